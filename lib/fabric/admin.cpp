#include "fabric/admin.hpp"

#include <algorithm>
#include <cstring>

#include "core/identify.hpp"

namespace nvmeof::fabric {

Result<std::vector<uint8_t>> read_data(AdminChannel& ch, const Sqe& cmd, uint32_t len) {
  std::vector<uint8_t> buf(len);
  auto r = ch.admin_command(cmd, buf.data(), len);
  if (!r) return r.error();
  return buf;
}

Result<std::vector<uint8_t>> get_log_page(AdminChannel& ch, uint8_t lid, uint32_t nsid, uint32_t len) {
  len = (len + 3) & ~3u;
  const uint32_t chunk = std::max<uint32_t>(ch.admin_max_transfer() & ~3u, 4096);
  std::vector<uint8_t> out(len);
  for (uint32_t off = 0; off < len;) {
    const uint32_t n = std::min(chunk, len - off);
    Sqe c;
    prep_get_log_page(c, lid, nsid, n, off);
    auto r = ch.admin_command(c, out.data() + off, n);
    if (!r) return r.error();
    off += n;
  }
  return out;
}

Result<ControllerInfo> identify_controller(AdminChannel& ch) {
  Sqe c;
  prep_identify(c, cns::kController, 0);
  auto raw = read_data(ch, c, kIdentifyLen);
  if (!raw) return raw.error();
  return parse_identify_controller(*raw);
}

Result<NamespaceInfo> identify_namespace(AdminChannel& ch, uint32_t nsid) {
  Sqe c;
  prep_identify(c, cns::kNamespace, nsid);
  auto raw = read_data(ch, c, kIdentifyLen);
  if (!raw) return raw.error();
  auto ns = parse_identify_namespace(*raw, nsid);
  if (!ns) return ns.error();
  prep_identify(c, cns::kNamespaceDescriptors, nsid);
  auto desc = read_data(ch, c, kIdentifyLen);
  if (desc) {
    if (auto p = parse_ns_descriptors(*desc, ns->id); !p) return p.error();
  } else if (desc.error().category() != nvme_category()) {
    return desc.error();
  }
  return ns;
}

Result<std::vector<uint32_t>> changed_namespaces(AdminChannel& ch) {
  constexpr uint32_t kLen = 4096;
  auto raw = get_log_page(ch, log_page::kChangedNamespaces, 0xffffffffu, kLen);
  if (!raw) return raw.error();
  std::vector<uint32_t> out;
  for (size_t at = 0; at + 4 <= raw->size(); at += 4) {
    uint32_t id;
    std::memcpy(&id, raw->data() + at, 4);
    if (id == 0) break;
    if (id == kAllNamespacesChanged) return std::vector<uint32_t>{kAllNamespacesChanged};
    out.push_back(id);
  }
  return out;
}

Result<std::vector<uint32_t>> active_namespaces(AdminChannel& ch) {
  std::vector<uint32_t> out;
  uint32_t from = 0;
  for (;;) {
    Sqe c;
    prep_identify(c, cns::kActiveNamespaceList, from);
    auto raw = read_data(ch, c, kIdentifyLen);
    if (!raw) return raw.error();
    size_t n = 0;
    for (; n < kIdentifyLen / 4; ++n) {
      uint32_t id;
      std::memcpy(&id, raw->data() + n * 4, 4);
      if (id == 0) break;
      if (id <= from) return Errc::short_data;  // the list must ascend past `from`
      out.push_back(id);
    }
    if (n < kIdentifyLen / 4) return out;
    from = out.back();
  }
}

Result<AnaLog> ana_log(AdminChannel& ch, uint32_t nn) {
  auto hdr = get_log_page(ch, log_page::kAna, kNsidAll, kAnaHeaderLen);
  if (!hdr) return hdr.error();
  uint16_t ngrps;
  std::memcpy(&ngrps, hdr->data() + 8, sizeof ngrps);
  const uint64_t want = kAnaHeaderLen + uint64_t{ngrps} * kAnaGroupDescLen + uint64_t{nn} * 4;
  auto full = get_log_page(ch, log_page::kAna, kNsidAll,
                           static_cast<uint32_t>(std::min<uint64_t>(want, kMaxLogLen)));
  if (!full) return full.error();
  return parse_ana_log(*full);
}

Result<DiscoveryLog> discovery_log(AdminChannel& ch) {
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto hdr = get_log_page(ch, log_page::kDiscovery, 0, kDiscoveryRecordLen);
    if (!hdr) return hdr.error();
    uint64_t genctr, numrec;
    std::memcpy(&genctr, hdr->data(), 8);
    std::memcpy(&numrec, hdr->data() + 8, 8);
    numrec = std::min(numrec, kMaxDiscoveryRecords);
    auto full = get_log_page(ch, log_page::kDiscovery, 0,
                             static_cast<uint32_t>((numrec + 1) * kDiscoveryRecordLen));
    if (!full) return full.error();
    uint64_t again;
    std::memcpy(&again, full->data(), 8);
    if (again != genctr) continue;  // the log changed between the two reads
    // Tell the parser only about the records we fetched, should NUMREC exceed our cap.
    std::memcpy(full->data() + 8, &numrec, 8);
    return parse_discovery_log(*full);
  }
  return Errc::protocol_error;
}

}  // namespace nvmeof::fabric
