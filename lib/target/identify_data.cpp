#include "target/identify_data.hpp"

#include <nvme/types.h>

#include <algorithm>
#include <cstring>

#include "target/ns_store.hpp"
#include "target/subsystem.hpp"

namespace nvmeof::target {
namespace {

// SN/MN/FR are space padded, not NUL terminated.
template <size_t N>
void put_padded(char (&dst)[N], const std::string& s) {
  std::memset(dst, ' ', N);
  std::memcpy(dst, s.data(), std::min(N, s.size()));
}

// NQNs and transport addresses are NUL padded.
template <size_t N>
void put_string(char (&dst)[N], const std::string& s) {
  std::memset(dst, 0, N);
  std::memcpy(dst, s.data(), std::min(N - 1, s.size()));
}

uint8_t ana_state_code(AnaState s) { return static_cast<uint8_t>(s); }

// TP8028 fields (NVMe 2.3), past libnvme 1.3's struct: CIU byte 135 and CIRN 143:136 sit in
// rsvd134, CCRL byte 1807 opens rsvd1807.
constexpr size_t kCiuInRsvd134 = 135 - 134;
constexpr size_t kCirnInRsvd134 = 136 - 134;

}  // namespace

void build_identify_controller(const TargetOptions& opts, const Subsystem& subsys,
                               const ControllerInstance& inst, uint32_t nports, nvme_id_ctrl& id) {
  std::memset(&id, 0, sizeof id);
  const bool disc = subsys.is_discovery();
  put_padded(id.sn, subsys.serial());
  put_padded(id.mn, subsys.model());
  put_padded(id.fr, "0.1");
  id.mdts = opts.mdts;
  id.cntlid = inst.cntlid;
  id.ver = 0x00020000;
  id.cntrltype = disc ? 2 : 1;
  // 128-bit host identifiers; keep-alive timer reset by any command (traffic based).
  id.ctratt = (1u << 0) | (1u << 6);
  id.acl = 3;
  id.aerl = 3;
  id.frmw = 0x03;  // one firmware slot, read-only
  id.lpa = 0x04;   // extended data (offsets) for Get Log Page
  id.kas = 1;      // keep-alive granularity: 100 ms
  id.sqes = 0x66;
  id.cqes = 0x44;
  id.maxcmd = static_cast<uint16_t>(std::min<uint32_t>(opts.max_queue_depth, 0xffff));
  // SGLS bits 1:0 = 01b (SGLs, no alignment rule); bit 20: in-capsule data addressed by offset.
  // No keyed descriptors (bit 2): those are RDMA's.
  id.sgls = 1u | NVME_CTRL_SGLS_OFFSET;
  id.msdbd = 1;
  id.iorcsz = 1;
  id.icdoff = 0;
  put_string(id.subnqn, subsys.nqn());
  if (disc) {
    id.ioccsz = 4;
    id.oaes = 1u << 31;  // Discovery Log Page Change notices
    return;
  }
  id.cmic = NVME_CTRL_CMIC_MULTI_PORT | NVME_CTRL_CMIC_MULTI_CTRL | NVME_CTRL_CMIC_MULTI_ANA_REPORTING;
  id.oaes = (1u << 11) | (1u << 8);  // ANA change and Namespace Attribute notices
  id.anatt = opts.anatt_s;
  id.crdt1 = opts.crdt_100ms[0];
  id.crdt2 = opts.crdt_100ms[1];
  id.crdt3 = opts.crdt_100ms[2];
  id.anacap = NVME_CTRL_ANACAP_OPT | NVME_CTRL_ANACAP_NON_OPT | NVME_CTRL_ANACAP_INACCESSIBLE |
              NVME_CTRL_ANACAP_PERSISTENT_LOSS | NVME_CTRL_ANACAP_CHANGE;
  id.anagrpmax = nports;
  id.nanagrpid = nports;
  // Command Quiesce Time, bytes 387:386 (NVMe 2.1; libnvme 1.3 keeps them in rsvd384). Not
  // reporting it (0) leaves the host to its own bound; the target honours cqt_ms either way.
  const uint16_t cqt = opts.report_cqt ? opts.cqt_ms : 0;
  std::memcpy(id.rsvd384 + 2, &cqt, sizeof cqt);
  id.rsvd134[kCiuInRsvd134] = inst.ciu;
  std::memcpy(id.rsvd134 + kCirnInRsvd134, &inst.cirn, sizeof inst.cirn);
  id.rsvd1807[0] = opts.ccr == CcrSupport::enabled ? kCcrLimit : 0;
  id.nn = subsys.max_nsid();
  id.mnan = subsys.max_nsid();
  id.oncs = NVME_CTRL_ONCS_DSM | NVME_CTRL_ONCS_WRITE_ZEROES;
  id.vwc = 0x07;  // volatile write cache present; Flush to all namespaces supported
  id.ioccsz = (64 + opts.in_capsule_data) / 16;
}

void build_identify_namespace(const NsStore& ns, uint32_t anagrpid, nvme_id_ns& id) {
  std::memset(&id, 0, sizeof id);
  id.nsze = id.ncap = id.nuse = ns.blocks();
  id.nlbaf = 0;
  id.flbas = 0;
  id.nmic = 1;     // may be shared by several controllers
  id.dlfeat = 1;   // deallocated blocks read as zeroes
  id.anagrpid = anagrpid;
  std::memcpy(id.nguid, ns.nguid().data(), sizeof id.nguid);
  id.lbaf[0].ds = ns.lba_shift();
}

void build_ns_descriptors(const NsStore& ns, std::span<uint8_t, kIdentifyLen> out) {
  std::fill(out.begin(), out.end(), 0);
  size_t at = 0;
  auto put = [&](uint8_t type, const uint8_t* p, uint8_t len) {
    nvme_ns_id_desc d{};
    d.nidt = type;
    d.nidl = len;
    std::memcpy(out.data() + at, &d, sizeof d);
    std::memcpy(out.data() + at + sizeof d, p, len);
    at += sizeof d + len;
  };
  put(NVME_NIDT_NGUID, ns.nguid().data(), 16);
  put(NVME_NIDT_UUID, ns.uuid().data(), 16);
  const uint8_t csi_nvm = 0;
  put(NVME_NIDT_CSI, &csi_nvm, 1);
}

void build_active_ns_list(const Subsystem& subsys, uint32_t after, std::span<uint8_t, kIdentifyLen> out) {
  std::fill(out.begin(), out.end(), 0);
  size_t n = 0;
  for (const auto& ns : subsys.namespaces()) {
    if (ns->nsid() <= after) continue;
    if (n == kIdentifyLen / 4) break;
    const uint32_t id = ns->nsid();
    std::memcpy(out.data() + 4 * n++, &id, 4);
  }
}

std::vector<uint8_t> build_ana_log(uint64_t chgcnt, std::span<const AnaGroupView> groups, size_t own,
                                   std::span<const uint32_t> nsids, bool groups_only) {
  const size_t listed = groups_only ? 0 : nsids.size();
  std::vector<uint8_t> out(sizeof(nvme_ana_log) + groups.size() * sizeof(nvme_ana_group_desc) +
                           listed * sizeof(uint32_t));
  nvme_ana_log hdr{};
  hdr.chgcnt = chgcnt;
  hdr.ngrps = static_cast<uint16_t>(groups.size());
  std::memcpy(out.data(), &hdr, sizeof hdr);
  size_t at = sizeof hdr;
  for (size_t g = 0; g < groups.size(); ++g) {
    const bool mine = g == own && !groups_only;
    nvme_ana_group_desc d{};
    d.grpid = static_cast<uint32_t>(g + 1);
    d.nnsids = mine ? static_cast<uint32_t>(nsids.size()) : 0;
    d.chgcnt = groups[g].chgcnt;
    d.state = ana_state_code(groups[g].state);
    std::memcpy(out.data() + at, &d, sizeof d);
    at += sizeof d;
    if (!mine) continue;
    std::memcpy(out.data() + at, nsids.data(), nsids.size_bytes());
    at += nsids.size_bytes();
  }
  return out;
}

std::vector<uint8_t> build_discovery_log(uint64_t genctr, std::span<const DiscoveryRecord> records) {
  std::vector<uint8_t> out(sizeof(nvmf_discovery_log) + records.size() * sizeof(nvmf_disc_log_entry));
  nvmf_discovery_log hdr{};
  hdr.genctr = genctr;
  hdr.numrec = records.size();
  hdr.recfmt = 0;
  std::memcpy(out.data(), &hdr, sizeof hdr);
  size_t at = sizeof hdr;
  for (const auto& r : records) {
    nvmf_disc_log_entry e{};
    e.trtype = NVMF_TRTYPE_TCP;
    e.adrfam = r.adrfam;
    e.subtype = NVME_NQN_NVME;
    e.treq = r.treq;
    e.portid = r.portid;
    e.cntlid = 0xffff;  // dynamic controller model
    e.asqsz = 32;
    e.eflags = NVMF_DISC_EFLAGS_NONE;
    put_string(e.trsvcid, r.trsvcid);
    put_string(e.subnqn, r.subnqn);
    put_string(e.traddr, r.traddr);
    e.tsas.tcp.sectype = r.sectype;
    std::memcpy(out.data() + at, &e, sizeof e);
    at += sizeof e;
  }
  return out;
}

}  // namespace nvmeof::target
