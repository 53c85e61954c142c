// DH-HMAC-CHAP against the embedded target over loopback: our host machine
// (auth/dhchap.hpp) drives raw NVMe/TCP Authentication Send/Receive commands on the admin queue
// and an I/O queue, uni- and bidirectional; a wrong key gets Failure1 and the connection
// closed; a host that stops mid-transaction is dropped after TargetOptions::auth_timeout.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstring>
#include <numeric>
#include <thread>

#include "core/fabrics_command.hpp"
#include "../common/rig.hpp"
#include "auth/dhchap.hpp"
#include "nvmeof/target.hpp"
#include "target_client.hpp"

using namespace nvmeof;
using namespace nvmeof::test;
using namespace std::chrono_literals;

namespace {

constexpr char kNqn[] = "nqn.2024-01.io.nvmeof:auth-target";
constexpr char kOtherHost[] = "nqn.2014-08.org.nvmexpress:uuid:no-key-host";

auth::Secret secret(auth::HashId t, size_t len, const char* nqn) {
  auto s = auth::generate_secret(t, len, nqn);
  REQUIRE(s);
  return *s;
}

struct Keys {
  auth::Secret host = secret(auth::HashId::sha256, 32, kHostNqn);
  auth::Secret ctrl = secret(auth::HashId::none, 48, kNqn);
};

TargetOptions options(const Keys& k, bool with_ctrl_key, std::chrono::milliseconds timeout = 5000ms) {
  TargetOptions o = test::rig_target_options(1, 4ull << 20);
  o.subsystems[0].nqn = kNqn;
  TargetHost h;
  h.nqn = kHostNqn;
  h.dhchap_key = auth::format_secret(k.host);
  if (with_ctrl_key) h.dhchap_ctrl_key = auth::format_secret(k.ctrl);
  o.subsystems[0].hosts.push_back(h);
  o.auth_timeout = timeout;
  return o;
}

using test::Rig;

auth::HostAuthConfig host_config(const Keys& k, bool bidirectional, auth::DhGroup g = auth::DhGroup::null) {
  auth::HostAuthConfig c;
  c.hostnqn = kHostNqn;
  c.subnqn = kNqn;
  c.host_secret = k.host;
  if (bidirectional) c.ctrl_secret = k.ctrl;
  c.groups = {g};
  c.tid = 1;
  return c;
}

// The transport of run_host_authentication: one Authentication Send or Receive per call.
Result<void> authenticate(Client& c, const auth::HostAuthConfig& cfg, uint16_t qid) {
  auth::AuthSend send = [&](std::span<const uint8_t> b) -> Result<void> {
    Sqe sqe;
    prep_auth_send(sqe, static_cast<uint32_t>(b.size()));
    Reply r = c.exec(sqe, b.data(), static_cast<uint32_t>(b.size()));
    if (!r.ok) return Errc::connection_closed;
    if (!r.status().is_success()) return make_error_code(r.status());
    return {};
  };
  auth::AuthReceive receive = [&](size_t max_len) -> Result<auth::Bytes> {
    Sqe sqe;
    prep_auth_receive(sqe, static_cast<uint32_t>(max_len));
    Reply r = c.exec(sqe, nullptr, 0, static_cast<uint32_t>(max_len));
    if (!r.ok) return Errc::connection_closed;
    if (!r.status().is_success()) return make_error_code(r.status());
    return r.data;
  };
  return auth::run_host_authentication(cfg, qid, c.cntlid(), send, receive);
}

// Admin queue: ICReq, Connect; returns the Connect's DW0.
uint32_t connect_admin(Client& c, uint16_t port, const char* hostnqn = kHostNqn) {
  REQUIRE(c.connect(port));
  REQUIRE(c.ic());
  Reply r = c.connect_queue(kNqn, 0, 0xffff, 0, 31, hostnqn);
  REQUIRE(r.ok);
  REQUIRE(r.status().is_success());
  return r.cqe.dw0;
}

uint32_t connect_io(Client& c, uint16_t port, uint16_t cntlid) {
  REQUIRE(c.connect(port));
  REQUIRE(c.ic());
  c.icd_ = 8192;
  Reply r = c.connect_queue(kNqn, 1, cntlid);
  REQUIRE(r.ok);
  REQUIRE(r.status().is_success());
  return r.cqe.dw0;
}

void enable(Client& admin) {
  Reply r = admin.property_set(prop::kCc, 1 | (6u << 16) | (4u << 20));
  REQUIRE(r.ok);
  REQUIRE(r.status().is_success());
}

// Data written through the authenticated I/O queue reads back.
void data_round_trip(Client& io) {
  std::vector<uint8_t> w(4096);
  std::iota(w.begin(), w.end(), uint8_t{7});
  Reply wr = io.write(1, 3, 1, w.data(), 4096);
  REQUIRE(wr.ok);
  CHECK(wr.status().is_success());
  Reply rd = io.read(1, 3, 1, 4096);
  REQUIRE(rd.ok);
  CHECK(rd.status().is_success());
  CHECK(rd.data == w);
}

void authenticated_association(bool bidirectional, auth::DhGroup admin_group, auth::DhGroup io_group) {
  const Keys k;
  Rig rig(options(k, bidirectional));
  Client admin;
  const uint32_t dw0 = connect_admin(admin, rig.port(0));
  CHECK((dw0 & kAuthReqAtr) != 0);
  // Authenticate before anything else: the target refuses even property access.
  Reply early = admin.property_get(prop::kCap, true);
  REQUIRE(early.ok);
  CHECK(early.status() == auth::kAuthRequired);
  auto r = authenticate(admin, host_config(k, bidirectional, admin_group), 0);
  INFO(r.detail());
  REQUIRE(r);
  enable(admin);
  Reply id = admin.identify(cns::kController);
  REQUIRE(id.ok);
  CHECK(id.status().is_success());

  Client io;
  CHECK((connect_io(io, rig.port(0), static_cast<uint16_t>(dw0 & 0xffff)) & kAuthReqAtr) != 0);
  Reply blocked = io.read(1, 0, 1, 4096);
  REQUIRE(blocked.ok);
  CHECK(blocked.status() == auth::kAuthRequired);
  auth::HostAuthConfig io_cfg = host_config(k, bidirectional, io_group);
  io_cfg.tid = 2;
  r = authenticate(io, io_cfg, 1);
  INFO(r.detail());
  REQUIRE(r);
  data_round_trip(io);
  CHECK(rig.stats(0).authentications == 2);
  CHECK(rig.stats(0).auth_failures == 0);
}

}  // namespace

