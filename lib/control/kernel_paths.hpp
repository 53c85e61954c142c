// The kernel host's NVMe topology, as paths we can drive: which subsystems this host reaches,
// through which controllers (transport, address, state), and for each namespace every path with
// its generic char device (/dev/ngXnY, for io_uring passthrough), ANA group and state, NUMA
// node and queue count.
//
// The tree comes from libnvme (host -> subsystem -> controller -> namespace -> path). Two
// kernel modes give two shapes, folded here into one:
//  * nvme_core multipath=N: each controller has its own namespace nvmeXnY with its own /dev/ngXnY;
//    the namespaces of one NSID in one subsystem are the paths of one namespace. sysfs has no
//    ana_state in this mode: the ANA group and state come from the ANA log page (0x0C), read by
//    admin passthrough on /dev/nvmeX.
//  * multipath=Y: one head namespace nvmeXnY (one /dev/ngXnY) with hidden paths nvmeXcYnZ whose
//    sysfs ana_state and ana_grpid are read directly; those paths have no char device of their
//    own (generic_device is empty).
//
// sysfs root: libnvme 1.3 reads the fixed /sys paths (later versions honour the environment
// variable LIBNVME_SYSFS_PATH, which this code does not set); the attributes read here directly
// (ana_state, ana_grpid, numa_node, queue_count) are read under `sysfs_root`.
//
// Threading: scan_kernel_paths() blocks (sysfs reads, one admin command per controller) and
// keeps no state; call it from the control thread or a tool.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "nvmeof/identify.hpp"
#include "nvmeof/status.hpp"

namespace nvmeof {

/// Where a path's ANA state came from.
enum class AnaSource : uint8_t {
  sysfs,     ///< the kernel's ana_state attribute (multipath=Y)
  log_page,  ///< Get Log Page 0x0C through admin passthrough on /dev/nvmeX
  none,      ///< unknown: no attribute, and the log page could not be read (or ANA off)
};
/// "sysfs", "log_page", "none".
const char* to_string(AnaSource s) noexcept;

/// One controller of a subsystem as the kernel host sees it.
struct KernelController {
  std::string name;          ///< "nvme0"
  std::string transport;     ///< "tcp", "rdma", "fc", "pcie", "loop"
  std::string address;       ///< the kernel's address string, e.g. "traddr=127.0.0.1,trsvcid=4420"
  std::string traddr;        ///< empty when the transport has none (pcie: the PCI address)
  std::string trsvcid;
  std::string state;         ///< "live", "connecting", "resetting", "deleting", ...
  std::string admin_device;  ///< "/dev/nvme0"
  int numa_node = -1;        ///< -1 when the kernel does not tie it to a node
  uint32_t queue_count = 0;  ///< queues the kernel opened, the admin queue included; 0 unknown
};

/// One way to a namespace: a controller's view of it.
struct KernelPath {
  std::string controller;      ///< KernelController::name
  std::string block_device;    ///< "nvme0n1" (multipath=N) or "nvme0c0n1" (multipath=Y)
  std::string generic_device;  ///< "/dev/ng0n1"; empty when the path has none
  uint32_t ana_group = 0;      ///< 0 when unknown
  std::optional<AnaState> ana_state;  ///< empty when unknown (ana_source none)
  AnaSource ana_source = AnaSource::none;
  int numa_node = -1;          ///< of the controller
  uint32_t queue_count = 0;    ///< of the controller
};

/// A namespace of a subsystem, with every path to it (sorted by controller name).
struct KernelNamespace {
  uint32_t nsid = 0;
  uint32_t lba_size = 0;   ///< bytes per logical block, 0 unknown
  uint64_t lba_count = 0;  ///< size in logical blocks
  /// Multipath head ("nvme0n1" and "/dev/ng0n1") with multipath=Y; empty with multipath=N.
  std::string head_device;
  std::string head_generic_device;
  std::vector<KernelPath> paths;
};

/// One NVM subsystem (one NQN) and everything of it this host reaches.
struct KernelSubsystem {
  std::string name;  ///< "nvme-subsys0"
  std::string nqn;
  std::vector<KernelController> controllers;  ///< sorted by name (nvme2 before nvme10)
  std::vector<KernelNamespace> namespaces;  ///< sorted by NSID
};

/// Everything scan_kernel_paths() found, subsystems in the kernel's order.
struct KernelTopology {
  std::vector<KernelSubsystem> subsystems;
};

/// How scan_kernel_paths() finds ANA states.
enum class AnaLookup : uint8_t {
  /// sysfs ana_state where the kernel has it, else the ANA log page read through /dev/nvmeX
  /// (needs CAP_SYS_ADMIN; without it those paths report AnaSource::none).
  sysfs_then_log_page,
  sysfs_only,  ///< no admin commands at all
};

struct KernelScanOptions {
  std::string sysfs_root = "/sys";  ///< for the attributes read here (see above)
  std::string dev_root = "/dev";    ///< where /dev/nvmeX and /dev/ngXnY are looked up
  AnaLookup ana = AnaLookup::sysfs_then_log_page;
};

/// Scans the kernel host's NVMe topology. Odd or missing sysfs attributes leave fields at their
/// "unknown" values; a controller whose ANA log cannot be read leaves its paths' ANA state
/// unknown. A host without NVMe (no /sys/class/nvme-subsystem) gives an empty topology.
/// Errors: Errc::unsupported when libnvme cannot create its tree, ENOMEM.
Result<KernelTopology> scan_kernel_paths(const KernelScanOptions& opts = {});

}  // namespace nvmeof
