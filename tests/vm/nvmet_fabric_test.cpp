// A fabric that changes under running volumes, against Linux nvmet inside the testbed guest
// (nvmet_fabric_test.sh): our subsystem (namespaces 1 and 2) on ports 40 and 41, port 42
// exporting only another subsystem; the host watches the discovery controller of all three
// ports (Host::add_discovery). [fabric] asserts, phase by phase, with a verified workload on
// each namespace's volume (zero errors, zero mismatches):
//   1. discovery: the volumes, opened over port 40 alone, gain port 41 (its discovery log lists
//      the subsystem there) and carry I/O on it;
//   2. port 42 linked to the subsystem mid-run: nvmet sends a Discovery Log Page Change to the
//      discovery controller on port 42, the log is read again and the port becomes a path that
//      carries I/O. The time from the link to the first completed I/O on it is printed for each
//      of three rounds, beside the time a connect to that port takes alone;
//   3. port 42 unlinked again: nvmet ends its controllers there and tells the discovery
//      controller; the path is removed (gone from the stats), no I/O fails;
//   4. namespace 1's backing file grown and nvmet told to revalidate its size: nvmet sends a
//      Namespace Attribute Changed event, the volume's size follows, and a write past the old
//      end reads back; the engine reports one resize;
//   5. namespace 2 disabled: its volume's I/O completes with Invalid Namespace, its stats say
//      removed, the engine reports the removal, and namespace 1's volume keeps completing
//      verified I/O on the same controllers;
//   6. referrals in a loop (40 -> 41 -> 40) and one to a port nothing serves: each address is
//      watched once, the new one followed as a referral, no path made of them.
// Set-up from the script's environment: FAB_NQN, FAB_ADDR40/41/42, FAB_FILE_PREFIX, NVMET.
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "../common/verified_workload.hpp"
#include "../common/wait.hpp"
#include "nvmeof/controller.hpp"
#include "nvmeof/host.hpp"
#include "nvmeof/volume.hpp"
#include "testbed_env.hpp"

using namespace nvmeof;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

using test::env_or;
using test::wait_until;

constexpr auto kBound = 60s;  // a phase takes seconds under TCG

std::string nqn() { return env_or("FAB_NQN", "nqn.2014-08.org.nvmexpress:nvmeof-testbed-fabric"); }
fs::path nvmet() { return env_or("NVMET", "/sys/kernel/config/nvmet"); }

TransportAddress port_address(int port) {
  const std::string var = "FAB_ADDR" + std::to_string(port);
  const std::string fallback = port == 40 ? "127.0.0.1:4440" : port == 41 ? "127.0.0.2:4441" : "127.0.0.3:4442";
  auto a = TransportAddress::parse(env_or(var.c_str(), fallback.c_str()));
  REQUIRE(a);
  return *a;
}

void link_port(int port, bool on) {
  const fs::path link = nvmet() / "ports" / std::to_string(port) / "subsystems" / nqn();
  std::error_code ec;
  if (on) fs::create_directory_symlink(nvmet() / "subsystems" / nqn(), link, ec);
  else fs::remove(link, ec);
  INFO(link.string() << ": " << ec.message());
  REQUIRE(!ec);
}

void write_attr(const fs::path& f, const std::string& v) {
  std::ofstream out(f);
  out << v << "\n";
  out.close();
  INFO(f.string());
  REQUIRE(out.good());
}

const PathStats* path_at(const VolumeStats& s, const TransportAddress& a) {
  for (const auto& p : s.paths)
    if (p.traddr == a.traddr && p.trsvcid == a.trsvcid) return &p;
  return nullptr;
}

bool carries(const Volume& v, const TransportAddress& a) {
  const VolumeStats s = v.stats();
  const PathStats* p = path_at(s, a);
  return p && p->state == PathState::live && p->ios > 0;
}

