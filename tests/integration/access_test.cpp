// Access control of the embedded target: which hosts may connect to a subsystem (an allow list
// of host NQNs, or any host), the automatic rule (any host only when every port is on loopback),
// the Connect Invalid Host status our host library reports as "host not allowed", the discovery
// log filtered per host, and nvmeof-target's --allow-host / --allow-any-host / key flags.
// Every port binds 127.0.0.1 or 0.0.0.0 and every connection goes over loopback.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <set>

#include "../common/block_stamp.hpp"
#include "../common/tool_process.hpp"
#include "control/controller_access.hpp"
#include "nvmeof/controller.hpp"
#include "nvmeof/target.hpp"
#include "reactor/sync_io.hpp"
#include "target/host_access.hpp"
#include "target_client.hpp"

using namespace nvmeof;
using namespace std::chrono_literals;

namespace {

const std::string kNqn = "nqn.2024-01.io.nvmeof:access";
const std::string kAllowed = "nqn.2014-08.org.nvmexpress:uuid:access-allowed-host";
const std::string kOther = "nqn.2014-08.org.nvmexpress:uuid:access-other-host";
const std::string kStranger = "nqn.2014-08.org.nvmexpress:uuid:access-stranger";

TargetSubsystem subsystem(const std::string& nqn, HostAccess access,
                          std::vector<std::string> hosts = {}) {
  TargetSubsystem s;
  s.nqn = nqn;
  s.namespaces[0].size_bytes = 4ull << 20;
  s.access = access;
  for (auto& h : hosts) s.hosts.push_back(TargetHost{std::move(h), {}, {}, {}, {}});
  return s;
}

struct Env {
  std::unique_ptr<Target> target;
  TransportAddress addr;
  std::unique_ptr<ControlPlane> cp = ControlPlane::create().value();

  explicit Env(std::vector<TargetSubsystem> subs, const std::string& traddr = "127.0.0.1") {
    TargetOptions o;
    o.ports = {TargetPort{traddr, "0", AnaState::optimized}};
    o.subsystems = std::move(subs);
    auto t = Target::start(o);
    REQUIRE(t);
    target = std::move(*t);
    addr.traddr = "127.0.0.1";  // a wildcard port is reached over loopback too
    addr.trsvcid = std::to_string(target->port_number(0));
  }

  Result<std::shared_ptr<Controller>> connect(const std::string& subnqn, const std::string& host) {
    ConnectOptions o;
    o.subnqn = subnqn;
    o.hostnqn = host;
    o.connect_timeout = 5s;
    o.admin_timeout = 5s;
    return Controller::connect(*cp, addr, o);
  }

  // The subsystem NQNs host `host` finds in the discovery log.
  std::set<std::string> discovered(const std::string& host) {
    auto d = connect(kDiscoveryNqn, host);
    REQUIRE(d);
    auto log = (*d)->discovery_log();
    REQUIRE(log);
    std::set<std::string> nqns;
    for (const auto& e : log->entries) {
      CHECK(e.trsvcid == addr.trsvcid);
      nqns.insert(e.subnqn);
    }
    return nqns;
  }
};

// Connects as `host` and checks it was refused with Connect Invalid Host and a clear message.
void check_refused(Env& env, const std::string& subnqn, const std::string& host) {
  auto c = env.connect(subnqn, host);
  REQUIRE_FALSE(c);
  CHECK(c.error() == make_error_code(status::kConnectInvalidHost));
  const NvmeStatus st{static_cast<uint16_t>(c.error().value())};
  CHECK(st.sct() == Sct::command_specific);
  CHECK(st.sc() == 0x84);
  CHECK(st.dnr());
  CHECK_THAT(c.error().message(), Catch::Contains("host not allowed"));
}

// Writes a stamped pattern through an I/O queue of `ctrl` and reads it back.
void check_data(Env& env, Controller& ctrl, uint64_t seq) {
  auto reactor = Reactor::create();
  REQUIRE(reactor);
  auto qp = create_io_queue(ctrl, **reactor, 16);
  REQUIRE(qp);
  SyncIo io(**qp, **reactor, 1, 4096);
  std::vector<uint8_t> data(8 * 4096), back(data.size());
  test::fill_blocks(data.data(), 4096, 10, 8, seq);
  REQUIRE(io.write(10, 8, data.data()));
  REQUIRE(io.read(10, 8, back.data()));
  CHECK(test::count_mismatches(back.data(), 4096, 10, 8, seq) == 0);
  std::vector<uint8_t> raw(data.size());
  REQUIRE(env.target->read_ns(ctrl.info().subnqn, 1, 10 * 4096, raw.data(), raw.size()));
  CHECK(raw == data);
}

}  // namespace

