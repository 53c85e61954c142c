// The host side of an NVMe/TCP queue pair over an io_uring socket driven by a Reactor.
//
// Set-up (connect()) blocks the calling thread up to the connect timeout: TCP connect, the TLS
// handshake when QpConfig::tls is set, ICReq / ICResp, Fabrics Connect. start() then hands the socket to the reactor. From then on the pair
// is driven by its reactor only: submit() queues a capsule in a per-command header slot, a
// reactor poller gathers every queued PDU into one IORING_OP_SENDMSG per turn (one send in
// flight per socket keeps the byte stream ordered), and one receive into a pair-owned staging
// buffer (IORING_OP_READ_FIXED when the reactor's buffer table took it, else IORING_OP_RECV)
// feeds the shared PduReader, which copies C2H data into the request's buffer.
//
// While its reactor spins (Reactor::spinning(): a busy lane always, an adaptive lane in its
// spin windows) the poller instead calls recv() and send()/sendmsg() on the socket with
// MSG_DONTWAIT every turn: the same batches and the same parser, minus the ring's task work and
// its extra kernel entry per completion, which is what a polling reactor pays for io_uring at
// queue depth 1 (latency_bench --mechanics). A received completion's next command then goes
// out in the same turn. The two never overlap: a direct receive only runs while no ring receive
// is armed, and a ring receive is armed only in a turn where the reactor does not spin (the
// one before it waits), so bytes are read by one of them at a time, in order; likewise one
// send at a time, whichever way it went.
//
// With TLS (lib/tls Session, memory BIOs, on the reactor thread: no thread hop) the same batch
// of iovecs is encrypted into the session (small pieces coalesced so records stay large) and
// its ciphertext is sent from a pair-owned buffer in chunks, one send in flight as before; a
// batch counts as sent once all of its ciphertext is. Received ciphertext is fed to the session
// and the plaintext read out into a second buffer goes to the PduReader. The buffers grow once;
// nothing is allocated per I/O. A session error fails the pair like a socket error.
//
// Threading: connect() on any thread; everything else on the reactor's thread. Completion
// callbacks and the listener run inline on that thread; they may submit() and close(), but must
// not destroy the pair (post the destruction to the reactor instead).
#pragma once

#include <sys/uio.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/node_memory.hpp"
#include "fabric/connect.hpp"
#include "nvmeof/controller.hpp"
#include "transport/queue_pair.hpp"
#include "transport/queue_pair_base.hpp"
#include "reactor/reactor.hpp"
#include "transport/transport_limits.hpp"
#include "tls/psk.hpp"
#include "transport/tcp/pdu.hpp"

namespace nvmeof::tls {
class Session;
}

