#include "core/identify.hpp"

#include <nvme/types.h>

#include <algorithm>
#include <cstring>

namespace nvmeof {
namespace {

template <class T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

std::string trimmed(const char* s, size_t n) {
  size_t len = strnlen(s, n);
  while (len > 0 && (s[len - 1] == ' ' || s[len - 1] == '\0')) --len;
  return std::string(s, len);
}

constexpr size_t kIdentifyLen = 4096;
constexpr size_t kCqtOffset = 386;  // NVMe 2.1 Identify Controller bytes 387:386
// TP8028 fields (NVMe 2.3), not yet in libnvme 1.3's struct.
constexpr size_t kCiuOffset = 135;
constexpr size_t kCirnOffset = 136;   // 8 bytes, little endian
constexpr size_t kCcrlOffset = 1807;

}  // namespace

Result<ControllerInfo> parse_identify_controller(std::span<const uint8_t> raw) {
  if (raw.size() < kIdentifyLen) return Errc::short_data;
  nvme_id_ctrl id;
  std::memcpy(&id, raw.data(), sizeof id);
  ControllerInfo c;
  c.cntlid = id.cntlid;
  c.serial = trimmed(id.sn, sizeof id.sn);
  c.model = trimmed(id.mn, sizeof id.mn);
  c.firmware = trimmed(id.fr, sizeof id.fr);
  c.subnqn = trimmed(id.subnqn, sizeof id.subnqn);
  c.mdts = id.mdts;
  // MDTS is in units of CAP.MPSMIN; fabrics controllers use 4 KiB pages. Past 2^20 pages the
  // limit no longer matters for a host that splits at 1 MiB anyway.
  c.max_transfer = id.mdts == 0 ? 0 : (id.mdts >= 20 ? 0 : (4096u << std::min<uint8_t>(id.mdts, 19)));
  c.nn = id.nn;
  c.kas_100ms = id.kas;
  c.ctratt = id.ctratt;
  c.ciu = raw[kCiuOffset];
  c.cirn = load<uint64_t>(raw.data() + kCirnOffset);
  c.ccrl = raw[kCcrlOffset];
  c.anatt_s = id.anatt;
  c.anacap = id.anacap;
  c.nanagrpid = id.nanagrpid;
  c.cqt_ms = load<uint16_t>(raw.data() + kCqtOffset);
  c.crdt_100ms = {id.crdt1, id.crdt2, id.crdt3};
  c.cmic = id.cmic;
  c.ioccsz_bytes = id.ioccsz * 16u;
  c.iorcsz_bytes = id.iorcsz * 16u;
  c.sgls = id.sgls;
  c.oncs = id.oncs;
  c.vwc = id.vwc;
  c.ver = id.ver;
  c.cntrltype = id.cntrltype;
  return c;
}

bool NamespaceId::same_namespace_as(const NamespaceId& o) const noexcept {
  bool any = false;
  if (has_nguid && o.has_nguid) {
    if (nguid != o.nguid) return false;
    any = true;
  }
  if (has_eui64 && o.has_eui64) {
    if (eui64 != o.eui64) return false;
    any = true;
  }
  if (has_uuid && o.has_uuid) {
    if (uuid != o.uuid) return false;
    any = true;
  }
  return any;
}

std::string NamespaceId::to_string() const {
  static const char* hex = "0123456789abcdef";
  auto put = [](std::string& s, const uint8_t* p, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      s += hex[p[i] >> 4];
      s += hex[p[i] & 0xf];
    }
  };
  std::string s;
  if (has_nguid) {
    s += "nguid:";
    put(s, nguid.data(), nguid.size());
  } else if (has_eui64) {
    s += "eui64:";
    put(s, eui64.data(), eui64.size());
  } else if (has_uuid) {
    s += "uuid:";
    put(s, uuid.data(), uuid.size());
  }
  return s;
}

Result<NamespaceInfo> parse_identify_namespace(std::span<const uint8_t> raw, uint32_t nsid) {
  if (raw.size() < kIdentifyLen) return Errc::short_data;
  nvme_id_ns ns;
  std::memcpy(&ns, raw.data(), sizeof ns);
  NamespaceInfo info;
  info.nsid = nsid;
  info.size_blocks = ns.nsze;
  info.capacity_blocks = ns.ncap;
  info.anagrpid = ns.anagrpid;
  info.nmic = ns.nmic;
  if (ns.nsze == 0) return info;
  // FLBAS bits 3:0 and 6:5 select the format (64 formats since NVMe 2.0).
  const unsigned fmt = (ns.flbas & 0xf) | ((ns.flbas >> 1) & 0x30);
  if (fmt > ns.nlbaf || fmt >= 64) return Errc::invalid_argument;
  const unsigned lbads = ns.lbaf[fmt].ds;
  if (lbads < 9 || lbads > 16) return Errc::invalid_argument;
  info.block_size = 1u << lbads;
  static constexpr uint8_t zero16[16] = {};
  if (std::memcmp(ns.nguid, zero16, 16) != 0) {
    std::memcpy(info.id.nguid.data(), ns.nguid, 16);
    info.id.has_nguid = true;
  }
  if (std::memcmp(ns.eui64, zero16, 8) != 0) {
    std::memcpy(info.id.eui64.data(), ns.eui64, 8);
    info.id.has_eui64 = true;
  }
  return info;
}

