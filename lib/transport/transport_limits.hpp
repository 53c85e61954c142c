// What one transport allows a queue pair: each transport publishes its own (tcp::kLimits,
// rdma::kLimits, uring::kLimits), and the controller sizes every queue of a path with the
// limits of that path's transport (control/queue_limits.hpp), never with another transport's.
//
// Threading: constant data.
#pragma once

#include <algorithm>
#include <cstdint>

namespace nvmeof {

struct TransportLimits {
  /// Commands one queue may hold (SQSIZE + 1).
  uint32_t max_queue_depth = 0;
  /// Write bytes the admin queue carries inside the command capsule (0: none; the I/O queues'
  /// in-capsule size is the controller's IOCCSZ).
  uint32_t admin_in_capsule_data = 0;
  /// Largest data length of one command when the controller reports no MDTS.
  uint32_t default_max_transfer = 0;
  /// The transport's own ceiling on one command's data (RDMA: what a keyed SGL data block
  /// describes; passthrough: what the kernel maps at once), whatever MDTS says.
  uint32_t max_transfer_cap = UINT32_MAX;

  /// Largest data length of one command for a controller whose MDTS is `mdts_bytes` (0: none
  /// reported).
  constexpr uint32_t max_transfer(uint32_t mdts_bytes) const noexcept {
    return std::min(mdts_bytes ? mdts_bytes : default_max_transfer, max_transfer_cap);
  }
};

}  // namespace nvmeof
