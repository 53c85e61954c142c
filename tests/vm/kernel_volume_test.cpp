// The multipath Volume over kernel paths, inside the testbed guest (kernel_volume_test.sh):
//   [connect]  kernel controllers made through libnvme (nvmf_add_ctrl) with fast_io_fail_tmo=0
//              and a one-second reconnect delay, to both TCP ports and the RDMA port; a port
//              nobody listens on and a subsystem the target does not have give clear errors.
//   [volume]   a Volume over the three paths' /dev/ngXnY (io_uring passthrough) running a
//              verified workload while port 2's ANA group goes inaccessible and back, then
//              port 1 is taken away and given back: zero application errors, zero mismatches,
//              the longest stall printed. Needs the controllers of [connect] (same guest run).
//   [disconnect] a controller reset (the fence of a kernel path) and back to live; then every
//              kernel controller of the subsystem deleted through libnvme.
// Addresses and the NQN come from TCP1, TCP2, RDMA_ADDR, NQN and NVMET (guest_lib.sh).
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "../common/verified_workload.hpp"
#include "testbed_env.hpp"
#include "control/kernel_connect.hpp"
#include "control/kernel_paths.hpp"
#include "nvmeof/volume.hpp"

using namespace nvmeof;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

using test::env_or;
std::string nqn() { return test::testbed_nqn(); }
std::string nvmet() { return env_or("NVMET", "/sys/kernel/config/nvmet"); }

TransportAddress addr(const std::string& s, Transport t) {
  auto a = TransportAddress::parse(s);
  REQUIRE(a);
  a->transport = t;
  return *a;
}

std::string read_line(const std::string& path) {
  std::ifstream in(path);
  std::string s;
  std::getline(in, s);
  return s;
}

void write_line(const std::string& path, const std::string& v) {
  std::ofstream out(path);
  out << v << "\n";
  out.close();
  REQUIRE(out.good());
}

void set_ana(int port, const char* state) {
  write_line(nvmet() + "/ports/" + std::to_string(port) + "/ana_groups/1/ana_state", state);
}
fs::path port_link(int port) { return fs::path(nvmet()) / "ports" / std::to_string(port) / "subsystems" / nqn(); }
void port_remove(int port) { fs::remove(port_link(port)); }
void port_add(int port) { fs::create_directory_symlink(fs::path(nvmet()) / "subsystems" / nqn(), port_link(port)); }

KernelConnectOptions kopts() {
  KernelConnectOptions o;
  o.subnqn = nqn();
  // The shortest KATO nvmet counts (whole seconds): a failed kernel path's writes wait the
  // TP4129 hold, 3 x KATO + fence_bound (nvmet's keep-alive is traffic based, it has no CQT).
  o.keep_alive_tmo_s = 1;
  return o;
}

// The subsystem's kernel paths to namespace 1, in controller order, with their controllers.
struct Paths {
  std::vector<std::string> controllers;
  std::vector<std::string> devices;
};
Paths kernel_paths() {
  KernelScanOptions so;
  so.ana = AnaLookup::sysfs_only;
  auto topo = scan_kernel_paths(so);
  REQUIRE(topo);
  Paths out;
  for (const auto& s : topo->subsystems) {
    if (s.nqn != nqn()) continue;
    for (const auto& ns : s.namespaces)
      if (ns.nsid == 1)
        for (const auto& p : ns.paths) {
          out.controllers.push_back(p.controller);
          out.devices.push_back(p.generic_device);
        }
  }
  return out;
}

}  // namespace

TEST_CASE("kernel controllers are connected through libnvme with fast failure", "[connect]") {
  const std::vector<TransportAddress> targets = {
      addr(env_or("TCP1", "127.0.0.1:4420"), Transport::tcp),
      addr(env_or("TCP2", "127.0.0.2:4421"), Transport::tcp),
      addr(env_or("RDMA_ADDR", "10.10.10.1:4420"), Transport::rdma),
  };
  for (const auto& t : targets) {
    INFO(t.to_string());
    auto c = kernel_connect(t, kopts());
    REQUIRE(c);
    CHECK(c->state == "live");
    CHECK(c->transport == (t.transport == Transport::rdma ? "rdma" : "tcp"));
    CHECK(c->traddr == t.traddr);
    const std::string dir = "/sys/class/nvme/" + c->name + "/";
    CHECK(read_line(dir + "fast_io_fail_tmo") == "0");
    CHECK(read_line(dir + "reconnect_delay") == "1");
  }
  const Paths p = kernel_paths();
  REQUIRE(p.devices.size() == 3);
  for (const auto& d : p.devices) CHECK(fs::exists(d));

}

TEST_CASE("bad kernel connects give clear errors, quickly", "[connect]") {
  {
    INFO("a port nobody listens on");
    // The refusal itself (ECONNREFUSED from the kernel), not a wait that ran out.
    auto c = kernel_connect(addr("127.0.0.1:4499", Transport::tcp), kopts());
    REQUIRE_FALSE(c);
    CHECK(c.error() == make_error_code(Errc::connection_refused));
  }
  {
    INFO("a subsystem the target does not export");
    KernelConnectOptions o = kopts();
    o.subnqn = "nqn.2014-08.org.nvmexpress:no-such-subsystem";
    auto c = kernel_connect(addr(env_or("TCP1", "127.0.0.1:4420"), Transport::tcp), o);
    REQUIRE_FALSE(c);
    INFO(c.error().message());
    CHECK(c.error() == make_error_code(Errc::connection_refused));
  }
  {
    INFO("no subsystem NQN");
    auto c = kernel_connect(addr(env_or("TCP1", "127.0.0.1:4420"), Transport::tcp), KernelConnectOptions{});
    REQUIRE_FALSE(c);
    CHECK(c.error() == make_error_code(Errc::invalid_argument));
  }
}

