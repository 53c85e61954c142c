// A volume served as a Linux block device (/dev/ublkbN) through the kernel's ublk driver.
// See ARCHITECTURE.md, "ublk".
//
// One ublk queue per engine reactor: queue q's commands to the driver (FETCH_REQ, then
// COMMIT_AND_FETCH_REQ per request) go on reactor q's own ring, from its thread, and each
// request becomes a volume I/O submitted on that same reactor, so a request never changes
// thread between the driver and the paths.
//
// Threading: create(), stop() and the destructor from one control thread (never a reactor
// thread: they wait for the reactors); ios() from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nvmeof/host.hpp"
#include "nvmeof/status.hpp"
#include "nvmeof/volume.hpp"

namespace nvmeof::ublk {

/// What the driver does with the device's I/O when its server (this process) dies.
enum class Recovery : uint8_t {
  /// The driver fails every queued and in-flight request (EIO) and removes the block device;
  /// the dead device stays listed until deleted (Device::remove_dead).
  none,
  /// UBLK_F_USER_RECOVERY | UBLK_F_USER_RECOVERY_REISSUE: the driver holds the requests (new
  /// ones wait too, the block device stays) until a new server takes the device over
  /// (DeviceOptions::recover_id), then reissues them to it, the in-flight ones included.
  reissue,
};

struct DeviceOptions {
  unsigned queues = 0;           ///< ublk queues, each on its own reactor; 0: one per reactor
  unsigned depth = 128;          ///< requests in flight per queue (1..4096)
  /// Largest request in bytes; 0: the volume's largest command (Volume::max_transfer), at most
  /// 1 MiB (each tag holds a buffer of this size).
  uint32_t max_io_bytes = 0;
  Recovery recovery = Recovery::none;
  /// >= 0: take over the device of this ID, left by a server that died with Recovery::reissue
  /// (START_USER_RECOVERY, the queues fetch, END_USER_RECOVERY) instead of adding one. Its
  /// queues, depth and size of request are the device's.
  int recover_id = -1;
};

class Queue;

class Device {
 public:
  /// Adds the device (or takes one over), sets its limits from the volume's namespace (logical
  /// block size, size, largest transfer), starts a queue on each of the first `queues`
  /// reactors of `host` and starts the device. `vol` must be open on `host` and outlive the
  /// device. Errors: Errc::unsupported with kNoDriver (ublk/control.hpp) when the kernel has no
  /// ublk driver; Errc::invalid_argument (more queues than reactors, a depth out of range);
  /// errno codes from the driver (EPERM without CAP_SYS_ADMIN, EBUSY for a device being
  /// recovered that another server still holds), each with a detail naming the step.
  static Result<std::unique_ptr<Device>> create(std::shared_ptr<Host> host, Volume& vol,
                                                const DeviceOptions& opts);
  /// stop() when not stopped yet.
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  uint32_t id() const noexcept { return id_; }
  /// "/dev/ublkb<id>".
  std::string block_path() const;
  /// Clean stop: STOP_DEV (the block device goes away once its I/O has completed; the driver
  /// gives back every queue's commands), then DEL_DEV. Errors: the driver's, with the step.
  Result<void> stop();
  /// Requests completed to the driver so far.
  uint64_t ios() const noexcept;

  /// Deletes a device whose server died (Recovery::none leaves it listed, its block device
  /// gone). Errors: Errc::unsupported with kNoDriver, the driver's (ENODEV: no such device).
  static Result<void> remove_dead(uint32_t id);

 private:
  Device() = default;
  std::shared_ptr<Host> host_;
  uint32_t id_ = 0;
  int cdev_fd_ = -1;
  bool stopped_ = false;
  std::vector<std::unique_ptr<Queue>> queues_;
};

}  // namespace nvmeof::ublk
