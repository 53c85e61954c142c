// A per-core run-to-completion loop. It owns one io_uring; the queue pairs it drives put their
// socket operations on that ring, and it dispatches completions back to them inline.
//
// Threading: everything except post(), wake() and the counters (turns(), waits(),
// wait_timeouts()) is for the owning thread only (the thread that calls poll()). post() and
// wake() may be called from any thread (bounded MPSC ring, eventfd).
// poll() may be re-entered from a callback it runs (a queue pair's destructor drains its socket
// operations that way); each completion, timer and posted function still runs exactly once.
#pragma once

#include <liburing.h>
#include <sys/uio.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "nvmeof/status.hpp"

namespace nvmeof {

/// Receives io_uring completions. The SQE's user_data holds the handler's address
/// (Seastar-style: completion objects live in their owner, not in a side table). SQEs whose
/// completion nobody needs (cancellations) carry user_data 0 and are dropped by the reactor.
struct IoHandler {
  void (*fn)(IoHandler* self, const io_uring_cqe& cqe) noexcept = nullptr;
};

/// A one-shot timer owned by the caller, armed on a reactor. `fn` runs on the reactor thread
/// once `deadline_ns` (Reactor::clock_ns time base) has passed; it may re-arm the timer.
/// The caller keeps the object alive while it is armed (cancel it before destroying it).
struct Timer {
  void (*fn)(Timer* self) noexcept = nullptr;
  uint64_t deadline_ns = 0;
  bool armed = false;     // owned by the reactor
  size_t heap_index = 0;  // owned by the reactor
};

/// How a thread that does not sit in poll() learns that the ring has completions.
enum class CompletionNotify : uint8_t {
  /// Only poll() waits for completions. The ring runs completion work cooperatively (cheaper),
  /// so a thread blocked outside poll() would not see completions arrive.
  none,
  /// An eventfd (notify_fd()) becomes readable whenever completions are posted, so another event
  /// loop (e.g. Boost.Asio) can wait for it and then call poll(0).
  eventfd,
};

struct ReactorOptions {
  unsigned ring_entries = 1024;   ///< SQ size; CQ is twice that
  unsigned post_capacity = 4096;  ///< MPSC ring slots for post() (rounded up to a power of two)
  CompletionNotify notify = CompletionNotify::none;
  /// 128-byte SQEs and 32-byte CQEs (IORING_SETUP_SQE128 | CQE32, Linux 5.19+), so that io_uring
  /// passthrough queue pairs (NVMe commands on /dev/ngXnY) share this ring instead of each
  /// keeping a ring of its own. Also drops COOP_TASKRUN: passthrough completions arrive as task
  /// work, which only the default notification delivers to a thread asleep in the ring. When
  /// the kernel refuses, the reactor comes up without (big_entries() tells).
  bool big_entries = false;
  /// IORING_SETUP_SINGLE_ISSUER | DEFER_TASKRUN (Linux 6.1+): completion work waits until the
  /// owning thread enters the ring (poll() does when IORING_SQ_TASKRUN says work is pending)
  /// instead of interrupting it, which is what a polling thread wants. Then the thread that
  /// calls create() must be the one that calls poll(), get_sqe() and register_*(); other
  /// threads reach it only through post() and wake(). Only with CompletionNotify::none and
  /// without big_entries; when the kernel refuses, the reactor comes up without
  /// (single_issuer() tells).
  bool single_issuer = false;
};

class Reactor {
 public:
  /// Creates the io_uring, probing optional setup flags and features and falling back when the
  /// kernel lacks them. Errors: errno codes from io_uring_queue_init or eventfd (ENOMEM, ENOSYS,
  /// EPERM when io_uring is disabled), Errc::invalid_argument for zero sizes.
  static Result<std::unique_ptr<Reactor>> create(const ReactorOptions& opts = {});
  /// Destroys the ring; the kernel cancels whatever is still in flight. Queue pairs and armed
  /// timers that use this reactor must be gone first.
  ~Reactor();
  Reactor(const Reactor&) = delete;
  Reactor& operator=(const Reactor&) = delete;

