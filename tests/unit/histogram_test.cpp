#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "core/histogram.hpp"

using nvmeof::LatencyHistogram;

namespace {

// A reported percentile is a bucket midpoint: within 1/64 of the exact value.
constexpr double kRelativeError = 1.0 / 64.0;

bool within_bucket_error(uint64_t reported, uint64_t exact) {
  const double tolerance = std::max(1.0, static_cast<double>(exact) * kRelativeError);
  return std::fabs(static_cast<double>(reported) - static_cast<double>(exact)) <= tolerance;
}

// The exact percentile by the same rank rule as the histogram: the ceil(q/100 * n)-th smallest.
uint64_t exact_percentile(std::vector<uint64_t> v, double q) {
  std::sort(v.begin(), v.end());
  auto rank = static_cast<size_t>(std::ceil(q / 100.0 * static_cast<double>(v.size())));
  rank = std::clamp<size_t>(rank, 1, v.size());
  return v[rank - 1];
}

}  // namespace

TEST_CASE("histogram buckets are contiguous and bounded in width", "[histogram]") {
  for (size_t i = 0; i + 1 < LatencyHistogram::kBuckets; ++i) {
    INFO("bucket " << i);
    REQUIRE(LatencyHistogram::bucket_high(i) + 1 == LatencyHistogram::bucket_low(i + 1));
    REQUIRE(LatencyHistogram::bucket_of(LatencyHistogram::bucket_low(i)) == i);
    REQUIRE(LatencyHistogram::bucket_of(LatencyHistogram::bucket_high(i)) == i);
    const uint64_t width = LatencyHistogram::bucket_high(i) - LatencyHistogram::bucket_low(i) + 1;
    REQUIRE(width * LatencyHistogram::kSubBuckets <= std::max<uint64_t>(
                                                         LatencyHistogram::bucket_low(i), 32));
  }
  // About 137 s fits; everything beyond shares the last bucket.
  CHECK(LatencyHistogram::bucket_of(100'000'000'000ull) < LatencyHistogram::kBuckets - 1);
  CHECK(LatencyHistogram::bucket_of(UINT64_MAX) == LatencyHistogram::kBuckets - 1);
}

TEST_CASE("an empty histogram reports zeros", "[histogram]") {
  LatencyHistogram h;
  CHECK(h.count() == 0);
  CHECK(h.percentile(50) == 0);
  CHECK(h.max() == 0);
  CHECK(h.min() == 0);
  CHECK(h.mean() == 0.0);
}

TEST_CASE("small values are exact and one value reports itself", "[histogram]") {
  LatencyHistogram h;
  for (uint64_t v = 0; v < 32; ++v) h.record(v);
  CHECK(h.percentile(0) == 0);
  CHECK(h.percentile(50) == 15);
  CHECK(h.percentile(100) == 31);

  LatencyHistogram one;
  one.record(123'456'789);
  CHECK(one.percentile(50) == 123'456'789);
  CHECK(one.percentile(99.9) == 123'456'789);
  CHECK(one.max() == 123'456'789);
  CHECK(one.mean() == 123'456'789.0);
}

TEST_CASE("percentiles of a uniform distribution", "[histogram]") {
  // 1..100000 ns: the q-th percentile is q * 1000.
  LatencyHistogram h;
  std::vector<uint64_t> values;
  for (uint64_t v = 1; v <= 100'000; ++v) {
    h.record(v);
    values.push_back(v);
  }
  for (double q : {1.0, 25.0, 50.0, 90.0, 99.0, 99.9, 100.0}) {
    INFO("q " << q << " reported " << h.percentile(q));
    CHECK(within_bucket_error(h.percentile(q), exact_percentile(values, q)));
  }
  CHECK(h.count() == 100'000);
  CHECK(h.max() == 100'000);
  CHECK(h.min() == 1);
  CHECK(h.mean() == Approx(50'000.5));
}

TEST_CASE("percentiles of a log-normal latency distribution", "[histogram]") {
  std::mt19937_64 rng(42);
  std::lognormal_distribution<double> dist(std::log(50'000.0), 0.8);  // median 50 us
  LatencyHistogram h;
  std::vector<uint64_t> values;
  for (int i = 0; i < 200'000; ++i) {
    const auto v = static_cast<uint64_t>(dist(rng));
    h.record(v);
    values.push_back(v);
  }
  for (double q : {50.0, 90.0, 99.0, 99.9, 99.99}) {
    INFO("q " << q << " reported " << h.percentile(q) << " exact " << exact_percentile(values, q));
    CHECK(within_bucket_error(h.percentile(q), exact_percentile(values, q)));
  }
  CHECK(h.max() == *std::max_element(values.begin(), values.end()));
}

TEST_CASE("a bimodal distribution keeps its tail", "[histogram]") {
  // 99 % at 20 us, 1 % at 30 ms: p50 and p98 see the fast mode, p99.5 the slow one.
  LatencyHistogram h;
  for (int i = 0; i < 99'000; ++i) h.record(20'000);
  for (int i = 0; i < 1'000; ++i) h.record(30'000'000);
  CHECK(within_bucket_error(h.percentile(50), 20'000));
  CHECK(within_bucket_error(h.percentile(98), 20'000));
  CHECK(within_bucket_error(h.percentile(99.5), 30'000'000));
  CHECK(h.max() == 30'000'000);
}

TEST_CASE("values beyond the range are counted and their max kept", "[histogram]") {
  LatencyHistogram h;
  h.record(1'000);
  h.record(500'000'000'000ull);  // 500 s
  CHECK(h.count() == 2);
  CHECK(h.max() == 500'000'000'000ull);
  CHECK(h.percentile(100) <= 500'000'000'000ull);
  CHECK(h.percentile(100) >= LatencyHistogram::bucket_low(LatencyHistogram::kBuckets - 1));
}

TEST_CASE("merge equals recording into one histogram", "[histogram]") {
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<uint64_t> dist(1, 10'000'000);
  LatencyHistogram a, b, both;
  for (int i = 0; i < 50'000; ++i) {
    const uint64_t v = dist(rng);
    (i % 3 ? a : b).record(v);
    both.record(v);
  }
  a.merge(b);
  CHECK(a.count() == both.count());
  CHECK(a.max() == both.max());
  CHECK(a.min() == both.min());
  CHECK(a.mean() == Approx(both.mean()));
  for (double q : {10.0, 50.0, 99.0, 99.9}) CHECK(a.percentile(q) == both.percentile(q));

  LatencyHistogram empty;
  a.merge(empty);
  CHECK(a.count() == both.count());
  CHECK(a.min() == both.min());
  a.reset();
  CHECK(a.count() == 0);
}