TEST_CASE("the loopback rule", "[access]") {
  using target::is_loopback_traddr;
  for (const char* a : {"127.0.0.1", "127.0.0.2", "127.255.1.9", "::1", "0:0:0:0:0:0:0:1",
                        "::ffff:127.0.0.1", "localhost"})
    CHECK(is_loopback_traddr(a));
  for (const char* a : {"0.0.0.0", "::", "10.0.0.1", "128.0.0.1", "::2", "::ffff:10.0.0.1",
                        "localhost.example", "", "127.0.0.1 ", "host"})
    CHECK_FALSE(is_loopback_traddr(a));
  const auto loop = TargetPort{"127.0.0.1", "0", AnaState::optimized};
  const auto wild = TargetPort{"0.0.0.0", "0", AnaState::optimized};
  const auto s = subsystem(kNqn, HostAccess::automatic);
  CHECK(target::any_host_allowed(s, {loop, TargetPort{"::1", "0", AnaState::optimized}}));
  CHECK_FALSE(target::any_host_allowed(s, {loop, wild}));
  CHECK_FALSE(target::any_host_allowed(s, {}));
  CHECK(target::any_host_allowed(subsystem(kNqn, HostAccess::any), {wild}));
  CHECK_FALSE(target::any_host_allowed(subsystem(kNqn, HostAccess::allow_list), {loop}));
}

TEST_CASE("an allow list: the listed host connects and moves data, another is refused",
          "[access]") {
  Env env({subsystem(kNqn, HostAccess::allow_list, {kAllowed})});
  auto c = env.connect(kNqn, kAllowed);
  REQUIRE(c);
  CHECK((*c)->is_live());
  check_data(env, **c, 1);
  check_refused(env, kNqn, kOther);
  // The refusal is not sticky: the listed host still connects.
  auto again = env.connect(kNqn, kAllowed);
  REQUIRE(again);
}

TEST_CASE("Invalid Host on admin and I/O queue Connect, seen raw", "[access]") {
  Env env({subsystem(kNqn, HostAccess::allow_list, {kAllowed})});
  const uint16_t port = env.target->port_number(0);
  test::Client refused;
  REQUIRE(refused.connect(port));
  REQUIRE(refused.ic());
  auto r = refused.connect_queue(kNqn, 0, 0xffff, 0, 31, kOther.c_str());
  REQUIRE(r.ok);
  CHECK(r.status() == status::kConnectInvalidHost);
  CHECK(r.cqe.dw0 == 0);

  test::Client admin;
  REQUIRE(admin.open_admin(port, kNqn, 0, kAllowed.c_str()));
  // An I/O queue of someone else's controller is refused for the host first.
  test::Client io;
  REQUIRE(io.connect(port));
  REQUIRE(io.ic());
  CHECK(io.connect_queue(kNqn, 1, admin.cntlid(), 0, 31, kOther.c_str()).status() ==
        status::kConnectInvalidHost);
  test::Client ok_io;
  CHECK(ok_io.open_io(port, kNqn, admin.cntlid(), 1, kAllowed.c_str()));
}

