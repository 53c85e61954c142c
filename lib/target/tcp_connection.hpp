// One NVMe/TCP connection of the embedded target (one queue: admin or I/O), served by its own
// thread: ICReq/ICResp, capsules, R2T/H2CData, C2HData, responses, keep-alive, asynchronous
// events, and the per-port faults. PDUs are parsed by the shared codec (transport/tcp/pdu.hpp).
//
// Threading: run() is the connection's thread and owns everything except the members marked
// "any thread": close requests, wake-ups, completions posted by the held-write thread, events
// posted by the CCR worker, the teardown time and the loop counters, which other threads use to
// reach or observe a connection without blocking on it. Close requests, wake-ups, the teardown
// time and the counters are atomics (a close request may only be raised, never lowered: stop
// and reset outrank the end of an association); posted completions and events sit behind
// posted_mu_. Sockets are non-blocking and the thread waits in ppoll on the socket and an
// eventfd, so a close request or a fault change reaches it within one wake-up even while it is
// sending. With a polling TargetOptions::poll it first keeps passing over the socket without
// blocking (each pass checks the same atomics), so in a closed loop the next command needs no
// wake-up.
//
// Ending has two steps: the connection stops serving (it executes nothing more, leaves its
// controller, and the teardown time is set), then its socket closes. Behind a partition the
// second step waits until the partition heals, the way no FIN crosses a pulled cable.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "nvmeof/command.hpp"
#include "nvmeof/status.hpp"
#include "target/byte_buffer.hpp"
#include "target/io_commands.hpp"
#include "tls/socket_stream.hpp"
#include "transport/tcp/pdu.hpp"

namespace nvmeof::target {

class Controller;
class Port;
class QueueAuth;
class Subsystem;
struct TargetCore;

/// Why a connection is being closed from outside its thread.
enum class CloseKind : uint8_t {
  none,
  stop,         ///< the target stops
  reset,        ///< fault injection: close with RST
  association,  ///< the controller's association ended (admin queue gone, keep-alive expired)
};

class TcpConnection : public std::enable_shared_from_this<TcpConnection> {
 public:
  /// Takes ownership of the connected, non-blocking socket `fd`.
  TcpConnection(TargetCore& core, Port& port, int fd, uint64_t id, std::string peer,
                std::string local_addr);
  ~TcpConnection();
  TcpConnection(const TcpConnection&) = delete;
  TcpConnection& operator=(const TcpConnection&) = delete;

  /// The connection's thread body: serves until the peer closes, a fatal protocol error, or a
  /// close request; then closes the socket and leaves the controller.
  void run() noexcept;

  // -- any thread --
  void request_close(CloseKind k) noexcept;
  void wake() noexcept;
  /// Completes a held command (a delayed write) on this connection, if it is still alive.
  void post_completion(uint16_t slot, uint16_t cid, NvmeStatus st);
  /// Raises an asynchronous event (Asynchronous Event Request DW0) on this admin connection:
  /// it completes an outstanding AER, or the next one.
  void post_event(uint32_t dw0);
  bool finished() const noexcept { return finished_.load(std::memory_order_acquire); }
  /// When the connection was found dead or closed (steady ns), 0 while it lives.
  uint64_t teardown_ns() const noexcept { return teardown_ns_.load(std::memory_order_acquire); }
  /// Passes of the connection's loop so far, and wake-ups from its sleep in ppoll
  /// (PortStats::poll_passes, poll_wakeups). Relaxed: statistics.
  uint64_t poll_passes() const noexcept { return passes_.load(std::memory_order_relaxed); }
  uint64_t poll_wakeups() const noexcept { return wakeups_.load(std::memory_order_relaxed); }

  // -- PduReader handler interface (connection thread) --
  Errc on_header(const uint8_t* hdr, const tcp::HeaderCheck& hc, uint8_t*& dst) noexcept;
  Errc on_pdu(const uint8_t* hdr, const tcp::HeaderCheck& hc) noexcept;

