// nvmeof-bench's I/O engine: `iodepth` slots, each one VolumeIo that its completion callback
// resubmits inline on the reactor thread, until the main thread asks them to stop.
//
// No two I/Os ever overlap, so the expected content of every block is unambiguous, and no lock is
// needed: in the timed phase slot s owns the units (bs-sized pieces of the working set) u with
// u % iodepth == s and has one I/O in flight at a time. The sweeps (prefill, final check) walk the
// working set in chunks taken from one atomic cursor, so they never overlap either.
//
// Threading: the public methods are for the main thread. Slot state and per-slot statistics are
// written by whichever reactor thread completes the slot's I/O (one at a time, handed over through
// the volume's submission ring); the main thread reads them only after wait_idle() saw every slot
// finish (acquire on `active_`). `fault_ns_`, `window_count_` and `stop_` are written by the main
// thread and read by the callbacks: a stale read only moves a boundary by one I/O.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <semaphore>
#include <vector>

#include "bench/intervals.hpp"
#include "bench/options.hpp"
#include "bench/stamp.hpp"
#include "core/histogram.hpp"
#include "core/node_memory.hpp"
#include "nvmeof/volume.hpp"

namespace nvmeof::bench {

struct WorkloadConfig {
  RwMode rw = RwMode::read;
  unsigned rwmixread = 50;
  uint32_t block_size = 4096;
  uint32_t unit_blocks = 1;      ///< blocks per timed I/O (bs / block size)
  uint64_t units = 0;            ///< working set, in units
  unsigned iodepth = 1;
  bool verify = true;
  uint64_t seed = 1;
  uint64_t run_id = 0;           ///< stamped into every block; differs from run to run
  /// I/O size of the prefill and final check. Kept small: set-up is not what is measured, and
  /// iodepth x 128 KiB writes outlast the volume's per-command deadline on a loaded host.
  uint32_t sweep_bytes = 32u << 10;
  /// Per reactor, the node its slots' buffers go on (-1: wherever). Slot i is submitted to
  /// reactor i % size; empty: the volume routes every submission itself.
  std::vector<int> reactor_nodes;
  /// Fault windows the timed phase tracks (see mark_fault()); at most this many faults.
  size_t fault_windows = 0;
  /// Receives every completion of the timed phase (--latency-log, --plot); may be null. Outlives
  /// the workload.
  IntervalRecorder* recorder = nullptr;
};

enum class Phase : uint8_t { prefill, timed, final_check };
inline constexpr size_t kPhases = 3;
const char* to_string(Phase p) noexcept;

/// One block whose content was not the one last acknowledged.
struct Mismatch {
  Phase phase = Phase::timed;
  uint64_t lba = 0;
  uint64_t expected_seq_low = 0;   ///< the last acknowledged write
  uint64_t expected_seq_high = 0;  ///< above low when later writes failed (either may be there)
  BlockCheck check = BlockCheck::ok;
  Stamp found;
};

/// Errors the application saw: an NVMe status, or a submit() return code.
struct ErrorCount {
  uint16_t status = 0;
  int submit_rc = 0;
  uint64_t count = 0;
};

struct OpTotals {
  uint64_t ios = 0;
  uint64_t bytes = 0;
  LatencyHistogram latency;
};

/// From one fault's injection to the next one's (or the end): what the application saw.
struct WindowTotals {
  uint64_t ios = 0;
  uint64_t errors = 0;
  uint64_t max_latency_ns = 0;   ///< the longest I/O completing in the window
  uint64_t max_gap_ns = 0;       ///< the longest time without a completion, within the window
};

/// A read or write slower than the stall threshold that did not overlap a window (see
/// Workload::set_window): when it completed and how long it took.
struct Stall {
  uint64_t at_ns = 0;
  uint64_t latency_ns = 0;
  uint64_t lba = 0;
  IoOp op = IoOp::read;
};

/// An I/O still in flight (Workload::in_flight): what a drain that timed out waited for.
struct InFlight {
  unsigned slot = 0;
  IoOp op = IoOp::read;
  uint64_t lba = 0;
  uint32_t nlb = 0;
  uint64_t age_ns = 0;
  bool parked = false;  ///< refused by a full submission ring, waiting for service()
};

struct PhaseTotals {
  OpTotals read, write;
  /// Latencies split by whether the I/O overlapped a window (set_window): [0] outside, [1] inside.
  LatencyHistogram read_window[2], write_window[2];
  uint64_t stalls_outside = 0;          ///< I/Os outside windows slower than stall_ns
  std::vector<Stall> stall_examples;    ///< the first few of them, in completion order
  std::vector<uint64_t> stall_bins;     ///< stalls outside windows per bin (set_stall_bins)
  uint64_t errors = 0;
  uint64_t mismatches = 0;        ///< blocks
  uint64_t verified_blocks = 0;
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;            ///< last completion
  uint64_t max_latency_after_fault_ns = 0;
  uint64_t max_gap_after_fault_ns = 0;
  std::vector<ErrorCount> error_counts;
  std::vector<Mismatch> mismatch_examples;  ///< the first few
  std::vector<WindowTotals> windows;        ///< timed phase: one per mark_fault() call
  double seconds() const noexcept {
    return end_ns > start_ns ? static_cast<double>(end_ns - start_ns) / 1e9 : 0.0;
  }
};

/// CLOCK_MONOTONIC in nanoseconds: the reactors' time base.
uint64_t monotonic_ns() noexcept;

class Workload {
 public:
  Workload(Volume& volume, const WorkloadConfig& config);
  ~Workload();
  Workload(const Workload&) = delete;
  Workload& operator=(const Workload&) = delete;