TEST_CASE("the discovery log shows a host only the subsystems it may use", "[access][discovery]") {
  const std::string a = "nqn.2024-01.io.nvmeof:access-a";
  const std::string b = "nqn.2024-01.io.nvmeof:access-b";
  const std::string open = "nqn.2024-01.io.nvmeof:access-open";
  Env env({subsystem(a, HostAccess::allow_list, {kAllowed}),
           subsystem(b, HostAccess::allow_list, {kOther, kAllowed}),
           subsystem(open, HostAccess::any)});
  CHECK(env.discovered(kAllowed) == std::set<std::string>{a, b, open});
  CHECK(env.discovered(kOther) == std::set<std::string>{b, open});
  // The discovery subsystem itself is open to any host; it lists nothing closed to it.
  CHECK(env.discovered(kStranger) == std::set<std::string>{open});
  check_refused(env, a, kOther);
  check_refused(env, b, kStranger);
  auto c = env.connect(open, kStranger);
  REQUIRE(c);
}

TEST_CASE("automatic: any host on a loopback port, only the listed ones on 0.0.0.0",
          "[access]") {
  SECTION("127.0.0.1: any host") {
    Env env({subsystem(kNqn, HostAccess::automatic, {kAllowed})});
    auto c = env.connect(kNqn, kStranger);
    REQUIRE(c);
    check_data(env, **c, 2);
    CHECK(env.discovered(kStranger) == std::set<std::string>{kNqn});
  }
  SECTION("0.0.0.0 (reached over loopback): only the listed host") {
    Env env({subsystem(kNqn, HostAccess::automatic, {kAllowed})}, "0.0.0.0");
    check_refused(env, kNqn, kStranger);
    CHECK(env.discovered(kStranger).empty());
    auto c = env.connect(kNqn, kAllowed);
    REQUIRE(c);
    check_data(env, **c, 3);
    CHECK(env.discovered(kAllowed) == std::set<std::string>{kNqn});
  }
  SECTION("0.0.0.0 with no host listed: nobody; HostAccess::any opens it") {
    Env closed({subsystem(kNqn, HostAccess::automatic)}, "0.0.0.0");
    check_refused(closed, kNqn, kAllowed);
    Env open({subsystem(kNqn, HostAccess::any)}, "0.0.0.0");
    auto c = open.connect(kNqn, kStranger);
    REQUIRE(c);
  }
}

TEST_CASE("bad host entries are refused at start", "[access]") {
  TargetOptions o;
  o.ports[0].trsvcid = "0";
  o.subsystems = {subsystem(kNqn, HostAccess::allow_list, {kAllowed, kAllowed})};
  auto dup = Target::start(o);
  REQUIRE_FALSE(dup);
  CHECK(dup.error() == make_error_code(Errc::invalid_argument));
  o.subsystems = {subsystem(kNqn, HostAccess::allow_list, {""})};
  auto empty = Target::start(o);
  REQUIRE_FALSE(empty);
  CHECK(empty.error() == make_error_code(Errc::invalid_argument));
}

// ---- nvmeof-target's flags -------------------------------------------------------------------

namespace {

const std::string kKey = "DHHC-1:00:AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyAl7OaH:";  // a valid secret (key bytes 1..32)

std::string target_bin() { return test::tool_path("NVMEOF_TARGET"); }

// Starts nvmeof-target with `args` and --json; returns the start-up JSON.
nlohmann::json start_json(std::unique_ptr<test::ToolProcess>& proc, std::vector<std::string> args) {
  args.insert(args.begin(), target_bin());
  args.insert(args.end(), {"--size", "4M", "--nqn", kNqn, "--json"});
  proc = std::make_unique<test::ToolProcess>(args);
  const std::string line = proc->read_line();
  REQUIRE_FALSE(line.empty());
  return nlohmann::json::parse(line);
}

}  // namespace

