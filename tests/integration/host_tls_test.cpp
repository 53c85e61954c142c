// The host library's NVMe/TCP secure channel (ConnectOptions::tls_psk) against the embedded
// target's TLS ports: the admin queue and every I/O queue through TLS 1.3 with the PSK derived
// for (hostnqn, subnqn), both cipher suites, data verified (on the target's own copy too); a
// volume over two TLS paths whose path is reset mid-run reconnects through TLS with no error;
// the refusals (another PSK, a TLS host on a plaintext port, a plaintext host on a TLS-only
// port) each fail with their own error, before the connect timeout, and a path that keeps
// failing stays in backoff with the reason in its stats; TLS and DH-HMAC-CHAP together;
// discovery through TLS.
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
#include "tls/psk.hpp"
#include "transport/tcp/queue_pair.hpp"

using namespace nvmeof;
using namespace std::chrono_literals;

namespace {

constexpr char kNqn[] = "nqn.2024-01.io.nvmeof:host-tls";
constexpr char kHost[] = "nqn.2014-08.org.nvmexpress:uuid:6f1c2a3b-4d5e-4f60-8a7b-9c0d1e2f3a4b";
constexpr uint32_t kBlock = 4096;

// A configured PSK whose hash (01: SHA-256 -> TLS_AES_128_GCM_SHA256, 02: SHA-384 ->
// TLS_AES_256_GCM_SHA384) picks the suite, its bytes from `seed`.
std::string psk_text(tls::PskHash h, uint8_t seed) {
  tls::ConfiguredPsk p{h, tls::SecretBytes(tls::hash_size(h))};
  for (size_t i = 0; i < p.key.size(); ++i) p.key.data()[i] = static_cast<uint8_t>(seed + 29 * i);
  auto s = tls::format_interchange(p);
  REQUIRE(s);
  return *s;
}

struct PortSpec {
  PortTls tls = PortTls::required;
  std::string psk;
};

// The rig's target with one port per spec, and `dhchap_key` for kHost when given.
TargetOptions tls_target(const std::vector<PortSpec>& ports, const std::string& dhchap_key = {}) {
  TargetOptions o = test::rig_target_options(ports.size());
  for (size_t i = 0; i < ports.size(); ++i) {
    o.ports[i].tls = ports[i].tls;
    o.ports[i].tls_psk = ports[i].psk;
  }
  o.subsystems[0].nqn = kNqn;
  if (!dhchap_key.empty()) {
    TargetHost h;
    h.nqn = kHost;
    h.dhchap_key = dhchap_key;
    o.subsystems[0].hosts.push_back(h);
  }
  return o;
}

using test::Rig;

ConnectOptions options(const std::string& psk) {
  ConnectOptions c;
  c.subnqn = kNqn;
  c.hostnqn = kHost;
  c.tls_psk = psk;
  c.connect_timeout = 5s;
  // Nothing here tests fencing: a keep-alive late on a loaded machine must not end the
  // association under a check.
  c.kato_ms = 2000;
  return c;
}

std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>((i * 2654435761u) >> 11 ^ seed);
  return v;
}

// An I/O queue of `ctrl` through TLS with the expected suite; 4 KiB (in-capsule), 128 KiB and
// 1 MiB (R2T, several C2HData PDUs, many TLS records) written, read back and compared, and
// compared with the target's own copy. `busy`: on a busy reactor, where the pair calls recv()
// and send() itself (the ciphertext goes out in chunks from its own loop).
void write_read_verify(Rig& rig, Controller& ctrl, tls::CipherSuite suite, uint64_t slba0,
                       bool busy) {
  INFO("busy reactor: " << busy);
  auto rr = Reactor::create();
  REQUIRE(rr);
  Reactor& reactor = **rr;
  reactor.set_spinning(busy);
  auto qp = create_io_queue(ctrl, reactor, 16);
  REQUIRE(qp);
  auto* tcp_qp = dynamic_cast<tcp::QueuePair*>(qp->get());
  REQUIRE(tcp_qp != nullptr);
  CHECK(tcp_qp->is_tls());
  CHECK(tcp_qp->direct_socket() == busy);
  CHECK(tcp_qp->tls_suite() == suite);
  SyncIo io(**qp, reactor, 1, kBlock);
  uint64_t slba = slba0;
  for (uint32_t blocks : {1u, 32u, 256u}) {
    const auto out = pattern(size_t{blocks} * kBlock, blocks + static_cast<uint32_t>(slba0));
    std::vector<uint8_t> in(out.size(), 0);
    INFO(blocks << " blocks at " << slba);
    auto w = io.write(slba, blocks, out.data());
    INFO((w ? std::string("ok") : w.error().message()));
    REQUIRE(w);
    auto r = io.read(slba, blocks, in.data());
    INFO((r ? std::string("ok") : r.error().message()));
    REQUIRE(r);
    CHECK(in == out);
    std::vector<uint8_t> on_target(out.size());
    REQUIRE(rig.target->read_ns(kNqn, 1, slba * kBlock, on_target.data(), on_target.size()));
    CHECK(on_target == out);
    slba += blocks;
  }
}

}  // namespace

