// When an adaptive poller (a host lane, a target connection) may keep spinning instead of
// sleeping. Spinning pays only while the spinner owns its CPU: on a contended CPU a thread that
// never sleeps is always runnable, so it waits its turn behind every other runnable thread,
// while a thread that sleeps is woken with the scheduler's wake-up preference the moment its
// completion lands. Two spinners on a shared machine then each wait out the other's time off
// the CPU (at load 7 to 10 on 2 cores, QD32 with a busy host and a busy target gave 6.5 K IOPS
// where a sleeping pair gave 36 K). The governor tells from the polling loop's own clock: one
// turn ends and the next starts microseconds later; a gap of `preempted_ns` or more between
// them (a turn's own work, such as completion callbacks, is not counted) means the thread was
// taken off the CPU. Then the spin stops and no spin starts again for `backoff_ns`: the poller
// sleeps and is woken like a sleeping one, and tries again once the backoff has passed.
//
// Threading: one poller thread owns a governor. Pure logic on the caller's clock (tests drive it
// with a fake one).
#pragma once

#include <cstdint>

namespace nvmeof::detail {

class SpinGovernor {
 public:
  /// A spinning turn at least this far from the previous one: the thread lost its CPU.
  static constexpr uint64_t kPreemptedNs = 200'000;
  /// How long after a preemption no spin starts.
  static constexpr uint64_t kBackoffNs = 100'000'000;

  explicit SpinGovernor(uint64_t preempted_ns = kPreemptedNs, uint64_t backoff_ns = kBackoffNs) noexcept
      : preempted_ns_(preempted_ns), backoff_ns_(backoff_ns) {}

  /// Whether a spin may start (or go on) at `now`.
  bool may_spin(uint64_t now) const noexcept { return now >= quiet_until_; }

  /// A turn of the polling loop starts at `now`. A gap of preempted_ns or more since the end of
  /// the previous turn (with no sleep between them) means the thread was off its CPU: the
  /// backoff starts.
  void turn_start(uint64_t now) noexcept {
    if (last_end_ != 0 && now > last_end_ && now - last_end_ >= preempted_ns_) {
      quiet_until_ = now + backoff_ns_;
      ++preemptions_;
    }
    last_end_ = 0;
  }
  /// The turn ended at `now` and the loop goes straight on to the next one.
  void turn_end(uint64_t now) noexcept { last_end_ = now; }
  /// The loop sleeps: the gap to the next turn is the sleep, not a preemption.
  void stopped() noexcept { last_end_ = 0; }

  /// Preemptions seen (diagnostics).
  uint64_t preemptions() const noexcept { return preemptions_; }

 private:
  uint64_t preempted_ns_;
  uint64_t backoff_ns_;
  uint64_t last_end_ = 0;
  uint64_t quiet_until_ = 0;
  uint64_t preemptions_ = 0;
};

}  // namespace nvmeof::detail