TEST_CASE("nvmeof-target --allow-host: only those hosts connect; JSON lists the hosts",
          "[access][cli]") {
  std::unique_ptr<test::ToolProcess> proc;
  const std::string keyfile = "/tmp/nvmeof-access-test-key." + std::to_string(::getpid());
  std::ofstream(keyfile) << kKey << "\n";
  auto j = start_json(proc, {"--listen", "127.0.0.1:0", "--allow-host", kAllowed,
                             "--host-key", kOther + "=@" + keyfile});
  ::unlink(keyfile.c_str());
  const auto& s = j["subsystems"].at(0);
  CHECK(s["any_host"] == false);
  CHECK(s["hosts"] == nlohmann::json::array({kAllowed, kOther}));
  CHECK(s["access"].get<std::string>().rfind("only these 2 hosts may connect", 0) == 0);
  CHECK(j.dump().find("DHHC-1") == std::string::npos);  // never the keys

  auto cp_made = ControlPlane::create();
  REQUIRE(cp_made);
  ControlPlane& cp = **cp_made;
  TransportAddress addr;
  addr.traddr = "127.0.0.1";
  addr.trsvcid = j["ports"].at(0)["trsvcid"].get<std::string>();
  ConnectOptions o;
  o.subnqn = kNqn;
  o.hostnqn = kAllowed;
  auto ok = Controller::connect(cp, addr, o);
  REQUIRE(ok);
  o.hostnqn = kStranger;
  auto refused = Controller::connect(cp, addr, o);
  REQUIRE_FALSE(refused);
  CHECK(refused.error() == make_error_code(status::kConnectInvalidHost));
}

namespace {

// nvmeof-target's output (stdout and stderr) up to and including its access line.
std::string startup_output(std::vector<std::string> args) {
  // exec keeps the pid, so the SIGTERM at the end reaches the target itself.
  args.insert(args.begin(), {"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>&1", target_bin(), "--size",
                             "4M", "--nqn", kNqn});
  test::ToolProcess proc(args);
  std::string out;
  for (;;) {
    const std::string line = proc.read_line();
    if (line.empty()) break;  // EOF or 20 s without a line
    out += line + "\n";
    // The rule line ("<nqn>: ..."), not a warning saying the same.
    if (line.rfind("nvmeof-target: " + kNqn + ": ", 0) == 0 && line.find("may connect") != std::string::npos)
      break;
  }
  return out;
}

}  // namespace

TEST_CASE("nvmeof-target: the start-up line names the rule", "[access][cli]") {
  auto out = startup_output({"--listen", "127.0.0.1:0"});
  CHECK_THAT(out, Catch::Contains(kNqn + ": any host may connect (every listen address is loopback)"));
  out = startup_output({"--listen", "127.0.0.1:0", "--listen", "127.0.0.2:0", "--allow-host", kAllowed});
  CHECK_THAT(out, Catch::Contains("only this host may connect: " + kAllowed));
  out = startup_output({"--listen", "127.0.0.1:0", "--listen", "0.0.0.0:0"});
  CHECK_THAT(out, Catch::Contains("no host may connect: 0.0.0.0 is not a loopback address"));
  CHECK_THAT(out, Catch::Contains("warning: no host may connect"));
  CHECK_THAT(out, Catch::Contains("--allow-host"));
  out = startup_output({"--listen", "0.0.0.0:0", "--allow-any-host"});
  CHECK_THAT(out, Catch::Contains("any host may connect (--allow-any-host)"));
  CHECK_THAT(out, Catch::Contains("warning: --allow-any-host: any host that reaches 0.0.0.0"));
}

