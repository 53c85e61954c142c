// The embedded target's NVMe/TCP secure channel: TLS 1.3 with the port's PSK before the ICReq,
// admin and I/O queues through it with data verified, the ports' requirements in the discovery
// log (TREQ, TSAS SECTYPE), and the refusals (plaintext on a TLS-only port, wrong PSK, a
// subsystem the target does not have).
#include <catch2/catch.hpp>

#include <nvme/types.h>

#include <cstring>
#include <vector>

#include "../common/rig.hpp"
#include "core/identify.hpp"
#include "nvmeof/target.hpp"
#include "target_client.hpp"
#include "tls/psk.hpp"

using namespace nvmeof;
using nvmeof::test::Client;
using nvmeof::test::kHostNqn;

namespace {

constexpr char kNqn[] = "nqn.2024-01.io.nvmeof:tls-target";
constexpr uint32_t kBlock = 4096;

tls::ConfiguredPsk configured_psk(uint8_t seed) {
  tls::ConfiguredPsk p{tls::PskHash::sha256, tls::SecretBytes(32)};
  for (size_t i = 0; i < 32; ++i) p.key.data()[i] = static_cast<uint8_t>(seed + 13 * i);
  return p;
}

// Port 0: TLS required; port 1: TLS not required; port 2: plaintext only.
// Three ports: TLS required, TLS allowed, and no TLS.
TargetOptions tls_options() {
  TargetOptions o = test::rig_target_options(3);
  const std::string psk = *tls::format_interchange(configured_psk(1));
  o.ports = {TargetPort{"127.0.0.1", "0", AnaState::optimized, PortTls::required, psk},
             TargetPort{"127.0.0.1", "0", AnaState::optimized, PortTls::not_required, psk},
             TargetPort{"127.0.0.1", "0", AnaState::optimized}};
  o.subsystems[0].nqn = kNqn;
  return o;
}

using test::Rig;

tls::TlsPsk host_psk(const char* subnqn, uint8_t seed = 1) {
  auto p = tls::derive_tls_psk(configured_psk(seed), kHostNqn, subnqn);
  REQUIRE(p);
  return std::move(*p);
}

// ICReq, Connect and CC.EN = 1 through TLS.
bool open_admin_tls(Client& c, uint16_t port, const char* subnqn, uint16_t* cntlid = nullptr) {
  if (!c.connect(port) || c.start_tls(host_psk(subnqn)) || !c.ic()) return false;
  auto r = c.connect_queue(subnqn, 0, 0xffff, 0, 31, kHostNqn);
  if (!r.ok || !r.status().is_success()) return false;
  if (cntlid != nullptr) *cntlid = static_cast<uint16_t>(r.cqe.dw0);
  return c.property_set(0x14, 1 | (6u << 16) | (4u << 20)).ok;
}

std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>((i * 2654435761u) >> 13 ^ seed);
  return v;
}

}  // namespace

TEST_CASE("TLS port: admin and I/O queues through TLS, data verified", "[target][tls]") {
  Rig rig(tls_options());
  for (size_t port : {size_t{0}, size_t{1}}) {
    Client admin;
    uint16_t cntlid = 0;
    REQUIRE(open_admin_tls(admin, rig.port(port), kNqn, &cntlid));
    auto id = parse_identify_controller(admin.identify(0x01).data);
    REQUIRE(id);
    CHECK(id->subnqn == kNqn);

    Client io;
    REQUIRE(io.connect(rig.port(port)));
    REQUIRE_FALSE(io.start_tls(host_psk(kNqn)));
    REQUIRE(io.ic());
    io.icd_ = 8192;
    auto r = io.connect_queue(kNqn, 1, cntlid, 0, 31, kHostNqn);
    REQUIRE(r.ok);
    REQUIRE(r.status().is_success());
    // 4 KiB (in-capsule) and 128 KiB (R2T and several C2HData PDUs, many TLS records).
    for (uint32_t blocks : {1u, 32u}) {
      const auto data = pattern(size_t{blocks} * kBlock, blocks + static_cast<uint32_t>(port));
      const uint64_t slba = 64 * blocks + port;
      REQUIRE(io.write(1, slba, blocks, data.data(), static_cast<uint32_t>(data.size())).status().is_success());
      auto back = io.read(1, slba, blocks, static_cast<uint32_t>(data.size()));
      REQUIRE(back.status().is_success());
      CHECK(back.data == data);
    }
  }
}

TEST_CASE("TLS port: refusals", "[target][tls]") {
  Rig rig(tls_options());
  SECTION("plaintext on a TLS-only port is closed") {
    Client c;
    REQUIRE(c.connect(rig.port(0)));
    CHECK_FALSE(c.ic());
    CHECK(c.closed_within(5000));
  }
  SECTION("plaintext on a not-required port is served") {
    Client c;
    REQUIRE(c.open_admin(rig.port(1), kNqn));
    CHECK(c.identify(0x01).ok);
  }
  SECTION("TLS on a plaintext-only port fails") {
    Client c;
    REQUIRE(c.connect(rig.port(2)));
    CHECK(c.start_tls(host_psk(kNqn)));
  }
  SECTION("a host with another PSK") {
    Client c;
    REQUIRE(c.connect(rig.port(0)));
    CHECK(c.start_tls(host_psk(kNqn, 2)) == tls::TlsErrc::psk_mismatch);
    Client ok;  // the port keeps serving
    CHECK(open_admin_tls(ok, rig.port(0), kNqn));
  }
  SECTION("an identity naming a subsystem the target does not have") {
    Client c;
    REQUIRE(c.connect(rig.port(0)));
    CHECK(c.start_tls(host_psk("nqn.2024-01.io.nvmeof:absent")) == tls::TlsErrc::handshake_rejected);
  }
}

TEST_CASE("discovery log reports each port's secure channel", "[target][tls][discovery]") {
  Rig rig(tls_options());
  Client d;
  REQUIRE(open_admin_tls(d, rig.port(0), kDiscoveryNqn));
  auto full = d.get_log(0x70, 1024 * 4);
  REQUIRE(full.ok);
  auto log = parse_discovery_log(full.data);
  REQUIRE(log);
  REQUIRE(log->entries.size() == 3);
  const uint8_t want_treq[] = {NVMF_TREQ_REQUIRED, NVMF_TREQ_NOT_REQUIRED, NVMF_TREQ_NOT_SPECIFIED};
  const uint8_t want_sectype[] = {NVMF_TCP_SECTYPE_TLS13, NVMF_TCP_SECTYPE_TLS13, NVMF_TCP_SECTYPE_NONE};
  for (size_t i = 0; i < 3; ++i) {
    CHECK(log->entries[i].trsvcid == std::to_string(rig.port(i)));
    CHECK(log->entries[i].treq == want_treq[i]);
    // TSAS is the last 256 bytes of the entry; its first byte is the NVMe/TCP SECTYPE.
    CHECK(full.data[1024 * (i + 1) + 768] == want_sectype[i]);
  }
}

TEST_CASE("a TLS port needs a PSK that parses", "[target][tls]") {
  TargetOptions o;
  o.ports = {TargetPort{"127.0.0.1", "0", AnaState::optimized, PortTls::required, "NVMeTLSkey-1:01:bad:"}};
  CHECK(Target::start(o).error() == make_error_code(Errc::invalid_argument));
  o.ports[0].tls_psk.clear();
  CHECK(Target::start(o).error() == make_error_code(Errc::invalid_argument));
}
