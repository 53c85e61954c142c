#include "core/crc32c.hpp"

#include <isa-l/crc.h>

#include <climits>

namespace nvmeof::detail {

uint32_t crc32c_update(uint32_t state, const void* data, size_t len) noexcept {
  auto* p = static_cast<unsigned char*>(const_cast<void*>(data));  // ISA-L takes a non-const pointer
  while (len > 0) {
    // crc32_iscsi takes an int length; feed huge buffers in chunks.
    const int chunk = len > static_cast<size_t>(INT_MAX / 2) ? INT_MAX / 2 : static_cast<int>(len);
    state = crc32_iscsi(p, chunk, state);
    p += chunk;
    len -= static_cast<size_t>(chunk);
  }
  return state;
}

}  // namespace nvmeof::detail