namespace nvmeof::tcp {

/// Tests only: receives between large payloads take whatever the socket holds, as before
/// header-sized receives (QueuePair::header_recvs); the negative control of their test.
inline bool g_no_header_recv_for_test = false;
/// Tests only: receives of large payloads are not acknowledged at once (QueuePair::quick_acks);
/// the negative control of their test.
inline bool g_no_quick_ack_for_test = false;

inline constexpr uint32_t kMaxQueueDepth = 1024;
/// In-capsule data the admin queue accepts (NVMe/TCP: 8 KiB on the admin queue).
inline constexpr uint32_t kAdminInCapsuleData = 8192;
/// Transfer cap when the controller reports no MDTS.
inline constexpr uint32_t kDefaultMaxTransfer = 1u << 20;
inline constexpr uint16_t kAdminCntlid = fabric::kAdminCntlid;
/// NVMe/TCP's limits as the controller sees them (transport/transport_limits.hpp).
inline constexpr TransportLimits kLimits{kMaxQueueDepth, kAdminInCapsuleData, kDefaultMaxTransfer};

struct QpConfig {
  std::string traddr = "127.0.0.1";
  std::string trsvcid = "4420";
  std::string host_iface;  ///< optional SO_BINDTODEVICE (needs CAP_NET_RAW)
  uint16_t qid = 0;
  uint32_t depth = 32;     ///< 1..kMaxQueueDepth commands outstanding; SQSIZE = depth - 1
  uint32_t kato_ms = 0;    ///< admin queue only
  uint16_t cntlid = kAdminCntlid;  ///< kAdminCntlid for the admin queue, else the admin's CNTLID
  std::string subnqn;
  std::string hostnqn;
  std::array<uint8_t, 16> hostid{};
  Digest digest = Digest::none;
  /// Bytes of write data sent inside the capsule (IOCCSZ - 64); larger writes wait for R2T.
  /// 0 on the admin queue means kAdminInCapsuleData.
  uint32_t in_capsule_data = 0;
  uint32_t max_transfer = 0;  ///< MDTS in bytes; 0 means kDefaultMaxTransfer
  uint32_t recv_buffer = 256u << 10;  ///< staging buffer for the socket's receives
  std::chrono::milliseconds connect_timeout{3000};
  /// The post-connect step (in-band authentication) on this queue, within connect_timeout; see
  /// fabric/connect.hpp. Empty: none, and a controller that requires authentication is refused.
  fabric::Authenticator authenticate;
  /// The secure channel: set, the connection runs a TLS 1.3 handshake with this PSK (identity,
  /// key, suite; tls/psk.hpp) before the ICReq, within connect_timeout, and every byte after it
  /// (ICReq, Connect, authentication, every PDU) goes through the session. Null: plaintext.
  std::shared_ptr<const tls::TlsPsk> tls;
  /// With tls: offer the session to kernel TLS after the handshake (tls/ktls.hpp).
  bool ktls = true;
  /// Connect with SQ flow control disabled (fabric::ConnectParams): reads then end with a
  /// SUCCESS-flagged C2HData, one PDU fewer each.
  bool disable_sq_flow_control = false;
  /// Runs at the end of the pair's destructor (e.g. returns its queue id to a pool).
  std::function<void()> on_destroy;
};

/// What ICResp and the Connect response settled.
struct Session {
  bool hdgst = false;
  bool ddgst = false;
  uint8_t cpda = 0;
  uint32_t maxh2cdata = 0;
  uint16_t cntlid = 0;  ///< from the Connect response (DW0 15:0)
  bool ktls = false;    ///< TLS whose record layer the kernel runs (the pair moves plaintext)
};

/// Consumes `sent` bytes from iov[start..count): whole entries are skipped, a partly sent one is
/// trimmed in place. Returns the new start (== count when everything went out).
inline unsigned advance_iov(iovec* iov, unsigned start, unsigned count, size_t sent) noexcept {
  while (sent > 0 && start < count) {
    if (sent >= iov[start].iov_len) {
      sent -= iov[start].iov_len;
      ++start;
    } else {
      iov[start].iov_base = static_cast<uint8_t*>(iov[start].iov_base) + sent;
      iov[start].iov_len -= sent;
      sent = 0;
    }
  }
  // Zero-length entries left at the front carry nothing to send.
  while (start < count && iov[start].iov_len == 0) ++start;
  return start;
}

/// One command slot, indexed by CID (QueueSlot::req while outstanding). `phase` answered means
/// the response arrived while the send in flight still references the slot's header or the
/// request's data; the completion waits for that send to finish so the caller never gets a
/// buffer the kernel may still read. Complete here because QueuePairBase's members use it.
struct CommandSlot : QueueSlot {
  static constexpr uint16_t kNil = 0xffff;
  /// Header + header digest + padding up to the largest CPDA alignment (128 bytes).
  static constexpr size_t kHdrArea = 128;
  enum class Dir : uint8_t { none, to_controller, from_controller };
  enum class Phase : uint8_t { free, active, answered };
  enum class SendWork : uint8_t { capsule, h2c };

  Phase phase = Phase::free;
  Dir dir = Dir::none;
  SendWork work = SendWork::capsule;
  bool in_capsule = false;
  bool queued = false;    // in the send queue
  bool in_batch = false;  // referenced by the send in flight
  bool discard = false;   // detach_data(): C2H data for it is dropped
  uint16_t next = kNil;   // send queue link
  uint16_t ttag = 0;
  uint32_t hdr_len = 0;   // bytes of hdr[] to send (header, digest, padding)
  uint32_t ddgst = 0;     // data digest of in-capsule data
  uint32_t h2c_off = 0;   // next byte to send for the current R2T
  uint32_t h2c_left = 0;  // bytes of the current R2T not yet sent
  uint32_t r2t_next = 0;  // where the next R2T must start
  uint32_t c2h_next = 0;  // read data received so far
  Cqe cqe{};
  alignas(8) uint8_t hdr[kHdrArea];
};

class QueuePair final : public QueuePairBase<CommandSlot> {
 public:
  /// Blocking set-up bounded by cfg.connect_timeout. Returns the pair in QpState::connecting;
  /// call start() on the reactor's thread to make it live. Errors: invalid_argument (depth,
  /// address), connection_refused, timeout, malformed_pdu / protocol_error / peer_terminated /
  /// header_digest_error (bad ICResp or Connect response), unsupported (PFV, digests the
  /// controller refused), an nvme_category() status when the controller rejects Connect, errno
  /// codes (socket, SO_BINDTODEVICE); with TLS also tls_handshake_failed, tls_not_offered;
  /// without it tls_required (see ConnectOptions::tls_psk). Each failure logs one line.
  static Result<std::unique_ptr<QueuePair>> connect(Reactor& reactor, const QpConfig& cfg);

  /// Closes the pair and, on the reactor thread, polls the reactor until no socket operation is
  /// in flight (bounded to 2 s; past that the I/O buffers are left to the kernel and freed when
  /// its completions arrive). Every outstanding request has completed when it returns.
  ~QueuePair() override;

  /// Reactor thread: registers the send poller and arms the first receive; state becomes live.
  void start() noexcept;

  int submit(IoRequest& req) noexcept override;
  // close(), state(), error(), depth(), outstanding(), label(): QueuePairBase.
  uint16_t qid() const noexcept override { return cfg_.qid; }
  uint32_t max_transfer() const noexcept override { return max_transfer_; }
  /// C2H data still to come for `req` is received into nothing (the reader drops it).
  bool detach_data(IoRequest& req) noexcept override;

