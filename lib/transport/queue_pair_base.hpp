// The lifecycle queue pairs share, written once, in two parts.
//
// QueuePairLifecycle, every queue pair: the state machine connecting -> live -> failed ->
// closed with one fail() that acts the same from connecting and from live, and the listener
// notification. Its hooks:
//   stop_transport()   once, when the pair fails (from connecting or live): stop the socket, QP
//                      or ring so that no new data is accepted and in-flight operations come back.
//   settle()           failed -> closed once nothing the pair started is outstanding; fail()
//                      calls it last, the transport whenever it learns it may have become quiet.
//
// QueuePairBase, the fabric queue pairs (NVMe/TCP, NVMe/RDMA), adds the slot table (CID ->
// request, a free list, the outstanding count) and the drain that completes every outstanding
// request exactly once with status::kHostPathError once the transport says none of its
// operations can still touch a request's buffer. The io_uring passthrough pair has the first
// part only: its commands are in the kernel, which cannot cancel them, so each completes when
// the kernel gives it back (with status::kHostPathError once the pair failed) and their
// bookkeeping outlives the pair (transport/uring/queue_pair.hpp).
//
// A fabric transport derives from QueuePairBase<Slot>, with its own slot type derived from
// QueueSlot, and supplies three more hooks besides stop_transport(). They run only on the way
// down (failure, drain), never per I/O; the per-I/O part (take_slot, complete_slot, the state
// test of submit) is inline and not virtual.
//   transport_quiet()  true when no operation the transport started can still read or write a
//                      request's buffer (socket operations back, work requests flushed).
//   on_quiet()         once, when the failed pair is quiet, before the drain (release what the
//                      transport holds: close its socket, forget its send queue).
//   retire_slot(cid)   for each request the drain completes, before its callback (the slot's
//                      transport state: staging memory, send-queue links).
// The transport calls settle() whenever it learns it may have become quiet (an operation came
// back while the pair is failed); settle() drains and closes when it is.
//
// Threading: as QueuePair, the reactor's thread only. Completion callbacks and the listener run
// inline; they may submit() (refused unless live) and close() (a no-op once failed), but must
// not destroy the pair.
#pragma once

#include <cerrno>
#include <cstdint>
#include <memory>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>

#include "core/log.hpp"
#include "core/node_memory.hpp"
#include "nvmeof/status.hpp"
#include "transport/queue_pair.hpp"

namespace nvmeof {

/// What every slot of a QueuePairBase holds; a transport's slot type derives from it.
struct QueueSlot {
  IoRequest* req = nullptr;  ///< the request holding this CID; null while the slot is free
};

/// The completion a request gets when its queue pair went away under it.
inline Cqe host_path_error_cqe(uint16_t cid, uint16_t sq_id) noexcept {
  Cqe c{};
  c.cid = cid;
  c.sq_id = sq_id;
  c.status_field = status::kHostPathError.cqe_field();
  return c;
}

/// The state machine of every queue pair (see the top of this file).
class QueuePairLifecycle : public QueuePair {
 public:
  /// The pair fails with errno ECANCELED (system category) unless it already failed, from
  /// connecting as from live; outstanding requests complete once the transport is quiet.
  void close() noexcept override { fail(errno_code(ECANCELED), nullptr); }
  QpState state() const noexcept final { return state_; }
  std::error_code error() const noexcept final { return error_; }
  /// "tcp 127.0.0.1:4420 qid 1", the prefix of this pair's log lines.
  const std::string& label() const noexcept { return label_; }

  QueuePairLifecycle(const QueuePairLifecycle&) = delete;
  QueuePairLifecycle& operator=(const QueuePairLifecycle&) = delete;

 protected:
  explicit QueuePairLifecycle(std::string label) : label_(std::move(label)) {}
  ~QueuePairLifecycle() override = default;

  virtual void stop_transport() noexcept = 0;
  virtual void settle() noexcept = 0;

  /// connecting -> live; false (nothing changes) from any other state.
  bool go_live() noexcept {
    if (state_ != QpState::connecting) return false;
    state_ = QpState::live;
    return true;
  }

