#include <catch2/catch.hpp>

#include <nvme/types.h>

#include <cstring>
#include <vector>

#include "core/identify.hpp"

using namespace nvmeof;

TEST_CASE("identify controller parses the fields we use, including CQT", "[identify]") {
  std::vector<uint8_t> raw(4096, 0);
  auto* id = reinterpret_cast<nvme_id_ctrl*>(raw.data());
  std::memcpy(id->sn, "SN123   ", 8);
  std::memset(id->mn, ' ', sizeof id->mn);
  std::memcpy(id->mn, "model", 5);
  id->mdts = 5;
  id->cntlid = 7;
  id->ioccsz = (64 + 8192) / 16;
  id->anatt = 10;
  id->kas = 1;
  std::strcpy(id->subnqn, "nqn.test:sub");
  raw[386] = 25;  // CQT 25 ms
  id->ctratt = 1u << 6;  // traffic-based keep-alive
  // TP8028: CIU at 135, CIRN at 143:136 (little endian), CCRL at 1807.
  raw[135] = 0x5a;
  const uint64_t cirn = 0x0123456789abcdefull;
  std::memcpy(raw.data() + 136, &cirn, 8);
  raw[1807] = 4;
  auto c = parse_identify_controller(raw);
  REQUIRE(c);
  CHECK(c->serial == "SN123");
  CHECK(c->model == "model");
  CHECK(c->max_transfer == 128u * 1024);
  CHECK(c->cntlid == 7);
  CHECK(c->in_capsule_data() == 8192u);
  CHECK(c->anatt_s == 10);
  CHECK(c->cqt_ms == 25);
  CHECK(c->kas_100ms == 1);
  CHECK(c->traffic_based_keep_alive());
  CHECK(c->ciu == 0x5a);
  CHECK(c->cirn == cirn);
  CHECK(c->ccrl == 4);
  CHECK(c->subnqn == "nqn.test:sub");
  CHECK(parse_identify_controller(std::span<const uint8_t>(raw.data(), 4000)).error() ==
        make_error_code(Errc::short_data));
}

TEST_CASE("identify namespace picks the current LBA format", "[identify]") {
  std::vector<uint8_t> raw(4096, 0);
  auto* ns = reinterpret_cast<nvme_id_ns*>(raw.data());
  ns->nsze = 1000;
  ns->nlbaf = 1;
  ns->flbas = 1;
  ns->lbaf[0].ds = 9;
  ns->lbaf[1].ds = 12;
  ns->anagrpid = 2;
  ns->nguid[0] = 0xaa;
  auto info = parse_identify_namespace(raw, 1);
  REQUIRE(info);
  CHECK(info->block_size == 4096u);
  CHECK(info->size_blocks == 1000u);
  CHECK(info->anagrpid == 2u);
  CHECK(info->id.has_nguid);
  ns->flbas = 5;  // beyond NLBAF
  CHECK_FALSE(parse_identify_namespace(raw, 1));
  CHECK_FALSE(parse_identify_namespace(std::span<const uint8_t>(raw.data(), 10), 1));
}

TEST_CASE("namespace descriptors and identity matching", "[identify]") {
  std::vector<uint8_t> raw(4096, 0);
  raw[0] = NVME_NIDT_NGUID;
  raw[1] = 16;
  for (int i = 0; i < 16; ++i) raw[4 + static_cast<size_t>(i)] = static_cast<uint8_t>(i + 1);
  raw[20] = NVME_NIDT_UUID;
  raw[21] = 16;
  raw[24] = 0x55;
  NamespaceId a;
  REQUIRE(parse_ns_descriptors(raw, a));
  CHECK(a.has_nguid);
  CHECK(a.has_uuid);
  NamespaceId b = a;
  CHECK(a.same_namespace_as(b));
  b.nguid[3] ^= 1;
  CHECK_FALSE(a.same_namespace_as(b));
  NamespaceId none;
  CHECK_FALSE(a.same_namespace_as(none));
  // A descriptor running past the buffer.
  std::vector<uint8_t> cut(raw.begin(), raw.begin() + 30);
  NamespaceId c;
  CHECK(parse_ns_descriptors(cut, c).error() == make_error_code(Errc::short_data));
  raw[1] = 15;  // wrong NGUID length
  NamespaceId d;
  CHECK_FALSE(parse_ns_descriptors(raw, d));
}