TEST_CASE("admin and I/O queues through TLS, both cipher suites, data verified", "[tls]") {
  const auto [hash, suite] = GENERATE(
      std::pair{tls::PskHash::sha256, tls::CipherSuite::aes_128_gcm_sha256},
      std::pair{tls::PskHash::sha384, tls::CipherSuite::aes_256_gcm_sha384});
  const std::string psk = psk_text(hash, 7);
  Rig rig(tls_target({{PortTls::required, psk}, {PortTls::not_required, psk}}));
  auto cp_made = ControlPlane::create();
  REQUIRE(cp_made);
  ControlPlane& cp = **cp_made;
  for (size_t port : {size_t{0}, size_t{1}}) {
    auto c = Controller::connect(cp, rig.addr(port), options(psk));
    REQUIRE(c);
    CHECK(rig.stats(port).tls_sessions == 1);
    write_read_verify(rig, **c, suite, 1000 * port, false);
    CHECK(rig.stats(port).tls_sessions == 2);  // the I/O queue's own handshake
    write_read_verify(rig, **c, suite, 1000 * port + 500, true);
    CHECK(rig.stats(port).tls_sessions == 3);
    CHECK(rig.stats(port).tls_failures == 0);
  }
  // The key from a file (@PATH), as nvme gen-tls-key writes it (with a newline).
  const std::string file = "/tmp/nvmeof-host-tls-key-" + std::to_string(::getpid());
  {
    std::ofstream f(file);
    f << psk << "\n";
  }
  auto c = Controller::connect(cp, rig.addr(0), options("@" + file));
  std::remove(file.c_str());
  REQUIRE(c);
  CHECK(rig.stats(0).tls_sessions == 4);
}

TEST_CASE("a volume over two TLS paths: a reset path reconnects through TLS, no error", "[tls]") {
  const std::string psk = psk_text(tls::PskHash::sha256, 3);
  Rig rig(tls_target({{PortTls::required, psk}, {PortTls::required, psk}}));
  VolumeOptions vo;
  vo.paths = {rig.addr(0), rig.addr(1)};
  vo.connect = options(psk);
  vo.reconnect_min = 10ms;
  vo.no_path_timeout = 10s;
  // A busy volume's queue pairs drive their TLS sockets with their own recv() and send() calls.
  vo.poll = GENERATE(PollMode::adaptive, PollMode::busy);
  vo.reactors = 1;
  INFO("poll " << to_string(vo.poll));
  auto v = Volume::open(vo);
  REQUIRE(v);
  const uint64_t sessions0 = rig.stats(0).tls_sessions;
  CHECK(sessions0 >= 2);  // admin queue and at least one I/O queue
  CHECK(rig.stats(1).tls_sessions >= 2);
  // 1 to 32 blocks per I/O: writes larger than the in-capsule size (R2T) and reads of several
  // TLS records.
  test::VerifiedWorkload w(**v, 8, 64, 0, 32);
  w.start();
  REQUIRE(test::wait_for(**v, 15s, [](const VolumeStats& s) { return s.completed > 300; }).completed > 300);
  rig.target->inject(0, FaultKind::reset);
  const auto st = test::wait_for(**v, 15s, [](const VolumeStats& s) {
    return s.paths.at(0).reconnects >= 1 && s.paths.at(0).state == PathState::live;
  });
  INFO(to_text(st));
  REQUIRE(st.paths.at(0).reconnects >= 1);
  REQUIRE(st.paths.at(0).state == PathState::live);
  // The reconnected path carries verified I/O again. The volume's own count, in the snapshots
  // the waits return (the workload's count runs on while stats() waits for the lanes, so the
  // two are never compared).
  const uint64_t before = st.completed;
  REQUIRE(test::wait_for(**v, 15s, [&](const VolumeStats& now) { return now.completed > before + 300; }).completed > before + 300);
  REQUIRE(w.finish(15s));
  INFO(w.first_error());
  CHECK(w.errors() == 0);
  CHECK(w.mismatches() == 0);
  CHECK(rig.stats(0).tls_sessions > sessions0);  // the reconnect ran its own handshakes
  CHECK(rig.stats(0).tls_failures == 0);
  CHECK(rig.stats(0).tls_plaintext_refused == 0);
}

