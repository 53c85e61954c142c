// A kernel path as a volume path (Transport::passthrough): built when liburing has
// IORING_OP_URING_CMD (kernel_endpoint_unavailable.cpp otherwise).
#include <algorithm>
#include <cstdio>
#include <fstream>

#include "control/endpoint.hpp"
#include "control/kernel_connect.hpp"
#include "control/kernel_paths.hpp"
#include "fabric/admin.hpp"
#include "transport/uring/admin.hpp"
#include "transport/uring/queue_pair.hpp"
#include "core/log.hpp"

namespace nvmeof::detail {
namespace {

// /sys/class/nvme/nvmeX/kato: the keep-alive timeout in seconds (Linux 5.x and later); 0 when
// the attribute is missing, and the volume then holds writes for its fence bound only.
uint32_t read_kato_ms(const std::string& ctrl) {
  std::ifstream in("/sys/class/nvme/" + ctrl + "/kato");
  unsigned long s = 0;
  if (!(in >> s)) return 0;
  return static_cast<uint32_t>(std::min<unsigned long>(s, 3600) * 1000);
}

// A kernel path in multipath=N mode: the controller's admin commands on /dev/nvmeX (io_uring
// passthrough, the ioctl as fallback), I/O by io_uring passthrough on the namespace's /dev/ngXnY.
class KernelEndpoint final : public PathEndpoint {
 public:
  KernelEndpoint(std::string device, KernelController ctrl, uring::AdminDevice admin, ControllerInfo info,
                 uint32_t nsid)
      : device_(std::move(device)), ctrl_(std::move(ctrl)), admin_(std::move(admin)),
        info_(std::move(info)), nsid_(nsid) {
    kato_ms_ = read_kato_ms(ctrl_.name);
  }

  const ControllerInfo& info() const noexcept override { return info_; }
  std::optional<uint32_t> fixed_nsid() const noexcept override { return nsid_; }
  Result<NamespaceInfo> identify_namespace(uint32_t nsid) override { return fabric::identify_namespace(admin_, nsid); }
  Result<std::vector<uint32_t>> active_namespaces() override { return std::vector<uint32_t>{nsid_}; }
  Result<AnaLog> ana_log() override { return fabric::ana_log(admin_, info_.nn); }
  // Opening the device and registering it with the ring are quick and belong to the ring's
  // thread, so all of it happens in start().
  Result<PreparedQueue> prepare_io_queue(Reactor& r, uint32_t depth, int) override {
    uring::QpConfig qc;
    qc.device = device_;
    qc.depth = std::min(depth ? depth : 128, uring::kLimits.max_queue_depth);
    Reactor* reactor = &r;
    PreparedQueue q;
    q.start = [reactor, qc]() -> Result<std::unique_ptr<QueuePair>> {
      auto qp = uring::QueuePair::open(*reactor, qc);
      if (!qp) return qp.error();
      (*qp)->start();
      return std::unique_ptr<QueuePair>(std::move(*qp));
    };
    return q;  // no traffic counter: the kernel keeps this controller alive, not us
  }
  // The kernel host's keep-alive timeout (sysfs, seconds), read once at open.
  uint32_t kato_ms() const noexcept override { return kato_ms_; }
  bool has_async_events() const noexcept override { return false; }
  void on_async_event(std::function<void(uint32_t)>) override {}
  void on_failure(std::function<void(std::error_code)>) override {}
  std::error_code health() override {
    const std::string st = kernel_controller_state(ctrl_.name);
    if (st == "live") return {};
    return make_error_code(Errc::not_connected);
  }
  // The kernel tears the connection down and completes what it held; when it is already
  // reconnecting there is nothing left to tear down.
  void fence() override {
    if (auto r = kernel_reset(ctrl_.name); !r && r.error() != errno_code(EBUSY))
      nvmeof::detail::log_warning("nvmeof: reset of %s: %s\n", ctrl_.name.c_str(), r.error().message().c_str());
  }
  void close() override {}

 private:
  std::string device_;
  KernelController ctrl_;
  uring::AdminDevice admin_;
  ControllerInfo info_;
  uint32_t nsid_;
  uint32_t kato_ms_ = 0;
};

}  // namespace

Result<std::shared_ptr<PathEndpoint>> open_kernel_endpoint(const TransportAddress& addr) {
  KernelScanOptions so;
  so.ana = AnaLookup::sysfs_only;
  auto topo = scan_kernel_paths(so);
  if (!topo) return topo.error();
  for (const auto& s : topo->subsystems)
    for (const auto& ns : s.namespaces)
      for (const auto& p : ns.paths) {
        if (p.generic_device != addr.traddr) continue;
        for (const auto& k : s.controllers) {
          if (k.name != p.controller) continue;
          if (k.state != "live") return Errc::not_connected;
          auto admin = uring::AdminDevice::open(k.admin_device);
          if (!admin) return admin.error();
          auto info = fabric::identify_controller(*admin);
          if (!info) return info.error();
          admin->set_max_transfer(info->max_transfer);
          // The volume splits I/O at this size; the passthrough pair takes no more.
          const uint32_t limit = uring::transfer_limit(addr.traddr, "/sys");
          info->max_transfer = info->max_transfer ? std::min(info->max_transfer, limit) : limit;
          return std::shared_ptr<PathEndpoint>(
              std::make_shared<KernelEndpoint>(addr.traddr, k, std::move(*admin), std::move(*info), ns.nsid));
        }
      }
  return errno_code(ENOENT);
}

}  // namespace nvmeof::detail
