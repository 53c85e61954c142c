#include "target/admin_commands.hpp"

#include <nvme/types.h>

#include <algorithm>
#include <cstring>
#include <span>

#include "target/controller.hpp"
#include "target/identify_data.hpp"
#include "target/subsystem.hpp"
#include "target/target_core.hpp"

namespace nvmeof::target {
namespace {

constexpr NvmeStatus kInvalidLogPage = NvmeStatus::make(Sct::command_specific, 0x09, true);
constexpr uint8_t kLogError = 0x01;
constexpr uint8_t kLogSmart = 0x02;
constexpr uint8_t kLogFwSlot = 0x03;
constexpr uint8_t kCnsNvmController = 0x06;

AdminResult identify(const AdminContext& ctx, const Sqe& c, std::vector<uint8_t>& out) {
  const Subsystem& s = ctx.ctrl.subsystem();
  const uint8_t cns_value = c.cdw10 & 0xff;
  out.assign(kIdentifyLen, 0);
  std::span<uint8_t, kIdentifyLen> buf(out.data(), kIdentifyLen);
  switch (cns_value) {
    case cns::kController: {
      nvme_id_ctrl id;
      build_identify_controller(ctx.core.opts, s, ctx.ctrl.cntlid(),
                                static_cast<uint32_t>(ctx.core.ports.size()), id);
      std::memcpy(out.data(), &id, sizeof id);
      return {status::kSuccess};
    }
    case cns::kNamespace: {
      if (s.is_discovery()) return {status::kInvalidField};
      if (c.nsid == 0 || c.nsid > s.max_nsid()) return {status::kInvalidNamespace};
      const NsStore* ns = s.ns(c.nsid);
      if (!ns) return {status::kSuccess};  // an inactive nsid reads as zeroes
      nvme_id_ns id;
      build_identify_namespace(*ns, static_cast<uint32_t>(ctx.ctrl.port() + 1), id);
      std::memcpy(out.data(), &id, sizeof id);
      return {status::kSuccess};
    }
    case cns::kActiveNamespaceList:
      if (s.is_discovery() || c.nsid >= 0xfffffffeu) return {status::kInvalidField};
      build_active_ns_list(s, c.nsid, buf);
      return {status::kSuccess};
    case cns::kNamespaceDescriptors: {
      if (s.is_discovery()) return {status::kInvalidField};
      const NsStore* ns = s.ns(c.nsid);
      if (!ns) return {status::kInvalidNamespace};
      build_ns_descriptors(*ns, buf);
      return {status::kSuccess};
    }
    case kCnsNvmController:
      // NVM command set specific controller data: all zero means no size limits beyond MDTS.
      // Linux asks for it to size Write Zeroes, DSM and Verify.
      if (s.is_discovery() || (c.cdw11 >> 24) != 0) break;
      return {status::kSuccess};
    default: break;
  }
  out.clear();
  return {status::kInvalidField};
}

std::vector<uint8_t> whole_log(const AdminContext& ctx, uint8_t lid, uint8_t lsp, bool& known) {
  const Subsystem& s = ctx.ctrl.subsystem();
  known = true;
  if (s.is_discovery()) {
    if (lid == 0x70) return build_discovery_log(1, ctx.core.discovery_records(ctx.local_addr));
    known = false;
    return {};
  }
  switch (lid) {
    case kLogError: return std::vector<uint8_t>(64, 0);
    case kLogSmart: {
      std::vector<uint8_t> log(512, 0);
      log[3] = 100;  // available spare, percent
      log[4] = 10;   // available spare threshold
      return log;
    }
    case kLogFwSlot: {
      std::vector<uint8_t> log(512, 0);
      log[0] = 1;  // slot 1 active
      std::memcpy(log.data() + 8, "0.1     ", 8);
      return log;
    }
    case log_page::kAna: {
      std::vector<uint32_t> nsids;
      for (const auto& ns : s.namespaces()) nsids.push_back(ns->nsid());
      const auto groups = ctx.core.ana_groups();
      return build_ana_log(ctx.core.ana_chgcnt.load(std::memory_order_acquire), groups,
                           ctx.ctrl.port(), nsids, (lsp & 1) != 0);
    }
    default: known = false; return {};
  }
}

AdminResult get_log_page(const AdminContext& ctx, const Sqe& c, std::vector<uint8_t>& out) {
  const uint8_t lid = c.cdw10 & 0xff;
  const uint8_t lsp = (c.cdw10 >> 8) & 0x7f;
  const uint64_t numd = ((static_cast<uint64_t>(c.cdw11 & 0xffff) << 16) | (c.cdw10 >> 16)) + 1;
  const uint64_t offset = c.cdw12 | (static_cast<uint64_t>(c.cdw13) << 32);
  if (offset & 3) return {status::kInvalidField};
  bool known = false;
  const std::vector<uint8_t> log = whole_log(ctx, lid, lsp, known);
  if (!known) return {kInvalidLogPage};
  if (offset > log.size()) return {status::kInvalidField};
  // Never allocate what a hostile NUMD asks for: the reply is bounded by the transfer limit.
  const uint64_t len = std::min<uint64_t>(numd * 4, ctx.core.max_transfer());
  out.assign(len, 0);
  const uint64_t avail = std::min<uint64_t>(len, log.size() - offset);
  std::memcpy(out.data(), log.data() + offset, avail);
  return {status::kSuccess};
}

AdminResult set_features(const AdminContext& ctx, const Sqe& c) {
  Controller& ctrl = ctx.ctrl;
  switch (c.cdw10 & 0xff) {
    case feature::kNumberOfQueues: {
      if (ctrl.subsystem().is_discovery()) return {status::kInvalidField};
      const uint32_t nsqr = c.cdw11 & 0xffff, ncqr = c.cdw11 >> 16;
      if (nsqr == 0xffff || ncqr == 0xffff) return {status::kInvalidField};
      const uint32_t max = ctx.core.opts.max_io_queues;
      const uint32_t nsqa = std::min(nsqr + 1, max), ncqa = std::min(ncqr + 1, max);
      ctrl.io_queues_granted = static_cast<uint16_t>(std::min(nsqa, ncqa));
      return {status::kSuccess, ((ncqa - 1) << 16) | (nsqa - 1)};
    }
    case feature::kKeepAliveTimer: ctrl.kato_ms = c.cdw11; return {status::kSuccess};
    case feature::kAsyncEventConfig: ctrl.aec = c.cdw11; return {status::kSuccess};
    default: return {status::kInvalidField};
  }
}

AdminResult get_features(const AdminContext& ctx, const Sqe& c) {
  const Controller& ctrl = ctx.ctrl;
  switch (c.cdw10 & 0xff) {
    case feature::kNumberOfQueues: {
      if (ctrl.subsystem().is_discovery()) return {status::kInvalidField};
      const uint32_t n = ctrl.io_queues_granted ? ctrl.io_queues_granted : ctx.core.opts.max_io_queues;
      return {status::kSuccess, ((n - 1) << 16) | (n - 1)};
    }
    case feature::kKeepAliveTimer: return {status::kSuccess, ctrl.kato_ms};
    case feature::kAsyncEventConfig: return {status::kSuccess, ctrl.aec};
    default: return {status::kInvalidField};
  }
}

}  // namespace

AdminResult execute_admin(const AdminContext& ctx, const Sqe& c, std::vector<uint8_t>& out) {
  out.clear();
  switch (c.opcode) {
    case opcode::kIdentify: return identify(ctx, c, out);
    case opcode::kGetLogPage: return get_log_page(ctx, c, out);
    case opcode::kSetFeatures: return set_features(ctx, c);
    case opcode::kGetFeatures: return get_features(ctx, c);
    case opcode::kKeepAlive: return {status::kSuccess};
    default: return {status::kInvalidOpcode};
  }
}

}  // namespace nvmeof::target