 private:
  // Connect is taken exactly once, first: await_connect -> connecting (the Connect is in hand,
  // its data may still be on the way) -> live once it succeeded, back to await_connect when it
  // failed. The queue's role (admin or I/O, qid_) is bound only on the way to live.
  enum class Phase : uint8_t { await_icreq, await_connect, connecting, live, closing };
  enum class SlotState : uint8_t {
    free,
    receiving,      ///< capsule header seen, in-capsule data arriving
    awaiting_data,  ///< R2T sent, H2CData arriving
    waiting,        ///< held for the port's injected latency
    held,           ///< a delayed write, owned by HeldWrites until it posts the completion
    aer,            ///< an Asynchronous Event Request waiting for an event
  };
  /// One command in flight; its index is the R2T transfer tag.
  struct Slot {
    Sqe sqe{};
    uint16_t index = 0;
    SlotState state = SlotState::free;
    bool h2c = false;          // data moves host -> controller
    bool in_capsule = false;
    bool poisoned = false;     // a data digest failed: complete with a transient transport error
    NvmeStatus early{};        // found while receiving: complete with this, execute nothing
    uint32_t xfer_len = 0;     // SGL length
    uint32_t received = 0;     // H2C bytes received
    uint32_t r2t_end = 0;      // end offset of the outstanding R2T
    IoPlan plan{};
    ByteBuffer buf;
  };
  struct Posted {
    uint16_t slot;
    uint16_t cid;
    NvmeStatus st;
  };
  enum class RecvResult : uint8_t { idle, progress, closed };
  struct Handler {
    TcpConnection& c;
    Errc on_header(const uint8_t* h, const tcp::HeaderCheck& hc, uint8_t*& dst) noexcept {
      return c.on_header(h, hc, dst);
    }
    Errc on_pdu(const uint8_t* h, const tcp::HeaderCheck& hc) noexcept { return c.on_pdu(h, hc); }
  };

  // Transport (tcp_connection.cpp).
  CloseKind drain_wakeups();
  RecvResult receive();
  bool flush();
  // The socket's byte stream, through TLS when the port asks for it (tcp_connection_tls.cpp):
  // recv/send semantics (bytes, 0 at EOF, -1 with errno, EAGAIN when nothing moves). The first
  // wire_recv of a TLS port settles the secure channel (the handshake, before the ICReq).
  ssize_t wire_recv(uint8_t* buf, size_t len);
  // A TLS send never waits: it encrypts at most one chunk and leaves what the socket does not
  // take in the session (wire_pending(), part of backlog()); len 0 only sends that.
  ssize_t wire_send(const uint8_t* buf, size_t len);
  size_t wire_pending() const noexcept;
  bool send_pending_ciphertext();
  // Before the socket closes: a TLS close_notify, best effort (never waits).
  void wire_close() noexcept;
  bool open_secure_channel();
  size_t backlog() const noexcept { return out_.size() - out_head_ + wire_pending(); }
  bool backlog_full() const noexcept;
  void note_backlog() noexcept;
  short wait_for_events(uint64_t now);  // returns the socket's revents
  bool can_spin() const noexcept;
  void stop_serving();
  void linger_while_partitioned();
  void close_socket();
  CloseKind close_request() const noexcept {
    return static_cast<CloseKind>(close_req_.load(std::memory_order_acquire));
  }
  Errc protocol_error(tcp::Fes fes, uint32_t fei, const char* what) noexcept;
  void fail_connection(tcp::Fes fes, uint32_t fei, const char* what, size_t offending_len);
  // Serves nothing more: what is queued goes out, then the FIN (see run()).
  void begin_closing(const char* why);
  void on_data_digest_error();
  void on_ic_req(const uint8_t* hdr);
  Errc on_capsule_header(const uint8_t* hdr, const tcp::HeaderCheck& hc, uint8_t*& dst);
  Errc on_h2c_header(const uint8_t* hdr, uint8_t*& dst);
  void on_h2c_done(Slot& s, uint32_t datal);
  void put_header(const void* hdr, size_t hlen);
  uint8_t* begin_c2h(uint16_t cid, uint32_t len, bool success);
  void seal_c2h(uint32_t len);
  void cancel_c2h();
  void send_r2t(Slot& s);
  void complete(Slot& s, NvmeStatus st, uint32_t dw0 = 0, uint32_t dw1 = 0);
  Slot* alloc_slot();
  void free_slot(Slot& s);
  void log(const char* what, const char* detail) const;
  uint64_t kato_deadline() const noexcept;

  // Commands (tcp_connection_commands.cpp).
  void start_command(Slot& s, uint32_t icd_len);
  NvmeStatus classify_data(Slot& s, uint32_t icd_len) const;
  NvmeStatus check_io(Slot& s);
  void command_ready(Slot& s);
  void run_due(uint64_t now);
  void execute(Slot& s);
  void execute_fabrics(Slot& s);
  void execute_connect(Slot& s);
  void execute_disconnect(Slot& s);
  void execute_auth(Slot& s);
  void end_after_auth_failure(const char* what);
  void execute_admin(Slot& s);
  void execute_io(Slot& s);
  void hold_aer(Slot& s);
  void raise_event(uint32_t dw0);
  void raise_ana_event();

