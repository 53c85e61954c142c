// The host library authenticating with DH-HMAC-CHAP against the embedded target: a Controller
// whose ConnectOptions carry the secrets authenticates its admin queue and every I/O queue,
// uni- and bidirectional; a wrong key, a wrong controller key, a missing key and a malformed
// one each fail with a clear error; a volume re-authenticates every reconnect of a path and
// keeps a path with a bad key in backoff, its error in the path's stats. Data is verified.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <thread>
#include <vector>

#include "../common/rig.hpp"
#include "../common/verified_workload.hpp"
#include "auth/secret.hpp"
#include "control/controller_access.hpp"
#include "nvmeof/controller.hpp"
#include "nvmeof/target.hpp"
#include "nvmeof/volume.hpp"
#include "transport/queue_pair.hpp"
#include "reactor/reactor.hpp"
#include "reactor/sync_io.hpp"

using namespace nvmeof;
using namespace std::chrono_literals;

namespace {

constexpr char kNqn[] = "nqn.2024-01.io.nvmeof:host-auth";
constexpr char kHost[] = "nqn.2014-08.org.nvmexpress:uuid:2b7e2f5c-0d1a-4e39-9d0a-5c1a6f7e8d90";

std::string secret(auth::HashId t, size_t len, const char* nqn) {
  auto s = auth::generate_secret(t, len, nqn);
  REQUIRE(s);
  return auth::format_secret(*s);
}

struct Keys {
  std::string host = secret(auth::HashId::sha256, 32, kHost);
  std::string ctrl = secret(auth::HashId::sha512, 64, kNqn);
};

// The rig's target with `ports` ports on a subsystem of 8 MiB that lets kHost in with `keys`
// (the host key, and the controller key too when `ctrl_key`).
TargetOptions auth_target(const Keys& keys, bool ctrl_key, size_t ports = 1) {
  TargetOptions o = test::rig_target_options(ports, 8ull << 20);
  o.subsystems[0].nqn = kNqn;
  TargetHost h;
  h.nqn = kHost;
  h.dhchap_key = keys.host;
  if (ctrl_key) h.dhchap_ctrl_key = keys.ctrl;
  o.subsystems[0].hosts.push_back(h);
  return o;
}

using test::Rig;

ConnectOptions options(const std::string& key, const std::string& ctrl = {}) {
  ConnectOptions c;
  c.subnqn = kNqn;
  c.hostnqn = kHost;
  c.dhchap_secret = key;
  c.dhchap_ctrl_secret = ctrl;
  c.connect_timeout = 5s;
  return c;
}

// A counter of the target's summed over all its ports.
uint64_t total(const Rig& rig, uint64_t PortStats::*counter) {
  uint64_t n = 0;
  for (size_t i = 0; i < rig.to.ports.size(); ++i) n += rig.stats(i).*counter;
  return n;
}
uint64_t authentications(const Rig& rig) { return total(rig, &PortStats::authentications); }
uint64_t auth_failures(const Rig& rig) { return total(rig, &PortStats::auth_failures); }

// Writes a pattern through an authenticated I/O queue, reads it back and compares; the
// target's own copy must match too.
void write_read_verify(Rig& rig, Controller& ctrl) {
  auto rr = Reactor::create();
  REQUIRE(rr);
  Reactor& reactor = **rr;
  auto qp = create_io_queue(ctrl, reactor, 16);
  REQUIRE(qp);
  std::vector<uint8_t> out(8192), in(8192, 0);
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(i * 7 + 3);
  SyncIo io(**qp, reactor, 1, 4096);
  REQUIRE(io.write(8, 2, out.data()));
  REQUIRE(io.read(8, 2, in.data()));
  CHECK(std::memcmp(out.data(), in.data(), out.size()) == 0);
  std::vector<uint8_t> on_target(8192);
  REQUIRE(rig.target->read_ns(kNqn, 1, 8 * 4096, on_target.data(), on_target.size()));
  CHECK(std::memcmp(out.data(), on_target.data(), out.size()) == 0);
}

}  // namespace

TEST_CASE("the host authenticates its admin and I/O queues (unidirectional)", "[auth]") {
  const Keys keys;
  Rig rig(auth_target(keys, false));
  auto cp_made = ControlPlane::create();
  REQUIRE(cp_made);
  ControlPlane& cp = **cp_made;
  auto c = Controller::connect(cp, rig.addr(0), options(keys.host));
  REQUIRE(c);
  CHECK(authentications(rig) == 1);
  write_read_verify(rig, **c);
  CHECK(authentications(rig) == 2);  // the I/O queue authenticated too
  CHECK(auth_failures(rig) == 0);
}

TEST_CASE("the host authenticates the controller too (bidirectional, key from a file)", "[auth]") {
  const Keys keys;
  Rig rig(auth_target(keys, true));
  const std::string file = "/tmp/nvmeof-host-auth-ctrl-" + std::to_string(::getpid());
  {
    std::ofstream f(file);
    f << keys.ctrl << "\n";
  }
  auto cp_made = ControlPlane::create();
  REQUIRE(cp_made);
  ControlPlane& cp = **cp_made;
  auto c = Controller::connect(cp, rig.addr(0), options(keys.host, "@" + file));
  std::remove(file.c_str());
  REQUIRE(c);
  write_read_verify(rig, **c);
  CHECK(authentications(rig) == 2);
}

