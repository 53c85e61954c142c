// The queue-pair interface every transport implements (NVMe/TCP, NVMe/RDMA, io_uring
// passthrough). The multipath layer talks to transports only through this. The fabric
// transports share its lifecycle through QueuePairBase (transport/queue_pair_base.hpp).
//
// Threading: a queue pair belongs to one Reactor and is used only from that reactor's thread
// (submit, close, callbacks). No locks, no allocation per I/O.
#pragma once

#include <cstdint>
#include <system_error>

#include "nvmeof/command.hpp"

namespace nvmeof {

struct IoRequest;
/// Completion callback: runs inline on the reactor thread when the command completes.
using IoCallback = void (*)(IoRequest& req, const Cqe& cqe) noexcept;

/// One command in flight. The caller owns the object (a pool, its own frame) and must keep it
/// and its data buffer alive until the callback ran. The queue pair writes `cmd.cid` and the
/// fields after `user`.
struct IoRequest {
  Sqe cmd{};                 ///< filled by the caller with a prep_* helper
  void* data = nullptr;      ///< host buffer for the command's data (read target or write source)
  uint32_t data_len = 0;     ///< bytes of data the command moves
  IoCallback on_complete = nullptr;
  void* user = nullptr;      ///< free for the caller
  // -- owned by the queue pair while the request is outstanding --
  uint64_t submit_ns = 0;    ///< reactor clock at submit (for deadlines and latency)
  IoRequest* next = nullptr; ///< intrusive link for the queue pair's lists
};

/// Explicit queue state (no flag soup). A pair moves connecting -> live -> failed -> closed
/// (close() and transport errors alike pass through failed while their socket drains).
enum class QpState : uint8_t {
  connecting,  ///< being set up
  live,        ///< accepts commands
  failed,      ///< transport error seen; draining, accepts nothing
  closed,      ///< torn down; every outstanding command has completed
};

const char* to_string(QpState s) noexcept;

/// Told once when a queue pair fails, from `connecting` or from `live` (on the reactor thread,
/// before outstanding commands complete), whether a transport error or close() made it fail.
class QueuePairListener {
 public:
  virtual void on_queue_failed(class QueuePair& qp, std::error_code why) noexcept = 0;

 protected:
  ~QueuePairListener() = default;
};

class QueuePair {
 public:
  virtual ~QueuePair() = default;

  /// Queues `req`. No syscall here: the reactor submits socket I/O in batches.
  /// Returns 0, -EAGAIN when every slot is busy, -ENOTCONN when the pair is not live,
  /// -EINVAL when the data length exceeds the transfer limit (split by the caller above).
  virtual int submit(IoRequest& req) noexcept = 0;

  /// Fails the pair now (as if the transport broke) and tears the connection down: closes the
  /// socket and cancels its I/O. Outstanding requests complete with status::kHostPathError only
  /// once no in-flight socket operation can still read from or write into their buffers.
  /// After `close()` returns, no new data from the peer is accepted.
  virtual void close() noexcept = 0;

  virtual QpState state() const noexcept = 0;
  /// Why the pair failed (empty while live; kept once closed).
  virtual std::error_code error() const noexcept = 0;
  virtual uint16_t qid() const noexcept = 0;
  virtual uint32_t depth() const noexcept = 0;
  virtual uint32_t outstanding() const noexcept = 0;
  /// Largest data length of one command (MDTS, or the transport's own limit).
  virtual uint32_t max_transfer() const noexcept = 0;
  /// Promises that nothing more is written into `req.data` (an outstanding read): data still to
  /// arrive for it is discarded, the request still completes as usual. For a read another path
  /// already answered (a hedge), so its buffer can go back to the application at once. False
  /// when the transport cannot promise it (the kernel or a NIC writes the buffer directly) or
  /// `req` is not outstanding here: the caller must then wait for its completion.
  virtual bool detach_data(IoRequest& req) noexcept {
    (void)req;
    return false;
  }

  void set_listener(QueuePairListener* l) noexcept { listener_ = l; }

 protected:
  QueuePairListener* listener_ = nullptr;
};

}  // namespace nvmeof
