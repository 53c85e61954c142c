// CRC32C (the NVMe/TCP digest) against memcpy of the same buffer: the digest's cost per byte
// relative to the cheapest thing a data path does with every byte anyway.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/crc32c.hpp"

namespace {

std::vector<uint8_t> make_buffer(size_t len) {
  std::vector<uint8_t> buf(len);
  for (size_t i = 0; i < len; ++i) buf[i] = static_cast<uint8_t>(i * 131 + 7);
  return buf;
}

void bm_crc32c(benchmark::State& state) {
  const auto len = static_cast<size_t>(state.range(0));
  const std::vector<uint8_t> buf = make_buffer(len);
  for (auto _ : state) {
    uint32_t crc = nvmeof::detail::crc32c(buf.data(), buf.size());
    benchmark::DoNotOptimize(crc);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}

void bm_memcpy(benchmark::State& state) {
  const auto len = static_cast<size_t>(state.range(0));
  const std::vector<uint8_t> src = make_buffer(len);
  std::vector<uint8_t> dst(len);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), len);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * state.range(0));
}

}  // namespace

BENCHMARK(bm_crc32c)->Arg(4096)->Arg(128 << 10);
BENCHMARK(bm_memcpy)->Arg(4096)->Arg(128 << 10);

BENCHMARK_MAIN();
