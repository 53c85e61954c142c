// A per-core run-to-completion loop. It owns one io_uring; the queue pairs it drives put their
// socket operations on that ring, and it dispatches completions back to them inline.
//
// Threading: everything except post() and wake() is for the owning thread only (the thread that
// calls poll()). post() may be called from any thread (bounded MPSC ring).
#pragma once

#include <liburing.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "nvmeof/status.hpp"

namespace nvmeof {

/// Receives io_uring completions. The SQE's user_data holds the handler's address
/// (Seastar-style: completion objects live in their owner, not in a side table).
struct IoHandler {
  void (*fn)(IoHandler* self, const io_uring_cqe& cqe) noexcept = nullptr;
};

/// A one-shot timer owned by the caller, armed on a reactor.
struct Timer {
  void (*fn)(Timer* self) noexcept = nullptr;
  uint64_t deadline_ns = 0;
  bool armed = false;
  size_t heap_index = 0;  // owned by the reactor
};

struct ReactorOptions {
  unsigned ring_entries = 1024;  ///< SQ size; CQ is twice that
  unsigned post_capacity = 4096; ///< MPSC ring slots for post()
};

class Reactor {
 public:
  /// Creates the io_uring. Errors: errno codes from io_uring_queue_init (e.g. ENOMEM, ENOSYS).
  static Result<std::unique_ptr<Reactor>> create(const ReactorOptions& opts = {});
  ~Reactor();
  Reactor(const Reactor&) = delete;
  Reactor& operator=(const Reactor&) = delete;

  /// A free SQE, flushing the ring to the kernel first if it is full. nullptr only when the
  /// kernel cannot take more (callers then retry on the next poll).
  io_uring_sqe* get_sqe() noexcept;
  io_uring* ring() noexcept;

  /// One loop turn: submits queued SQEs, reaps completions (dispatching each to its
  /// IoHandler), runs expired timers, drains posted functions, runs pollers. Blocks up to
  /// `max_wait` when there is nothing to do (0: never blocks). Returns events handled.
  int poll(std::chrono::microseconds max_wait = std::chrono::microseconds{0}) noexcept;

  /// Runs poll() until `done()` is true or `timeout` passes. Returns false on timeout.
  bool run_until(const std::function<bool()>& done, std::chrono::milliseconds timeout);

  /// Monotonic clock, refreshed once per poll() (cheap to read on the hot path).
  uint64_t now_ns() const noexcept { return now_ns_; }
  static uint64_t clock_ns() noexcept;

  void arm(Timer& t, uint64_t deadline_ns) noexcept;
  void cancel(Timer& t) noexcept;

  /// A function called on every poll() turn (e.g. deadline scans). Owning thread only.
  using Poller = int (*)(void* ctx) noexcept;
  void add_poller(Poller fn, void* ctx);
  void remove_poller(Poller fn, void* ctx);

  /// Runs `fn` on the reactor thread at its next turn. Any thread. Returns false when the
  /// ring is full (the caller retries or fails the request; nothing is dropped silently).
  bool post(std::function<void()> fn);
  /// Wakes a reactor blocked in poll(). Any thread.
  void wake() noexcept;

 private:
  Reactor() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  uint64_t now_ns_ = 0;
};

}  // namespace nvmeof
