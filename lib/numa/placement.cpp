// The placement plan: pure functions of the topology and the request, plus the one place that
// looks a path's device up (place_path).
#include <algorithm>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "nvmeof/topology.hpp"

namespace nvmeof {
namespace {

namespace fs = std::filesystem;

// "/dev/ng3n1", "/dev/nvme3n1", "/dev/nvme3" -> "nvme3".
std::string controller_of(std::string_view dev) {
  const size_t slash = dev.rfind('/');
  if (slash != std::string_view::npos) dev.remove_prefix(slash + 1);
  if (dev.substr(0, 2) == "ng") dev.remove_prefix(2);
  else if (dev.substr(0, 4) == "nvme") dev.remove_prefix(4);
  else return {};
  size_t digits = 0;
  while (digits < dev.size() && dev[digits] >= '0' && dev[digits] <= '9') ++digits;
  if (digits == 0) return {};
  return "nvme" + std::string(dev.substr(0, digits));
}

// The RDMA device whose PCI function also carries `iface` (an HCA and its netdev), or "".
std::string rdma_device_of(const Topology& topo, const std::string& iface) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::path(topo.sysfs_root()) / "class/infiniband", ec)) {
    std::error_code ec2;
    if (fs::exists(e.path() / "device/net" / iface, ec2)) return e.path().filename().string();
  }
  return {};
}

std::string node_text(int n) { return n < 0 ? "unknown" : std::to_string(n); }

}  // namespace

const char* to_string(PlacementMode m) noexcept {
  switch (m) {
    case PlacementMode::numa: return "numa";
    case PlacementMode::unpinned: return "unpinned";
  }
  return "?";
}

PathPlacement place_path(const Topology& topo, const TransportAddress& addr, int index) {
  PathPlacement p;
  p.index = index;
  p.address = addr.to_string();
  if (addr.transport == Transport::passthrough) {
    p.device = controller_of(addr.traddr);
    if (!p.device.empty()) {
      p.source = NodeSource::kernel_ctrl;
      p.node = topo.nvme_ctrl_node(p.device);
    }
    return p;
  }
  std::string iface = addr.host_iface;
  NodeSource source = NodeSource::host_iface;
  if (iface.empty()) {
    auto r = route_interface(addr.traddr);
    if (!r) return p;
    iface = *r;
    source = NodeSource::route;
  }
  if (addr.transport == Transport::rdma) {
    if (std::string dev = rdma_device_of(topo, iface); !dev.empty()) {
      p.device = dev;
      p.source = NodeSource::rdma_device;
      p.node = topo.rdma_node(dev);
      return p;
    }
  }
  p.device = iface;
  p.source = source;
  p.node = topo.net_node(iface);
  return p;
}

Placement plan_placement(const Topology& topo, const PlacementRequest& req,
                         std::vector<PathPlacement> paths) {
  Placement plan;
  plan.mode = req.mode;
  plan.nodes = topo.nodes();
  plan.paths = std::move(paths);
  plan.memory_node = req.memory_node;
  const std::set<int> allowed(req.allowed_cpus.begin(), req.allowed_cpus.end());
  auto usable = [&](int cpu) {
    return topo.node_of_cpu(cpu) != kUnknownNode && (allowed.empty() || allowed.count(cpu) != 0);
  };

  std::vector<int> chosen;
  if (req.mode == PlacementMode::numa) {
    if (!req.cpus.empty()) {
      for (unsigned i = 0; i < req.reactors; ++i) {
        const int c = req.cpus[i % req.cpus.size()];
        chosen.push_back(usable(c) ? c : -1);
      }
    } else {
      // Nodes carrying a path first (in node order), then the others; each node's allowed CPUs
      // in ascending order; one CPU per node per round.
      std::vector<const NumaNode*> order;
      for (int with_path = 1; with_path >= 0; --with_path)
        for (const auto& n : topo.nodes()) {
          const bool has = std::any_of(plan.paths.begin(), plan.paths.end(),
                                       [&](const PathPlacement& p) { return p.node == n.id; });
          if (has == (with_path == 1)) order.push_back(&n);
        }
      std::vector<std::vector<int>> per_node;
      for (const NumaNode* n : order) {
        std::vector<int> c;
        for (int cpu : n->cpus)
          if (usable(cpu)) c.push_back(cpu);
        if (!c.empty()) per_node.push_back(std::move(c));
      }
      std::vector<int> rounds;
      for (size_t k = 0;; ++k) {
        bool any = false;
        for (const auto& c : per_node)
          if (k < c.size()) {
            rounds.push_back(c[k]);
            any = true;
          }
        if (!any) break;
      }
      for (unsigned i = 0; i < req.reactors; ++i)
        chosen.push_back(rounds.empty() ? -1 : rounds[i % rounds.size()]);
    }
  } else {
    chosen.assign(req.reactors, -1);
  }

  for (unsigned i = 0; i < req.reactors; ++i) {
    ReactorPlacement r;
    r.index = static_cast<int>(i);
    r.cpu = chosen[i];
    if (req.mode == PlacementMode::numa) r.node = r.cpu >= 0 ? topo.node_of_cpu(r.cpu) : kUnknownNode;
    else r.node = req.memory_node;
    for (const auto& p : plan.paths)
      r.distances.push_back(req.mode == PlacementMode::numa ? topo.distance(r.node, p.node) : kLocalDistance);
    plan.reactors.push_back(std::move(r));
  }
  return plan;
}

std::string to_text(const Placement& p) {
  // Appends only: GCC 12 misreports "literal" + std::string&& under -O2 (-Wrestrict).
  std::string s = "placement: ";
  s += to_string(p.mode);
  if (p.memory_node >= 0) s.append(", memory on node ").append(std::to_string(p.memory_node));
  s += "\n";
  for (const auto& n : p.nodes) {
    s.append("  node ").append(std::to_string(n.id)).append(": cpus");
    for (int c : n.cpus) s.append(" ").append(std::to_string(c));
    s += "; distances";
    for (int d : n.distances) s.append(" ").append(std::to_string(d));
    s += "\n";
  }
  for (const auto& path : p.paths) {
    s.append("  path ").append(std::to_string(path.index)).append(" ").append(path.address);
    s.append(": node ").append(node_text(path.node)).append(" (").append(to_string(path.source));
    if (!path.device.empty()) s.append(" ").append(path.device);
    s += ")\n";
  }
  for (const auto& r : p.reactors) {
    s.append("  reactor ").append(std::to_string(r.index)).append(": cpu ");
    s.append(r.cpu < 0 ? std::string("unpinned") : std::to_string(r.cpu));
    s.append(", node ").append(node_text(r.node)).append(", path distances");
    for (int d : r.distances) s.append(" ").append(std::to_string(d));
    s += "\n";
  }
  return s;
}

std::string to_json(const Placement& p) {
  using nlohmann::json;
  json j;
  j["mode"] = to_string(p.mode);
  j["memory_node"] = p.memory_node;
  j["nodes"] = json::array();
  for (const auto& n : p.nodes) j["nodes"].push_back({{"id", n.id}, {"cpus", n.cpus}, {"distances", n.distances}});
  j["paths"] = json::array();
  for (const auto& path : p.paths)
    j["paths"].push_back({{"index", path.index}, {"address", path.address}, {"device", path.device},
                          {"source", to_string(path.source)}, {"node", path.node}});
  j["reactors"] = json::array();
  for (const auto& r : p.reactors)
    j["reactors"].push_back({{"index", r.index}, {"cpu", r.cpu}, {"node", r.node}, {"distances", r.distances}});
  return j.dump(2);
}

}  // namespace nvmeof