  const Session& session() const noexcept { return session_; }
  /// Socket operations the kernel may still complete (diagnostics, tests).
  int inflight_ops() const noexcept;
  /// True when receives go into a buffer registered with the reactor's ring (READ_FIXED).
  bool registered_receive() const noexcept;
  /// Payload bytes received straight into commands' buffers (recv_direct), on the reactor's
  /// thread.
  uint64_t placed_bytes() const noexcept { return placed_bytes_; }
  /// Receives that took only the next PDU header, because large C2HData payloads were coming
  /// (recv_direct), on the reactor's thread.
  uint64_t header_recvs() const noexcept { return header_recvs_; }
  /// Receives acknowledged at once (TCP_QUICKACK) while large C2HData payloads come, on the
  /// reactor's thread.
  uint64_t quick_acks() const noexcept { return quick_acks_; }
  /// The connection's socket (tests, diagnostics: to read its TCP state); -1 once closed.
  int socket_fd() const noexcept;
  /// True while the pair polls its socket with non-blocking system calls (its reactor spins:
  /// Reactor::spinning()) rather than through ring operations.
  bool direct_socket() const noexcept { return reactor_.spinning(); }
  /// True when the connection runs inside TLS; tls_suite() then names the negotiated suite.
  bool is_tls() const noexcept { return tls_ != nullptr || session_.ktls; }
  /// True when that TLS runs in the kernel (kernel TLS) rather than on the reactor.
  bool is_ktls() const noexcept { return session_.ktls; }
  tls::CipherSuite tls_suite() const noexcept;

  QueuePair(const QueuePair&) = delete;
  QueuePair& operator=(const QueuePair&) = delete;

 private:
  using Slot = CommandSlot;
  struct IoCore;
  struct RecvSink;
  friend struct RecvSink;

  QueuePair(Reactor& reactor, const QpConfig& cfg, int fd, const Session& s, std::string label,
            std::unique_ptr<tls::Session> tls);

  static int poll_fn(void* self) noexcept;
  int flush() noexcept;
  void arm_recv() noexcept;
  bool submit_batch() noexcept;
  // While the reactor spins: the same send and receive as non-blocking system calls, run by the
  // poller; nothing is ever in flight in the kernel.
  bool send_direct() noexcept;
  int recv_direct() noexcept;
  void ack_at_once() noexcept;
  void on_recv(const io_uring_cqe& cqe) noexcept;
  /// What follows feeding received bytes to the reader: a pair closed meanwhile finishes its
  /// teardown, a reader error fails it.
  void after_consume(Errc err) noexcept;
  void on_send(const io_uring_cqe& cqe) noexcept;
  // The TLS halves of flush/on_send/on_recv (the end of queue_pair.cpp).
  bool tls_encrypt_batch() noexcept;
  bool tls_next_chunk() noexcept;
  void tls_receive(size_t n) noexcept;
  void batch_done() noexcept;
  // QueuePairBase's hooks: shut the socket down and cancel its operations; quiet once none is
  // in flight; then close the descriptor and forget the send queue.
  void stop_transport() noexcept override;
  bool transport_quiet() const noexcept override;
  void on_quiet() noexcept override;
  void retire_slot(uint16_t cid) noexcept override;
  /// A socket operation came back while the pair is not live: drain and close once none is left.
  void finish_teardown() noexcept;
  void complete(uint16_t cid, const Cqe& cqe) noexcept;
  void release(uint16_t cid, const Cqe& cqe) noexcept;
  void enqueue(uint16_t cid) noexcept;
  void unlink(uint16_t cid) noexcept;

  // PduReader callbacks.
  Errc on_header(const uint8_t* hdr, const HeaderCheck& hc, uint8_t*& dst) noexcept;
  Errc on_pdu(const uint8_t* hdr, const HeaderCheck& hc) noexcept;
  Errc on_r2t(const R2t& r) noexcept;

  Reactor& reactor_;
  QpConfig cfg_;
  Session session_;
  uint32_t in_capsule_ = 0;
  uint32_t max_transfer_ = 0;
  bool poller_added_ = false;

  Negotiated send_neg_{};  // digests + CPDA for PDUs we send
  PduReader reader_;
  const char* fail_detail_ = "";
  uint64_t placed_bytes_ = 0;  // placed_bytes()
  uint64_t header_recvs_ = 0;  // header_recvs()
  uint64_t quick_acks_ = 0;    // quick_acks()
  bool header_reads_ = false;  // the last C2HData carried kHeaderRecvMin bytes or more

  uint16_t sendq_head_;
  uint16_t sendq_tail_;

  IoCore* core_ = nullptr;  // outlives the pair while the kernel still holds its operations
  // The secure channel (reactor thread only); null on a plaintext connection.
  std::unique_ptr<tls::Session> tls_;
  nvmeof::detail::NodeBuffer tls_plain_;  // decrypted bytes on their way to the reader
  nvmeof::detail::NodeBuffer tls_stage_;  // small pieces of a batch coalesced into one record
};

}  // namespace nvmeof::tcp
