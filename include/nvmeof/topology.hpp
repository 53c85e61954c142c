// NUMA topology and the placement plan of a volume's data plane.
//
// The topology is read from sysfs, whose root is a parameter (tests replay fake trees): the
// nodes, their online CPUs and the distance table (/sys/devices/system/node), and the node of a
// device a path goes through: a network interface, an RDMA device, a kernel NVMe controller.
// An unknown node (-1, kUnknownNode) is a real value: a device whose firmware reports no node,
// a loopback address, a system built without NUMA.
//
// The plan is plain data computed once when a volume opens: which CPU each reactor runs on, its
// node, each path's node and the distance from each reactor to each path. It is printable as text
// and JSON (snake_case keys, arrays always arrays).
//
// Threading: Topology is immutable after read(); every function here may be called from any
// thread. Reading sysfs is control-path work (never on a reactor's hot path).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "nvmeof/controller.hpp"
#include "nvmeof/status.hpp"
#include "nvmeof/export.h"

NVMEOF_API_BEGIN  // every declaration below is public API (default visibility)
namespace nvmeof {

inline constexpr int kUnknownNode = -1;
/// The distance of a node to itself in the ACPI SLIT convention sysfs uses.
inline constexpr int kLocalDistance = 10;

struct NumaNode {
  int id = 0;
  std::vector<int> cpus;       ///< online CPUs only, ascending
  std::vector<int> distances;  ///< to every node of the topology, in Topology::nodes() order
};

class Topology {
 public:
  /// Reads `<sysfs_root>/devices/system/node` and `<sysfs_root>/devices/system/cpu/online`.
  /// A system without the node directory (built without NUMA) is one node 0 holding every online
  /// CPU. Errors: an errno code when neither the node directory nor the online CPU list can be
  /// read; Errc::invalid_argument when a cpulist or distance file does not parse.
  static Result<Topology> read(const std::string& sysfs_root = "/sys");
  /// One node 0 with `cpus`: what a machine without NUMA information looks like.
  static Topology single_node(std::vector<int> cpus);

  const std::string& sysfs_root() const noexcept { return root_; }
  const std::vector<NumaNode>& nodes() const noexcept { return nodes_; }
  /// Every online CPU, ascending.
  std::vector<int> cpus() const;
  /// The node holding `cpu`, or kUnknownNode.
  int node_of_cpu(int cpu) const noexcept;
  /// The distance from node `a` to node `b`. When either is unknown: the largest distance in the
  /// table (kLocalDistance on one node), so a path of unknown place is never preferred over a
  /// known local one and never ranks below a known remote one.
  int distance(int a, int b) const noexcept;
  /// The largest distance in the table.
  int max_distance() const noexcept;

  /// `<root>/class/net/<ifname>/device/numa_node`, or that of the nearest parent device that has
  /// one (a virtio NIC's sits on its PCI function): kUnknownNode when the interface has no device
  /// (lo, dummy, veth), no such file exists or it says -1.
  int net_node(std::string_view ifname) const;
  /// `<root>/class/infiniband/<dev>/device/numa_node` (or a parent's), or kUnknownNode.
  int rdma_node(std::string_view dev) const;
  /// `<root>/class/nvme/<nvmeX>/device/numa_node` (a PCIe controller) or, for a fabrics
  /// controller, the node of the interface its connection leaves through (`host_iface`, else
  /// `address`'s traddr= route). kUnknownNode when neither is known.
  int nvme_ctrl_node(std::string_view ctrl) const;

 private:
  std::string root_ = "/sys";
  std::vector<NumaNode> nodes_;
  std::vector<int> cpu_node_;  ///< indexed by CPU number
};

/// The interface the kernel would send packets to `traddr` through: a connected UDP socket
/// (no packet is sent) asks the routing table for the source address, which names the interface
/// (getifaddrs). For an address of this host the answer is the interface that owns it. Errors:
/// Errc::invalid_argument for an address that does not parse, errno codes (ENETUNREACH).
Result<std::string> route_interface(const std::string& traddr);

/// Where one path leaves this host, and how that was found.
enum class NodeSource : uint8_t {
  host_iface,   ///< the interface the user named
  route,        ///< the interface of the route to the target
  rdma_device,  ///< the RDMA device
  kernel_ctrl,  ///< the kernel NVMe controller
  none,         ///< nothing to look at (loopback, no route)
};
const char* to_string(NodeSource s) noexcept;

struct PathPlacement {
  int index = 0;
  std::string address;      ///< TransportAddress::to_string()
  std::string device;       ///< interface, RDMA device or controller looked at; "" when none
  NodeSource source = NodeSource::none;
  int node = kUnknownNode;
};

/// The node a path's traffic leaves this host from. Never fails: unknown is kUnknownNode.
PathPlacement place_path(const Topology& topo, const TransportAddress& addr, int index);

enum class PlacementMode : uint8_t {
  numa,      ///< reactors pinned to their CPUs, memory on their node, paths chosen by distance
  unpinned,  ///< no pinning; memory wherever the kernel puts it (or VolumeOptions::memory_node)
};
const char* to_string(PlacementMode m) noexcept;

struct ReactorPlacement {
  int index = 0;
  int cpu = -1;                 ///< -1: not pinned
  int node = kUnknownNode;      ///< where it runs and where its memory goes
  std::vector<int> distances;   ///< to each path, in path order
};

struct Placement {
  PlacementMode mode = PlacementMode::numa;
  std::vector<NumaNode> nodes;
  std::vector<ReactorPlacement> reactors;
  std::vector<PathPlacement> paths;
  int memory_node = kUnknownNode;  ///< when set, every reactor's memory goes there instead
};

/// What a plan is computed from.
struct PlacementRequest {
  PlacementMode mode = PlacementMode::numa;
  unsigned reactors = 1;
  std::vector<int> cpus;           ///< reactor i runs on cpus[i % size]; empty: chosen here
  std::vector<int> allowed_cpus;   ///< the process's affinity mask; empty: every online CPU
  int memory_node = kUnknownNode;
};

/// The plan: pure, no system calls. Chosen CPUs (when `cpus` is empty) interleave the nodes
/// that have allowed CPUs, taking each node's CPUs in ascending order, so that R reactors cover
/// min(R, nodes) nodes; a node that carries a path comes before one that carries none.
/// An explicit CPU that is offline or not allowed keeps its index but runs unpinned (cpu -1).
/// In unpinned mode no reactor is pinned and each reactor's node is memory_node (or unknown);
/// distances are then all equal, so path choice ignores them.
Placement plan_placement(const Topology& topo, const PlacementRequest& req,
                         std::vector<PathPlacement> paths);

std::string to_text(const Placement& p);
std::string to_json(const Placement& p);

/// The calling thread's CPU and that CPU's node in `topo` (getcpu); kUnknownNode if unknown.
int current_node(const Topology& topo) noexcept;

}  // namespace nvmeof
NVMEOF_API_END