TEST_CASE("refusals: another PSK, TLS to a plaintext port, plaintext to a TLS-only port", "[tls]") {
  const std::string psk = psk_text(tls::PskHash::sha256, 1);
  const std::string other = psk_text(tls::PskHash::sha256, 2);
  Rig rig(tls_target({{PortTls::required, psk}, {PortTls::none, {}}}));
  auto cp_made = ControlPlane::create();
  REQUIRE(cp_made);
  ControlPlane& cp = **cp_made;
  // A refusal, not a hang until the connect timeout: each failure below names the refusal's own
  // cause (a connect that waited out connect_timeout fails with Errc::timeout instead), and where
  // the target tells a refusal it counts it.
  auto refused = [&](size_t port, const ConnectOptions& o) {
    auto c = Controller::connect(cp, rig.addr(port), o);
    if (!c) CHECK(c.error() != make_error_code(Errc::timeout));
    return c;
  };
  {
    auto c = refused(0, options(other));
    REQUIRE_FALSE(c);
    CHECK(c.error() == make_error_code(Errc::tls_handshake_failed));
    // The target counts a refusal on its connection thread, maybe after the host has seen it.
    CHECK(test::wait_until([&] { return rig.stats(0).tls_failures == 1; }));
  }
  {
    auto c = refused(1, options(psk));
    REQUIRE_FALSE(c);
    CHECK(c.error() == make_error_code(Errc::tls_not_offered));
  }
  {
    auto c = refused(0, options(""));
    REQUIRE_FALSE(c);
    CHECK(c.error() == make_error_code(Errc::tls_required));
    CHECK(test::wait_until([&] { return rig.stats(0).tls_plaintext_refused == 1; }));
    ConnectOptions off = options(psk);
    off.tls = TlsUse::off;  // a key, but TLS switched off
    auto d = refused(0, off);
    REQUIRE_FALSE(d);
    CHECK(d.error() == make_error_code(Errc::tls_required));
  }
  {
    std::string bad = psk;
    bad[20] = bad[20] == 'A' ? 'B' : 'A';  // the CRC no longer matches
    auto c = Controller::connect(cp, rig.addr(0), options(bad));
    REQUIRE_FALSE(c);
    CHECK(c.error() == make_error_code(Errc::invalid_argument));
    ConnectOptions on = options("");
    on.tls = TlsUse::on;
    auto d = Controller::connect(cp, rig.addr(0), on);
    REQUIRE_FALSE(d);
    CHECK(d.error() == make_error_code(Errc::invalid_argument));
  }
  // The plaintext port still serves plaintext, the TLS port the right key.
  CHECK(Controller::connect(cp, rig.addr(1), options("")));
  CHECK(Controller::connect(cp, rig.addr(0), options(psk)));
}