bool listed(const Volume& v, const TransportAddress& a) {
  const VolumeStats s = v.stats();
  return path_at(s, a) != nullptr;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

VolumeOptions volume_options(uint32_t nsid) {
  VolumeOptions vo;
  vo.paths = {port_address(40)};
  vo.connect = test::testbed_options();
  vo.connect.subnqn = nqn();
  vo.nsid = nsid;
  vo.no_path_timeout = 60s;
  vo.io_deadline = 2s;  // TCG: a healthy command may take long; this test is not about detection
  return vo;
}

bool moving(const test::VerifiedWorkload& w, uint64_t more) {
  const uint64_t from = w.completed();
  return wait_until([&] { return w.completed() >= from + more; }, kBound);
}

}  // namespace

TEST_CASE("paths and namespaces change under running volumes", "[fabric]") {
  auto h = Host::create({});
  REQUIRE(h);
  std::shared_ptr<Host> host = *h;
  auto o1 = Volume::open(host, volume_options(1));
  REQUIRE(o1);
  auto o2 = Volume::open(host, volume_options(2));
  REQUIRE(o2);
  Volume& v1 = **o1;
  Volume& v2 = **o2;
  test::VerifiedWorkload w1(v1, 8, 32, 0);
  test::VerifiedWorkload w2(v2, 8, 32, 0);
  // A failed check ends the test early: the workloads stop (their I/O completes) before they go.
  struct Stop {
    test::VerifiedWorkload& a;
    test::VerifiedWorkload& b;
    ~Stop() {
      a.finish(kBound);
      b.finish(kBound);
    }
  } stop{w1, w2};
  w1.start();
  w2.start();
  REQUIRE(moving(w1, 50));

  // 1. Discovery of every port: port 41 becomes a path of both volumes.
  ConnectOptions dco = test::testbed_options();
  for (int p : {40, 41, 42}) REQUIRE(host->add_discovery(port_address(p), dco));
  REQUIRE(wait_until([&] { return carries(v1, port_address(41)) && carries(v2, port_address(41)); }, kBound));
  CHECK_FALSE(listed(v1, port_address(42)));
  std::printf("nvmet_fabric_test: discovery: port 41 became a path of both volumes\n");

  // 2 and 3, three rounds: port 42 linked (a path carrying I/O), then unlinked (removed).
  std::vector<double> to_first_io;
  for (int round = 0; round < 3; ++round) {
    const auto t0 = std::chrono::steady_clock::now();
    link_port(42, true);
    REQUIRE(wait_until([&] { return carries(v1, port_address(42)); }, kBound));
    to_first_io.push_back(ms_since(t0));
    REQUIRE(moving(w1, 50));
    const auto t1 = std::chrono::steady_clock::now();
    link_port(42, false);
    REQUIRE(wait_until([&] { return !listed(v1, port_address(42)) && !listed(v2, port_address(42)); }, kBound));
    std::printf("nvmet_fabric_test: round %d: port 42 linked -> first I/O on it %.1f ms; unlinked -> removed %.1f ms\n",
                round, to_first_io.back(), ms_since(t1));
    REQUIRE(moving(w1, 50));
    CHECK(w1.errors() == 0);
    CHECK(w2.errors() == 0);
  }
  // The connect alone, for comparison: a controller of the subsystem on port 41.
  std::vector<double> connect_ms;
  auto cp = ControlPlane::create();
  REQUIRE(cp);
  for (int i = 0; i < 3; ++i) {
    ConnectOptions co = test::testbed_options();
    co.subnqn = nqn();
    const auto t0 = std::chrono::steady_clock::now();
    auto c = Controller::connect(**cp, port_address(41), co);
    connect_ms.push_back(ms_since(t0));
    REQUIRE(c);
    (*c)->disconnect();
  }
  std::sort(to_first_io.begin(), to_first_io.end());
  std::sort(connect_ms.begin(), connect_ms.end());
  std::printf("nvmet_fabric_test: link to first I/O: median %.1f ms, max %.1f ms; connect alone: median %.1f ms\n",
              to_first_io[1], to_first_io[2], connect_ms[1]);

  // 4. Namespace 1 grows: the volume's size follows, and a block past the old end is usable.
  const uint64_t old_blocks = v1.size_blocks();
  const fs::path ns1 = nvmet() / "subsystems" / nqn() / "namespaces" / "1";
  fs::resize_file(env_or("FAB_FILE_PREFIX", "/run/nvmet-fabric-ns") + std::string("1.img"), 64ull << 20);
  write_attr(ns1 / "revalidate_size", "1");
  REQUIRE(wait_until([&] { return v1.size_blocks() > old_blocks; }, kBound));
  CHECK(v1.size_blocks() == (64ull << 20) / v1.block_size());
  std::vector<uint8_t> out(v1.block_size(), 0x5a), in(v1.block_size(), 0);
  CHECK(test::run_io(v1, IoOp::write, out.data(), old_blocks + 7, 1).is_success());
  CHECK(test::run_io(v1, IoOp::read, in.data(), old_blocks + 7, 1).is_success());
  CHECK(in == out);

  // 5. Namespace 2 disabled: its I/O fails clearly, namespace 1 goes on.
  REQUIRE(w2.finish(kBound));
  CHECK(w2.errors() == 0);
  CHECK(w2.mismatches() == 0);
  write_attr(nvmet() / "subsystems" / nqn() / "namespaces" / "2" / "enable", "0");
  REQUIRE(wait_until([&] { return v2.stats().namespace_removed; }, kBound));
  const NvmeStatus gone = test::run_io(v2, IoOp::read, in.data(), 0, 1);
  CHECK(gone.code() == status::kInvalidNamespace.code());
  REQUIRE(moving(w1, 100));

  const auto events = host->take_namespace_events();
  size_t resized = 0, removed = 0;
  for (const auto& e : events) {
    std::printf("nvmet_fabric_test: namespace event: %s nsid %u, %llu blocks\n", to_string(e.kind), e.nsid,
                static_cast<unsigned long long>(e.size_blocks));
    resized += e.kind == NamespaceEvent::Kind::resized && e.nsid == 1;
    removed += e.kind == NamespaceEvent::Kind::removed && e.nsid == 2;
  }
  CHECK(resized == 1);
  CHECK(removed == 1);

  REQUIRE(w1.finish(kBound));
  INFO(w1.first_error());
  CHECK(w1.errors() == 0);
  CHECK(w1.mismatches() == 0);
  // 6. Referrals, a loop among them: port 40 refers to 41 and to a port nothing serves, 41 back
  // to 40. Each address is watched once; the new one is followed (and retried: nothing there).
  auto referral = [&](int port, const std::string& name, const std::string& addr, const std::string& svc) {
    const fs::path r = nvmet() / "ports" / std::to_string(port) / "referrals" / name;
    REQUIRE(fs::create_directory(r));
    write_attr(r / "addr_trtype", "tcp");
    write_attr(r / "addr_adrfam", "ipv4");
    write_attr(r / "addr_traddr", addr);
    write_attr(r / "addr_trsvcid", svc);
    write_attr(r / "enable", "1");
  };
  referral(40, "to41", "127.0.0.2", "4441");
  referral(41, "to40", "127.0.0.1", "4440");
  referral(40, "nowhere", "127.0.0.4", "4443");
  REQUIRE(wait_until([&] { return host->stats().discovery.size() == 4; }, kBound));
  const HostStats hs = host->stats();
  size_t referred = 0;
  for (const auto& d : hs.discovery) referred += d.referral;
  CHECK(referred == 1);
  CHECK(v1.stats().paths.size() == 2);  // a referral is not a path
  for (const auto& d : hs.discovery)
    std::printf("nvmet_fabric_test: discovery %s: %s, %llu log reads, %llu change events, %llu reconnects\n",
                d.address.c_str(), d.connected ? "connected" : "not connected",
                static_cast<unsigned long long>(d.log_reads), static_cast<unsigned long long>(d.change_events),
                static_cast<unsigned long long>(d.reconnects));
  write_attr(nvmet() / "subsystems" / nqn() / "namespaces" / "2" / "enable", "1");
}
