// A TLS 1.3 session with an external PSK (NVMe/TCP secure channel) over OpenSSL 3 memory BIOs:
// no socket, no thread, no blocking. Whoever owns the socket (a reactor's io_uring queue pair,
// or the blocking SocketStream of socket_stream.hpp) moves bytes in and out:
//
//   received ciphertext  --feed()-->        [Session]  --read()-->        plaintext
//   plaintext            --write()-->       [Session]  --take_output()--> ciphertext to send
//
// Only TLS 1.3, only TLS_AES_128_GCM_SHA256 and TLS_AES_256_GCM_SHA384, no certificates: the
// client offers one PSK (identity, key, suite); the server looks the offered identity up through
// a callback. No session tickets are issued (an NVMe/TCP connection never resumes).
//
// The host's TCP queue pair (lib/transport/tcp) uses it so: detail::handshake() connects and
// runs the client handshake blocking (its own loop over feed()/handshake()/take_output(), which
// also tells a peer that answers in plaintext apart), exchanges ICReq/ICResp, Connect and any
// authentication through write()/read(), then hands the session to the QueuePair with the fd.
// The pair's send poller write()s each batch's iovecs (small ones coalesced into one record)
// and sends take_output() in chunks from its own buffer (one send in flight; the batch counts as
// sent once all of its ciphertext is); on_recv() feed()s the received ciphertext (the registered
// receive buffer stays the socket's) and read()s plaintext into a second buffer that goes to
// PduReader::consume, until read() returns 0.
//
// How a non-blocking queue pair puts it under its send/receive path (host side, NVMe/TCP):
//  1. After TCP connect, before the ICReq: create a client Session (SessionConfig::client).
//     Call handshake(); send take_output() bytes; on each receive completion feed() the bytes
//     and call handshake() again, sending whatever take_output() holds after every call, until
//     handshake() returns HandshakeState::done. Arm a timer for handshake_deadline(); when it
//     fires call handshake(now) which then fails with handshake_timeout. A receive of 0 bytes
//     (EOF) is peer_closed(): the next handshake() fails with TlsErrc::peer_closed.
//  2. Then the ICReq and every PDU go through the session: where the queue pair today hands a
//     PDU's iovecs to io_uring send, it calls write(iov) for each piece (the ciphertext
//     accumulates in the session; one write of many pieces yields full 16 KiB records) and then
//     sends take_output() into its own send buffer (output_pending() says how much room).
//     Where it parses received bytes, it first feed()s the ciphertext of the receive completion
//     and then read()s plaintext into its existing receive buffer until read() returns 0.
//     read() may return less than a record; a PDU may span records: the PDU parser is unchanged.
//  3. Errors: any Result error from read()/write() fails the queue pair (record_error,
//     peer_closed); the session is unusable after an error.
//  4. With kernel TLS (ktls.hpp) the session is used for the handshake only and the queue pair
//     then sends and receives plaintext on the socket as today.
//
// Threading: a Session is not thread-safe; one thread (the reactor that owns the connection)
// calls every member. Different sessions are independent. Cost per call: write() encrypts in
// place into the output BIO (AES-GCM, one copy), read() decrypts from the input BIO into the
// caller's buffer (one copy); no allocation once the BIOs have grown.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "nvmeof/status.hpp"
#include "tls/psk.hpp"
#include "tls/tls_error.hpp"

// OpenSSL's SSL and BIO, without its headers.
struct ssl_st;
struct bio_st;

namespace nvmeof::tls {

enum class Role : uint8_t { client, server };
enum class HandshakeState : uint8_t { want_input, done };

/// What the server needs for an identity: the key and the cipher suite it belongs to.
struct PskEntry {
  SecretBytes key;
  CipherSuite suite = CipherSuite::aes_128_gcm_sha256;
};
/// Server key lookup: the entry for `identity`, or nullopt when the identity is unknown.
/// Called on the session's thread during handshake().
using PskLookup = std::function<std::optional<PskEntry>(std::string_view identity)>;

/// The NVMe/TCP server lookup for one configured PSK: an identity "NVMe<v>R0<h> <hostnqn>
/// <subnqn>[ <digest>]" is accepted when `accept_subnqn` accepts its subsystem NQN (null:
/// any) and it equals the identity derived from `configured` for that host and subsystem (so
/// the hash and, for version 1, the digest must match); the entry is the TLS PSK so derived.
PskLookup nvme_psk_lookup(ConfiguredPsk configured,
                          std::function<bool(std::string_view subnqn)> accept_subnqn = {});

struct SessionConfig {
  Role role = Role::client;
  /// Client: the PSK it offers (TlsPsk::suite is the one suite offered).
  TlsPsk client_psk;
  /// Server: the key lookup, and the suites it accepts (empty: both).
  PskLookup server_lookup;
  std::vector<CipherSuite> server_suites;
  /// The handshake fails with handshake_timeout once this much time has passed since create().
  std::chrono::milliseconds handshake_timeout{10000};
  /// Keeps both directions' application traffic secrets (OpenSSL's key log) so that the
  /// connection can be handed to kernel TLS after the handshake (ktls.hpp). Off by default:
  /// then no secret beyond the PSK is held outside OpenSSL.
  bool keep_traffic_secrets = false;