Result<void> parse_ns_descriptors(std::span<const uint8_t> raw, NamespaceId& id) {
  size_t off = 0;
  while (off + 4 <= raw.size()) {
    const uint8_t nidt = raw[off];
    const uint8_t nidl = raw[off + 1];
    if (nidt == 0) break;  // end of list
    if (off + 4 + nidl > raw.size()) return Errc::short_data;
    const uint8_t* nid = raw.data() + off + 4;
    switch (nidt) {
      case NVME_NIDT_EUI64:
        if (nidl != NVME_NIDT_EUI64_LEN) return Errc::invalid_argument;
        std::memcpy(id.eui64.data(), nid, 8);
        id.has_eui64 = true;
        break;
      case NVME_NIDT_NGUID:
        if (nidl != NVME_NIDT_NGUID_LEN) return Errc::invalid_argument;
        std::memcpy(id.nguid.data(), nid, 16);
        id.has_nguid = true;
        break;
      case NVME_NIDT_UUID:
        if (nidl != 16) return Errc::invalid_argument;
        std::memcpy(id.uuid.data(), nid, 16);
        id.has_uuid = true;
        break;
      default: break;  // CSI and future types do not identify the namespace
    }
    off += 4 + nidl;
  }
  return {};
}

const char* to_string(AnaState s) noexcept {
  switch (s) {
    case AnaState::optimized: return "optimized";
    case AnaState::non_optimized: return "non-optimized";
    case AnaState::inaccessible: return "inaccessible";
    case AnaState::persistent_loss: return "persistent-loss";
    case AnaState::change: return "change";
  }
  return "unknown";
}

Result<AnaState> parse_ana_state(std::string_view s) {
  if (s == "optimized") return AnaState::optimized;
  if (s == "non-optimized" || s == "non_optimized") return AnaState::non_optimized;
  if (s == "inaccessible") return AnaState::inaccessible;
  if (s == "persistent-loss" || s == "persistent_loss") return AnaState::persistent_loss;
  if (s == "change") return AnaState::change;
  return Errc::invalid_argument;
}

const AnaGroup* AnaLog::group(uint32_t grpid) const noexcept {
  for (const auto& g : groups)
    if (g.grpid == grpid) return &g;
  return nullptr;
}

Result<AnaLog> parse_ana_log(std::span<const uint8_t> raw) {
  if (raw.size() < sizeof(nvme_ana_log)) return Errc::short_data;
  AnaLog log;
  log.chgcnt = load<uint64_t>(raw.data());
  const uint16_t ngrps = load<uint16_t>(raw.data() + 8);
  size_t off = sizeof(nvme_ana_log);
  for (unsigned i = 0; i < ngrps; ++i) {
    if (off + sizeof(nvme_ana_group_desc) > raw.size()) return Errc::short_data;
    const uint8_t* d = raw.data() + off;
    AnaGroup g;
    g.grpid = load<uint32_t>(d);
    const uint32_t nnsids = load<uint32_t>(d + 4);
    g.chgcnt = load<uint64_t>(d + 8);
    const uint8_t st = d[16] & 0xf;
    switch (st) {
      case 0x1: case 0x2: case 0x3: case 0x4: case 0xf: g.state = static_cast<AnaState>(st); break;
      default: return Errc::invalid_argument;
    }
    off += sizeof(nvme_ana_group_desc);
    if (nnsids > (raw.size() - off) / 4) return Errc::short_data;
    g.nsids.resize(nnsids);
    if (nnsids) std::memcpy(g.nsids.data(), raw.data() + off, nnsids * 4u);
    off += nnsids * 4u;
    log.groups.push_back(std::move(g));
  }
  return log;
}

Result<DiscoveryLog> parse_discovery_log(std::span<const uint8_t> raw) {
  constexpr size_t kHeader = 1024;
  constexpr size_t kEntry = sizeof(nvmf_disc_log_entry);
  static_assert(kEntry == 1024);
  if (raw.size() < kHeader) return Errc::short_data;
  DiscoveryLog log;
  log.genctr = load<uint64_t>(raw.data());
  const uint64_t numrec = load<uint64_t>(raw.data() + 8);
  if (numrec > (raw.size() - kHeader) / kEntry) return Errc::short_data;
  for (uint64_t i = 0; i < numrec; ++i) {
    nvmf_disc_log_entry e;
    std::memcpy(&e, raw.data() + kHeader + i * kEntry, kEntry);
    DiscoveryEntry d;
    d.trtype = e.trtype;
    d.adrfam = e.adrfam;
    d.subtype = e.subtype;
    d.treq = e.treq;
    if (e.trtype == NVMF_TRTYPE_TCP) d.sectype = e.tsas.tcp.sectype;
    d.portid = e.portid;
    d.cntlid = e.cntlid;
    d.asqsz = e.asqsz;
    d.trsvcid = trimmed(e.trsvcid, sizeof e.trsvcid);
    d.subnqn = trimmed(e.subnqn, sizeof e.subnqn);
    d.traddr = trimmed(e.traddr, sizeof e.traddr);
    log.entries.push_back(std::move(d));
  }
  return log;
}

}  // namespace nvmeof
