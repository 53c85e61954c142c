// The ublk control device (/dev/ublk-control): the driver's admin commands (add, parameters,
// start, stop, delete, user recovery), each one io_uring command on a small ring of its own.
// See ARCHITECTURE.md, "ublk".
//
// Threading: one thread at a time (the caller's); nothing here is on the I/O path.
#pragma once

#include <linux/ublk_cmd.h>

#include <cstdint>
#include <memory>

#include "nvmeof/status.hpp"

namespace nvmeof::ublk {

/// The text every refusal for a missing driver carries.
inline constexpr const char* kNoDriver =
    "the kernel has no ublk driver (ublk_drv; Linux 6.0+ with CONFIG_BLK_DEV_UBLK; Debian 12's 6.1 "
    "kernel does not build it)";

class Control {
 public:
  /// Opens /dev/ublk-control and a ring with 128-byte entries (the control commands need them).
  /// Errors: Errc::unsupported with kNoDriver when the device is missing, errno codes otherwise.
  static Result<std::unique_ptr<Control>> open();
  ~Control();
  Control(const Control&) = delete;
  Control& operator=(const Control&) = delete;

  /// ADD_DEV: `info` in (dev_id UINT32_MAX: the driver picks), out as the driver took it.
  Result<void> add(ublksrv_ctrl_dev_info& info);
  Result<void> set_params(uint32_t dev_id, ublk_params& params);
  Result<void> dev_info(uint32_t dev_id, ublksrv_ctrl_dev_info& info);
  /// START_DEV: returns once every queue has fetched every tag (the driver waits for that).
  Result<void> start(uint32_t dev_id, int server_pid);
  Result<void> stop(uint32_t dev_id);
  /// DEL_DEV: waits until nothing holds the device (its queues' commands completed, its char
  /// device closed); the asynchronous form (Linux 6.9+) returns at once.
  enum class Wait : uint8_t { until_freed, no };
  Result<void> remove(uint32_t dev_id, Wait wait);
  Result<void> start_recovery(uint32_t dev_id);
  Result<void> end_recovery(uint32_t dev_id, int server_pid);

 private:
  Control() = default;
  Result<void> command(uint32_t op, uint32_t dev_id, void* buf, uint16_t len, uint64_t data0);
  struct Ring;
  std::unique_ptr<Ring> ring_;
  int fd_ = -1;
};

}  // namespace nvmeof::ublk
