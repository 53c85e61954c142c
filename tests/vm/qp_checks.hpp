// Checks the testbed programs share (tests/vm): of a single queue pair, and of a verified run on a
// volume of two paths.
#pragma once

#include <catch2/catch.hpp>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <initializer_list>
#include <utility>
#include <vector>

#include "../common/block_stamp.hpp"
#include "../common/verified_workload.hpp"
#include "nvmeof/volume.hpp"
#include "reactor/sync_io.hpp"

namespace nvmeof::test {

// At QD 1 through `io`: each size in `sizes` (bytes, multiples of `bs`) written from `slba` on,
// each block stamped with a new sequence number from `seq`, read back and checked; the sizes
// follow each other on disk. Then a flush.
inline void write_read_each_size(SyncIo& io, uint32_t bs, uint64_t slba, std::initializer_list<uint32_t> sizes,
                                 uint64_t& seq) {
  for (uint32_t bytes : sizes) {
    INFO("QD1 bytes " << bytes);
    const uint32_t nlb = bytes / bs;
    std::vector<uint8_t> data(bytes), back(bytes, 0);
    fill_blocks(data.data(), bs, slba, nlb, ++seq);
    auto w = io.write(slba, nlb, data.data());
    INFO("write: " << (w ? "ok" : w.error().message()));
    REQUIRE(w);
    auto r = io.read(slba, nlb, back.data());
    INFO("read: " << (r ? "ok" : r.error().message()));
    REQUIRE(r);
    CHECK(count_mismatches(back.data(), bs, slba, nlb, seq) == 0);
    slba += nlb;
  }
  REQUIRE(io.flush());
}

// A volume over `paths` as the testbed's volume tests open it: round robin, queue depth 64, and
// deadlines far above the few milliseconds derived ones would be (TCG under load is slower).
inline std::unique_ptr<Volume> open_testbed_volume(std::vector<TransportAddress> paths, ConnectOptions connect) {
  VolumeOptions vo;
  vo.paths = std::move(paths);
  vo.connect = std::move(connect);
  vo.connect.io_queue_depth = 64;
  vo.selector = SelectorKind::round_robin;
  vo.io_deadline = std::chrono::seconds(2);
  vo.no_path_timeout = std::chrono::seconds(20);
  auto v = Volume::open(vo);
  INFO("open: " << (v ? "ok" : v.error().message()));
  REQUIRE(v);
  REQUIRE((*v)->block_size() == 4096);
  return std::move(*v);
}

// After `w` finished on `vol` (two paths, `slots` I/Os in flight): prints the volume's stats and
// the workload's counts, checks that nothing failed or read back wrong, that every I/O issued
// completed, and that both paths carried I/O. The stats, for the caller's own checks.
inline VolumeStats check_two_path_run(const Volume& vol, const VerifiedWorkload& w, uint32_t slots) {
  const VolumeStats st = vol.stats();
  std::printf("%s", to_text(st).c_str());
  std::printf("volume: %llu writes, %llu reads, %llu errors, %llu mismatches, longest stall %.1f ms\n",
              static_cast<unsigned long long>(w.writes()), static_cast<unsigned long long>(w.reads()),
              static_cast<unsigned long long>(w.errors()), static_cast<unsigned long long>(w.mismatches()),
              static_cast<double>(w.longest_gap_us()) / 1000.0);
  INFO("first error: " << w.first_error());
  CHECK(w.errors() == 0);
  CHECK(w.mismatches() == 0);
  CHECK(w.completed() == w.issued());
  CHECK(st.failed == 0);
  CHECK(w.reads() > slots);
  REQUIRE(st.paths.size() == 2);
  CHECK(st.paths[0].ios > 0);
  CHECK(st.paths[1].ios > 0);
  return st;
}

}  // namespace nvmeof::test
