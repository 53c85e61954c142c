// nvmeof-paths' renderers against a fixed snapshot: a kernel subsystem built here and the stats
// replies of live volumes in tests/golden/paths/live_snapshot.json must render exactly to the
// checked-in live_expected.txt and live_expected.json (and the --watch table to live_top.txt).
// On a mismatch the actual output is written next to the build's test log for a diff.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "paths/live_volumes.hpp"

using namespace nvmeof;

namespace {

std::string golden_dir() {
  const char* d = std::getenv("NVMEOF_GOLDEN_DIR");
  REQUIRE(d != nullptr);
  return d;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  REQUIRE(f.good());
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void check_golden(const std::string& actual, const std::string& name) {
  const std::string expected = slurp(golden_dir() + "/" + name);
  if (actual != expected) {
    std::ofstream("actual-" + name) << actual;
    INFO("wrote actual-" << name << " in the test's working directory");
  }
  CHECK(actual == expected);
}

KernelTopology fixed_kernel() {
  KernelTopology t;
  KernelSubsystem s;
  s.name = "nvme-subsys0";
  s.nqn = "nqn.2014-08.org.example:kernel";
  KernelController c;
  c.name = "nvme0";
  c.transport = "tcp";
  c.address = "traddr=192.168.1.10,trsvcid=4420";
  c.traddr = "192.168.1.10";
  c.trsvcid = "4420";
  c.state = "live";
  c.admin_device = "/dev/nvme0";
  c.numa_node = 0;
  c.queue_count = 3;
  s.controllers.push_back(c);
  KernelNamespace ns;
  ns.nsid = 1;
  ns.lba_size = 4096;
  ns.lba_count = 262144;
  ns.head_device = "nvme0n1";
  KernelPath p;
  p.controller = "nvme0";
  p.block_device = "nvme0c0n1";
  p.generic_device = "/dev/ng0n1";
  p.ana_group = 1;
  p.ana_state = AnaState::optimized;
  p.ana_source = AnaSource::sysfs;
  p.numa_node = 0;
  p.queue_count = 3;
  ns.paths.push_back(p);
  s.namespaces.push_back(ns);
  t.subsystems.push_back(s);
  return t;
}

std::vector<paths::LiveVolume> fixed_live() {
  const auto replies = nlohmann::json::parse(slurp(golden_dir() + "/live_snapshot.json"));
  std::vector<paths::LiveVolume> out;
  for (const auto& r : replies) {
    paths::LiveVolume v;
    REQUIRE(paths::parse_live_volume(
        r, "/run/nvmeof/nvmeof-" + std::to_string(r["pid"].get<int>()) + "-" + std::to_string(r["volume"].get<int>()) + ".sock",
        v));
    out.push_back(v);
  }
  return out;
}

}  // namespace

TEST_CASE("nvmeof-paths text matches the golden file", "[paths][golden]") {
  check_golden(paths::render_text(fixed_kernel(), fixed_live()), "live_expected.txt");
}

TEST_CASE("nvmeof-paths JSON matches the golden file and uses nvme-cli's keys", "[paths][golden]") {
  const auto j = paths::render_json(fixed_kernel(), fixed_live());
  check_golden(j.dump(2) + "\n", "live_expected.json");
  REQUIRE(j["Subsystems"].size() == 3);
  for (const auto& s : j["Subsystems"]) {
    for (const char* k : {"Name", "NQN", "IOPolicy", "Paths"}) CHECK(s.contains(k));
    for (const auto& p : s["Paths"])
      for (const char* k : {"Name", "Transport", "Address", "State", "ANAState"}) CHECK(p.contains(k));
  }
  const auto& live = j["Subsystems"][1]["Paths"][0];
  CHECK(live["mib_per_s"].get<double>() == Approx(78.125));  // 819200000 B over 10 s
  CHECK(live["latency_p99_us"].get<double>() == Approx(850.25));
  // Two volumes of one subsystem share its two controllers: each controller is listed once,
  // with both volumes on it.
  REQUIRE(j["Controllers"].size() == 2);
  for (const auto& c : j["Controllers"]) {
    CHECK(c["volumes"].size() == 2);
    CHECK(c["cntlid"].get<unsigned>() != 0);
  }
}

TEST_CASE("nvmeof-paths --watch table matches the golden file", "[paths][golden]") {
  auto before = fixed_live();
  auto now = before;
  // One second later: path 0 did 1000 more reads and 500 more writes of 4 KiB.
  now[0].paths[0].reads += 1000;
  now[0].paths[0].writes += 500;
  now[0].paths[0].ios += 1500;
  now[0].paths[0].bytes += 1500 * 4096;
  check_golden(paths::render_top(now, before, 1.0), "live_top.txt");
}

TEST_CASE("a reply that is not a volume's stats is refused", "[paths]") {
  paths::LiveVolume v;
  CHECK_FALSE(paths::parse_live_volume(nlohmann::json::parse(R"({"ok":false,"error":"x"})"), "s", v));
  CHECK_FALSE(paths::parse_live_volume(nlohmann::json::parse(R"({"ok":true})"), "s", v));
  CHECK_FALSE(paths::parse_live_volume(nlohmann::json::parse("[1,2]"), "s", v));
}