namespace {
std::vector<uint8_t> ana_log_bytes(const std::vector<std::pair<uint8_t, std::vector<uint32_t>>>& groups) {
  std::vector<uint8_t> out(16, 0);
  const uint16_t n = static_cast<uint16_t>(groups.size());
  out[0] = 9;  // chgcnt
  std::memcpy(out.data() + 8, &n, 2);
  uint32_t id = 1;
  for (auto& [state, nsids] : groups) {
    std::vector<uint8_t> d(32, 0);
    std::memcpy(d.data(), &id, 4);
    const uint32_t cnt = static_cast<uint32_t>(nsids.size());
    std::memcpy(d.data() + 4, &cnt, 4);
    d[16] = state;
    out.insert(out.end(), d.begin(), d.end());
    for (uint32_t ns : nsids) {
      const auto* p = reinterpret_cast<const uint8_t*>(&ns);
      out.insert(out.end(), p, p + 4);
    }
    ++id;
  }
  return out;
}
}  // namespace

TEST_CASE("ANA log page parses and rejects short or bad input", "[identify][ana]") {
  auto raw = ana_log_bytes({{0x1, {1, 2}}, {0x3, {1}}, {0xf, {}}});
  auto log = parse_ana_log(raw);
  REQUIRE(log);
  CHECK(log->chgcnt == 9u);
  REQUIRE(log->groups.size() == 3);
  CHECK(log->groups[0].state == AnaState::optimized);
  CHECK(log->groups[0].nsids == std::vector<uint32_t>{1, 2});
  CHECK(log->group(2)->state == AnaState::inaccessible);
  CHECK(log->group(3)->state == AnaState::change);
  CHECK(log->group(9) == nullptr);
  for (size_t cut : {size_t{0}, size_t{15}, size_t{30}, raw.size() - 1 - 32 - 4}) {
    std::vector<uint8_t> s(raw.begin(), raw.begin() + static_cast<long>(cut));
    CHECK(parse_ana_log(s).error() == make_error_code(Errc::short_data));
  }
  auto bad = ana_log_bytes({{0x7, {}}});
  CHECK(parse_ana_log(bad).error() == make_error_code(Errc::invalid_argument));
  // A huge NSID count must not be trusted.
  auto huge = ana_log_bytes({{0x1, {}}});
  const uint32_t big = 0x40000000;
  std::memcpy(huge.data() + 16 + 4, &big, 4);
  CHECK(parse_ana_log(huge).error() == make_error_code(Errc::short_data));
  CHECK(*parse_ana_state("non-optimized") == AnaState::non_optimized);
  CHECK_FALSE(parse_ana_state("bogus"));
}

TEST_CASE("discovery log page parses entries", "[identify][discovery]") {
  std::vector<uint8_t> raw(1024 + 2 * 1024, 0);
  const uint64_t numrec = 2;
  std::memcpy(raw.data() + 8, &numrec, 8);
  auto* e = reinterpret_cast<nvmf_disc_log_entry*>(raw.data() + 1024);
  e[0].trtype = 3;
  e[0].adrfam = 1;
  e[0].subtype = 2;
  std::strcpy(e[0].traddr, "127.0.0.1");
  std::strcpy(e[0].trsvcid, "4420");
  std::strcpy(e[0].subnqn, "nqn.test:a");
  e[1].portid = 2;
  auto log = parse_discovery_log(raw);
  REQUIRE(log);
  REQUIRE(log->entries.size() == 2);
  CHECK(log->entries[0].traddr == "127.0.0.1");
  CHECK(log->entries[0].trsvcid == "4420");
  CHECK(log->entries[0].subnqn == "nqn.test:a");
  CHECK(log->entries[1].portid == 2);
  std::vector<uint8_t> s(raw.begin(), raw.begin() + 1024 + 1000);
  CHECK(parse_discovery_log(s).error() == make_error_code(Errc::short_data));
  CHECK_FALSE(parse_discovery_log(std::span<const uint8_t>(raw.data(), 100)));
}