TEST_CASE("a path whose PSK is refused stays in backoff with the error in its stats", "[tls]") {
  const std::string psk = psk_text(tls::PskHash::sha384, 5);
  Rig rig(tls_target({{PortTls::required, psk}, {PortTls::required, psk_text(tls::PskHash::sha384, 6)}}));
  VolumeOptions vo;
  vo.paths = {rig.addr(0), rig.addr(1)};
  vo.connect = options(psk);
  vo.reconnect_min = 10ms;
  vo.reconnect_max = 1000ms;
  auto v = Volume::open(vo);
  REQUIRE(v);
  const auto t0 = std::chrono::steady_clock::now();
  const auto s = test::wait_for(**v, 15s, [](const VolumeStats& st) { return st.paths.at(1).connect_failures >= 4; });
  const auto elapsed = std::chrono::steady_clock::now() - t0;
  INFO(to_text(s));
  REQUIRE(s.paths.at(1).connect_failures >= 4);
  CHECK(s.paths.at(1).state != PathState::live);
  CHECK(s.paths.at(1).last_connect_error == make_error_code(Errc::tls_handshake_failed).message());
  CHECK(s.paths.at(0).connect_failures == 0);
  // Backoff, not a tight loop: after the first failure the retries waited 10, 20 and 40 ms.
  CHECK(elapsed >= 70ms);
  CHECK(test::wait_until([&] { return rig.stats(1).tls_failures >= 4; }));
  CHECK(rig.stats(1).tls_failures <= (*v)->stats().paths.at(1).connect_failures + 1);
  test::VerifiedWorkload w(**v, 4);
  w.start();
  REQUIRE(test::wait_for(**v, 15s, [](const VolumeStats& st) { return st.completed > 200; }).completed > 200);
  REQUIRE(w.finish(15s));
  CHECK(w.errors() == 0);
  CHECK(w.mismatches() == 0);
}

TEST_CASE("TLS and DH-HMAC-CHAP together: every queue authenticates inside TLS", "[tls][auth]") {
  const std::string psk = psk_text(tls::PskHash::sha256, 9);
  auto secret = auth::generate_secret(auth::HashId::sha256, 32, kHost);
  REQUIRE(secret);
  const std::string key = auth::format_secret(*secret);
  Rig rig(tls_target({{PortTls::required, psk}}, key));
  auto cp_made = ControlPlane::create();
  REQUIRE(cp_made);
  ControlPlane& cp = **cp_made;
  ConnectOptions o = options(psk);
  o.dhchap_secret = key;
  auto c = Controller::connect(cp, rig.addr(0), o);
  REQUIRE(c);
  CHECK(rig.stats(0).tls_sessions == 1);
  CHECK(rig.stats(0).authentications == 1);
  write_read_verify(rig, **c, tls::CipherSuite::aes_128_gcm_sha256, 2000, false);
  CHECK(rig.stats(0).tls_sessions == 2);
  CHECK(rig.stats(0).authentications == 2);
  // TLS alone is not enough when the host must authenticate.
  auto d = Controller::connect(cp, rig.addr(0), options(psk));
  REQUIRE_FALSE(d);
  CHECK(d.error() == make_error_code(Errc::authentication_required));
  CHECK(rig.stats(0).auth_failures == 0);
}

TEST_CASE("discovery through TLS lists the ports a host can use", "[tls][discovery]") {
  const std::string psk = psk_text(tls::PskHash::sha256, 4);
  // 0: TLS required, 1: TLS not required, 2: plaintext only.
  Rig rig(tls_target({{PortTls::required, psk}, {PortTls::not_required, psk}, {PortTls::none, {}}}));
  VolumeOptions vo;
  vo.connect = options(psk);
  vo.no_path_timeout = 5s;
  {
    // With the key: discovery over the TLS-only port; the paths are the two ports offering TLS.
    auto v = Volume::open_discovered(rig.addr(0), vo);
    REQUIRE(v);
    const auto s = (*v)->stats();
    REQUIRE(s.paths.size() == 2);
    CHECK(s.paths[0].address.find(std::to_string(rig.target->port_number(0))) != std::string::npos);
    CHECK(s.paths[1].address.find(std::to_string(rig.target->port_number(1))) != std::string::npos);
    test::VerifiedWorkload w(**v, 4);
    w.start();
    REQUIRE(test::wait_for(**v, 15s, [](const VolumeStats& st) { return st.completed > 100; }).completed > 100);
    REQUIRE(w.finish(15s));
    CHECK(w.errors() == 0);
    CHECK(w.mismatches() == 0);
    CHECK(rig.stats(0).tls_sessions >= 3);  // discovery, admin and I/O queues
  }
  {
    // Without: discovery over the plaintext port; the TLS-only port is left out.
    vo.connect.tls_psk.clear();
    auto v = Volume::open_discovered(rig.addr(2), vo);
    REQUIRE(v);
    const auto s = (*v)->stats();
    REQUIRE(s.paths.size() == 2);
    CHECK(s.paths[0].address.find(std::to_string(rig.target->port_number(1))) != std::string::npos);
    CHECK(s.paths[1].address.find(std::to_string(rig.target->port_number(2))) != std::string::npos);
  }
}
