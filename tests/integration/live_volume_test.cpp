// A live volume seen from outside: a volume opened with a control socket (and one through
// NVMEOF_CONTROL_DIR) under verified I/O against the embedded target, read by the real
// nvmeof-paths binary (text and JSON, --volume PID) and steered with set-selector through the
// socket. The socket is mode 0600 and goes with the volume.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <memory>
#include <string>

#include "../common/rig.hpp"
#include "../common/tool_process.hpp"
#include "../common/verified_workload.hpp"
#include "observe/control_socket.hpp"
#include "nvmeof/target.hpp"
#include "nvmeof/volume.hpp"

using namespace nvmeof;
using namespace std::chrono_literals;

namespace {

using test::Rig;

// Where the rig's volume puts its control socket.
std::string control_dir() { return "/tmp/nvmeof-live-volume-test." + std::to_string(::getpid()); }

// The rig's volume has a control socket in control_dir(); a deadline a loaded machine cannot
// make a healthy path miss.
void live(TargetOptions&, VolumeOptions& vo) {
  vo.io_deadline = 2s;
  vo.control_socket = control_dir();
}

// Another volume on the rig's target, with no control socket of its own.
VolumeOptions options(const Rig& r) {
  VolumeOptions vo = r.volume_options();
  vo.control_socket.clear();
  return vo;
}

std::string paths_tool(const std::string& args) {
  return test::tool_path("NVMEOF_PATHS") + " --no-kernel --control-dir " + control_dir() + " " + args;
}

std::string only_socket(const std::string& dir) {
  auto r = test::run_command("ls " + dir);
  REQUIRE(r.exit_code == 0);
  std::string name = r.output.substr(0, r.output.find('\n'));
  return dir + "/" + name;
}

}  // namespace

TEST_CASE("nvmeof-paths reads a live volume's paths and counters", "[live-volume]") {
  Rig r(2, live);
  test::VerifiedWorkload w(*r.vol);
  w.start();
  REQUIRE(test::wait_until([&] { return r.vol->stats().paths[0].ios > 200 && r.vol->stats().paths[1].ios > 200; }));
  const std::string sock = only_socket(control_dir());
  CHECK(sock == control_dir() + "/nvmeof-" + std::to_string(::getpid()) + "-0.sock");
  struct stat st {};
  REQUIRE(::stat(sock.c_str(), &st) == 0);
  CHECK(S_ISSOCK(st.st_mode));
  CHECK((st.st_mode & 0777) == 0600);
  CHECK(st.st_uid == ::getuid());

  auto res = test::run_command(paths_tool("--json --volume " + std::to_string(::getpid())));
  REQUIRE(res.exit_code == 0);
  const auto j = nlohmann::json::parse(res.output);
  REQUIRE(j["Subsystems"].size() == 1);
  const auto& s = j["Subsystems"][0];
  CHECK(s["NQN"] == TargetSubsystem{}.nqn);
  CHECK(s["IOPolicy"] == "service-time");
  CHECK(s["pid"] == ::getpid());
  REQUIRE(s["Paths"].size() == 2);
  const auto after = r.vol->stats();
  for (size_t i = 0; i < 2; ++i) {
    const auto& p = s["Paths"][i];
    CHECK(p["Transport"] == "tcp");
    CHECK(p["Address"] == "traddr=127.0.0.1,trsvcid=" + std::to_string(r.target->port_number(i)));
    CHECK(p["State"] == "live");
    CHECK(p["ANAState"] == "optimized");
    CHECK(p["ios"].get<uint64_t>() > 200);
    CHECK(p["ios"].get<uint64_t>() <= after.paths[i].ios);  // a snapshot taken before this one
    CHECK(p["reads"].get<uint64_t>() + p["writes"].get<uint64_t>() == p["ios"].get<uint64_t>());
    CHECK(p["latency_p99_us"].get<double>() > 0);
    CHECK(p["mib_per_s"].get<double>() > 0);
  }

  // The ANA change the target makes shows in the tool's text.
  r.target->set_ana_state(1, AnaState::inaccessible);
  REQUIRE(test::wait_until([&] { return r.vol->stats().paths[1].ana_state == AnaState::inaccessible; }));
  res = test::run_command(paths_tool(""));
  REQUIRE(res.exit_code == 0);
  // The subsystem once, its controllers (paths) once, then the volume with its own ANA state.
  const std::string pid = std::to_string(::getpid());
  CHECK(res.output.find(" - NQN=" + TargetSubsystem{}.nqn) != std::string::npos);
  CHECK(res.output.find("nvmeof-" + pid + "-s") != std::string::npos);
  CHECK(res.output.find(" +- path1 tcp traddr=127.0.0.1,trsvcid=" + std::to_string(r.target->port_number(1)) +
                        " live cntlid ") != std::string::npos);
  CHECK(res.output.find("nvmeof-" + pid + "-0 nsid 1 ") != std::string::npos);
  CHECK(res.output.find("ana path0 optimized, path1 inaccessible") != std::string::npos);
  r.target->set_ana_state(1, AnaState::optimized);

  // --watch draws the table (output not a terminal: one screen per interval).
  res = test::run_command("timeout -s INT 1.5 " + paths_tool("--watch 0.2"), 10);
  CHECK(res.output.find("Path performance") != std::string::npos);
  CHECK(res.output.find("path0") != std::string::npos);

  REQUIRE(w.finish(30s));
  CHECK(w.errors() == 0);
  CHECK(w.mismatches() == 0);
  r.vol.reset();
  CHECK(::access(sock.c_str(), F_OK) != 0);  // the socket went with the volume
  res = test::run_command(paths_tool("--volume " + std::to_string(::getpid())));
  CHECK(res.exit_code == 1);
  CHECK(res.output.find("no live volume") != std::string::npos);
}

