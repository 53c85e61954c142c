// CRC32C (Castagnoli), the NVMe/TCP header and data digest. ISA-L's crc32_iscsi does the work
// (SSE4.2 / PCLMUL paths chosen at run time); this wrapper only fixes the seed and final XOR.
#pragma once

#include <cstddef>
#include <cstdint>

namespace nvmeof::detail {

inline constexpr uint32_t kCrc32cSeed = 0xffffffffu;

/// Continues a running CRC32C state (start from kCrc32cSeed, finish with crc32c_final).
uint32_t crc32c_update(uint32_t state, const void* data, size_t len) noexcept;
inline constexpr uint32_t crc32c_final(uint32_t state) noexcept { return ~state; }
/// CRC32C of one buffer, e.g. crc32c("123456789", 9) == 0xe3069283.
inline uint32_t crc32c(const void* data, size_t len) noexcept {
  return crc32c_final(crc32c_update(kCrc32cSeed, data, len));
}

}  // namespace nvmeof::detail
