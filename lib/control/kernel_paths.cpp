#include "control/kernel_paths.hpp"

#include <libnvme.h>
#include <sys/stat.h>
#include <syslog.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <fstream>
#include <map>
#include <memory>

#include "core/identify.hpp"
#include "fabric/admin.hpp"
#include "transport/uring/admin.hpp"

namespace nvmeof {
namespace {

struct TreeDeleter {
  void operator()(nvme_root* r) const noexcept { nvme_free_tree(r); }
};

std::string str(const char* s) { return s ? std::string(s) : std::string(); }

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\0')) s.pop_back();
  return s;
}

std::optional<std::string> read_attr(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::string line;
  std::getline(in, line);
  return trim(line);
}

template <class T>
std::optional<T> to_number(const std::string& s) {
  T v{};
  const char* b = s.data();
  const char* e = b + s.size();
  const auto [p, ec] = std::from_chars(b, e, v);
  if (ec != std::errc{} || p != e || s.empty()) return std::nullopt;
  return v;
}

bool exists(const std::string& path) {
  struct stat st{};
  return ::stat(path.c_str(), &st) == 0;
}

// "traddr=127.0.0.1,trsvcid=4420,src_addr=..." -> the value of `key`.
std::string address_field(const std::string& address, const std::string& key) {
  size_t pos = 0;
  while (pos < address.size()) {
    size_t end = address.find(',', pos);
    if (end == std::string::npos) end = address.size();
    const std::string item = address.substr(pos, end - pos);
    const size_t eq = item.find('=');
    if (eq != std::string::npos && item.substr(0, eq) == key) return trim(item.substr(eq + 1));
    pos = end + 1;
  }
  return {};
}

// nvmeXnY -> /dev/ngXnY when the node exists.
std::string generic_of(const std::string& block_name, const std::string& dev_root) {
  if (block_name.rfind("nvme", 0) != 0) return {};
  const std::string ng = dev_root + "/ng" + block_name.substr(4);
  return exists(ng) ? ng : std::string();
}

// The ANA log of each controller, read at most once per scan.
class AnaLogs {
 public:
  explicit AnaLogs(const KernelScanOptions& o) : opts_(o) {}

  const AnaLog* of(const std::string& ctrl) {
    auto it = logs_.find(ctrl);
    if (it != logs_.end()) return it->second ? &*it->second : nullptr;
    std::optional<AnaLog> log;
    if (opts_.ana == AnaLookup::sysfs_then_log_page) {
      auto dev = uring::AdminDevice::open(opts_.dev_root + "/" + ctrl);
      if (dev) {
        // NN bounds the NSID lists of the log (fabric::ana_log reads the header, then that much).
        if (auto info = fabric::identify_controller(*dev)) {
          dev->set_max_transfer(info->max_transfer);
          if (auto l = fabric::ana_log(*dev, info->nn)) log = std::move(*l);
        }
      }
    }
    auto& slot = logs_[ctrl];
    slot = std::move(log);
    return slot ? &*slot : nullptr;
  }

 private:
  const KernelScanOptions& opts_;
  std::map<std::string, std::optional<AnaLog>> logs_;
};

KernelController make_controller(nvme_ctrl_t c, const KernelScanOptions& opts) {
  KernelController k;
  k.name = str(nvme_ctrl_get_name(c));
  k.transport = str(nvme_ctrl_get_transport(c));
  k.address = trim(str(nvme_ctrl_get_address(c)));
  k.traddr = str(nvme_ctrl_get_traddr(c));
  if (k.traddr.empty() || k.traddr == "none") k.traddr = address_field(k.address, "traddr");
  k.trsvcid = str(nvme_ctrl_get_trsvcid(c));
  if (k.trsvcid.empty() || k.trsvcid == "none") k.trsvcid = address_field(k.address, "trsvcid");
  const std::string dir = opts.sysfs_root + "/class/nvme/" + k.name + "/";
  k.state = read_attr(dir + "state").value_or(str(nvme_ctrl_get_state(c)));
  k.admin_device = opts.dev_root + "/" + k.name;
  const std::string numa = read_attr(dir + "numa_node").value_or(str(nvme_ctrl_get_numa_node(c)));
  k.numa_node = to_number<int>(numa).value_or(-1);
  const std::string qc =
      read_attr(dir + "queue_count").value_or(str(nvme_ctrl_get_queue_count(c)));
  k.queue_count = to_number<uint32_t>(qc).value_or(0);
  return k;
}

KernelNamespace& namespace_for(KernelSubsystem& s, nvme_ns_t n) {
  const uint32_t nsid = static_cast<uint32_t>(nvme_ns_get_nsid(n));
  for (auto& ns : s.namespaces)
    if (ns.nsid == nsid) return ns;
  KernelNamespace ns;
  ns.nsid = nsid;
  const int lba = nvme_ns_get_lba_size(n);
  ns.lba_size = lba > 0 ? static_cast<uint32_t>(lba) : 0;
  ns.lba_count = nvme_ns_get_lba_count(n);
  s.namespaces.push_back(std::move(ns));
  return s.namespaces.back();
}

void fill_controller_fields(KernelPath& p, const KernelSubsystem& s) {
  for (const auto& c : s.controllers) {
    if (c.name != p.controller) continue;
    p.numa_node = c.numa_node;
    p.queue_count = c.queue_count;
  }
}

// multipath=N: the ANA log of the path's own controller, and the group that lists the NSID.
void ana_from_log(KernelPath& p, uint32_t nsid, AnaLogs& logs) {
  const AnaLog* log = logs.of(p.controller);
  if (!log) return;
  for (const auto& g : log->groups) {
    if (std::find(g.nsids.begin(), g.nsids.end(), nsid) == g.nsids.end()) continue;
    p.ana_group = g.grpid;
    p.ana_state = g.state;
    p.ana_source = AnaSource::log_page;
    return;
  }
}

void ana_from_sysfs(KernelPath& p, const std::string& dir) {
  if (auto st = read_attr(dir + "/ana_state")) {
    if (auto s = parse_ana_state(*st)) {
      p.ana_state = *s;
      p.ana_source = AnaSource::sysfs;
    }
  }
  if (auto g = read_attr(dir + "/ana_grpid")) p.ana_group = to_number<uint32_t>(*g).value_or(0);
}

// nvme2 before nvme10.
bool by_name(const std::string& a, const std::string& b) {
  return a.size() != b.size() ? a.size() < b.size() : a < b;
}

}  // namespace

