// Per-interval figures of nvmeof-bench's timed phase (--latency-log, --plot): I/Os, bytes and a
// latency histogram per interval of --log-interval, filled by the completion callbacks, and the
// fewest usable paths seen in each interval, sampled by the main thread.
//
// Threading: record() runs on any reactor thread, concurrently (relaxed atomics: each counter is
// exact, a reader sees every record() that happened before its acquire of the phase's end);
// start(), note_usable() and rows() are for the main thread, rows() after the phase drained.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

namespace nvmeof::bench {

struct IntervalRow {
  double start_s = 0;     ///< since the timed phase started
  double end_s = 0;       ///< the interval's end (the last one may be shorter)
  uint64_t read_ios = 0, write_ios = 0;
  double read_iops = 0, write_iops = 0;
  double read_mib_s = 0, write_mib_s = 0;
  double p50_us = 0, p99_us = 0, max_us = 0;  ///< reads and writes together; 0 without I/O
  int usable_paths = -1;  ///< the fewest seen; -1: never sampled
};

class IntervalRecorder {
 public:
  /// Latency resolution: 8 linear sub-buckets per power of two (within 1/16 of the value).
  static constexpr unsigned kSubBits = 3;
  static constexpr unsigned kMaxExponent = 40;  ///< about 18 minutes; longer lands in the last bucket
  static constexpr size_t kBuckets = (kMaxExponent - kSubBits + 2) << kSubBits;
  /// At most this many intervals (about 1.3 KiB each).
  static constexpr size_t kMaxIntervals = 20000;

  /// `duration_ns` / `interval_ns` intervals, rounded up, at least 1 and at most kMaxIntervals.
  IntervalRecorder(uint64_t interval_ns, uint64_t duration_ns);
  /// The timed phase starts at `t0_ns` (CLOCK_MONOTONIC).
  void start(uint64_t t0_ns) noexcept { t0_.store(t0_ns, std::memory_order_release); }
  /// One completion at `now_ns`; before start() or before t0 it is dropped, after the last
  /// interval it counts in the last one (the drain).
  void record(uint64_t now_ns, bool write, uint64_t bytes, uint64_t latency_ns) noexcept;
  void note_usable(uint64_t now_ns, unsigned usable) noexcept;
  std::vector<IntervalRow> rows() const;
  size_t intervals() const noexcept { return n_; }
  uint64_t interval_ns() const noexcept { return interval_ns_; }

  static size_t bucket_of(uint64_t ns) noexcept;
  static uint64_t bucket_mid(size_t b) noexcept;

 private:
  struct Slot {
    std::atomic<uint64_t> ios[2]{};
    std::atomic<uint64_t> bytes[2]{};
    std::atomic<uint64_t> max_ns{0};
    std::atomic<int> usable{-1};
    std::atomic<uint32_t> hist[kBuckets]{};
  };
  size_t index_of(uint64_t now_ns) const noexcept;

  uint64_t interval_ns_;
  uint64_t duration_ns_;
  size_t n_;
  std::atomic<uint64_t> t0_{0};
  std::unique_ptr<Slot[]> slots_;
};

}  // namespace nvmeof::bench
