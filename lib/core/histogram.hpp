// A latency histogram with log-linear buckets (HdrHistogram's layout, fixed precision): values
// below 32 ns have a bucket each; above, every power-of-two range [2^e, 2^(e+1)) is split into 32
// equal sub-buckets, so a bucket is at most 1/32 of its values wide. Values up to 2^37 ns
// (about 137 s) are kept; larger ones land in the last bucket (max() still reports them exactly).
// Reported percentiles are bucket midpoints, within 1/64 (1.6 %) of the true value.
//
// Threading: none. One thread records into a histogram; to combine per-thread histograms, merge()
// them after their writers stopped (or on the thread that owns the destination).
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>

namespace nvmeof {

class LatencyHistogram {
 public:
  static constexpr unsigned kSubBits = 5;
  /// Linear sub-buckets per power-of-two range.
  static constexpr uint64_t kSubBuckets = uint64_t{1} << kSubBits;
  /// Values at or above this land in the last bucket.
  static constexpr unsigned kMaxExponent = 37;
  static constexpr size_t kBuckets = (kMaxExponent - kSubBits + 1) * kSubBuckets;

  /// Counts one value (nanoseconds). O(1), no allocation.
  void record(uint64_t ns) noexcept {
    ++counts_[bucket_of(ns)];
    ++count_;
    sum_ += ns;
    max_ = std::max(max_, ns);
    min_ = std::min(min_, ns);
  }

  /// Adds every value of `other` to this histogram.
  void merge(const LatencyHistogram& other) noexcept {
    for (size_t i = 0; i < kBuckets; ++i) counts_[i] += other.counts_[i];
    count_ += other.count_;
    sum_ += other.sum_;
    max_ = std::max(max_, other.max_);
    min_ = std::min(min_, other.min_);
  }

  /// Forgets every value.
  void reset() noexcept { *this = LatencyHistogram{}; }

  /// The value at percentile `q` (0..100: 50 is the median, 99.9 the 999th of 1000): the midpoint
  /// of the bucket holding the ceil(q/100 * count)-th smallest value, clamped to [min, max] so a
  /// one-value histogram reports that value. 0 when empty.
  uint64_t percentile(double q) const noexcept {
    if (count_ == 0) return 0;
    q = std::clamp(q, 0.0, 100.0);
    auto rank = static_cast<uint64_t>(q / 100.0 * static_cast<double>(count_) + 0.999999999);
    rank = std::clamp<uint64_t>(rank, 1, count_);
    uint64_t seen = 0;
    for (size_t i = 0; i < kBuckets; ++i) {
      seen += counts_[i];
      if (seen >= rank) {
        const uint64_t mid = bucket_low(i) + (bucket_high(i) - bucket_low(i)) / 2;
        return std::clamp(mid, min_, max_);
      }
    }
    return max_;
  }

  uint64_t count() const noexcept { return count_; }
  /// Sum of the exact values (ns).
  uint64_t sum() const noexcept { return sum_; }
  /// Values in buckets that lie wholly at or below `ns` (a Prometheus bucket's cumulative count;
  /// a value in the bucket straddling `ns` counts in the next bound up).
  uint64_t count_at_most(uint64_t ns) const noexcept {
    uint64_t n = 0;
    for (size_t i = 0; i < kBuckets && bucket_high(i) <= ns; ++i) n += counts_[i];
    return n;
  }
  /// Largest value recorded, exact. 0 when empty.
  uint64_t max() const noexcept { return max_; }
  /// Smallest value recorded, exact. 0 when empty.
  uint64_t min() const noexcept { return count_ ? min_ : 0; }
  /// Arithmetic mean of the exact values. 0 when empty.
  double mean() const noexcept {
    return count_ ? static_cast<double>(sum_) / static_cast<double>(count_) : 0.0;
  }

  /// The bucket a value falls in.
  static constexpr size_t bucket_of(uint64_t ns) noexcept {
    if (ns < kSubBuckets) return static_cast<size_t>(ns);
    const unsigned e = static_cast<unsigned>(std::bit_width(ns)) - 1;
    if (e >= kMaxExponent) return kBuckets - 1;
    const unsigned shift = e - kSubBits;
    // (ns >> shift) is in [kSubBuckets, 2 * kSubBuckets): the sub-bucket plus one range's worth,
    // which makes the index continuous with the exact buckets below kSubBuckets.
    return static_cast<size_t>(shift) * kSubBuckets + static_cast<size_t>(ns >> shift);
  }
  /// Smallest value of bucket `i`.
  static constexpr uint64_t bucket_low(size_t i) noexcept {
    if (i < kSubBuckets) return i;
    const uint64_t shift = i / kSubBuckets - 1;
    return (kSubBuckets + i % kSubBuckets) << shift;
  }
  /// Largest value of bucket `i` (the last bucket also holds everything above it).
  static constexpr uint64_t bucket_high(size_t i) noexcept {
    if (i < kSubBuckets) return i;
    const uint64_t shift = i / kSubBuckets - 1;
    return bucket_low(i) + (uint64_t{1} << shift) - 1;
  }

 private:
  std::array<uint64_t, kBuckets> counts_{};
  uint64_t count_ = 0;
  uint64_t sum_ = 0;
  uint64_t max_ = 0;
  uint64_t min_ = std::numeric_limits<uint64_t>::max();
};

}  // namespace nvmeof
