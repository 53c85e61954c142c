// Connecting and disconnecting kernel NVMe-oF controllers through libnvme (nvmf_add_ctrl and
// nvme_disconnect_ctrl), for paths that the kernel host carries and we then drive by io_uring
// passthrough on their /dev/ngXnY.
//
// The defaults suit a multipath user above the kernel: fast_io_fail_tmo=0, so that when a
// connection drops the kernel fails the commands it holds at once instead of keeping them for
// the reconnect; a short reconnect delay, so that a path that returns is usable within about a
// second; ctrl_loss_tmo long, so that the kernel keeps trying while we fail over.
//
// Fencing a dead path for writes (ARCHITECTURE.md, "Failover") is, for a kernel path, resetting (or
// deleting) its controller: the kernel tears the connection down and completes every command
// it still held before it reconnects.
//
// Needs root (writes to /dev/nvme-fabrics and sysfs). Threading: every call blocks its caller
// and keeps no state.
#pragma once

#include <string>

#include "control/kernel_paths.hpp"
#include "nvmeof/controller.hpp"
#include "nvmeof/status.hpp"

namespace nvmeof {

struct KernelConnectOptions {
  std::string subnqn;             ///< required
  std::string hostnqn;            ///< default: /etc/nvme/hostnqn, else one libnvme derives
  std::string hostid;             ///< default: /etc/nvme/hostid, else none
  Digest digest = Digest::none;
  int reconnect_delay_s = 1;      ///< the kernel's reconnect_delay
  int ctrl_loss_tmo_s = 600;      ///< give up reconnecting after this; -1 never
  int fast_io_fail_tmo_s = 0;     ///< fail held commands this long after a drop; -1 never
  int keep_alive_tmo_s = 5;
  int nr_io_queues = 0;           ///< 0: the kernel's default (one per CPU)
  int nr_poll_queues = 0;         ///< queues for IOPOLL rings; 0 none
  int queue_size = 0;             ///< 0: the kernel's default
  bool duplicate_connect = false; ///< allow a second controller to the same address
  std::string sysfs_root = "/sys";
};

/// Connects a kernel controller to `addr` (tcp or rdma) and returns it once live (as
/// scan_kernel_paths() would describe it). Errors: invalid_argument (no subnqn, a transport
/// the kernel cannot take here), connection_refused (nothing listens, or the target refused:
/// wrong NQN, no such port), unsupported (the kernel lacks the fabrics module), timeout (not
/// live within 10 s), errno codes otherwise. A one-line reason from libnvme goes to stderr.
Result<KernelController> kernel_connect(const TransportAddress& addr, const KernelConnectOptions& opts);

/// Deletes the kernel controller `name` ("nvme3") through libnvme. Errors: ENOENT when there is
/// no such controller, errno codes from sysfs.
Result<void> kernel_disconnect(const std::string& name, const std::string& sysfs_root = "/sys");

/// Resets the kernel controller `name`: the kernel drops the connection, completes what it held
/// and reconnects. EBUSY when it is already resetting or reconnecting (nothing left to fence).
Result<void> kernel_reset(const std::string& name, const std::string& sysfs_root = "/sys");

/// The controller's state from sysfs ("live", "connecting", "resetting", ...), "gone" when
/// it no longer exists.
std::string kernel_controller_state(const std::string& name, const std::string& sysfs_root = "/sys");

}  // namespace nvmeof
