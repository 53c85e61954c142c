// Kernel TLS offload: after the TLS 1.3 handshake in user space (session.hpp), the record layer
// of both directions moves into the kernel ("tls" upper-layer protocol, TLS_TX and TLS_RX), and
// the socket then carries plaintext for its owner, exactly as a connection without TLS does.
//
// What OpenSSL and the kernel allow (Debian 12: OpenSSL 3.0.x; kernels 6.1 and 6.12):
//  * Debian builds libssl with KTLS (OPENSSL_NO_KTLS is not defined), but OpenSSL 3.0 offloads
//    only the TLS 1.3 *transmit* direction (receive offload came with the record-layer rewrite
//    of 3.2), and only when its write BIO is a socket BIO: with the memory BIOs of Session it
//    never engages by itself.
//  * So the hand-off installs both directions' keys itself: the application traffic secrets come
//    from OpenSSL's key log callback (SessionConfig::keep_traffic_secrets), the write key and IV
//    from HKDF-Expand-Label "key" / "iv" (RFC 8446 7.3) through OpenSSL's TLS13-KDF, and the
//    record sequence numbers are 0: the hand-off happens right after the handshake, before any
//    application record in either direction, and only when nothing is buffered.
//  * The kernel must offer the "tls" ULP (/proc/sys/net/ipv4/tcp_available_ulp, or a module
//    loaded on demand). Kernels here: this machine's host kernel has none (the reactor then
//    encrypts in user space, on its own thread: no thread hop); Debian's 6.12 guest kernel has
//    tls.ko, where tests/vm/ktls_test checks both directions against a user-space peer.
//  * Limits: a record the peer sends after the handshake that is not application data (a TLS
//    1.3 NewSessionTicket or KeyUpdate) makes the kernel's receive fail (EIO) once offloaded,
//    since no control-message buffer is given: the connection then fails like any broken socket.
//    Our target sends neither; a target that does should be reached with kernel TLS off.
#pragma once

#include <cstdint>
#include <string>

#include "nvmeof/status.hpp"
#include "tls/psk.hpp"
#include "tls/session.hpp"

namespace nvmeof::tls {

struct KtlsSupport {
  bool kernel_ulp = false;       ///< "tls" listed in tcp_available_ulp
  bool openssl_ktls = false;     ///< libssl built with KTLS (compile-time OPENSSL_NO_KTLS unset)
  std::string available_ulps;    ///< the kernel's list as read, for logs
};

/// Reads /proc/sys/net/ipv4/tcp_available_ulp (ulp_path for tests). Thread-safe, no side effects.
KtlsSupport probe_ktls(const char* ulp_path = "/proc/sys/net/ipv4/tcp_available_ulp");

/// One direction's record protection: AES-GCM key, the 12-byte static IV, the next sequence.
struct DirectionKeys {
  SecretBytes key;  ///< 16 (AES-128) or 32 (AES-256) bytes
  SecretBytes iv;   ///< 12 bytes
  uint64_t seq = 0;
};
/// Both directions, seen from the session's own side (tx: what it sends).
struct TrafficKeys {
  CipherSuite suite = CipherSuite::aes_128_gcm_sha256;
  DirectionKeys tx;
  DirectionKeys rx;
};

/// The application traffic keys of an established session created with keep_traffic_secrets.
/// Errors: not_established, ktls_unavailable (secrets not kept), crypto_failure (HKDF).
Result<TrafficKeys> traffic_keys(const Session& s);

/// Attaches the "tls" ULP to the connected TCP socket `fd` and installs TLS_TX and TLS_RX.
/// Errors: ktls_unavailable (the kernel has no tls ULP, or refused the keys), its detail naming
/// the step and the errno.
/// `socket_changed` (when given) tells whether the ULP was attached before a failure: then the
/// socket is unusable (close it); otherwise it is as it was and user-space TLS can go on.
Result<void> install_ktls(int fd, const TrafficKeys& keys, bool* socket_changed = nullptr);

/// The hand-off: `s` established on `fd`, with nothing buffered in either direction (else
/// ktls_unavailable: bytes would be lost). On success the socket sends and receives plaintext
/// through the kernel's record layer and `s` must not be used again. On failure nothing on the
/// socket has changed unless `socket_changed` says so (then the socket is unusable: close it).
/// The error's detail says why.
Result<void> enable_ktls(int fd, const Session& s, bool* socket_changed = nullptr);

}  // namespace nvmeof::tls
