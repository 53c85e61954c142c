// NUMA topology from fake sysfs trees, the placement plan computed from it (golden), and the
// path choice that follows from the plan's distances.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "multipath/path_selector.hpp"
#include "numa/cpulist.hpp"
#include "nvmeof/topology.hpp"

using namespace nvmeof;
using namespace nvmeof::detail;
namespace fs = std::filesystem;

namespace {

// A throw-away sysfs tree.
class FakeSysfs {
 public:
  FakeSysfs() {
    char tmpl[] = "/tmp/nvmeof-sysfs-XXXXXX";
    root_ = mkdtemp(tmpl);
  }
  ~FakeSysfs() {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  FakeSysfs& file(const std::string& rel, const std::string& text) {
    const fs::path p = fs::path(root_) / rel;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text << "\n";
    return *this;
  }
  FakeSysfs& dir(const std::string& rel) {
    fs::create_directories(fs::path(root_) / rel);
    return *this;
  }
  FakeSysfs& node(int id, const std::string& cpulist, const std::string& distance) {
    const std::string d = "devices/system/node/node" + std::to_string(id);
    return file(d + "/cpulist", cpulist).file(d + "/distance", distance);
  }
  FakeSysfs& nic(const std::string& name, int node) {
    return file("class/net/" + name + "/device/numa_node", std::to_string(node));
  }
  const std::string& root() const { return root_; }

 private:
  std::string root_;
};

Topology read(const FakeSysfs& s) {
  auto t = Topology::read(s.root());
  REQUIRE(t);
  return *t;
}

TransportAddress tcp(const std::string& addr, const std::string& iface) {
  TransportAddress a;
  a.traddr = addr;
  a.host_iface = iface;
  return a;
}

std::vector<PathPlacement> place(const Topology& t, const std::vector<TransportAddress>& addrs) {
  std::vector<PathPlacement> out;
  for (size_t i = 0; i < addrs.size(); ++i) out.push_back(place_path(t, addrs[i], static_cast<int>(i)));
  return out;
}

// The views a lane builds: everything usable and optimized unless changed, distances from the plan.
std::vector<PathView> views(const ReactorPlacement& r) {
  std::vector<PathView> v(r.distances.size());
  for (size_t i = 0; i < v.size(); ++i) v[i].distance = r.distances[i];
  return v;
}

std::map<int, int> picks(SelectorKind k, const std::vector<PathView>& v, int n) {
  SelectorState st;
  std::map<int, int> c;
  for (int i = 0; i < n; ++i) ++c[select_path(k, v, st, 1, 4096)];
  return c;
}

FakeSysfs two_nodes() {
  FakeSysfs s;
  s.file("devices/system/cpu/online", "0-3")
      .node(0, "0-1", "10 21")
      .node(1, "2-3", "21 10")
      .nic("eth0", 0)
      .nic("eth1", 1);
  return s;
}

}  // namespace

TEST_CASE("cpulists parse like the kernel prints them", "[numa]") {
  CHECK(*parse_cpulist("0-3,8,10-11\n") == std::vector<int>{0, 1, 2, 3, 8, 10, 11});
  CHECK(*parse_cpulist("") == std::vector<int>{});
  CHECK(*parse_cpulist("5") == std::vector<int>{5});
  CHECK(*parse_cpulist("3,1-2,2") == std::vector<int>{1, 2, 3});
  CHECK_FALSE(parse_cpulist("1-"));
  CHECK_FALSE(parse_cpulist("a"));
  CHECK_FALSE(parse_cpulist("3-1"));
  CHECK_FALSE(parse_cpulist("1,,2"));
}

TEST_CASE("one node: every reactor there, every distance local", "[numa]") {
  FakeSysfs s;
  s.file("devices/system/cpu/online", "0-3").node(0, "0-3", "10").nic("eth0", -1);
  const Topology t = read(s);
  REQUIRE(t.nodes().size() == 1);
  CHECK(t.cpus() == std::vector<int>{0, 1, 2, 3});
  CHECK(t.net_node("eth0") == kUnknownNode);
  PlacementRequest req;
  req.reactors = 2;
  const Placement p = plan_placement(t, req, place(t, {tcp("192.0.2.1", "eth0")}));
  CHECK(to_text(p) ==
        "placement: numa\n"
        "  node 0: cpus 0 1 2 3; distances 10\n"
        "  path 0 tcp://192.0.2.1:4420: node unknown (host_iface eth0)\n"
        "  reactor 0: cpu 0, node 0, path distances 10\n"
        "  reactor 1: cpu 1, node 0, path distances 10\n");
}

TEST_CASE("two nodes with a NIC on each: a reactor per node, each prefers its own path", "[numa]") {
  const FakeSysfs s = two_nodes();
  const Topology t = read(s);
  CHECK(t.node_of_cpu(3) == 1);
  CHECK(t.node_of_cpu(9) == kUnknownNode);
  CHECK(t.distance(0, 1) == 21);
  CHECK(t.distance(1, 1) == 10);
  PlacementRequest req;
  req.reactors = 4;
  const Placement p = plan_placement(t, req, place(t, {tcp("192.0.2.1", "eth0"), tcp("198.51.100.1", "eth1")}));
  CHECK(to_text(p) ==
        "placement: numa\n"
        "  node 0: cpus 0 1; distances 10 21\n"
        "  node 1: cpus 2 3; distances 21 10\n"
        "  path 0 tcp://192.0.2.1:4420: node 0 (host_iface eth0)\n"
        "  path 1 tcp://198.51.100.1:4420: node 1 (host_iface eth1)\n"
        "  reactor 0: cpu 0, node 0, path distances 10 21\n"
        "  reactor 1: cpu 2, node 1, path distances 21 10\n"
        "  reactor 2: cpu 1, node 0, path distances 10 21\n"
        "  reactor 3: cpu 3, node 1, path distances 21 10\n");

  const auto j = nlohmann::json::parse(to_json(p));
  CHECK(j["mode"] == "numa");
  CHECK(j["reactors"].size() == 4);
  CHECK(j["reactors"][1]["cpu"] == 2);
  CHECK(j["reactors"][1]["distances"] == nlohmann::json::array({21, 10}));
  CHECK(j["paths"][1]["source"] == "host_iface");
  CHECK(j["nodes"][0]["cpus"].is_array());

  for (const auto k : {SelectorKind::numa, SelectorKind::service_time}) {
    // Both optimized: each reactor keeps to the path on its node.
    CHECK(picks(k, views(p.reactors[0]), 10)[0] == 10);
    CHECK(picks(k, views(p.reactors[1]), 10)[1] == 10);
    // Its own path gone: the other node's.
    auto v = views(p.reactors[0]);
    v[0].use = PathUse::unusable;
    CHECK(picks(k, v, 10)[1] == 10);
    // An optimized remote path beats a non-optimized local one.
    v = views(p.reactors[1]);
    v[1].ana = AnaState::non_optimized;
    CHECK(picks(k, v, 10)[0] == 10);
  }
  // The numa selector stays local even when the local path is the busier one.
  auto v = views(p.reactors[1]);
  v[1].outstanding = 30;
  CHECK(picks(SelectorKind::numa, v, 5)[1] == 5);
}

TEST_CASE("the chosen CPUs put nodes that carry a path first", "[numa]") {
  const FakeSysfs s = two_nodes();
  const Topology t = read(s);
  PlacementRequest req;
  req.reactors = 1;
  const Placement p = plan_placement(t, req, place(t, {tcp("198.51.100.1", "eth1")}));
  REQUIRE(p.reactors.size() == 1);
  CHECK(p.reactors[0].cpu == 2);
  CHECK(p.reactors[0].node == 1);
  // ... within the CPUs the process may use.
  req.allowed_cpus = {0, 1, 3};
  req.reactors = 2;
  const Placement q = plan_placement(t, req, place(t, {tcp("198.51.100.1", "eth1")}));
  CHECK(q.reactors[0].cpu == 3);
  CHECK(q.reactors[1].cpu == 0);
}

TEST_CASE("unknown nodes: as far as the farthest known node", "[numa]") {
  FakeSysfs s;
  s.file("devices/system/cpu/online", "0-1")
      .node(0, "0", "10 20")
      .node(1, "1", "20 10")
      .nic("eth0", -1)
      .dir("class/net/lo")
      .nic("eth1", 1);
  const Topology t = read(s);
  CHECK(t.net_node("eth0") == kUnknownNode);
  CHECK(t.net_node("lo") == kUnknownNode);
  CHECK(t.net_node("nosuch") == kUnknownNode);
  CHECK(t.net_node("../x") == kUnknownNode);
  CHECK(t.distance(kUnknownNode, 0) == 20);
  CHECK(t.distance(1, 7) == 20);
  PlacementRequest req;
  req.reactors = 2;
  const Placement p = plan_placement(t, req, place(t, {tcp("192.0.2.1", "eth0"), tcp("198.51.100.1", "eth1")}));
  CHECK(to_text(p) ==
        "placement: numa\n"
        "  node 0: cpus 0; distances 10 20\n"
        "  node 1: cpus 1; distances 20 10\n"
        "  path 0 tcp://192.0.2.1:4420: node unknown (host_iface eth0)\n"
        "  path 1 tcp://198.51.100.1:4420: node 1 (host_iface eth1)\n"
        "  reactor 0: cpu 1, node 1, path distances 20 10\n"
        "  reactor 1: cpu 0, node 0, path distances 20 20\n");
  // Node 1's reactor prefers its known local path; node 0's sees two equally far paths.
  CHECK(picks(SelectorKind::numa, views(p.reactors[0]), 6)[1] == 6);
  const auto c = picks(SelectorKind::numa, views(p.reactors[1]), 6);
  CHECK(c.at(0) == 3);
  CHECK(c.at(1) == 3);
}

TEST_CASE("offline CPUs are left out; an explicit offline CPU runs unpinned", "[numa]") {
  FakeSysfs s;
  s.file("devices/system/cpu/online", "0,2-3").node(0, "0-1", "10 21").node(1, "2-3", "21 10");
  const Topology t = read(s);
  CHECK(t.nodes()[0].cpus == std::vector<int>{0});
  CHECK(t.node_of_cpu(1) == kUnknownNode);
  PlacementRequest req;
  req.reactors = 3;
  req.cpus = {1, 3};
  const Placement p = plan_placement(t, req, {});
  CHECK(to_text(p) ==
        "placement: numa\n"
        "  node 0: cpus 0; distances 10 21\n"
        "  node 1: cpus 2 3; distances 21 10\n"
        "  reactor 0: cpu unpinned, node unknown, path distances\n"
        "  reactor 1: cpu 3, node 1, path distances\n"
        "  reactor 2: cpu unpinned, node unknown, path distances\n");
}

TEST_CASE("no node directory: one node of the online CPUs; unpinned placement", "[numa]") {
  FakeSysfs s;
  s.file("devices/system/cpu/online", "0-2");
  const Topology t = read(s);
  REQUIRE(t.nodes().size() == 1);
  CHECK(t.nodes()[0].cpus == std::vector<int>{0, 1, 2});
  PlacementRequest req;
  req.mode = PlacementMode::unpinned;
  req.reactors = 2;
  req.memory_node = 0;
  const Placement p = plan_placement(t, req, {});
  CHECK(to_text(p) ==
        "placement: unpinned, memory on node 0\n"
        "  node 0: cpus 0 1 2; distances 10\n"
        "  reactor 0: cpu unpinned, node 0, path distances\n"
        "  reactor 1: cpu unpinned, node 0, path distances\n");
  FakeSysfs empty;
  CHECK_FALSE(Topology::read(empty.root()));
  FakeSysfs bad;
  bad.node(0, "0-x", "10");
  CHECK(Topology::read(bad.root()).error() == make_error_code(Errc::invalid_argument));
}

TEST_CASE("a virtio NIC's node sits on its PCI function, one level up", "[numa]") {
  FakeSysfs s;
  s.node(0, "0", "10 20").node(1, "1", "20 10");
  s.file("devices/pci0000:80/0000:80:00.0/0000:81:00.0/numa_node", "1")
      .dir("devices/pci0000:80/0000:80:00.0/0000:81:00.0/virtio4")
      .file("devices/pci0000:00/0000:00:02.0/numa_node", "-1")
      .dir("devices/pci0000:00/0000:00:02.0/virtio0")
      .dir("class/net/eth0")
      .dir("class/net/eth1");
  fs::create_directory_symlink("../../../devices/pci0000:80/0000:80:00.0/0000:81:00.0/virtio4",
                               fs::path(s.root()) / "class/net/eth1/device");
  fs::create_directory_symlink("../../../devices/pci0000:00/0000:00:02.0/virtio0",
                               fs::path(s.root()) / "class/net/eth0/device");
  const Topology t = read(s);
  CHECK(t.net_node("eth1") == 1);
  CHECK(t.net_node("eth0") == kUnknownNode);
}

TEST_CASE("kernel and RDMA paths: the controller's or the device's node", "[numa]") {
  FakeSysfs s = two_nodes();
  s.file("class/nvme/nvme0/device/numa_node", "1")
      .file("class/nvme/nvme1/address", "traddr=10.0.0.2,trsvcid=4420,host_iface=eth0")
      .file("class/infiniband/mlx5_0/device/numa_node", "1")
      .dir("class/infiniband/mlx5_0/device/net/eth1");
  const Topology t = read(s);
  CHECK(t.nvme_ctrl_node("nvme0") == 1);
  CHECK(t.nvme_ctrl_node("nvme1") == 0);
  CHECK(t.nvme_ctrl_node("nvme7") == kUnknownNode);
  CHECK(t.rdma_node("mlx5_0") == 1);

  TransportAddress k;
  k.transport = Transport::passthrough;
  k.traddr = "/dev/ng0n1";
  PathPlacement p = place_path(t, k, 0);
  CHECK(p.source == NodeSource::kernel_ctrl);
  CHECK(p.device == "nvme0");
  CHECK(p.node == 1);
  k.traddr = "/dev/nvme1n3";
  CHECK(place_path(t, k, 0).node == 0);

  TransportAddress r = tcp("192.0.2.9", "eth1");
  r.transport = Transport::rdma;
  p = place_path(t, r, 0);
  CHECK(p.source == NodeSource::rdma_device);
  CHECK(p.device == "mlx5_0");
  CHECK(p.node == 1);
}

TEST_CASE("the route to an address names the interface carrying it", "[numa]") {
  // Loopback is on every host (containers included); its interface has no device, so no node.
  auto r = route_interface("127.0.0.1");
  REQUIRE(r);
  CHECK(*r == "lo");
  CHECK_FALSE(route_interface("not-an-address"));
  const FakeSysfs s = two_nodes();
  const PathPlacement p = place_path(read(s), tcp("127.0.0.1", ""), 3);
  CHECK(p.source == NodeSource::route);
  CHECK(p.device == "lo");
  CHECK(p.node == kUnknownNode);
}
