#include "multipath/path_selector.hpp"

#include <limits>

namespace nvmeof::detail {

int ana_tier(AnaState s) noexcept {
  switch (s) {
    case AnaState::optimized: return 0;
    case AnaState::non_optimized: return 1;
    default: return -1;
  }
}

namespace {

// The best tier that has a usable path other than `exclude`; falls back to `exclude` itself
// when it is the only usable path at all.
int best_tier(std::span<const PathView> paths, int exclude, bool& only_excluded) noexcept {
  int best = 2;
  int best_with_excluded = 2;
  for (size_t i = 0; i < paths.size(); ++i) {
    const auto& p = paths[i];
    const int t = ana_tier(p.ana);
    if (p.use != PathUse::usable || t < 0) continue;
    if (t < best_with_excluded) best_with_excluded = t;
    if (static_cast<int>(i) != exclude && t < best) best = t;
  }
  only_excluded = best == 2 && best_with_excluded < 2;
  return only_excluded ? best_with_excluded : best;
}

bool candidate(const PathView& p, size_t i, int tier, int exclude, bool allow_excluded) noexcept {
  if (p.use != PathUse::usable || ana_tier(p.ana) != tier) return false;
  return allow_excluded || static_cast<int>(i) != exclude;
}

// Expected time until an I/O of `io_bytes` would complete on `p`: the bytes queued ahead plus
// its own, at the path's per-command bandwidth, plus the path's latency. A path with no
// measurement yet costs nothing, so that it gets probed rather than starved.
double service_time(const PathView& p, uint64_t io_bytes) noexcept {
  if (p.latency_ns <= 0 || p.bytes_per_ns <= 0) return 0;
  const double bytes = static_cast<double>(p.outstanding_bytes + io_bytes);
  return bytes / p.bytes_per_ns + p.latency_ns;
}

}  // namespace

int select_path(SelectorKind kind, std::span<const PathView> paths, SelectorState& st,
                uint32_t round_robin_ios, uint64_t io_bytes, int exclude) noexcept {
  bool only_excluded = false;
  const int tier = best_tier(paths, exclude, only_excluded);
  if (tier > 1) return -1;
  const size_t n = paths.size();

  if (kind == SelectorKind::round_robin) {
    const uint32_t per_turn = round_robin_ios ? round_robin_ios : 1;
    // Stay on the current path for `per_turn` I/Os while it remains a candidate.
    if (st.cursor < n && st.in_turn < per_turn &&
        candidate(paths[st.cursor], st.cursor, tier, exclude, only_excluded)) {
      ++st.in_turn;
      return static_cast<int>(st.cursor);
    }
    for (size_t k = 1; k <= n; ++k) {
      const size_t i = (st.cursor + k) % n;
      if (candidate(paths[i], i, tier, exclude, only_excluded)) {
        st.cursor = static_cast<uint32_t>(i);
        st.in_turn = 1;
        return static_cast<int>(i);
      }
    }
    return -1;
  }

  int best = -1;
  double best_cost = std::numeric_limits<double>::infinity();
  int best_distance = std::numeric_limits<int>::max();
  // Start after the last pick so that ties rotate instead of piling on path 0.
  for (size_t k = 1; k <= n; ++k) {
    const size_t i = (st.cursor + k) % n;
    const auto& p = paths[i];
    if (!candidate(p, i, tier, exclude, only_excluded)) continue;
    double cost = 0;
    int distance = p.distance;
    switch (kind) {
      case SelectorKind::queue_depth:
        cost = p.outstanding;
        distance = 0;
        break;
      case SelectorKind::numa:
        cost = static_cast<double>(p.distance) * 1e6 + p.outstanding;
        distance = 0;
        break;
      case SelectorKind::service_time:
      case SelectorKind::round_robin:
        cost = service_time(p, io_bytes);
        break;
    }
    if (cost < best_cost || (cost == best_cost && distance < best_distance)) {
      best = static_cast<int>(i);
      best_cost = cost;
      best_distance = distance;
    }
  }
  if (best >= 0) st.cursor = static_cast<uint32_t>(best);
  return best;
}

}  // namespace nvmeof::detail
