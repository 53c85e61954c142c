// The content nvmeof-bench writes into every block, and its check. A block opens with a 32-byte
// stamp (LBA, the unit's write sequence number, the run id, a check word) and the rest is a
// pseudo-random pattern seeded from the stamp, so a block that is stale (older sequence), misplaced
// (other LBA), from another run, torn or zeroed is told apart from the one last written.
// Threading: pure functions.
#pragma once

#include <cstdint>
#include <cstring>

namespace nvmeof::bench {

struct Stamp {
  uint64_t lba = 0;
  uint64_t seq = 0;
  uint64_t run_id = 0;
  uint64_t check = 0;
};
static_assert(sizeof(Stamp) == 32);

/// splitmix64's finaliser: a cheap, well-mixing 64-bit hash.
constexpr uint64_t mix64(uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

constexpr uint64_t stamp_check(uint64_t lba, uint64_t seq, uint64_t run_id) noexcept {
  return mix64(lba ^ mix64(seq ^ mix64(run_id ^ 0x6e766d656f662d62ull)));
}

/// Writes the stamp and the pattern of (lba, seq, run_id) into one block of `block_size` bytes
/// (a multiple of 8, at least 32).
inline void fill_block(void* block, uint32_t block_size, uint64_t lba, uint64_t seq,
                       uint64_t run_id) noexcept {
  const Stamp s{lba, seq, run_id, stamp_check(lba, seq, run_id)};
  auto* p = static_cast<uint8_t*>(block);
  std::memcpy(p, &s, sizeof s);
  uint64_t x = s.check | 1;
  for (uint32_t off = sizeof s; off < block_size; off += 8) {
    // xorshift64: the pattern only has to be cheap and differ for every stamp.
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(p + off, &x, 8);
  }
}

/// What a block holds, as far as its own stamp tells.
enum class BlockCheck : uint8_t {
  ok,            ///< stamp valid, pattern intact
  bad_stamp,     ///< the check word does not match (not a stamp of this tool, or torn)
  bad_pattern,   ///< stamp valid but the rest of the block differs from its pattern
};

/// Reads the stamp of `block` into `out` and checks the block is internally consistent.
inline BlockCheck check_block(const void* block, uint32_t block_size, Stamp& out) noexcept {
  const auto* p = static_cast<const uint8_t*>(block);
  std::memcpy(&out, p, sizeof out);
  if (out.check != stamp_check(out.lba, out.seq, out.run_id)) return BlockCheck::bad_stamp;
  uint64_t x = out.check | 1;
  for (uint32_t off = sizeof out; off < block_size; off += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    uint64_t got;
    std::memcpy(&got, p + off, 8);
    if (got != x) return BlockCheck::bad_pattern;
  }
  return BlockCheck::ok;
}

}  // namespace nvmeof::bench