const char* to_string(AnaSource s) noexcept {
  switch (s) {
    case AnaSource::sysfs: return "sysfs";
    case AnaSource::log_page: return "log_page";
    case AnaSource::none: return "none";
  }
  return "none";
}

Result<KernelTopology> scan_kernel_paths(const KernelScanOptions& opts) {
  KernelTopology topo;
  if (!exists(opts.sysfs_root + "/class/nvme-subsystem")) return topo;
  std::unique_ptr<nvme_root, TreeDeleter> root(nvme_create_root(stderr, LOG_CRIT));
  if (!root) return Errc::unsupported;
  // A failed scan of one subsystem still leaves the rest of the tree; a host without NVMe
  // fails with ENOENT. Either way what the tree holds is the answer.
  (void)nvme_scan_topology(root.get(), nullptr, nullptr);

  AnaLogs logs(opts);
  for (nvme_host_t h = nvme_first_host(root.get()); h; h = nvme_next_host(root.get(), h)) {
    for (nvme_subsystem_t s = nvme_first_subsystem(h); s; s = nvme_next_subsystem(h, s)) {
      KernelSubsystem ks;
      ks.name = str(nvme_subsystem_get_name(s));
      ks.nqn = trim(str(nvme_subsystem_get_nqn(s)));
      for (nvme_ctrl_t c = nvme_subsystem_first_ctrl(s); c; c = nvme_subsystem_next_ctrl(s, c))
        ks.controllers.push_back(make_controller(c, opts));

      // multipath=N: every controller's own namespaces are paths.
      for (nvme_ctrl_t c = nvme_subsystem_first_ctrl(s); c; c = nvme_subsystem_next_ctrl(s, c)) {
        for (nvme_ns_t n = nvme_ctrl_first_ns(c); n; n = nvme_ctrl_next_ns(c, n)) {
          KernelNamespace& ns = namespace_for(ks, n);
          KernelPath p;
          p.controller = str(nvme_ctrl_get_name(c));
          p.block_device = str(nvme_ns_get_name(n));
          p.generic_device = generic_of(p.block_device, opts.dev_root);
          fill_controller_fields(p, ks);
          ana_from_sysfs(p, opts.sysfs_root + "/block/" + p.block_device);
          if (p.ana_source == AnaSource::none) ana_from_log(p, ns.nsid, logs);
          ns.paths.push_back(std::move(p));
        }
      }
      // multipath=Y: head namespaces with hidden per-controller paths.
      for (nvme_ns_t n = nvme_subsystem_first_ns(s); n; n = nvme_subsystem_next_ns(s, n)) {
        KernelNamespace& ns = namespace_for(ks, n);
        ns.head_device = str(nvme_ns_get_name(n));
        ns.head_generic_device = generic_of(ns.head_device, opts.dev_root);
        for (nvme_path_t pp = nvme_namespace_first_path(n); pp;
             pp = nvme_namespace_next_path(n, pp)) {
          KernelPath p;
          nvme_ctrl_t c = nvme_path_get_ctrl(pp);
          p.controller = c ? str(nvme_ctrl_get_name(c)) : std::string();
          p.block_device = str(nvme_path_get_name(pp));
          fill_controller_fields(p, ks);
          ana_from_sysfs(p, opts.sysfs_root + "/block/" + p.block_device);
          if (p.ana_source == AnaSource::none && !p.controller.empty())
            ana_from_log(p, ns.nsid, logs);
          ns.paths.push_back(std::move(p));
        }
      }
      std::sort(ks.controllers.begin(), ks.controllers.end(),
                [](const KernelController& a, const KernelController& b) {
                  return by_name(a.name, b.name);
                });
      std::sort(ks.namespaces.begin(), ks.namespaces.end(),
                [](const KernelNamespace& a, const KernelNamespace& b) { return a.nsid < b.nsid; });
      for (auto& ns : ks.namespaces)
        std::sort(ns.paths.begin(), ns.paths.end(),
                  [](const KernelPath& a, const KernelPath& b) {
                    return by_name(a.controller, b.controller);
                  });
      topo.subsystems.push_back(std::move(ks));
    }
  }
  return topo;
}

}  // namespace nvmeof