TEST_CASE("set-selector through the socket changes the volume's selector", "[live-volume]") {
  Rig r(2, live);
  const std::string sock = only_socket(control_dir());
  auto a = detail::control_request(sock, R"({"op":"set-selector","selector":"round-robin"})");
  REQUIRE(a);
  CHECK(nlohmann::json::parse(*a)["ok"] == true);
  CHECK(r.vol->stats().selector == SelectorKind::round_robin);
  a = detail::control_request(sock, R"({"op":"set-selector","selector":"fastest"})");
  REQUIRE(a);
  CHECK(nlohmann::json::parse(*a)["ok"] == false);
  CHECK(nlohmann::json::parse(*a)["error"].get<std::string>().find("unknown selector") != std::string::npos);
  a = detail::control_request(sock, "not json");
  REQUIRE(a);
  CHECK(nlohmann::json::parse(*a)["ok"] == false);
  CHECK(r.vol->stats().selector == SelectorKind::round_robin);
}

TEST_CASE("NVMEOF_CONTROL_DIR gives a volume a socket without an option", "[live-volume]") {
  Rig r(2, live);
  const std::string envdir = control_dir() + "-env";
  ::setenv("NVMEOF_CONTROL_DIR", envdir.c_str(), 1);
  auto v = Volume::open(options(r));
  ::unsetenv("NVMEOF_CONTROL_DIR");
  REQUIRE(v);
  const std::string sock = only_socket(envdir);
  CHECK(sock.find("nvmeof-" + std::to_string(::getpid()) + "-") != std::string::npos);
  auto a = detail::control_request(sock, R"({"op":"stats"})");
  REQUIRE(a);
  CHECK(nlohmann::json::parse(*a)["stats"]["paths"].size() == 2);
  v->reset();
  // Off by default: without the option and the variable, no socket.
  auto quiet = Volume::open(options(r));
  REQUIRE(quiet);
  CHECK(test::run_command("ls " + envdir).output.empty());
}
