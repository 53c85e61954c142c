// Where a volume's data plane runs: its copy of the engine's plan with its own paths added (the
// distance from each reactor to each path), and the routing of submissions made by threads that
// are not reactors.
#include "multipath/volume_impl.hpp"

namespace nvmeof::detail {

void SubsystemPaths::plan_placement() {
  const Engine& h = engine_of(*host_);
  topology_ = h.topology;
  placement_ = h.placement;
  placement_.paths.clear();
  for (const auto& sp : paths()) {
    placement_.paths.push_back(place_path(topology_, sp->address(), sp->index));
    sp->numa_node.store(placement_.paths.back().node);
  }
  for (auto& r : placement_.reactors) {
    r.distances.clear();
    for (const auto& p : placement_.paths)
      r.distances.push_back(placement_.mode == PlacementMode::numa ? topology_.distance(r.node, p.node)
                                                                   : kLocalDistance);
  }
}

void SubsystemPaths::index_lanes() {
  node_lanes_.clear();
  for (auto& l : lanes_) {
    const int n = l->node();
    if (n < 0 || placement_.mode != PlacementMode::numa) continue;
    if (static_cast<size_t>(n) >= node_lanes_.size()) node_lanes_.resize(static_cast<size_t>(n) + 1);
    node_lanes_[static_cast<size_t>(n)].push_back(l.get());
  }
}

int SubsystemPaths::distance_to(size_t lane, int path_node) const noexcept {
  if (placement_.mode != PlacementMode::numa) return kLocalDistance;
  return topology_.distance(placement_.reactors[lane].node, path_node);
}

Lane* SubsystemPaths::lane_for_caller() noexcept {
  const uint32_t turn = next_lane_.fetch_add(1, std::memory_order_relaxed);
  if (!node_lanes_.empty()) {
    const int node = current_node(topology_);
    if (node >= 0 && static_cast<size_t>(node) < node_lanes_.size()) {
      const auto& local = node_lanes_[static_cast<size_t>(node)];
      if (!local.empty()) return local[turn % local.size()];
    }
  }
  return lanes_[turn % lanes_.size()].get();
}

int Lane::node() const noexcept {
  return sub_.placement_.reactors[static_cast<size_t>(index_)].node;
}

}  // namespace nvmeof::detail