  TargetCore& core_;
  Port& port_;
  int fd_;
  // Connection thread only: the TLS stream once the handshake is done; null for plaintext.
  std::unique_ptr<tls::SocketStream> tls_;
  // Ciphertext taken out of the session, [tls_tx_off_, tls_tx_len_) not sent yet.
  std::vector<uint8_t> tls_tx_ = std::vector<uint8_t>(64u << 10);
  std::vector<uint8_t> tls_rx_ = std::vector<uint8_t>(64u << 10);  // received ciphertext
  size_t tls_tx_off_ = 0;
  size_t tls_tx_len_ = 0;
  tls::Session* tls_session_ = nullptr;  // tls_'s session
  bool tls_closed_ = false;  // close_notify queued
  bool channel_settled_ = false;
  int efd_ = -1;
  const uint64_t id_;
  const std::string peer_;
  const std::string local_addr_;

  Phase phase_ = Phase::await_icreq;
  tcp::PduReader reader_;
  tcp::Negotiated send_neg_{};  // digests, and the HPDA the host asked for our data
  ByteBuffer rbuf_;
  size_t rbuf_pos_ = 0;  // received bytes before this were handed to the reader
  size_t rbuf_len_ = 0;  // bytes of rbuf_ the last recv returned
  ByteBuffer out_;
  size_t out_head_ = 0;  // bytes of out_ already sent
  size_t c2h_mark_ = 0;  // where the C2HData PDU being built starts in out_
  std::vector<std::unique_ptr<Slot>> slots_;
  std::vector<uint16_t> free_;
  uint16_t cur_slot_ = 0;   // the capsule the reader is inside
  uint16_t cur_h2c_ = 0;    // the command the current H2CData belongs to
  uint16_t connect_slot_ = 0;  // the Connect in hand while phase_ is connecting
  size_t max_backlog_seen_ = 0;
  tcp::Fes term_fes_ = tcp::Fes::none;  // set by a handler that rejects a PDU
  uint32_t term_fei_ = 0;
  const char* term_what_ = nullptr;
  bool digest_error_logged_ = false;
  uint64_t closing_deadline_ = 0;
  size_t closing_backlog_ = 0;  // the output still pending at the last pass while closing
  const char* closing_why_ = "";  // logged when the closing deadline ends the connection
  bool write_shut_ = false;
  bool blackholed_ = false;
  bool partitioned_ = false;  // the socket is not looked at (FaultKind::partition)

  std::shared_ptr<Controller> ctrl_;
  Subsystem* subsys_ = nullptr;
  uint16_t qid_ = 0;
  uint32_t sq_entries_ = 0;
  uint32_t sq_head_ = 0;
  bool sq_flow_control_ = true;  // CQEs carry SQHD
  bool c2h_success_ = false;     // reads end with a SUCCESS-flagged C2HData, no CapsuleResp
  uint32_t icd_limit_;
  uint32_t max_transfer_;
  const uint64_t spin_ns_;  // TargetOptions::poll: 0 sleeps at once, UINT64_MAX never sleeps
  std::multimap<uint64_t, uint16_t> delayed_;  // latency and bandwidth faults: due time -> slot
  uint64_t link_free_ns_ = 0;  // bandwidth fault: when this queue's data so far has passed
  std::vector<uint16_t> aers_;
  std::vector<uint32_t> pending_events_;  // raised while no AER was outstanding, oldest first
  uint64_t seen_ana_chgcnt_ = 0;
  std::vector<uint8_t> admin_out_;
  // DH-HMAC-CHAP of this queue (queue_auth.hpp); null when its host has no key. Until it has
  // authenticated, the queue is dropped at auth_deadline_ns_.
  std::shared_ptr<QueueAuth> auth_;
  uint64_t auth_deadline_ns_ = UINT64_MAX;

  // -- any thread --
  std::atomic<uint8_t> close_req_{0};  // a CloseKind
  std::atomic<bool> woken_{false};
  std::atomic<bool> has_posted_{false};
  std::atomic<uint64_t> teardown_ns_{0};
  std::atomic<bool> finished_{false};
  // Written by the connection thread only, with a relaxed load and store (a spinning pass pays
  // no locked instruction for them), on a line of their own, away from the flags other threads
  // write; read by Port::stats.
  alignas(64) std::atomic<uint64_t> passes_{0};
  std::atomic<uint64_t> wakeups_{0};
  std::mutex posted_mu_;  // guards posted_ and posted_events_
  std::vector<Posted> posted_;
  std::vector<uint32_t> posted_events_;
};

}  // namespace nvmeof::target