TEST_CASE("a volume over three kernel paths survives an ANA flip and a lost port", "[volume]") {
  const Paths kp = kernel_paths();
  REQUIRE(kp.devices.size() == 3);
  VolumeOptions vo;
  for (const auto& d : kp.devices) {
    auto a = TransportAddress::parse("passthrough://" + d);
    REQUIRE(a);
    vo.paths.push_back(*a);
  }
  vo.connect.subnqn = nqn();
  vo.connect.io_queue_depth = 32;
  // Linux nvmet reports no Command Quiesce Time; this bounds the wait before writes move.
  vo.fence_bound = 100ms;
  // TCG runs everything about fifty times slower, with pauses of its own: a command deadline
  // tuned for hardware would call healthy paths dead here.
  vo.io_deadline = 2s;
  auto v = Volume::open(vo);
  REQUIRE(v);
  Volume& vol = **v;
  CHECK(vol.usable_paths() == 3);
  std::printf("volume: %s\n", to_text(vol.stats()).c_str());

  test::VerifiedWorkload w(vol, 16, 32);
  w.start();
  auto phase = [&](const char* what, std::chrono::milliseconds d) {
    const uint64_t before = w.completed();
    std::this_thread::sleep_for(d);
    const uint64_t done = w.completed() - before;
    std::printf("phase %-28s %6llu I/Os\n", what, static_cast<unsigned long long>(done));
    std::fflush(stdout);
    return done;
  };
  CHECK(phase("all optimized", 1500ms) > 0);
  set_ana(2, "inaccessible");
  CHECK(phase("port 2 inaccessible", 2000ms) > 0);
  const auto mid = vol.stats();
  CHECK(mid.paths.at(1).ana_state == AnaState::inaccessible);
  set_ana(2, "optimized");
  CHECK(phase("port 2 optimized again", 1500ms) > 0);
  CHECK(vol.stats().paths.at(1).ana_state == AnaState::optimized);
  port_remove(1);
  CHECK(phase("port 1 removed", 3000ms) > 0);
  port_add(1);
  CHECK(phase("port 1 back", 5000ms) > 0);
  // The path returns once its writes' hold has passed and the kernel reconnected.
  for (int i = 0; i < 300 && vol.stats().paths.at(0).state != PathState::live; ++i)
    std::this_thread::sleep_for(100ms);
  REQUIRE(w.finish(30s));
  const auto st = vol.stats();
  std::printf("%s\n", to_text(st).c_str());
  std::printf("kernel volume: %llu I/Os (%llu writes), longest I/O %.1f ms, longest stall %.1f ms\n",
              static_cast<unsigned long long>(w.completed()), static_cast<unsigned long long>(w.writes()),
              static_cast<double>(w.longest_io_us()) / 1000.0, static_cast<double>(w.longest_gap_us()) / 1000.0);
  INFO(w.first_error());
  CHECK(w.errors() == 0);
  CHECK(w.mismatches() == 0);
  CHECK(w.completed() == w.issued());
  CHECK(st.paths.at(0).failovers >= 1);
  for (const auto& e : st.timeline)
    std::printf("kernel volume: path %d failed (%s), fenced +%.1f ms by %s\n", e.path, e.cause.c_str(),
                static_cast<double>(e.fenced_us) / 1000.0, e.fence_rule.c_str());
  CHECK(st.paths.at(0).reconnects >= 1);
  CHECK(st.paths.at(0).state == PathState::live);
  for (const auto& p : st.paths) CHECK(p.ios > 0);
  CHECK_FALSE(st.timeline.empty());
}

TEST_CASE("kernel controllers are deleted through libnvme", "[disconnect]") {
  const Paths kp = kernel_paths();
  REQUIRE_FALSE(kp.controllers.empty());
  {
    // Fencing a kernel path is a reset: the controller leaves live, then reconnects.
    const std::string& c = kp.controllers.front();
    REQUIRE(kernel_controller_state(c) == "live");
    REQUIRE(kernel_reset(c));
    for (int i = 0; i < 100 && kernel_controller_state(c) != "live"; ++i) std::this_thread::sleep_for(100ms);
    CHECK(kernel_controller_state(c) == "live");
    CHECK(kernel_reset("nvme999").error() == errno_code(ENOENT));
  }
  for (const auto& c : kp.controllers) {
    INFO(c);
    CHECK(kernel_disconnect(c));
  }
  for (const auto& c : kp.controllers) {
    for (int i = 0; i < 50 && kernel_controller_state(c) != "gone"; ++i) std::this_thread::sleep_for(100ms);
    CHECK(kernel_controller_state(c) == "gone");
  }
  auto again = kernel_disconnect(kp.controllers.front());
  REQUIRE_FALSE(again);
  CHECK(again.error() == errno_code(ENOENT));
}