TEST_CASE("a wrong key, a wrong controller key, no key and a malformed key are refused", "[auth]") {
  const Keys keys;
  Rig rig(auth_target(keys, true));
  auto cp_made = ControlPlane::create();
  REQUIRE(cp_made);
  ControlPlane& cp = **cp_made;
  Keys other;
  {
    auto c = Controller::connect(cp, rig.addr(0), options(other.host));
    REQUIRE_FALSE(c);
    CHECK(c.error() == make_error_code(Errc::authentication_failed));
    CHECK(auth_failures(rig) == 1);
  }
  {
    auto c = Controller::connect(cp, rig.addr(0), options(keys.host, other.ctrl));
    REQUIRE_FALSE(c);
    CHECK(c.error() == make_error_code(Errc::authentication_failed));
  }
  {
    auto c = Controller::connect(cp, rig.addr(0), options(""));
    REQUIRE_FALSE(c);
    CHECK(c.error() == make_error_code(Errc::authentication_required));
    CHECK(c.error().message().find("no key configured") != std::string::npos);
  }
  {
    std::string bad = keys.host;
    bad[12] = bad[12] == 'A' ? 'B' : 'A';  // the CRC no longer matches
    auto c = Controller::connect(cp, rig.addr(0), options(bad));
    REQUIRE_FALSE(c);
    CHECK(c.error() == make_error_code(Errc::invalid_argument));
    auto d = Controller::connect(cp, rig.addr(0), options("", keys.ctrl));
    REQUIRE_FALSE(d);
    CHECK(d.error() == make_error_code(Errc::invalid_argument));
  }
  // The right key still works after all that.
  auto ok = Controller::connect(cp, rig.addr(0), options(keys.host, keys.ctrl));
  REQUIRE(ok);
}

TEST_CASE("a volume re-authenticates every reconnect of a path", "[auth]") {
  const Keys keys;
  Rig rig(auth_target(keys, true, 2));
  VolumeOptions vo;
  vo.paths = {rig.addr(0), rig.addr(1)};
  vo.connect = options(keys.host, keys.ctrl);
  vo.reconnect_min = 10ms;
  vo.no_path_timeout = 10s;
  auto v = Volume::open(vo);
  REQUIRE(v);
  const uint64_t before = authentications(rig);
  CHECK(before >= 4);  // two admin queues and at least one I/O queue each
  test::VerifiedWorkload w(**v, 8);
  w.start();
  REQUIRE(test::wait_for(**v, 15s, [](const VolumeStats& s) { return s.completed > 200; }).completed > 200);
  rig.target->inject(0, FaultKind::reset);
  const auto st = test::wait_for(**v, 15s, [](const VolumeStats& s) { return s.paths.at(0).reconnects >= 1; });
  INFO(to_text(st));
  REQUIRE(st.paths.at(0).reconnects >= 1);
  REQUIRE(w.finish(15s));
  CHECK(w.errors() == 0);
  CHECK(w.mismatches() == 0);
  CHECK(authentications(rig) > before);  // the reconnected path authenticated again
  CHECK(auth_failures(rig) == 0);
}

TEST_CASE("a path whose key is wrong stays in backoff with the error in its stats", "[auth]") {
  // Two targets serving the same subsystem NQN: the volume's key is right for the first and
  // wrong for the second, so the second path keeps failing authentication.
  const Keys good_keys, other_keys;
  Rig good(auth_target(good_keys, false));
  Rig other(auth_target(other_keys, false));
  VolumeOptions vo;
  vo.paths = {good.addr(0), other.addr(0)};
  vo.connect = options(good_keys.host);
  vo.reconnect_min = 10ms;
  vo.reconnect_max = 1000ms;
  auto v = Volume::open(vo);
  REQUIRE(v);
  const auto t0 = std::chrono::steady_clock::now();
  const VolumeStats s = test::wait_for(**v, 15s, [](const VolumeStats& st) { return st.paths.at(1).connect_failures >= 4; });
  const auto elapsed = std::chrono::steady_clock::now() - t0;
  INFO(to_text(s));
  REQUIRE(s.paths.at(1).connect_failures >= 4);
  CHECK(s.paths.at(1).state != PathState::live);
  CHECK(s.paths.at(1).last_connect_error == make_error_code(Errc::authentication_failed).message());
  CHECK(s.paths.at(0).connect_failures == 0);
  // Backoff, not a tight loop: the retries after the first failure waited at least 10, 20 and
  // 40 ms (reconnect_min doubling).
  CHECK(elapsed >= 70ms);
  CHECK(auth_failures(other) >= 4);
  CHECK(auth_failures(other) <= s.paths.at(1).connect_failures + 1);
  // The good path serves verified I/O meanwhile.
  test::VerifiedWorkload w(**v, 4);
  w.start();
  std::this_thread::sleep_for(200ms);  // load only; nothing is timed
  REQUIRE(w.finish(15s));
  CHECK(w.errors() == 0);
  CHECK(w.mismatches() == 0);
  CHECK(w.completed() > 0);
}
