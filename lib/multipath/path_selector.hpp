// Path selectors: pure functions of the paths' state, as seen by one reactor. The choice order is
// explicit: usable optimized paths first, then usable non-optimized ones, else none (the I/O
// waits). inaccessible, persistent-loss and change paths never take new I/O.
#pragma once

#include <cstdint>
#include <span>

#include "nvmeof/identify.hpp"
#include "nvmeof/volume.hpp"

namespace nvmeof::detail {

enum class PathUse : uint8_t { usable, unusable };

/// One path as a reactor sees it when choosing.
struct PathView {
  PathUse use = PathUse::usable;
  AnaState ana = AnaState::optimized;
  uint32_t outstanding = 0;
  uint64_t outstanding_bytes = 0;
  double bytes_per_ns = 0;     ///< one command's bytes over its latency (EWMA); 0 = unknown yet
  double latency_ns = 0;       ///< measured completion latency (EWMA); 0 = unknown yet
  int distance = 10;           ///< NUMA distance from the reactor's node (10 = local)
};

/// Per-reactor selector memory (round-robin cursor).
struct SelectorState {
  uint32_t cursor = 0;
  uint32_t in_turn = 0;
};

/// The tier a path belongs to: 0 optimized, 1 non-optimized, -1 never.
int ana_tier(AnaState s) noexcept;

/// Picks a path index for an I/O of `io_bytes`, or -1 when no path is usable.
/// `exclude` (-1 for none) is skipped unless it is the only usable path.
int select_path(SelectorKind kind, std::span<const PathView> paths, SelectorState& st,
                uint32_t round_robin_ios, uint64_t io_bytes, int exclude = -1) noexcept;

}  // namespace nvmeof::detail
