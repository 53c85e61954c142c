// Checks of a single queue pair the testbed programs share (tests/vm).
#pragma once

#include <catch2/catch.hpp>

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "../common/block_stamp.hpp"
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

}  // namespace nvmeof::test
