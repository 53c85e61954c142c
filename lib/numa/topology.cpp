#include "nvmeof/topology.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "numa/cpulist.hpp"

namespace nvmeof {
namespace {

namespace fs = std::filesystem;

bool read_line(const fs::path& p, std::string& out) {
  std::ifstream f(p);
  if (!f) return false;
  std::getline(f, out);
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ' || out.back() == '\r')) out.pop_back();
  return true;
}

int read_node_file(const fs::path& p) {
  std::string s;
  if (!read_line(p, s)) return kUnknownNode;
  int v = kUnknownNode;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || v < 0) return kUnknownNode;
  return v;
}

// The node of the device behind a class entry (`<class dir>/device`): its own numa_node, else
// that of the nearest parent that has one (a virtio NIC's numa_node sits on its PCI function,
// one level up from the virtio device the class entry points at).
int device_node(const fs::path& class_entry) {
  std::error_code ec;
  fs::path p = fs::canonical(class_entry / "device", ec);
  if (ec) return kUnknownNode;
  for (int level = 0; level < 3 && p.has_relative_path(); ++level, p = p.parent_path()) {
    if (fs::exists(p / "numa_node", ec)) return read_node_file(p / "numa_node");
  }
  return kUnknownNode;
}

bool parse_int(std::string_view s, int& v) {
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc{} && end == s.data() + s.size() && v >= 0;
}

// "key=value,key=value" as in /sys/class/nvme/nvmeX/address.
std::string address_field(std::string_view all, std::string_view key) {
  size_t pos = 0;
  while (pos < all.size()) {
    size_t end = all.find(',', pos);
    if (end == std::string_view::npos) end = all.size();
    const std::string_view kv = all.substr(pos, end - pos);
    if (kv.size() > key.size() && kv.substr(0, key.size()) == key && kv[key.size()] == '=')
      return std::string(kv.substr(key.size() + 1));
    pos = end + 1;
  }
  return {};
}

// The interface that owns `addr` on this host, or "".
std::string interface_with_address(const sockaddr_storage& addr) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return {};
  std::string name;
  for (ifaddrs* i = list; i && name.empty(); i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != addr.ss_family) continue;
    if (addr.ss_family == AF_INET) {
      const auto* a = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
      const auto* b = reinterpret_cast<const sockaddr_in*>(&addr);
      if (a->sin_addr.s_addr == b->sin_addr.s_addr) name = i->ifa_name;
    } else if (addr.ss_family == AF_INET6) {
      const auto* a = reinterpret_cast<const sockaddr_in6*>(i->ifa_addr);
      const auto* b = reinterpret_cast<const sockaddr_in6*>(&addr);
      if (std::memcmp(&a->sin6_addr, &b->sin6_addr, sizeof a->sin6_addr) == 0) name = i->ifa_name;
    }
  }
  freeifaddrs(list);
  return name;
}

bool to_sockaddr(const std::string& host, sockaddr_storage& ss, socklen_t& len) {
  std::memset(&ss, 0, sizeof ss);
  auto* v4 = reinterpret_cast<sockaddr_in*>(&ss);
  if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(4420);
    len = sizeof *v4;
    return true;
  }
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&ss);
  if (inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(4420);
    len = sizeof *v6;
    return true;
  }
  return false;
}

}  // namespace

Result<std::vector<int>> parse_cpulist(std::string_view s) {
  std::vector<int> cpus;
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.remove_suffix(1);
  size_t pos = 0;
  while (pos < s.size()) {
    size_t end = s.find(',', pos);
    if (end == std::string_view::npos) end = s.size();
    const std::string_view item = s.substr(pos, end - pos);
    const size_t dash = item.find('-');
    int lo = 0, hi = 0;
    if (dash == std::string_view::npos) {
      if (!parse_int(item, lo)) return Errc::invalid_argument;
      hi = lo;
    } else if (!parse_int(item.substr(0, dash), lo) || !parse_int(item.substr(dash + 1), hi) || hi < lo) {
      return Errc::invalid_argument;
    }
    if (hi - lo > 1 << 16) return Errc::invalid_argument;
    for (int c = lo; c <= hi; ++c) cpus.push_back(c);
    pos = end + 1;
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  return cpus;
}

Topology Topology::single_node(std::vector<int> cpus) {
  Topology t;
  NumaNode n;
  n.id = 0;
  n.cpus = std::move(cpus);
  n.distances = {kLocalDistance};
  for (int c : n.cpus) {
    if (static_cast<size_t>(c) >= t.cpu_node_.size()) t.cpu_node_.resize(static_cast<size_t>(c) + 1, kUnknownNode);
    t.cpu_node_[static_cast<size_t>(c)] = 0;
  }
  t.nodes_.push_back(std::move(n));
  return t;
}

Result<Topology> Topology::read(const std::string& sysfs_root) {
  const fs::path sys(sysfs_root);
  std::string line;
  std::vector<int> online;
  bool have_online = false;
  if (read_line(sys / "devices/system/cpu/online", line)) {
    auto r = parse_cpulist(line);
    if (!r) return r.error();
    online = std::move(*r);
    have_online = true;
  }

  const fs::path node_dir = sys / "devices/system/node";
  std::vector<int> ids;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(node_dir, ec)) {
    const std::string name = e.path().filename().string();
    int id = 0;
    if (name.size() > 4 && name.compare(0, 4, "node") == 0 && parse_int(std::string_view(name).substr(4), id))
      ids.push_back(id);
  }
  if (ids.empty()) {
    if (!have_online) return std::error_code(ENOENT, std::system_category());
    Topology t = single_node(std::move(online));
    t.root_ = sysfs_root;
    return t;
  }
  std::sort(ids.begin(), ids.end());

  Topology t;
  t.root_ = sysfs_root;
  for (int id : ids) {
    NumaNode n;
    n.id = id;
    const fs::path d = node_dir / ("node" + std::to_string(id));
    if (read_line(d / "cpulist", line)) {
      auto r = parse_cpulist(line);
      if (!r) return r.error();
      for (int c : *r)
        if (!have_online || std::binary_search(online.begin(), online.end(), c)) n.cpus.push_back(c);
    }
    // One entry per online node, in node order (the order of `ids`).
    if (read_line(d / "distance", line)) {
      std::istringstream in(line);
      int v = 0;
      while (in >> v) n.distances.push_back(v);
      if (!in.eof()) return Errc::invalid_argument;
    }
    if (n.distances.size() != ids.size()) {
      // No (or a short) table: local is local, everything else one step away.
      n.distances.assign(ids.size(), 2 * kLocalDistance);
      for (size_t k = 0; k < ids.size(); ++k)
        if (ids[k] == id) n.distances[k] = kLocalDistance;
    }
    for (int c : n.cpus) {
      if (static_cast<size_t>(c) >= t.cpu_node_.size()) t.cpu_node_.resize(static_cast<size_t>(c) + 1, kUnknownNode);
      t.cpu_node_[static_cast<size_t>(c)] = id;
    }
    t.nodes_.push_back(std::move(n));
  }
  return t;
}

