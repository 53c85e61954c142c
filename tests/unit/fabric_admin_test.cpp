// The shared admin readers (lib/fabric/admin.hpp) over a scripted admin channel: log pages in
// pieces at their offsets, the ANA log's two reads, the discovery log's generation counter,
// the active namespace list's continuation.
#include <catch2/catch.hpp>

#include <cstring>
#include <functional>
#include <map>
#include <vector>

#include "fabric/admin.hpp"

using namespace nvmeof;
using namespace nvmeof::fabric;

namespace {

// Serves Get Log Page from `logs` (at the command's offset and length) and Identify from
// `identify`; records every command.
class ScriptedAdmin final : public AdminChannel {
 public:
  std::map<uint8_t, std::vector<uint8_t>> logs;
  std::function<std::vector<uint8_t>(const Sqe&)> identify;
  std::function<void(uint8_t lid, uint64_t off, uint32_t len)> after_log;  // may change `logs`
  std::vector<Sqe> sent;
  uint32_t chunk = 4096;

  Result<uint32_t> admin_command(const Sqe& c, void* data, uint32_t len) override {
    sent.push_back(c);
    if (c.opcode == opcode::kIdentify) {
      if (!identify) return make_error_code(status::kInvalidField);
      auto v = identify(c);
      if (v.empty()) return make_error_code(status::kInvalidField);
      std::memcpy(data, v.data(), std::min<size_t>(len, v.size()));
      return 0u;
    }
    REQUIRE(c.opcode == opcode::kGetLogPage);
    const uint8_t lid = c.cdw10 & 0xff;
    const uint32_t numd = ((c.cdw10 >> 16) | (c.cdw11 << 16)) + 1;
    const uint64_t off = c.cdw12 | (uint64_t{c.cdw13} << 32);
    REQUIRE(numd * 4 == len);
    const auto& page = logs[lid];
    std::memset(data, 0, len);
    if (off < page.size()) std::memcpy(data, page.data() + off, std::min<size_t>(len, page.size() - off));
    if (after_log) after_log(lid, off, len);
    return 0u;
  }
  uint32_t admin_max_transfer() const noexcept override { return chunk; }
};

template <class T>
void put(std::vector<uint8_t>& v, size_t at, T x) {
  if (v.size() < at + sizeof x) v.resize(at + sizeof x);
  std::memcpy(v.data() + at, &x, sizeof x);
}

// An ANA log of `groups` groups with `per_group` NSIDs each.
std::vector<uint8_t> ana_page(uint16_t groups, uint32_t per_group) {
  std::vector<uint8_t> v(kAnaHeaderLen);
  put<uint64_t>(v, 0, 7);  // CHGCNT
  put<uint16_t>(v, 8, groups);
  uint32_t nsid = 1;
  for (uint16_t g = 0; g < groups; ++g) {
    const size_t at = v.size();
    v.resize(at + kAnaGroupDescLen);
    put<uint32_t>(v, at, g + 1u);       // ANAGRPID
    put<uint32_t>(v, at + 4, per_group);  // NNSIDS
    v[at + 16] = 0x01;                  // optimized
    for (uint32_t i = 0; i < per_group; ++i) put<uint32_t>(v, v.size(), nsid++);
  }
  return v;
}

std::vector<uint8_t> discovery_page(uint64_t genctr, uint64_t records) {
  std::vector<uint8_t> v((records + 1) * kDiscoveryRecordLen, 0);
  put<uint64_t>(v, 0, genctr);
  put<uint64_t>(v, 8, records);
  return v;
}

}  // namespace

TEST_CASE("get_log_page reads in pieces of the channel's transfer size at their offsets") {
  ScriptedAdmin a;
  a.chunk = 4096;
  std::vector<uint8_t> page(10000);
  for (size_t i = 0; i < page.size(); ++i) page[i] = static_cast<uint8_t>(i * 7);
  a.logs[0x42] = page;
  auto r = get_log_page(a, 0x42, 5, 10000);
  REQUIRE(r);
  CHECK(r.value() == page);
  REQUIRE(a.sent.size() == 3);
  CHECK(a.sent[0].cdw12 == 0);
  CHECK(a.sent[1].cdw12 == 4096);
  CHECK(a.sent[2].cdw12 == 8192);
  CHECK(a.sent[2].cdw10 >> 16 == (10000 - 8192) / 4 - 1);  // NUMDL of the last piece
  CHECK(a.sent[0].nsid == 5);
}

TEST_CASE("ana_log reads the header, then the length its groups and NN name") {
  ScriptedAdmin a;
  a.logs[log_page::kAna] = ana_page(3, 4);
  auto r = ana_log(a, 12);
  REQUIRE(r);
  REQUIRE(r.value().groups.size() == 3);
  CHECK(r.value().groups[2].nsids == std::vector<uint32_t>{9, 10, 11, 12});
  CHECK(r.value().chgcnt == 7);
  REQUIRE(a.sent.size() == 2);
  CHECK((a.sent[0].cdw10 >> 16) + 1 == kAnaHeaderLen / 4);
  CHECK((a.sent[1].cdw10 >> 16) + 1 == (kAnaHeaderLen + 3 * kAnaGroupDescLen + 12 * 4) / 4);
  CHECK(a.sent[1].nsid == kNsidAll);
  // An NN smaller than the lists: the page is cut short and refused, not read past.
  ScriptedAdmin b;
  b.logs[log_page::kAna] = ana_page(2, 8);
  auto s = ana_log(b, 1);
  REQUIRE_FALSE(s);
  CHECK(s.error() == make_error_code(Errc::short_data));
}