  /// A free SQE, flushing the ring to the kernel first if it is full. nullptr only when the
  /// kernel cannot take more (callers then retry on the next poll).
  io_uring_sqe* get_sqe() noexcept;
  io_uring* ring() noexcept;
  /// IORING_FEAT_* bits the kernel reported.
  uint32_t features() const noexcept;
  /// True when the ring has 128-byte SQEs and 32-byte CQEs (ReactorOptions::big_entries).
  bool big_entries() const noexcept;
  /// True when the ring runs completion work only on its owner's entries
  /// (ReactorOptions::single_issuer taken by the kernel).
  bool single_issuer() const noexcept;
  /// The owner says it spins on poll() for now (a busy lane for good, an adaptive lane in a spin
  /// window) and will clear it before it waits. Meanwhile transports poll their sockets with
  /// non-blocking system calls every turn instead of arming ring operations on them, so poll()
  /// runs one turn and never waits in the ring, whatever its max_wait. Transports arm ring
  /// operations again in the first turn after it is cleared (the turn that precedes a wait).
  /// Owner thread only.
  void set_spinning(bool on) noexcept { spinning_ = on; }
  bool spinning() const noexcept { return spinning_; }
  /// Registers `fd` in the ring's file table (created sparse on first use) and returns its
  /// index for IOSQE_FIXED_FILE. Owning thread (or before the reactor runs). Errors: errno codes
  /// from io_uring_register (ENFILE when the table is full).
  Result<unsigned> register_file(int fd) noexcept;
  /// Frees a slot of register_file() (nothing may still use it).
  void unregister_file(unsigned index) noexcept;
  /// Registers `buf` in the ring's buffer table (created sparse on first use) and returns its
  /// index for fixed-buffer commands. Errors: errno codes from io_uring_register.
  Result<unsigned> register_buffer(const iovec& buf) noexcept;
  /// Frees a slot of register_buffer() (no command may still use it).
  void unregister_buffer(unsigned index) noexcept;
  /// The eventfd of CompletionNotify::eventfd (readable when completions are pending; read it to
  /// reset it), or -1.
  int notify_fd() const noexcept;

  /// One loop turn: reaps completions (dispatching each to its IoHandler), runs expired timers,
  /// drains posted functions, runs pollers, then submits queued SQEs in one system call. When
  /// that turn did nothing it blocks up to `max_wait` (bounded by the nearest timer, cut short by
  /// a completion or wake()) and runs one more turn. 0 never blocks, nor does a spinning
  /// reactor (set_spinning). Returns events handled.
  int poll(std::chrono::microseconds max_wait = std::chrono::microseconds{0}) noexcept;

  /// Runs poll() until `done()` is true or `timeout` passes. Returns false on timeout.
  bool run_until(const std::function<bool()>& done, std::chrono::milliseconds timeout);

  /// Loop turns run so far (two per poll() that waited, one otherwise): a spinning owner runs
  /// one per pass, a sleeping one about two per wake-up. What tells a loop that sleeps from one
  /// that spins without timing it. Any thread (relaxed; written by the owner only).
  uint64_t turns() const noexcept { return turns_.load(std::memory_order_relaxed); }
  /// Blocking waits in the ring so far, each ended by a completion, a wake() or its timeout.
  /// Any thread (relaxed; written by the owner only).
  uint64_t waits() const noexcept { return waits_.load(std::memory_order_relaxed); }
  /// Of those, the waits that ended by their timeout (max_wait or the nearest timer) with no
  /// completion, wake() or post() to end them sooner. Any thread (relaxed).
  uint64_t wait_timeouts() const noexcept { return wait_timeouts_.load(std::memory_order_relaxed); }

  /// Monotonic clock, refreshed once per poll() turn (cheap to read on the hot path).
  uint64_t now_ns() const noexcept { return now_ns_; }
  /// CLOCK_MONOTONIC in nanoseconds (a system call free vDSO read).
  static uint64_t clock_ns() noexcept;

  /// Arms (or re-arms with a new deadline) `t`. Owning thread only. O(log timers).
  void arm(Timer& t, uint64_t deadline_ns) noexcept;
  /// Disarms `t` if armed. Owning thread only.
  void cancel(Timer& t) noexcept;

  /// A function called on every poll() turn (e.g. send flushing, deadline scans); returns how
  /// much work it did (0: none, so the turn may block). Owning thread only; a poller may remove
  /// itself or another poller while it runs.
  using Poller = int (*)(void* ctx) noexcept;
  void add_poller(Poller fn, void* ctx);
  void remove_poller(Poller fn, void* ctx) noexcept;

  /// Runs `fn` on the reactor thread at its next turn. Any thread; never blocks. Returns false
  /// when the ring is full (the caller retries or fails the request; nothing is dropped
  /// silently). Functions run in the order their post() calls took a slot.
  bool post(std::function<void()> fn);
  /// Wakes a reactor blocked in poll() (or makes notify_fd() readable). Any thread. Coalesced:
  /// at most one eventfd write until the reactor has seen the previous one.
  void wake() noexcept;

 private:
  Reactor() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  uint64_t now_ns_ = 0;
  bool spinning_ = false;
  // Written by the owner with a relaxed load and store (no locked instruction on the hot path),
  // read by any thread: statistics, a stale value is only one turn old.
  std::atomic<uint64_t> turns_{0};
  std::atomic<uint64_t> waits_{0};
  std::atomic<uint64_t> wait_timeouts_{0};
};

}  // namespace nvmeof