std::vector<int> Topology::cpus() const {
  std::vector<int> all;
  for (const auto& n : nodes_) all.insert(all.end(), n.cpus.begin(), n.cpus.end());
  std::sort(all.begin(), all.end());
  return all;
}

int Topology::node_of_cpu(int cpu) const noexcept {
  if (cpu < 0 || static_cast<size_t>(cpu) >= cpu_node_.size()) return kUnknownNode;
  return cpu_node_[static_cast<size_t>(cpu)];
}

int Topology::max_distance() const noexcept {
  int m = kLocalDistance;
  for (const auto& n : nodes_)
    for (int d : n.distances) m = std::max(m, d);
  return m;
}

int Topology::distance(int a, int b) const noexcept {
  if (a < 0 || b < 0) return max_distance();
  size_t ia = nodes_.size(), ib = nodes_.size();
  for (size_t k = 0; k < nodes_.size(); ++k) {
    if (nodes_[k].id == a) ia = k;
    if (nodes_[k].id == b) ib = k;
  }
  if (ia == nodes_.size() || ib == nodes_.size()) return max_distance();
  const auto& row = nodes_[ia].distances;
  return ib < row.size() ? row[ib] : max_distance();
}

int Topology::net_node(std::string_view ifname) const {
  if (ifname.empty() || ifname.find('/') != std::string_view::npos) return kUnknownNode;
  return device_node(fs::path(root_) / "class/net" / std::string(ifname));
}

int Topology::rdma_node(std::string_view dev) const {
  if (dev.empty() || dev.find('/') != std::string_view::npos) return kUnknownNode;
  return device_node(fs::path(root_) / "class/infiniband" / std::string(dev));
}

int Topology::nvme_ctrl_node(std::string_view ctrl) const {
  if (ctrl.empty() || ctrl.find('/') != std::string_view::npos) return kUnknownNode;
  const fs::path d = fs::path(root_) / "class/nvme" / std::string(ctrl);
  if (const int n = device_node(d); n >= 0) return n;
  std::string addr;
  if (!read_line(d / "address", addr)) return kUnknownNode;
  if (std::string iface = address_field(addr, "host_iface"); !iface.empty()) return net_node(iface);
  std::string traddr = address_field(addr, "traddr");
  if (traddr.empty()) return kUnknownNode;
  auto iface = route_interface(traddr);
  return iface ? net_node(*iface) : kUnknownNode;
}

Result<std::string> route_interface(const std::string& traddr) {
  sockaddr_storage ss;
  socklen_t len = 0;
  if (!to_sockaddr(traddr, ss, len)) return Errc::invalid_argument;
  const int fd = ::socket(ss.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::error_code(errno, std::system_category());
  // connect() on a datagram socket only resolves the route; nothing is sent.
  if (::connect(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
    const int e = errno;
    ::close(fd);
    return std::error_code(e, std::system_category());
  }
  sockaddr_storage local{};
  socklen_t llen = sizeof local;
  const int rc = ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &llen);
  const int e = errno;
  ::close(fd);
  if (rc != 0) return std::error_code(e, std::system_category());
  std::string name = interface_with_address(local);
  if (name.empty()) return std::error_code(ENODEV, std::system_category());
  return name;
}

const char* to_string(NodeSource s) noexcept {
  switch (s) {
    case NodeSource::host_iface: return "host_iface";
    case NodeSource::route: return "route";
    case NodeSource::rdma_device: return "rdma_device";
    case NodeSource::kernel_ctrl: return "kernel_ctrl";
    case NodeSource::none: return "none";
  }
  return "?";
}

int current_node(const Topology& topo) noexcept {
  const int cpu = sched_getcpu();
  return cpu < 0 ? kUnknownNode : topo.node_of_cpu(cpu);
}

}  // namespace nvmeof
