// The block stamp every data test writes and checks: a header {lba, seq, magic} and then a
// pattern derived from both, so that a read returning an older write, another block or garbage
// never passes. seq 0 stands for "never written" (all zero).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace nvmeof::test {

inline constexpr uint64_t kStampMagic = 0x6e766d656f66ull;

struct Stamp {
  uint64_t lba;
  uint64_t seq;
  uint64_t magic;
};

inline void fill_block(uint8_t* p, uint32_t block, uint64_t lba, uint64_t seq) {
  const Stamp s{lba, seq, kStampMagic};
  std::memcpy(p, &s, sizeof s);
  for (uint32_t i = sizeof s; i < block; ++i) p[i] = static_cast<uint8_t>(lba * 31 + seq * 7 + i);
}

/// True when the block holds exactly (lba, seq); seq 0 means all zero.
inline bool block_matches(const uint8_t* p, uint32_t block, uint64_t lba, uint64_t seq) {
  if (seq == 0) return std::all_of(p, p + block, [](uint8_t b) { return b == 0; });
  std::vector<uint8_t> want(block);
  fill_block(want.data(), block, lba, seq);
  return std::memcmp(p, want.data(), block) == 0;
}

/// Stamps `nlb` consecutive blocks from `slba` with `seq`.
inline void fill_blocks(uint8_t* p, uint32_t block, uint64_t slba, uint32_t nlb, uint64_t seq) {
  for (uint32_t i = 0; i < nlb; ++i) fill_block(p + size_t{i} * block, block, slba + i, seq);
}

/// Blocks in [slba, slba + nlb) that do not hold (lba, seq).
inline uint32_t count_mismatches(const uint8_t* p, uint32_t block, uint64_t slba, uint32_t nlb, uint64_t seq) {
  uint32_t bad = 0;
  for (uint32_t i = 0; i < nlb; ++i) bad += !block_matches(p + size_t{i} * block, block, slba + i, seq);
  return bad;
}

}  // namespace nvmeof::test