TEST_CASE("unidirectional DH-HMAC-CHAP on the admin queue and an I/O queue") {
  authenticated_association(false, auth::DhGroup::null, auth::DhGroup::ffdhe2048);
}

TEST_CASE("bidirectional DH-HMAC-CHAP on the admin queue and an I/O queue") {
  authenticated_association(true, auth::DhGroup::ffdhe2048, auth::DhGroup::null);
}

TEST_CASE("a host without a key entry is not asked to authenticate") {
  const Keys k;
  Rig rig(options(k, false));
  Client admin;
  const uint32_t dw0 = connect_admin(admin, rig.port(0), kOtherHost);
  CHECK((dw0 & kAuthReqAtr) == 0);
  enable(admin);
  // Authentication commands on such a queue have no transaction to join.
  Sqe sqe;
  prep_auth_receive(sqe, 64);
  Reply r = admin.exec(sqe, nullptr, 0, 64);
  REQUIRE(r.ok);
  CHECK(r.status() == status::kCommandSequenceError);
}

TEST_CASE("a wrong host key gets Failure1 and the connection closed") {
  const Keys k;
  Rig rig(options(k, false));
  Client admin;
  connect_admin(admin, rig.port(0));
  auth::HostAuthConfig cfg = host_config(k, false);
  cfg.host_secret = secret(auth::HashId::sha256, 32, kHostNqn);
  auto r = authenticate(admin, cfg, 0);
  CHECK(r.error() == make_error_code(Errc::authentication_failed));
  CHECK(r.detail().find("authentication failed") != std::string::npos);  // Failure1's reason
  CHECK(admin.closed_within(5000));
  CHECK(rig.stats(0).auth_failures == 1);
  CHECK(rig.stats(0).authentications == 0);
  // The right key still works on a new association.
  Client again;
  connect_admin(again, rig.port(0));
  auto ok = authenticate(again, host_config(k, false), 0);
  INFO(ok.detail());
  CHECK(ok);
}