  /// Starts `phase`: every slot submits its first I/O. The sweeps end by themselves; the timed
  /// phase runs until request_stop().
  void start(Phase phase);
  void request_stop() noexcept;
  /// Resubmits slots whose submit() found the ring full. Call every millisecond or so, or
  /// after wait_for_park() says a slot parked.
  void service() noexcept;
  /// Sleeps until a slot parks (its submit() found the ring full) or `max` has passed. Lets the main thread sleep long while nothing needs it: each of its
  /// wake-ups takes a CPU from a polling reactor or target for a moment, which shows in the
  /// latency tail (p99) of a QD1 run.
  void wait_for_park(std::chrono::nanoseconds max);
  /// Waits (servicing) until no slot has an I/O in flight. False on timeout.
  bool wait_idle(std::chrono::milliseconds timeout);
  /// I/Os in flight or waiting to be resubmitted.
  unsigned active() const noexcept { return active_.load(std::memory_order_acquire); }
  /// A fault is injected at `ns`: from now on, track the longest I/O and the longest completion
  /// gap after the first one, and open the next fault window (up to config.fault_windows).
  void mark_fault(uint64_t ns) noexcept;
  /// The totals of a finished phase (after wait_idle()).
  PhaseTotals totals(Phase phase) const;
  /// Opens or closes a window (e.g. every path down): an I/O in flight at any moment while one
  /// was open counts as inside it (PhaseTotals::read_window[1]). Main thread.
  void set_window(bool open) noexcept;
  /// I/Os slower than this outside a window are counted as stalls (default 50 ms).
  void set_stall_threshold(uint64_t ns) noexcept { stall_ns_ = ns; }
  /// Before start(): also count those stalls in `bins` bins of `bin_ns` from `origin_ns` (the
  /// last bin takes everything later).
  void set_stall_bins(uint64_t origin_ns, uint64_t bin_ns, size_t bins) {
    stall_origin_ns_ = origin_ns;
    stall_bin_ns_ = bin_ns;
    stall_bins_ = bins;
  }
  /// What is in flight now and for how long (diagnostics after a timed-out wait; racy by a
  /// completion or two, never unsafe).
  std::vector<InFlight> in_flight() const;

 private:
  struct Slot;
  struct UnitState {
    uint32_t acked = 0;   ///< sequence of the last acknowledged write; 0: never
    uint32_t failed = 0;  ///< highest sequence of a failed write since then (may have landed)
  };

  static void on_complete(VolumeIo& io, NvmeStatus status) noexcept;
  void complete(Slot& s, NvmeStatus status) noexcept;
  bool prepare(Slot& s) noexcept;
  void issue(Slot& s) noexcept;
  /// The slot has nothing in flight and nothing more to do in this phase.
  void retire() noexcept;
  void account_error(Slot& s, uint16_t status, int submit_rc) noexcept;
  void verify(Slot& s) noexcept;
  void fill(Slot& s) noexcept;
  void collect(Phase phase);

  Volume& volume_;
  WorkloadConfig cfg_;
  std::vector<UnitState> units_;
  std::vector<std::unique_ptr<Slot>> slots_;
  Phase phase_ = Phase::timed;
  uint64_t phase_start_ns_ = 0;
  std::atomic<uint64_t> sweep_cursor_{0};
  std::atomic<unsigned> active_{0};
  std::atomic<bool> stop_{false};
  std::counting_semaphore<> parks_{0};  // released once per parked slot
  std::atomic<uint64_t> fault_ns_{0};
  std::atomic<uint64_t> last_completion_ns_{0};
  /// Window k starts at window_start_[k]; written before window_count_ is raised (release).
  std::vector<uint64_t> window_start_;
  std::atomic<size_t> window_count_{0};
  /// Odd while a window is open; bumped at every open and close.
  std::atomic<uint32_t> window_epoch_{0};
  uint64_t stall_ns_ = 50'000'000;
  uint64_t stall_origin_ns_ = 0, stall_bin_ns_ = 0;
  size_t stall_bins_ = 0;
  PhaseTotals totals_[kPhases];
};

}  // namespace nvmeof::bench
