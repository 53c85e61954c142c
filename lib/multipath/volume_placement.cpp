// Where a volume's data plane runs: the plan (computed once at open, before the lanes start),
// each lane pinning itself and placing its memory, and the routing of submissions made by
// threads that are not lanes.
#include <sched.h>

#include <cstdio>
#include <cstring>

#include "multipath/volume_impl.hpp"
#include "core/log.hpp"

namespace nvmeof::detail {
namespace {

constexpr size_t kAttemptsPerLane = 4096;

std::vector<int> allowed_cpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

}  // namespace

void VolumeImpl::plan_placement() {
  auto topo = Topology::read(opts_.sysfs_root);
  if (topo) {
    topology_ = std::move(*topo);
  } else {
    nvmeof::detail::log_warning("nvmeof: no NUMA topology under %s (%s): one node assumed\n",
                 opts_.sysfs_root.c_str(), topo.error().message().c_str());
    topology_ = Topology::single_node(allowed_cpus());
  }
  std::vector<PathPlacement> paths;
  for (size_t i = 0; i < opts_.paths.size(); ++i)
    paths.push_back(place_path(topology_, opts_.paths[i], static_cast<int>(i)));
  PlacementRequest req;
  req.mode = opts_.placement;
  req.reactors = opts_.reactors;
  req.cpus = opts_.cpus;
  req.allowed_cpus = allowed_cpus();
  req.memory_node = opts_.memory_node;
  placement_ = nvmeof::plan_placement(topology_, req, std::move(paths));
}

void VolumeImpl::index_lanes() {
  node_lanes_.clear();
  for (auto& l : lanes_) {
    const int n = l->node();
    if (n < 0 || placement_.mode != PlacementMode::numa) continue;
    if (static_cast<size_t>(n) >= node_lanes_.size()) node_lanes_.resize(static_cast<size_t>(n) + 1);
    node_lanes_[static_cast<size_t>(n)].push_back(l.get());
  }
}

Lane* VolumeImpl::lane_for_caller() noexcept {
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
  return vol_.placement_.reactors[static_cast<size_t>(index_)].node;
}

void Lane::place_thread() noexcept {
  const ReactorPlacement& r = vol_.placement_.reactors[static_cast<size_t>(index_)];
  if (r.cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(r.cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0)
      nvmeof::detail::log_warning("nvmeof: reactor %d: cannot pin to cpu %d (%s): runs unpinned\n", index_,
                   r.cpu, std::strerror(errno));
  }
  const int mem_node = vol_.placement_.memory_node >= 0 ? vol_.placement_.memory_node : r.node;
  // Queue pairs created on this thread read it: their slots and staging buffers follow.
  set_thread_memory_node(mem_node);
  attempts_ = NodeArray<Attempt>(kAttemptsPerLane, mem_node);
  free_ = nullptr;
  for (auto& a : attempts_) {
    a.next = free_;
    free_ = &a;
  }
}

}  // namespace nvmeof::detail
