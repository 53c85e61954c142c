// nvmeof-target as a fault rehearsal tool: the real binary started with --control, driven by
// `nvmeof-target ctl` while a volume (two paths) runs verified I/O against it. Each command must
// change what the volume sees: ANA state moves traffic, a reset is a failover, failing statuses
// are errors the volume retries, latency shows in the path's latency, clear gives the path back.
// Bad port, state, status and socket give a clear error and a non-zero exit. The run-time changes
// (add-port, remove-port, attach-ns, resize-ns, detach-ns) reach a running volume.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <memory>
#include <string>

#include "../common/rig.hpp"
#include "../common/tool_process.hpp"
#include "../common/verified_workload.hpp"
#include "nvmeof/target.hpp"
#include "nvmeof/volume.hpp"

using namespace nvmeof;
using namespace std::chrono_literals;

namespace {

// nvmeof-target in its own process (two ports, a control socket), and the rig's volume over it.
struct TargetProcess {
  std::string bin = test::tool_path("NVMEOF_TARGET");
  std::string sock = "/tmp/nvmeof-target-control-test." + std::to_string(::getpid()) + ".sock";
  std::unique_ptr<test::ToolProcess> proc;
  std::unique_ptr<Volume> vol;

  explicit TargetProcess(SelectorKind sel = SelectorKind::service_time) {
    proc = std::make_unique<test::ToolProcess>(std::vector<std::string>{
        bin, "--listen", "127.0.0.1:0", "--listen", "127.0.0.1:0", "--size", "16M", "--control", sock, "--json"});
    const auto j = nlohmann::json::parse(proc->read_line());
    VolumeOptions vo = test::rig_volume_options();
    for (const auto& p : j["ports"]) {
      TransportAddress a;
      a.traddr = "127.0.0.1";
      a.trsvcid = p["trsvcid"].get<std::string>();
      vo.paths.push_back(a);
    }
    vo.connect.subnqn = TargetSubsystem{}.nqn;
    vo.selector = sel;
    vo.io_deadline = 2s;  // a loaded machine must not turn these tests into deadline tests
    auto v = Volume::open(vo);
    REQUIRE(v);
    vol = std::move(*v);
  }
  test::CommandResult ctl(const std::string& words) { return test::run_command(bin + " ctl " + sock + " " + words); }
  PathStats path(int i) { return vol->stats().paths.at(static_cast<size_t>(i)); }
};

void finish_clean(test::VerifiedWorkload& w) {
  REQUIRE(w.finish(30s));
  CHECK(w.errors() == 0);
  CHECK(w.mismatches() == 0);
}

}  // namespace

TEST_CASE("ctl ana moves traffic off the port and back", "[target-control]") {
  TargetProcess r;
  test::VerifiedWorkload w(*r.vol);
  w.start();
  REQUIRE(test::wait_until([&] { return r.path(0).ios > 100 && r.path(1).ios > 100; }));
  auto res = r.ctl("ana 0 inaccessible");
  REQUIRE(res.exit_code == 0);
  REQUIRE(test::wait_until([&] { return r.path(0).ana_state == AnaState::inaccessible; }));
  const uint64_t p0 = r.path(0).ios, done = w.completed();
  REQUIRE(test::wait_until([&] { return w.completed() > done + 2000; }));
  CHECK(r.path(0).ios == p0);  // nothing more went to the inaccessible path
  const auto stats = r.ctl("stats");
  REQUIRE(stats.exit_code == 0);
  const auto j = nlohmann::json::parse(stats.output);
  CHECK(j["ports"][0]["ana_state"] == "inaccessible");
  CHECK(j["ports"][1]["reads"].get<uint64_t>() > 0);
  REQUIRE(r.ctl("ana 0 optimized").exit_code == 0);
  REQUIRE(test::wait_until([&] { return r.path(0).ios > p0 + 100; }));
  finish_clean(w);
}

TEST_CASE("ctl fault reset is a failover the volume records", "[target-control]") {
  TargetProcess r;
  test::VerifiedWorkload w(*r.vol);
  w.start();
  REQUIRE(test::wait_until([&] { return r.path(0).ios > 100; }));
  REQUIRE(r.ctl("fault 0 reset").exit_code == 0);
  REQUIRE(test::wait_until([&] { return !r.vol->stats().timeline.empty(); }));
  CHECK(r.vol->stats().timeline[0].path == 0);
  REQUIRE(test::wait_until([&] { return r.path(0).reconnects >= 1 && r.path(0).state == PathState::live; }));
  finish_clean(w);
}

TEST_CASE("ctl fail-status and latency show on the path, clear ends them", "[target-control]") {
  TargetProcess r(SelectorKind::round_robin);
  test::VerifiedWorkload w(*r.vol);
  w.start();
  REQUIRE(test::wait_until([&] { return r.path(0).ios > 100; }));
  REQUIRE(r.ctl("fail-status 0 0/0x6").exit_code == 0);
  REQUIRE(test::wait_until([&] { return r.path(0).errors > 0; }));
  REQUIRE(r.ctl("clear 0").exit_code == 0);
  REQUIRE(r.ctl("latency 0 30ms").exit_code == 0);
  REQUIRE(test::wait_until([&] { return r.path(0).latency.max_us >= 30000; }));
  REQUIRE(r.ctl("clear 0").exit_code == 0);
  finish_clean(w);  // failed commands were retried: the application saw no error
}

