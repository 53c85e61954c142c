#include "transport/uring/admin.hpp"
#include "transport/uring/passthru_cmd.hpp"

#include <cstring>

#include <fcntl.h>
#include <linux/nvme_ioctl.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <memory>

namespace nvmeof::uring {
namespace {

struct FreeDeleter {
  void operator()(void* p) const noexcept { std::free(p); }
};

// The kernel maps the buffer page by page; page alignment avoids a bounce copy.
std::unique_ptr<uint8_t, FreeDeleter> page_buffer(uint32_t len) {
  const size_t rounded = (len + 4095u) & ~size_t{4095};
  return std::unique_ptr<uint8_t, FreeDeleter>(
      static_cast<uint8_t*>(std::aligned_alloc(4096, rounded ? rounded : 4096)));
}

}  // namespace

Result<AdminDevice> AdminDevice::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_code(errno);
  return AdminDevice(fd);
}

AdminDevice& AdminDevice::operator=(AdminDevice&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
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

Result<ControllerInfo> AdminDevice::identify_controller() const {
  auto buf = page_buffer(4096);
  if (!buf) return errno_code(ENOMEM);
  Sqe cmd;
  prep_identify(cmd, cns::kController, 0);
  auto r = run(cmd, buf.get(), 4096);
  if (!r) return r.error();
  return parse_identify_controller({buf.get(), 4096});
}

Result<NamespaceInfo> AdminDevice::identify_namespace(uint32_t nsid) const {
  auto buf = page_buffer(4096);
  if (!buf) return errno_code(ENOMEM);
  Sqe cmd;
  prep_identify(cmd, cns::kNamespace, nsid);
  auto r = run(cmd, buf.get(), 4096);
  if (!r) return r.error();
  auto ns = parse_identify_namespace({buf.get(), 4096}, nsid);
  if (!ns) return ns.error();
  // The descriptor list (NVMe 1.3+) adds the UUID; a controller without it still has NGUID/EUI64.
  prep_identify(cmd, cns::kNamespaceDescriptors, nsid);
  std::memset(buf.get(), 0, 4096);
  if (auto d = run(cmd, buf.get(), 4096); d) {
    if (auto p = parse_ns_descriptors({buf.get(), 4096}, ns->id); !p) return p.error();
  } else if (d.error().category() != nvme_category()) {
    return d.error();
  }
  return ns;
}

Result<AnaLog> AdminDevice::ana_log(uint32_t max_bytes) const {
  const uint32_t len = std::max<uint32_t>(max_bytes & ~3u, 16);
  auto buf = page_buffer(len);
  if (!buf) return errno_code(ENOMEM);
  Sqe cmd;
  prep_get_log_page(cmd, log_page::kAna, 0xffffffff, len);
  auto r = run(cmd, buf.get(), len);
  if (!r) return r.error();
  return parse_ana_log({buf.get(), len});
}

}  // namespace nvmeof::uring