  /// connecting or live -> failed: records `why`, logs one line (not for a close, nor without
  /// `what`), stops the transport, tells the listener, then settles (the pair closes if
  /// nothing is outstanding any more). A no-op once failed or closed.
  void fail(std::error_code why, const char* what) noexcept {
    if (state_ == QpState::failed || state_ == QpState::closed) return;
    state_ = QpState::failed;
    error_ = why;
    if (what && why != std::errc::operation_canceled)
      detail::log_warning("nvmeof: %s: %s: %s\n", label_.c_str(), why.message().c_str(), what);
    stop_transport();
    if (listener_) listener_->on_queue_failed(*this, why);
    settle();
  }

  std::string label_;
  // Written only by the members above; the transports read them (the state test of every
  // submit and receive).
  QpState state_ = QpState::connecting;
  std::error_code error_;
};

template <class Slot>
class QueuePairBase : public QueuePairLifecycle {
  // Complete where the transport's class is declared: the members below use it inline.
  static_assert(std::is_base_of_v<QueueSlot, Slot>);

 public:
  uint32_t depth() const noexcept final { return depth_; }
  uint32_t outstanding() const noexcept final { return outstanding_; }

 protected:
  /// `depth` slots (CIDs 0..depth-1) on the creating thread's memory node (the pair is created
  /// on the thread that drives it).
  QueuePairBase(std::string label, uint32_t depth)
      : QueuePairLifecycle(std::move(label)),
        slots_(depth, detail::thread_memory_node()),
        depth_(depth),
        free_(std::make_unique<uint16_t[]>(depth)) {
    set_free_list(depth);
  }
  ~QueuePairBase() override = default;

  virtual bool transport_quiet() const noexcept = 0;
  virtual void on_quiet() noexcept {}
  virtual void retire_slot(uint16_t cid) noexcept { (void)cid; }

  // -- the slot table (hot path) --
  bool has_free_slot() const noexcept { return free_top_ != 0; }
  /// The CID take_slot() hands out next; has_free_slot() must hold.
  uint16_t next_slot() const noexcept { return free_[free_top_ - 1]; }
  /// Gives `req` the next free CID (written into req.cmd.cid); has_free_slot() must hold.
  uint16_t take_slot(IoRequest& req) noexcept {
    const uint16_t cid = free_[--free_top_];
    slots_[cid].req = &req;
    req.cmd.cid = cid;
    ++outstanding_;
    return cid;
  }
  /// True when `cid` names a slot that holds a request.
  bool is_outstanding(uint32_t cid) const noexcept { return cid < slots_.size() && slots_[cid].req; }
  /// Frees the slot, then runs the request's callback (which may submit again at once). The
  /// transport has reset its own fields of the slot before.
  void complete_slot(uint16_t cid, const Cqe& cqe) noexcept {
    Slot& s = slots_[cid];
    IoRequest* req = s.req;
    s.req = nullptr;
    free_[free_top_++] = cid;
    --outstanding_;
    if (req->on_complete) req->on_complete(*req, cqe);
  }
  /// Uses only the first `depth` slots (the controller holds fewer commands than asked for).
  /// Only while nothing is outstanding.
  void limit_depth(uint32_t depth) noexcept {
    if (outstanding_ != 0 || depth >= slots_.size()) return;
    depth_ = depth;
    set_free_list(depth);
  }

  // -- the drain (cold path) --
  /// failed and quiet -> closed: on_quiet(), then every outstanding request completes with
  /// status::kHostPathError (retire_slot() first), then the state is closed. Re-entrant calls
  /// (from a callback of the drain) do nothing.
  void settle() noexcept final {
    if (state_ != QpState::failed || draining_ || !transport_quiet()) return;
    draining_ = true;
    on_quiet();
    for (uint32_t cid = 0; cid < slots_.size(); ++cid) {
      if (!slots_[cid].req) continue;
      retire_slot(static_cast<uint16_t>(cid));
      complete_slot(static_cast<uint16_t>(cid), host_path_error_cqe(static_cast<uint16_t>(cid), qid()));
    }
    state_ = QpState::closed;
    draining_ = false;
  }

  // Written only by the members above; the transports read their slots' own fields.
  detail::NodeArray<Slot> slots_;

 private:
  void set_free_list(uint32_t depth) noexcept {
    free_top_ = 0;
    for (uint32_t i = depth; i-- > 0;) free_[free_top_++] = static_cast<uint16_t>(i);
  }

  uint32_t depth_ = 0;
  uint32_t outstanding_ = 0;
  std::unique_ptr<uint16_t[]> free_;
  uint32_t free_top_ = 0;
  bool draining_ = false;
};

}  // namespace nvmeof
