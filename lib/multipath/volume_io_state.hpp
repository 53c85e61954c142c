// What the volume keeps in a VolumeIo while it is in flight, in the opaque reserved storage of
// the public struct (nvmeof/volume.hpp), so that an I/O needs no allocation.
#pragma once

#include <cstdint>
#include <new>
#include <type_traits>

#include "nvmeof/status.hpp"
#include "nvmeof/volume.hpp"

namespace nvmeof {

namespace detail {
struct VolumeNs;
}

struct VolumeIoState {
  detail::VolumeNs* ns;    ///< the volume (namespace) it was submitted to
  uint64_t start_ns;       ///< when the volume accepted it
  uint16_t parts_left;     ///< split pieces outstanding
  NvmeStatus first_error;
  VolumeIo* next;          ///< intrusive link of a lane's backlog
};
static_assert(std::is_trivially_copyable_v<VolumeIoState> &&
              std::is_trivially_destructible_v<VolumeIoState>);
static_assert(sizeof(VolumeIoState) <= sizeof(VolumeIo::reserved_), "grow VolumeIo::reserved_");
static_assert(alignof(VolumeIoState) <= alignof(VolumeIo), "VolumeIo::reserved_ alignment");

/// The in-flight state of `io` (an implicit-lifetime object in its reserved bytes).
inline VolumeIoState& io_state(VolumeIo& io) noexcept {
  return *std::launder(reinterpret_cast<VolumeIoState*>(io.reserved_));
}
inline const VolumeIoState& io_state(const VolumeIo& io) noexcept {
  return *std::launder(reinterpret_cast<const VolumeIoState*>(io.reserved_));
}

}  // namespace nvmeof
