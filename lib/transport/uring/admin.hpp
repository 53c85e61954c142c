// Admin commands on a kernel controller's char device /dev/nvmeX: io_uring passthrough
// (IORING_OP_URING_CMD with NVME_URING_CMD_ADMIN) on a small ring made for the command, or the
// NVME_IOCTL_ADMIN_CMD ioctl where the kernel or liburing cannot do that (older than 5.19, or
// built without IORING_OP_URING_CMD). This is the control path (Identify, ANA log at connect
// and on change), so each command simply blocks its caller; the data path keeps its rings
// (queue_pair.hpp).
//
// Needs CAP_SYS_ADMIN (the kernel's rule for admin passthrough).
// Threading: every function blocks its caller and shares no state; call from the control
// thread (or any thread that may block).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "fabric/admin.hpp"
#include "nvmeof/command.hpp"
#include "nvmeof/status.hpp"

namespace nvmeof::uring {

/// One admin command through IORING_OP_URING_CMD (NVME_URING_CMD_ADMIN) on `fd`, waiting for
/// its completion: the NVMe status (>= 0, 0 success) with DW0 in `dw0`, or -errno. -ENOSYS
/// when this build or the kernel has no passthrough rings (the caller falls back to the ioctl).
/// admin_uring.cpp, or admin_uring_unavailable.cpp when liburing lacks IORING_OP_URING_CMD.
int run_admin_uring(int fd, const Sqe& cmd, void* data, uint32_t len, uint32_t timeout_ms,
                    uint32_t& dw0) noexcept;

/// An open /dev/nvmeX. Move-only; closes the descriptor when destroyed. As a
/// fabric::AdminChannel it takes the shared admin readers (fabric/admin.hpp: Identify, ANA log).
class AdminDevice final : public fabric::AdminChannel {
 public:
  /// Opens `path` (e.g. "/dev/nvme0") read-only. Errors: errno codes from open (ENOENT,
  /// EACCES).
  static Result<AdminDevice> open(const std::string& path);

  AdminDevice(AdminDevice&& o) noexcept
      : fabric::AdminChannel(o), fd_(o.fd_), max_transfer_(o.max_transfer_), mechanism_(o.mechanism_) {
    o.fd_ = -1;
  }
  AdminDevice& operator=(AdminDevice&& o) noexcept;
  AdminDevice(const AdminDevice&) = delete;
  AdminDevice& operator=(const AdminDevice&) = delete;
  ~AdminDevice() override;

  /// Runs `cmd` (opcode, nsid, CDW2-3, CDW10-15 taken as is) moving `len` bytes to or from
  /// `data` (direction from the opcode). Blocks until the command completes; the kernel's
  /// admin timeout, or `timeout` when not zero, bounds the wait. Returns DW0 of the completion.
  /// Errors: an nvme_category() code with the raw status when the controller (or the kernel on
  /// its behalf: host pathing error while the controller is not live) fails the command; errno
  /// codes from the ioctl (EPERM without CAP_SYS_ADMIN, EINTR when the command timed out or
  /// was cancelled, ENOTTY on a device that is not an NVMe controller).
  Result<uint32_t> run(const Sqe& cmd, void* data, uint32_t len,
                       std::chrono::milliseconds timeout = std::chrono::milliseconds{0}) const;
  /// How the last command went: "io_uring" (NVME_URING_CMD_ADMIN), "ioctl", or "none".
  const char* mechanism() const noexcept { return mechanism_; }

  /// fabric::AdminChannel: run() with the kernel's admin timeout.
  Result<uint32_t> admin_command(const Sqe& cmd, void* data, uint32_t len) override {
    return run(cmd, data, len);
  }
  /// Log pages are read in pieces of this size (MDTS once known: set_max_transfer()).
  uint32_t admin_max_transfer() const noexcept override { return max_transfer_; }
  void set_max_transfer(uint32_t bytes) noexcept { max_transfer_ = bytes ? bytes : kDefaultAdminTransfer; }
  static constexpr uint32_t kDefaultAdminTransfer = 128u << 10;

  int fd() const noexcept { return fd_; }

 private:
  explicit AdminDevice(int fd) noexcept : fd_(fd) {}
  int fd_ = -1;
  uint32_t max_transfer_ = kDefaultAdminTransfer;
  mutable const char* mechanism_ = "none";
};

}  // namespace nvmeof::uring