TEST_CASE("a wrong controller key is refused by the host (Failure2) and the queue ends") {
  const Keys k;
  Rig rig(options(k, true));
  Client admin;
  connect_admin(admin, rig.port(0));
  auth::HostAuthConfig cfg = host_config(k, true);
  cfg.ctrl_secret = secret(auth::HashId::none, 48, kNqn);
  auto r = authenticate(admin, cfg, 0);
  CHECK(r.error() == make_error_code(Errc::authentication_failed));
  CHECK(r.detail().find("controller key") != std::string::npos);
  CHECK(admin.closed_within(5000));
  CHECK(rig.stats(0).auth_failures == 1);
}

TEST_CASE("a host that stops mid-transaction is dropped after the timeout") {
  const Keys k;
  // Each step of the host below must beat the timeout even on a loaded machine; what is
  // checked is that silence ends the queue, not how exactly the timer fires.
  Rig rig(options(k, false, 1500ms));
  Client admin;
  connect_admin(admin, rig.port(0));
  // Negotiate, read the Challenge, then say nothing more.
  auth::HostAuth host(host_config(k, false));
  auth::Step s = host.start();
  Sqe sqe;
  prep_auth_send(sqe, static_cast<uint32_t>(s.out.size()));
  Reply sent = admin.exec(sqe, s.out.data(), static_cast<uint32_t>(s.out.size()));
  REQUIRE(sent.ok);
  REQUIRE(sent.status().is_success());
  prep_auth_receive(sqe, 4096);
  Reply challenge = admin.exec(sqe, nullptr, 0, 4096);
  REQUIRE(challenge.ok);
  CHECK(challenge.data[1] == auth::msg::kChallenge);
  // The event: the target closes the connection (well before this bound).
  CHECK(admin.closed_within(20000));
  CHECK(rig.stats(0).auth_failures == 1);
  // One that never starts is dropped the same way.
  Client idle;
  connect_admin(idle, rig.port(0));
  CHECK(idle.closed_within(20000));
  CHECK(rig.stats(0).auth_failures == 2);
}

TEST_CASE("malformed Authentication Send/Receive commands and messages") {
  const Keys k;
  Rig rig(options(k, false));
  Client admin;
  connect_admin(admin, rig.port(0));
  // Wrong SECP: Invalid Field, and the transaction is still open.
  Sqe sqe;
  prep_auth_receive(sqe, 4096);
  sqe.cdw10 = (sqe.cdw10 & 0x00ffffff) | (0xeau << 24);
  Reply r = admin.exec(sqe, nullptr, 0, 4096);
  REQUIRE(r.ok);
  CHECK(r.status() == status::kInvalidField);
  // A short Negotiate: the Authentication Send completes, the next Receive carries Failure1
  // (incorrect payload) and the queue ends.
  const uint8_t shorty[8] = {0, 0, 0, 0, 1, 0, 0, 1};
  prep_auth_send(sqe, sizeof shorty);
  r = admin.exec(sqe, shorty, sizeof shorty);
  REQUIRE(r.ok);
  CHECK(r.status().is_success());
  prep_auth_receive(sqe, 4096);
  r = admin.exec(sqe, nullptr, 0, 4096);
  REQUIRE(r.ok);
  CHECK(r.status().is_success());
  REQUIRE(r.data.size() >= auth::msg::kFailureSize);
  CHECK(r.data[1] == auth::msg::kFailure1);
  CHECK(r.data[7] == static_cast<uint8_t>(auth::FailureReason::incorrect_payload));
  CHECK(admin.closed_within(5000));
  CHECK(rig.stats(0).auth_failures == 1);
}

TEST_CASE("bad keys in the options are refused at start") {
  TargetOptions o;
  o.ports.assign(1, TargetPort{"127.0.0.1", "0", AnaState::optimized});
  TargetHost h;
  h.nqn = kHostNqn;
  h.dhchap_key = "DHHC-1:01:bm90IGEga2V5:";
  o.subsystems[0].hosts.push_back(h);
  auto r = Target::start(o);
  CHECK(r.error() == make_error_code(Errc::invalid_argument));
  o.subsystems[0].hosts[0].dhchap_key.clear();
  o.subsystems[0].hosts[0].dhchap_ctrl_key = auth::format_secret(secret(auth::HashId::none, 32, kNqn));
  CHECK(Target::start(o).error() == make_error_code(Errc::invalid_argument));
}
