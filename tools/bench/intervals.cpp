#include "bench/intervals.hpp"

#include <algorithm>
#include <bit>

namespace nvmeof::bench {

IntervalRecorder::IntervalRecorder(uint64_t interval_ns, uint64_t duration_ns)
    : interval_ns_(std::max<uint64_t>(interval_ns, 1)),
      duration_ns_(duration_ns),
      n_(std::clamp<uint64_t>((duration_ns + interval_ns_ - 1) / interval_ns_, 1, kMaxIntervals)),
      slots_(std::make_unique<Slot[]>(n_)) {}

size_t IntervalRecorder::bucket_of(uint64_t ns) noexcept {
  constexpr uint64_t kLinear = uint64_t{1} << kSubBits;
  if (ns < kLinear) return static_cast<size_t>(ns);
  const unsigned e = static_cast<unsigned>(std::bit_width(ns)) - 1;  // ns in [2^e, 2^(e+1))
  if (e > kMaxExponent) return kBuckets - 1;
  const uint64_t sub = (ns >> (e - kSubBits)) & (kLinear - 1);
  return std::min<size_t>(((e - kSubBits + 1) << kSubBits) + sub, kBuckets - 1);
}

uint64_t IntervalRecorder::bucket_mid(size_t b) noexcept {
  constexpr uint64_t kLinear = uint64_t{1} << kSubBits;
  if (b < kLinear) return b;
  const unsigned e = static_cast<unsigned>(b >> kSubBits) + kSubBits - 1;
  const uint64_t sub = b & (kLinear - 1);
  const uint64_t width = uint64_t{1} << (e - kSubBits);
  return (uint64_t{1} << e) + sub * width + width / 2;
}

size_t IntervalRecorder::index_of(uint64_t now_ns) const noexcept {
  const uint64_t t0 = t0_.load(std::memory_order_acquire);
  if (t0 == 0 || now_ns < t0) return n_;
  return static_cast<size_t>(std::min<uint64_t>((now_ns - t0) / interval_ns_, n_ - 1));
}

void IntervalRecorder::record(uint64_t now_ns, bool write, uint64_t bytes, uint64_t latency_ns) noexcept {
  const size_t i = index_of(now_ns);
  if (i >= n_) return;
  Slot& s = slots_[i];
  s.ios[write].fetch_add(1, std::memory_order_relaxed);
  s.bytes[write].fetch_add(bytes, std::memory_order_relaxed);
  s.hist[bucket_of(latency_ns)].fetch_add(1, std::memory_order_relaxed);
  uint64_t m = s.max_ns.load(std::memory_order_relaxed);
  while (latency_ns > m && !s.max_ns.compare_exchange_weak(m, latency_ns, std::memory_order_relaxed)) {
  }
}

void IntervalRecorder::note_usable(uint64_t now_ns, unsigned usable) noexcept {
  const size_t i = index_of(now_ns);
  if (i >= n_) return;
  const int u = static_cast<int>(usable);
  const int cur = slots_[i].usable.load(std::memory_order_relaxed);
  if (cur < 0 || u < cur) slots_[i].usable.store(u, std::memory_order_relaxed);
}

std::vector<IntervalRow> IntervalRecorder::rows() const {
  std::vector<IntervalRow> out;
  out.reserve(n_);
  for (size_t i = 0; i < n_; ++i) {
    const Slot& s = slots_[i];
    IntervalRow r;
    const uint64_t start = i * interval_ns_;
    const uint64_t end = i + 1 == n_ ? std::max(duration_ns_, start + 1) : start + interval_ns_;
    r.start_s = static_cast<double>(start) / 1e9;
    r.end_s = static_cast<double>(end) / 1e9;
    const double secs = static_cast<double>(end - start) / 1e9;
    r.read_ios = s.ios[0].load(std::memory_order_relaxed);
    r.write_ios = s.ios[1].load(std::memory_order_relaxed);
    r.read_iops = static_cast<double>(r.read_ios) / secs;
    r.write_iops = static_cast<double>(r.write_ios) / secs;
    r.read_mib_s = static_cast<double>(s.bytes[0].load(std::memory_order_relaxed)) / secs / 1048576.0;
    r.write_mib_s = static_cast<double>(s.bytes[1].load(std::memory_order_relaxed)) / secs / 1048576.0;
    r.usable_paths = s.usable.load(std::memory_order_relaxed);
    const uint64_t total = r.read_ios + r.write_ios;
    if (total > 0) {
      const uint64_t max_ns = s.max_ns.load(std::memory_order_relaxed);
      auto pct = [&](double q) {
        const auto rank = static_cast<uint64_t>(std::max(1.0, q / 100.0 * static_cast<double>(total) + 0.999999));
        uint64_t seen = 0;
        for (size_t b = 0; b < kBuckets; ++b) {
          seen += s.hist[b].load(std::memory_order_relaxed);
          if (seen >= rank) return std::min(bucket_mid(b), max_ns);
        }
        return max_ns;
      };
      r.p50_us = static_cast<double>(pct(50)) / 1e3;
      r.p99_us = static_cast<double>(pct(99)) / 1e3;
      r.max_us = static_cast<double>(max_ns) / 1e3;
    }
    out.push_back(r);
  }
  return out;
}

}  // namespace nvmeof::bench