TEST_CASE("ctl rejects a bad port, state, status or socket clearly", "[target-control]") {
  TargetProcess r;
  auto res = r.ctl("ana 7 optimized");
  CHECK(res.exit_code == 1);
  CHECK(res.output.find("port 7 out of range") != std::string::npos);
  res = r.ctl("ana 0 sideways");
  CHECK(res.exit_code == 2);
  CHECK(res.output.find("bad ANA state") != std::string::npos);
  res = r.ctl("fault 0 melt");
  CHECK(res.exit_code == 2);
  CHECK(res.output.find("bad fault") != std::string::npos);
  res = r.ctl("fail-status 0 9/1");
  CHECK(res.exit_code == 2);
  CHECK(res.output.find("bad status") != std::string::npos);
  res = r.ctl("latency 0 fast");
  CHECK(res.exit_code == 2);
  res = test::run_command(r.bin + " ctl /tmp/nvmeof-no-such.sock stats");
  CHECK(res.exit_code == 1);
  CHECK(res.output.find("no control socket") != std::string::npos);
  // The socket is the process user's alone.
  struct stat st {};
  REQUIRE(::stat(r.sock.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  // A second target cannot take a socket that is in use.
  res = test::run_command(r.bin + " --listen 127.0.0.1:0 --control " + r.sock, 10);
  CHECK(res.exit_code == 1);
  CHECK(res.output.find("--control") != std::string::npos);
  r.vol.reset();
  r.proc->stop();
  CHECK(::access(r.sock.c_str(), F_OK) != 0);  // the socket file went with the target
}

TEST_CASE("ctl changes the fabric under a running volume: a port added and removed, a namespace attached, "
          "resized and detached", "[target-control]") {
  TargetProcess r;
  test::VerifiedWorkload w(*r.vol);
  w.start();
  const std::string nqn = TargetSubsystem{}.nqn;
  // A port added: its index and address; the volume can take it as a path.
  auto res = r.ctl("add-port 127.0.0.1:0");
  INFO(res.output);
  REQUIRE(res.exit_code == 0);
  REQUIRE(res.output.rfind("port 2 at 127.0.0.1:", 0) == 0);
  TransportAddress a;
  a.trsvcid = res.output.substr(res.output.rfind(':') + 1);
  while (!a.trsvcid.empty() && (a.trsvcid.back() == '\n' || a.trsvcid.back() == ' ')) a.trsvcid.pop_back();
  REQUIRE(r.vol->add_path(a));
  REQUIRE(test::wait_until([&] {
    const auto s = r.vol->stats();
    return s.paths.size() == 3 && s.paths.at(2).state == PathState::live && s.paths.at(2).ios > 0;
  }, 20s));
  // Removed: the stats say so; the volume's path there fails over and I/O goes on.
  REQUIRE(r.ctl("remove-port 2").exit_code == 0);
  const auto stats = nlohmann::json::parse(r.ctl("stats").output);
  REQUIRE(stats["ports"].size() == 3);
  CHECK(stats["ports"][2]["removed"] == true);
  CHECK(stats["ports"][0]["removed"] == false);
  REQUIRE(r.vol->remove_path(a));
  // Namespaces: attached, resized, detached.
  REQUIRE(r.ctl("attach-ns " + nqn + " 2 8m").exit_code == 0);
  VolumeOptions vo = test::rig_volume_options();
  vo.paths = {*TransportAddress::parse(r.vol->stats().paths.at(0).address)};
  vo.connect.subnqn = nqn;
  vo.nsid = 2;
  auto v2 = Volume::open(vo);
  REQUIRE(v2);
  const uint64_t blocks = (*v2)->size_blocks();
  CHECK(blocks * (*v2)->block_size() == 8u << 20);
  REQUIRE(r.ctl("resize-ns " + nqn + " 2 16m").exit_code == 0);
  CHECK(test::wait_until([&] { return (*v2)->size_blocks() == 2 * blocks; }, 20s));
  REQUIRE(r.ctl("detach-ns " + nqn + " 2").exit_code == 0);
  CHECK(test::wait_until([&] { return (*v2)->stats().namespace_removed; }, 20s));
  // Refused, clearly, with nothing changed.
  res = r.ctl("detach-ns " + nqn + " 2");
  CHECK(res.exit_code == 1);
  CHECK(res.output.find("namespace 2 is not active") != std::string::npos);
  res = r.ctl("resize-ns " + nqn + " 1 1000");
  CHECK(res.exit_code == 1);
  CHECK(res.output.find("not a non-zero multiple") != std::string::npos);
  res = r.ctl("remove-port 9");
  CHECK(res.exit_code == 1);
  CHECK(res.output.find("no port 9") != std::string::npos);
  res = r.ctl("attach-ns " + nqn + " 0 8m");
  CHECK(res.exit_code == 2);
  CHECK(res.output.find("bad nsid") != std::string::npos);
  res = r.ctl("attach-ns " + nqn + " 3 lots");
  CHECK(res.exit_code == 2);
  CHECK(res.output.find("bad size") != std::string::npos);
  res = r.ctl("add-port nowhere");
  CHECK(res.exit_code == 1);
  CHECK(res.output.find("ADDR:PORT") != std::string::npos);
  finish_clean(w);
}