TEST_CASE("discovery_log reads again while the generation counter moves, three times at most") {
  ScriptedAdmin a;
  a.logs[log_page::kDiscovery] = discovery_page(1, 2);
  int header_reads = 0;
  a.after_log = [&](uint8_t, uint64_t off, uint32_t len) {
    // The log changes right after each of the first two header reads.
    if (off == 0 && len == kDiscoveryRecordLen && header_reads++ < 2)
      a.logs[log_page::kDiscovery] = discovery_page(header_reads + 10, 2);
  };
  auto r = discovery_log(a);
  REQUIRE(r);
  CHECK(r.value().entries.size() == 2);
  CHECK(r.value().genctr == 12);

  ScriptedAdmin b;
  uint64_t gen = 0;
  b.logs[log_page::kDiscovery] = discovery_page(0, 1);
  b.after_log = [&](uint8_t, uint64_t off, uint32_t len) {
    if (off == 0 && len == kDiscoveryRecordLen) b.logs[log_page::kDiscovery] = discovery_page(++gen, 1);
  };
  auto never = discovery_log(b);
  REQUIRE_FALSE(never);
  CHECK(never.error() == make_error_code(Errc::protocol_error));
}

TEST_CASE("active_namespaces continues past a full list and refuses one that does not pass its start") {
  ScriptedAdmin a;
  a.identify = [](const Sqe& c) {
    std::vector<uint8_t> v(kIdentifyLen, 0);
    const uint32_t from = c.nsid;
    const uint32_t n = from == 0 ? 1024 : 3;  // a full first list, then three more
    for (uint32_t i = 0; i < n; ++i) put<uint32_t>(v, i * 4, from + 1 + i);
    return v;
  };
  auto r = active_namespaces(a);
  REQUIRE(r);
  CHECK(r.value().size() == 1027);
  CHECK(r.value().back() == 1027);
  REQUIRE(a.sent.size() == 2);
  CHECK(a.sent[1].nsid == 1024);

  // A controller that answers the continuation with the list from the start again.
  ScriptedAdmin b;
  b.identify = [](const Sqe&) {
    std::vector<uint8_t> v(kIdentifyLen, 0);
    for (uint32_t i = 0; i < 1024; ++i) put<uint32_t>(v, i * 4, i + 1);
    return v;
  };
  auto bad = active_namespaces(b);
  REQUIRE_FALSE(bad);
  CHECK(bad.error() == make_error_code(Errc::short_data));
}

TEST_CASE("identify_namespace goes on without a descriptor list the controller refuses") {
  ScriptedAdmin a;
  a.identify = [](const Sqe& c) -> std::vector<uint8_t> {
    if ((c.cdw10 & 0xff) == cns::kNamespaceDescriptors) return {};  // refused
    std::vector<uint8_t> v(kIdentifyLen, 0);
    put<uint64_t>(v, 0, 2048);  // NSZE
    put<uint64_t>(v, 8, 2048);  // NCAP
    put<uint64_t>(v, 16, 2048); // NUSE
    v[104] = 1;                 // NGUID
    v[130] = 12;                // LBA format 0: 4096-byte blocks
    return v;
  };
  auto r = identify_namespace(a, 3);
  REQUIRE(r);
  CHECK(r.value().nsid == 3);
  CHECK(r.value().size_blocks == 2048);
  CHECK(r.value().block_size == 4096);
  CHECK(r.value().id.has_nguid);
  REQUIRE(a.sent.size() == 2);
  CHECK((a.sent[1].cdw10 & 0xff) == cns::kNamespaceDescriptors);
}

TEST_CASE("changed_namespaces reads the list up to its first 0, and 0xFFFFFFFF as every namespace") {
  ScriptedAdmin a;
  std::vector<uint8_t> page;
  put<uint32_t>(page, 0, 3);
  put<uint32_t>(page, 4, 7);
  put<uint32_t>(page, 8, 0);
  put<uint32_t>(page, 12, 9);  // past the end of the list: not read as an entry
  a.logs[log_page::kChangedNamespaces] = page;
  auto l = changed_namespaces(a);
  REQUIRE(l);
  CHECK(*l == std::vector<uint32_t>{3, 7});
  REQUIRE(a.sent.size() == 1);
  CHECK((a.sent[0].cdw10 & 0xff) == log_page::kChangedNamespaces);

  // More than 1024 changed: the controller says so in the first entry.
  a.logs[log_page::kChangedNamespaces] = {0xff, 0xff, 0xff, 0xff};
  l = changed_namespaces(a);
  REQUIRE(l);
  CHECK(*l == std::vector<uint32_t>{kAllNamespacesChanged});

  // A full list of 1024 entries (no 0 after it).
  std::vector<uint8_t> full;
  for (uint32_t i = 0; i < 1024; ++i) put<uint32_t>(full, i * 4, i + 1);
  a.logs[log_page::kChangedNamespaces] = full;
  l = changed_namespaces(a);
  REQUIRE(l);
  CHECK(l->size() == 1024);
  CHECK(l->back() == 1024);

  // Empty: nothing changed.
  a.logs[log_page::kChangedNamespaces] = {};
  l = changed_namespaces(a);
  REQUIRE(l);
  CHECK(l->empty());
}