TEST_CASE("nvmeof-target: bad access flags give clear errors", "[access][cli]") {
  const std::string base = target_bin() + " --listen 127.0.0.1:0 --size 4M ";
  struct Case {
    std::string args;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"--allow-host host1", "--allow-host host1: expected an NQN starting with \"nqn.\""},
      {"--allow-host ''", "expected an NQN"},
      {"--allow-host 'nqn.x y'", "no spaces"},
      {"--allow-host nqn." + std::string(230, 'a'), "at most 223 bytes"},
      {"--host-key " + kAllowed, "expected NQN=SECRET"},
      {"--host-key " + kAllowed + "=", "expected NQN=SECRET"},
      {"--host-key " + kAllowed + "=secret", "not of the form DHHC-1:0X:<base64>:"},
      {"--host-key " + kAllowed + "=DHHC-1:07:abcd:", "not of the form"},
      {"--host-key " + kAllowed + "=DHHC-1:00:ab*d:", "not of the form"},
      {"--host-key " + kAllowed + "=@/nonexistent/key", "cannot read the key file"},
      {"--host-key bad=" + kKey, "--host-key bad: expected an NQN"},
      {"--host-key " + kAllowed + "=" + kKey + " --host-key " + kAllowed + "=" + kKey,
       "has a key already"},
      {"--host-ctrl-key " + kAllowed + "=" + kKey, "needs --host-key for that host too"},
  };
  for (const auto& c : cases) {
    INFO(c.args);
    auto r = test::run_command(base + c.args, 10);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.output, Catch::Contains(c.says));
    CHECK_THAT(r.output, !Catch::Contains("ZjUzNzE2"));  // a secret is never echoed
  }
}

// A Connect the target cannot take gets Connect Invalid Parameters with the offset of the bad
// field, and the target's log says which field in words, always (not only with connection
// logging): an initiator that sends an empty HOSTNQN (spdk_nvme_perf does unless given one)
// otherwise sees only a status code.
TEST_CASE("nvmeof-target: a refused Connect is logged with its reason", "[access][cli]") {
  test::ToolProcess proc({"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>&1", target_bin(), "--size", "4M", "--nqn", kNqn,
                          "--listen", "127.0.0.1:0"});
  uint16_t port = 0;
  for (;;) {
    const std::string line = proc.read_line();
    REQUIRE_FALSE(line.empty());  // EOF or 20 s without a line
    const std::string key = "listening on 127.0.0.1:";
    if (const size_t at = line.find(key); at != std::string::npos && port == 0)
      port = static_cast<uint16_t>(std::stoul(line.substr(at + key.size())));
    if (line.find("may connect") != std::string::npos) break;
  }
  REQUIRE(port != 0);
  auto refused_line = [&](const std::string& says) {
    for (;;) {
      const std::string line = proc.read_line();
      if (line.empty()) return std::string();
      if (line.find("connect refused") != std::string::npos) {
        CHECK_THAT(line, Catch::Contains(says));
        return line;
      }
    }
  };

  test::Client nameless;
  REQUIRE(nameless.connect(port));
  REQUIRE(nameless.ic());
  auto r = nameless.connect_queue(kNqn, 0, 0xffff, 0, 31, "");
  REQUIRE(r.ok);
  CHECK(r.status() == status::kConnectInvalidParameters);
  CHECK(r.cqe.dw0 == ((1u << 16) | 512u));  // IATTR: in the connect data, at HOSTNQN
  CHECK_FALSE(refused_line("the Connect names no host (HOSTNQN is empty)").empty());

  test::Client lost;
  REQUIRE(lost.connect(port));
  REQUIRE(lost.ic());
  r = lost.connect_queue("nqn.2024-01.io.nvmeof:nope", 0, 0xffff, 0, 31, kAllowed.c_str());
  REQUIRE(r.ok);
  CHECK(r.status() == status::kConnectInvalidParameters);
  CHECK(r.cqe.dw0 == ((1u << 16) | 256u));
  CHECK_FALSE(refused_line("no such subsystem (SUBNQN): nqn.2024-01.io.nvmeof:nope").empty());

  // The refusals are not sticky: a named host on the right subsystem connects.
  test::Client admin;
  CHECK(admin.open_admin(port, kNqn, 0, kAllowed.c_str()));
}
