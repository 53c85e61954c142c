// Cross-Controller Reset (NVMe TP8028) on the embedded target: the admin command that ends
// another controller of the same subsystem and host, and the worker that finishes the resets
// which could not finish at once (their CCR log entry and asynchronous event).
// The command runs on the issuing controller's admin thread and waits at most CQT + 5 ms for
// the impacted controller to stop; anything longer goes to the worker, so no admin thread is
// held for long. (Implemented in admin_commands.cpp, beside the other admin commands.)
//
// Threading: CcrWorker::submit() may be called from any thread; jobs run on the worker's own
// thread. mu_ guards the job queue and the stop flag; everything a job touches synchronizes
// itself (Controller, HeldWrites, TcpConnection::post_event, Port counters).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "nvmeof/command.hpp"
#include "target/admin_commands.hpp"

namespace nvmeof::target {

class Controller;
struct TargetCore;

/// Asynchronous event of a finished CCR: notice (2), information F4h, log page 1Eh.
inline constexpr uint32_t kCcrCompletedEvent =
    (uint32_t{log_page::kCrossControllerReset} << 16) | (uint32_t{ccr::kEventInfoCompleted} << 8) | 2u;

class CcrWorker {
 public:
  struct Job {
    std::shared_ptr<Controller> issuer;
    std::shared_ptr<Controller> impacted;
    uint16_t icid = 0;
    uint64_t report_after_ns = 0;  ///< steady; the entry does not turn to success before this
  };

  explicit CcrWorker(TargetCore& core) : core_(core) {}
  ~CcrWorker();  ///< stop()
  CcrWorker(const CcrWorker&) = delete;
  CcrWorker& operator=(const CcrWorker&) = delete;

  void start();
  /// Joins the thread; resets still queued stay in progress (the target is going away).
  void stop();
  void submit(Job j);

 private:
  void run() noexcept;
  void finish(Job& j) noexcept;

  TargetCore& core_;
  std::mutex mu_;  // guards jobs_ and stopping_
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  bool stopping_ = false;
  std::thread thread_;
};

/// Executes Cross-Controller Reset `c` issued through ctx.ctrl. Errors (CQE status): invalid
/// opcode (CCR disabled, discovery controller), invalid field (no such live controller of this
/// subsystem and host with that CIU and CIRN, or the issuer itself), SCT 1 SC 3Fh (a reset of
/// that controller already in progress from this one), 40h (log full), 41h (CCRL in progress).
AdminResult cross_controller_reset(const AdminContext& ctx, const Sqe& c);

}  // namespace nvmeof::target
