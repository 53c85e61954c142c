#include "transport/uring/admin.hpp"
#include "transport/uring/passthru_cmd.hpp"

#include <cstring>

#include <fcntl.h>
#include <linux/nvme_ioctl.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cerrno>

namespace nvmeof::uring {

Result<AdminDevice> AdminDevice::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_code(errno);
  return AdminDevice(fd);
}

AdminDevice& AdminDevice::operator=(AdminDevice&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    max_transfer_ = o.max_transfer_;
    mechanism_ = o.mechanism_;
    o.fd_ = -1;
  }
  return *this;
}

AdminDevice::~AdminDevice() {
  if (fd_ >= 0) ::close(fd_);
}

Result<uint32_t> AdminDevice::run(const Sqe& cmd, void* data, uint32_t len,
                                  std::chrono::milliseconds timeout) const {
  uint32_t dw0 = 0;
  const int u = run_admin_uring(fd_, cmd, data, len, static_cast<uint32_t>(timeout.count()), dw0);
  if (u != -ENOSYS && u != -EOPNOTSUPP) {
    mechanism_ = "io_uring";
    if (u < 0) return errno_code(-u);
    if (u > 0) return make_error_code(NvmeStatus{static_cast<uint16_t>(u & 0x7fff)});
    return dw0;
  }
  mechanism_ = "ioctl";
  nvme_admin_cmd c{};
  fill_passthru(c, cmd, data, len, static_cast<uint32_t>(timeout.count()));
  const int r = ::ioctl(fd_, NVME_IOCTL_ADMIN_CMD, &c);
  if (r < 0) return errno_code(errno);
  if (r > 0) return make_error_code(NvmeStatus{static_cast<uint16_t>(r & 0x7fff)});
  return c.result;
}

}  // namespace nvmeof::uring
