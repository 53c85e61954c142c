#include "control/kernel_connect.hpp"
#include "core/log.hpp"

#include <fcntl.h>
#include <libnvme.h>
#include <syslog.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <thread>

namespace nvmeof {
namespace {

struct TreeDeleter {
  void operator()(nvme_root* r) const noexcept { nvme_free_tree(r); }
};
using Tree = std::unique_ptr<nvme_root, TreeDeleter>;

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// What nvmf_add_ctrl's errno (libnvme's ENVME_CONNECT_* or a kernel errno) means to a caller.
std::error_code connect_error(int err) {
  switch (err) {
    case ECONNREFUSED:
    case EHOSTUNREACH:
    case ENETUNREACH:
    case ENVME_CONNECT_CONNREFUSED:
    case ENVME_CONNECT_WRITE:  // the kernel's connect (or the target's Fabrics Connect) failed
    case EIO:
      return make_error_code(Errc::connection_refused);
    case ENVME_CONNECT_OPEN:  // no /dev/nvme-fabrics: the fabrics module is not loaded
    case ENVME_CONNECT_OPNOTSUPP:
      return make_error_code(Errc::unsupported);
    case EINVAL:
    case ENVME_CONNECT_INVAL:
    case ENVME_CONNECT_INVAL_TR:
    case ENVME_CONNECT_TARG:
    case ENVME_CONNECT_AARG:
    case ENVME_CONNECT_TRADDR:
    case ENVME_CONNECT_ADDRFAM:
    case ENVME_CONNECT_RESOLVE:
    case ENVME_CONNECT_NODEV:
      return make_error_code(Errc::invalid_argument);
    case ENVME_CONNECT_ALREADY:
      return errno_code(EALREADY);
    case ENVME_CONNECT_ADDRINUSE:
      return errno_code(EADDRINUSE);
    default:
      return err > 0 && err < 1000 ? errno_code(err) : make_error_code(Errc::protocol_error);
  }
}

Result<void> write_attr(const std::string& path, const char* value) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return errno_code(errno);
  const size_t n = std::char_traits<char>::length(value);
  const ssize_t w = ::write(fd, value, n);
  const int err = errno;
  ::close(fd);
  if (w < 0) return errno_code(err);
  return {};
}

}  // namespace

std::string kernel_controller_state(const std::string& name, const std::string& sysfs_root) {
  std::ifstream in(sysfs_root + "/class/nvme/" + name + "/state");
  std::string s;
  if (!in || !std::getline(in, s)) return "gone";
  return trim(s);
}

Result<KernelController> kernel_connect(const TransportAddress& addr, const KernelConnectOptions& o) {
  if (o.subnqn.empty()) return Errc::invalid_argument;
  const char* transport = nullptr;
  switch (addr.transport) {
    case Transport::tcp: transport = "tcp"; break;
    case Transport::rdma: transport = "rdma"; break;
    case Transport::passthrough: return Errc::invalid_argument;
  }
  Tree root(nvme_create_root(stderr, LOG_ERR));
  if (!root) return Errc::unsupported;
  nvme_host_t host = nullptr;
  if (o.hostnqn.empty()) {
    host = nvme_default_host(root.get());
  } else {
    host = nvme_lookup_host(root.get(), o.hostnqn.c_str(), o.hostid.empty() ? nullptr : o.hostid.c_str());
  }
  if (!host) return Errc::invalid_argument;
  nvme_ctrl_t c = nvme_create_ctrl(root.get(), o.subnqn.c_str(), transport, addr.traddr.c_str(),
                                   nullptr, addr.host_iface.empty() ? nullptr : addr.host_iface.c_str(),
                                   addr.trsvcid.c_str());
  if (!c) return Errc::invalid_argument;
  nvme_fabrics_config cfg;
  nvmf_default_config(&cfg);
  cfg.reconnect_delay = o.reconnect_delay_s;
  cfg.ctrl_loss_tmo = o.ctrl_loss_tmo_s;
  cfg.fast_io_fail_tmo = o.fast_io_fail_tmo_s;
  cfg.keep_alive_tmo = o.keep_alive_tmo_s;
  if (o.nr_io_queues > 0) cfg.nr_io_queues = o.nr_io_queues;
  if (o.nr_poll_queues > 0) cfg.nr_poll_queues = o.nr_poll_queues;
  if (o.queue_size > 0) cfg.queue_size = o.queue_size;
  cfg.duplicate_connect = o.duplicate_connect;
  cfg.hdr_digest = o.digest == Digest::header || o.digest == Digest::both;
  cfg.data_digest = o.digest == Digest::data || o.digest == Digest::both;
  if (nvmf_add_ctrl(host, c, &cfg) != 0) {
    const int err = errno;
    nvmeof::detail::log_warning("nvmeof: kernel connect to %s (%s): %s\n", addr.to_string().c_str(),
                 o.subnqn.c_str(), nvme_errno_to_string(err));
    nvme_free_ctrl(c);
    return connect_error(err);
  }
  const std::string name = nvme_ctrl_get_name(c) ? nvme_ctrl_get_name(c) : "";
  if (name.empty()) return Errc::protocol_error;
  // nvmf_add_ctrl returns once the kernel connected; the state may lag a moment behind.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (kernel_controller_state(name, o.sysfs_root) != "live") {
    if (std::chrono::steady_clock::now() > until) return Errc::timeout;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  // libnvme 1.3 leaves zero-valued options out of the connect string, so the kernel keeps its
  // default ("off") for a fast_io_fail_tmo of 0: set it through the controller's attribute.
  if (o.fast_io_fail_tmo_s == 0) {
    if (auto w = write_attr(o.sysfs_root + "/class/nvme/" + name + "/fast_io_fail_tmo", "0"); !w) {
      nvmeof::detail::log_warning("nvmeof: %s: setting fast_io_fail_tmo=0: %s\n", name.c_str(),
                   w.error().message().c_str());
      return w.error();
    }
  }
  KernelScanOptions so;
  so.sysfs_root = o.sysfs_root;
  so.ana = AnaLookup::sysfs_only;
  auto topo = scan_kernel_paths(so);
  if (!topo) return topo.error();
  for (const auto& s : topo->subsystems)
    for (const auto& k : s.controllers)
      if (k.name == name) return k;
  return errno_code(ENOENT);
}

Result<void> kernel_disconnect(const std::string& name, const std::string& sysfs_root) {
  if (kernel_controller_state(name, sysfs_root) == "gone") return errno_code(ENOENT);
  if (sysfs_root == "/sys") {
    Tree root(nvme_create_root(stderr, LOG_ERR));
    if (root) {
      if (nvme_ctrl_t c = nvme_scan_ctrl(root.get(), name.c_str())) {
        const int rc = nvme_disconnect_ctrl(c);
        const int err = errno;
        nvme_free_ctrl(c);
        if (rc == 0) return {};
        return errno_code(err ? err : EIO);
      }
    }
  }
  // libnvme reads the fixed /sys; under another root write the attribute it would write.
  return write_attr(sysfs_root + "/class/nvme/" + name + "/delete_controller", "1");
}

Result<void> kernel_reset(const std::string& name, const std::string& sysfs_root) {
  const std::string state = kernel_controller_state(name, sysfs_root);
  if (state == "gone") return errno_code(ENOENT);
  if (state != "live") return errno_code(EBUSY);
  return write_attr(sysfs_root + "/class/nvme/" + name + "/reset_controller", "1");
}

}  // namespace nvmeof
