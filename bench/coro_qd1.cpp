// coro_qd1: QD1 4 KiB read latency through the C++ coroutine form (`co_await volume.read`), the
// reference the Python package's pread is measured against (bench/python_bench.py runs both
// against one nvmeof-target process, in alternating rounds).
//
//   coro_qd1 ADDR:PORT NQN COUNT     prints one JSON line: {"mean_us":..,"p50_us":..,"p99_us":..}
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "nvmeof/task.hpp"
#include "nvmeof/volume.hpp"

namespace {

nvmeof::Task<int> reads(nvmeof::Volume& v, unsigned count, std::vector<double>& lat) {
  std::vector<char> buf(v.block_size());
  const uint64_t blocks = std::min<uint64_t>(v.size_blocks(), 4096);
  for (unsigned i = 0; i < count; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const nvmeof::NvmeStatus st = co_await v.read(buf.data(), (i * 7919ull) % blocks, 1);
    lat.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    if (!st.is_success()) co_return 1;
  }
  co_return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s ADDR:PORT NQN COUNT\n", argv[0]);
    return 2;
  }
  auto addr = nvmeof::TransportAddress::parse(argv[1]);
  if (!addr) return 2;
  nvmeof::VolumeOptions o;
  o.paths = {*addr};
  o.connect.subnqn = argv[2];
  o.connect.kato_ms = 5000;                       // as the C API's default
  o.io_deadline = std::chrono::milliseconds(2000);  // as bench/python_bench.py's Python side
  auto v = nvmeof::Volume::open(o);
  if (!v) {
    std::fprintf(stderr, "coro_qd1: open: %s\n", v.error().message().c_str());
    return 1;
  }
  std::vector<double> lat;
  const unsigned count = static_cast<unsigned>(std::strtoul(argv[3], nullptr, 10));
  lat.reserve(count);
  if (reads(**v, count, lat).result.get() != 0) return 1;
  std::sort(lat.begin(), lat.end());
  double sum = 0;
  for (double x : lat) sum += x;
  std::printf("{\"mean_us\":%.2f,\"p50_us\":%.2f,\"p99_us\":%.2f}\n", sum / lat.size(),
              lat[lat.size() / 2], lat[lat.size() * 99 / 100]);
  return 0;
}