  static SessionConfig client(TlsPsk psk);
  static SessionConfig server(PskLookup lookup, std::vector<CipherSuite> suites = {});
};

class Session {
 public:
  /// A session in its initial state. Errors: invalid_argument (client without identity or key,
  /// server without lookup), crypto_failure (OpenSSL could not build the context).
  static Result<std::unique_ptr<Session>> create(SessionConfig cfg);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  /// Hands received ciphertext to the session (any split; copied into the input BIO).
  void feed(std::span<const uint8_t> ciphertext);
  /// The peer closed its side (recv returned 0). A handshake in progress then fails with
  /// peer_closed; read() returns peer_closed once buffered records are consumed.
  void peer_closed() noexcept { peer_eof_ = true; }

  /// Advances the handshake with what was fed so far; afterwards take_output() holds what to
  /// send (also on failure: the alert for the peer). Errors: psk_mismatch, unknown_identity,
  /// no_shared_cipher, handshake_rejected, handshake_failed, peer_closed, handshake_timeout.
  Result<HandshakeState> handshake(std::chrono::steady_clock::time_point now =
                                       std::chrono::steady_clock::now());
  std::chrono::steady_clock::time_point handshake_deadline() const noexcept { return deadline_; }
  bool is_established() const noexcept { return established_; }

  /// Encrypts all of `plaintext` into the output (records of at most 16 KiB).
  /// Errors: not_established, record_error.
  Result<void> write(std::span<const uint8_t> plaintext);
  /// Decrypts into `out`: the number of plaintext bytes, 0 when no complete record is buffered
  /// (feed more). A post-handshake message (KeyUpdate) may leave output to send: check
  /// output_pending() after read() too. Errors: not_established, peer_closed (close_notify or
  /// EOF), record_error.
  Result<size_t> read(std::span<uint8_t> out);

  /// Ciphertext waiting to be sent.
  size_t output_pending() const noexcept;
  /// Moves up to out.size() bytes of pending ciphertext into `out`; the count moved.
  size_t take_output(std::span<uint8_t> out) noexcept;
  /// Queues a close_notify alert (then send take_output()).
  void close() noexcept;

  /// After the handshake: the negotiated suite and the identity used.
  CipherSuite suite() const noexcept { return suite_; }
  const std::string& identity() const noexcept { return identity_; }
  /// OpenSSL's text for the last failure ("" if none), for logs.
  const std::string& error_detail() const noexcept { return detail_; }
  /// The OpenSSL SSL object (for kernel TLS set-up after the handshake, ktls.hpp).
  void* native_handle() const noexcept { return ssl_; }
  /// With SessionConfig::keep_traffic_secrets, once established: the first application
  /// traffic secrets (RFC 8446 7.1, client_/server_application_traffic_secret_0); else empty.
  const SecretBytes& client_traffic_secret() const noexcept { return client_secret_; }
  const SecretBytes& server_traffic_secret() const noexcept { return server_secret_; }
  /// Received bytes not yet returned by read(): ciphertext in the input BIO plus decrypted
  /// plaintext OpenSSL holds. Non-zero means a hand-off to kernel TLS would lose them.
  size_t input_buffered() const noexcept;
  Role role() const noexcept { return cfg_.role; }

  struct Impl;

 private:
  Session() = default;
  std::error_code fail(std::error_code ec);
  std::error_code classify_handshake_error(int ssl_error);

  ::ssl_st* ssl_ = nullptr;
  ::bio_st* rbio_ = nullptr;  // owned by ssl_
  ::bio_st* wbio_ = nullptr;  // owned by ssl_
  SessionConfig cfg_;
  std::chrono::steady_clock::time_point deadline_{};
  bool established_ = false;
  bool peer_eof_ = false;
  bool unknown_identity_ = false;
  std::error_code failed_;
  CipherSuite suite_ = CipherSuite::aes_128_gcm_sha256;
  std::string identity_;
  std::string detail_;
  SecretBytes client_secret_;
  SecretBytes server_secret_;
};

}  // namespace nvmeof::tls
