// nvmeof-bench against an external nvmeof-target (both real binaries): --discover opens every
// path the discovery controller lists, --target-control injects --fail-path's fault into that
// target (the report and the target's own stats show it), the status line stays off when
// stderr is not a terminal, and ProgressLine renders rates and shares from two snapshots.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include <string>

#include "../common/tool_process.hpp"
#include "bench/progress.hpp"

using namespace nvmeof;

namespace {

struct ExternalTarget {
  std::string bin = test::tool_path("NVMEOF_TARGET");
  std::string sock = "/tmp/nvmeof-bench-observe-test." + std::to_string(::getpid()) + ".sock";
  test::ToolProcess proc{{bin, "--listen", "127.0.0.1:0", "--listen", "127.0.0.1:0", "--size", "16M", "--control",
                          sock, "--json"}};
  nlohmann::json ports = nlohmann::json::parse(proc.read_line())["ports"];
  std::string address(size_t i) const { return ports[i]["address"].get<std::string>(); }
};

// The JSON report in the tool's merged output: from the first line that starts with '{'.
nlohmann::json report_of(const std::string& out) {
  const size_t at = out.rfind('{', 0) == 0 ? 0 : out.find("\n{") + 1;
  return nlohmann::json::parse(out.substr(at));
}

std::string bench_bin() { return test::tool_path("NVMEOF_BENCH"); }

}  // namespace

TEST_CASE("--discover opens every path the discovery controller lists", "[bench]") {
  ExternalTarget t;
  auto r = test::run_command(bench_bin() + " --discover " + t.address(0) + " --runtime 300ms --no-verify --json", 60);
  REQUIRE(r.exit_code == 0);
  const auto j = report_of(r.output);
  REQUIRE(j["paths"].size() == 2);
  CHECK(j["paths"][0]["ios"].get<uint64_t>() > 0);
  CHECK(j["paths"][1]["ios"].get<uint64_t>() > 0);
  r = test::run_command(bench_bin() + " --discover 127.0.0.1:1 --runtime 300ms --json", 30);
  CHECK(r.exit_code != 0);
  CHECK(r.output.find("cannot open the volume") != std::string::npos);
}

TEST_CASE("--target-control injects the fault into the external target", "[bench]") {
  ExternalTarget t;
  auto r = test::run_command(bench_bin() + " --target " + t.address(0) + " --target " + t.address(1) +
                                 " --target-control " + t.sock +
                                 " --rw randrw --runtime 1500ms --fail-path 0 --fail-at 500ms --fail-kind reset --json",
                             90);
  INFO(r.output);
  // stderr is not a terminal here: no status line, the JSON starts the output's first '{'.
  CHECK(r.output.find("\r[") == std::string::npos);
  const auto j = report_of(r.output);
  CHECK(j["ok"] == true);
  CHECK(j["fault"]["injected"] == true);
  CHECK(r.output.find("fault not delivered") == std::string::npos);
  // A loaded machine may add a deadline failover on either path; the reset's must be there.
  bool path0 = false;
  for (const auto& e : j["fault"]["timeline"]) path0 = path0 || e["path"] == 0;
  CHECK(path0);
  CHECK(j["mismatches"] == 0);
  // The target saw the reset: port 0 was connected again (admin + one I/O queue per connect).
  const auto st = nlohmann::json::parse(test::run_command(t.bin + " ctl " + t.sock + " stats").output);
  CHECK(st["ports"][0]["connections"].get<uint64_t>() > 2);

  r = test::run_command(bench_bin() + " --target " + t.address(0) + " --target-control /tmp/nvmeof-no-such.sock "
                        "--fail-path 0 --runtime 300ms", 30);
  CHECK(r.exit_code == 1);
  CHECK(r.output.find("no control socket") != std::string::npos);
  r = test::run_command(bench_bin() + " --target " + t.address(0) + " --fail-path 0 --runtime 300ms", 30);
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("needs --embedded or --target-control") != std::string::npos);
}

TEST_CASE("the status line shows rates, shares and usable paths", "[bench]") {
  VolumeStats a, b;
  a.paths.resize(2);
  b.paths.resize(2);
  b.paths[0].reads = 3000;
  b.paths[0].read_bytes = 3000ull * 4096;
  b.paths[1].writes = 1000;
  b.paths[1].write_bytes = 1000ull * 4096;
  b.paths[0].latency.p99_us = 850;
  const std::string l = bench::ProgressLine::render(2.0, 5.0, a, b, 1.0, 2);
  CHECK(l.find("[  2.0/5.0 s]") == 0);
  CHECK(l.find("read 3.0k IOPS 11.7 MiB/s") != std::string::npos);
  CHECK(l.find("write 1.0k IOPS 3.9 MiB/s") != std::string::npos);
  CHECK(l.find("p99 850 us") != std::string::npos);
  CHECK(l.find("0:75% 1:25%") != std::string::npos);
  CHECK(l.find("usable 2/2") != std::string::npos);
}

TEST_CASE("--fault-script goes to the external target through --target-control", "[bench]") {
  ExternalTarget t;
  auto r = test::run_command(bench_bin() + " --target " + t.address(0) + " --target " + t.address(1) +
                                 " --target-control " + t.sock +
                                 " --rw randrw --runtime 1500ms --fault-script 400ms:reset:0,900ms:reset:1 --json",
                             90);
  INFO(r.output);
  const auto j = report_of(r.output);
  CHECK(j["ok"] == true);
  CHECK(j["mismatches"] == 0);
  CHECK(r.output.find("fault not delivered") == std::string::npos);
  REQUIRE(j["faults"].size() == 2);
  for (size_t i = 0; i < 2; ++i) {
    INFO("fault " << i);
    const auto& f = j["faults"][i];
    CHECK(f["delivered"] == true);
    // A loaded machine may fail the path by a deadline just before its reset: said so.
    if (f["outcome"] == "failover") {
      CHECK(f["failover"]["path"] == i);
    } else {
      CHECK(f["reason"].get<std::string>().starts_with("the path was already failed"));
    }
  }
  // Both ports were connected again after their reset.
  const auto st = nlohmann::json::parse(test::run_command(t.bin + " ctl " + t.sock + " stats").output);
  CHECK(st["ports"][0]["connections"].get<uint64_t>() > 2);
  CHECK(st["ports"][1]["connections"].get<uint64_t>() > 2);

  // A script naming a port the target does not have is refused before the run.
  r = test::run_command(bench_bin() + " --target " + t.address(0) + " --target-control " + t.sock +
                        " --fault-script 100ms:reset:1 --runtime 300ms", 30);
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("path 1 out of range (1 path: 0..0)") != std::string::npos);
}

TEST_CASE("--hostnqn and --dhchap-secret reach a target that names its hosts and asks for keys", "[bench][auth]") {
  const std::string host = "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555";
  const std::string key = "DHHC-1:00:AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyAl7OaH:";     // key bytes 1..32
  const std::string other = "DHHC-1:00:AgMEBQYHCAkKCwwNDg8QERITFBUWFxgZGhscHR4fICGrMmyA:";   // key bytes 2..33
  test::ToolProcess proc{{test::tool_path("NVMEOF_TARGET"), "--listen", "127.0.0.1:0", "--size", "16M",
                          "--allow-host", host, "--host-key", host + "=" + key, "--json"}};
  const std::string addr = nlohmann::json::parse(proc.read_line())["ports"][0]["address"].get<std::string>();
  const std::string base = bench_bin() + " --target " + addr + " --runtime 300ms --rw randrw";

  auto r = test::run_command(base + " --hostnqn " + host + " --dhchap-secret " + key + " --json", 60);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  auto j = report_of(r.output);
  CHECK(j["ok"] == true);
  CHECK(j["mismatches"] == 0);
  CHECK(j["total"]["ios"].get<uint64_t>() > 0);
  CHECK(j["config"]["dhchap"] == "host");
  CHECK(j["config"]["hostnqn"] == host);

  r = test::run_command(base + " --hostnqn " + host + " --dhchap-secret " + other, 60);
  CHECK(r.exit_code != 0);
  CHECK(r.output.find("cannot open the volume: authentication failed") != std::string::npos);
  r = test::run_command(base, 60);  // a host NQN the target does not allow
  CHECK(r.exit_code != 0);
  CHECK(r.output.find("host not allowed") != std::string::npos);
  r = test::run_command(bench_bin() + " --embedded --dhchap-secret " + key + " --runtime 300ms", 30);
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("with --embedded needs --hostnqn") != std::string::npos);
  r = test::run_command(bench_bin() + " --embedded --dhchap-ctrl-secret " + key + " --runtime 300ms", 30);
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("needs --dhchap-secret") != std::string::npos);

  // The embedded target allows only --hostnqn and asks it for both keys.
  r = test::run_command(bench_bin() + " --embedded --paths 2 --hostnqn " + host + " --dhchap-secret " + key +
                            " --dhchap-ctrl-secret " + other + " --runtime 300ms --json",
                        60);
  REQUIRE(r.exit_code == 0);
  j = report_of(r.output);
  CHECK(j["ok"] == true);
  CHECK(j["config"]["dhchap"] == "bidirectional");
  CHECK(j["paths"].size() == 2);
}
