#include "target/admin_commands.hpp"

#include <nvme/types.h>

#include <algorithm>
#include <cstring>
#include <span>

#include "target/clock.hpp"
#include "target/controller.hpp"
#include "target/cross_controller_reset.hpp"
#include "target/held_writes.hpp"
#include "target/identify_data.hpp"
#include "target/port.hpp"
#include "target/subsystem.hpp"
#include "target/target_core.hpp"
#include "target/tcp_connection.hpp"

namespace nvmeof::target {
namespace {

constexpr NvmeStatus kInvalidLogPage = NvmeStatus::make(Sct::command_specific, 0x09, true);
constexpr uint8_t kLogError = 0x01;
constexpr uint8_t kLogSmart = 0x02;
constexpr uint8_t kLogFwSlot = 0x03;
constexpr uint8_t kCnsNvmController = 0x06;
constexpr uint8_t kLspRmc = 0x01;  // CCR log: remove the completed entries returned
// How far past CQT a CCR waits on its admin thread for the impacted controller to stop.
constexpr uint64_t kCcrSyncSlackNs = 5'000'000;
// How long the worker waits for an impacted controller before it calls the reset failed. Every
// queue of ours stops within a wake-up; this only bounds a thread the machine starved.
constexpr uint64_t kCcrAsyncBoundNs = 5'000'000'000;
constexpr NvmeStatus ccr_status(uint8_t sc) { return NvmeStatus::make(Sct::command_specific, sc, true); }

AdminResult identify(const AdminContext& ctx, const Sqe& c, std::vector<uint8_t>& out) {
  const Subsystem& s = ctx.ctrl.subsystem();
  const uint8_t cns_value = c.cdw10 & 0xff;
  out.assign(kIdentifyLen, 0);
  std::span<uint8_t, kIdentifyLen> buf(out.data(), kIdentifyLen);
  switch (cns_value) {
    case cns::kController: {
      nvme_id_ctrl id;
      const bool disc = s.is_discovery();
      const ControllerInstance inst{ctx.ctrl.cntlid(), disc ? uint8_t{0} : ctx.ctrl.ciu(),
                                    disc ? uint64_t{0} : ctx.ctrl.cirn()};
      build_identify_controller(ctx.core.opts, s, inst,
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

// `offset`/`len`: the part the host asked for (the CCR log's RMC removes only what it returns).
// `rae`: Retain Asynchronous Event (a read that leaves the event of its log masked).
std::vector<uint8_t> whole_log(const AdminContext& ctx, uint8_t lid, uint8_t lsp, bool rae, uint64_t offset,
                               uint64_t len, bool& known) {
  const Subsystem& s = ctx.ctrl.subsystem();
  known = true;
  if (s.is_discovery()) {
    // A host sees only the subsystems it may connect to.
    if (lid == 0x70) {
      if (!rae) ctx.ctrl.disc_notice_masked = false;
      return build_discovery_log(ctx.core.discovery_genctr.load(std::memory_order_acquire),
                                 ctx.core.discovery_records(ctx.local_addr, ctx.ctrl.hostnqn()));
    }
    known = false;
    return {};
  }
  switch (lid) {
    case log_page::kChangedNamespaces: {
      if (!rae) ctx.ctrl.ns_notice_masked = false;
      std::vector<uint8_t> log(4096, 0);
      const auto ids = ctx.ctrl.changed_ns(rae);
      if (!ids.empty()) std::memcpy(log.data(), ids.data(), std::min(ids.size(), size_t{1024}) * 4);
      return log;
    }
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
    case log_page::kCrossControllerReset:
      if (ctx.core.opts.ccr == CcrSupport::disabled) break;
      return ctx.ctrl.ccr_log((lsp & kLspRmc) != 0, offset, len);
    default: break;
  }
  known = false;
  return {};
}

AdminResult get_log_page(const AdminContext& ctx, const Sqe& c, std::vector<uint8_t>& out) {
  const uint8_t lid = c.cdw10 & 0xff;
  const uint8_t lsp = (c.cdw10 >> 8) & 0x7f;
  const uint64_t numd = ((static_cast<uint64_t>(c.cdw11 & 0xffff) << 16) | (c.cdw10 >> 16)) + 1;
  const uint64_t offset = c.cdw12 | (static_cast<uint64_t>(c.cdw13) << 32);
  if (offset & 3) return {status::kInvalidField};
  // Never allocate what a hostile NUMD asks for: the reply is bounded by the transfer limit.
  const uint64_t len = std::min<uint64_t>(numd * 4, ctx.core.max_transfer());
  bool known = false;
  const bool rae = (c.cdw10 >> 15) & 1;
  const std::vector<uint8_t> log = whole_log(ctx, lid, lsp, rae, offset, len, known);
  if (!known) return {kInvalidLogPage};
  if (offset > log.size()) return {status::kInvalidField};
  out.assign(len, 0);
  const uint64_t avail = std::min<uint64_t>(len, log.size() - offset);
  std::memcpy(out.data(), log.data() + offset, avail);
  return {status::kSuccess};
}

// Temperature Threshold (04h) CDW11: TMPTH 15:0, TMPSEL 19:16, THSEL 21:20. Only the composite
// temperature (TMPSEL 0) exists here.
constexpr uint32_t kThselUnder = 1;
constexpr uint32_t kErrorRecoveryDulbe = 1u << 16;
// Get Features SEL (CDW10 10:8) and the capabilities it reports for SEL 011b.
constexpr uint32_t kSelDefault = 1;
constexpr uint32_t kSelSupported = 3;
constexpr uint32_t kCapChangeable = 1u << 2;

AdminResult set_features(const AdminContext& ctx, const Sqe& c) {
  Controller& ctrl = ctx.ctrl;
  const bool disc = ctrl.subsystem().is_discovery();
  switch (c.cdw10 & 0xff) {
    case feature::kNumberOfQueues: {
      if (disc) return {status::kInvalidField};
      // Base spec, Number of Queues: set only before any I/O queue was created.
      if (ctrl.had_io_queues()) return {status::kCommandSequenceError};
      const uint32_t nsqr = c.cdw11 & 0xffff, ncqr = c.cdw11 >> 16;
      if (nsqr == 0xffff || ncqr == 0xffff) return {status::kInvalidField};
      const uint32_t max = ctx.core.opts.max_io_queues;
      const uint32_t nsqa = std::min(nsqr + 1, max), ncqa = std::min(ncqr + 1, max);
      ctrl.io_queues_granted = static_cast<uint16_t>(std::min(nsqa, ncqa));
      return {status::kSuccess, ((ncqa - 1) << 16) | (nsqa - 1)};
    }
    case feature::kKeepAliveTimer: ctrl.set_kato(c.cdw11); return {status::kSuccess};
    case feature::kAsyncEventConfig: ctrl.aec = c.cdw11; return {status::kSuccess};
    case feature::kArbitration:
      if (disc) return {status::kInvalidField};
      ctrl.arbitration = c.cdw11;
      return {status::kSuccess};
    case feature::kPowerManagement:
      if (disc || (c.cdw11 & 0x1f) != 0) return {status::kInvalidField};  // NPSS 0: one state
      ctrl.power_management = c.cdw11 & 0xff;
      return {status::kSuccess};
    case feature::kTemperatureThreshold: {
      if (disc || ((c.cdw11 >> 16) & 0xf) != 0 || ((c.cdw11 >> 20) & 3) > kThselUnder)
        return {status::kInvalidField};
      const auto th = static_cast<uint16_t>(c.cdw11 & 0xffff);
      (((c.cdw11 >> 20) & 3) == kThselUnder ? ctrl.temp_under : ctrl.temp_over) = th;
      return {status::kSuccess};
    }
    case feature::kErrorRecovery:
      if (disc || (c.cdw11 & kErrorRecoveryDulbe)) return {status::kInvalidField};
      ctrl.error_recovery = c.cdw11 & 0xffff;
      return {status::kSuccess};
    case feature::kVolatileWriteCache:
      if (disc) return {status::kInvalidField};
      ctrl.write_cache.store((c.cdw11 & 1) != 0, std::memory_order_release);
      return {status::kSuccess};
    default: return {status::kInvalidField};
  }
}

AdminResult get_features(const AdminContext& ctx, const Sqe& c) {
  const Controller& ctrl = ctx.ctrl;
  const bool disc = ctrl.subsystem().is_discovery();
  const uint32_t sel = (c.cdw10 >> 8) & 7;
  const uint8_t fid = c.cdw10 & 0xff;
  // Features of the NVM subsystem that a discovery controller does not have.
  const bool nvm_only = fid == feature::kArbitration || fid == feature::kPowerManagement ||
                        fid == feature::kTemperatureThreshold || fid == feature::kErrorRecovery ||
                        fid == feature::kVolatileWriteCache || fid == feature::kNumberOfQueues;
  if (disc && nvm_only) return {status::kInvalidField};
  if (sel == kSelSupported) {
    switch (fid) {
      case feature::kArbitration:
      case feature::kPowerManagement:
      case feature::kTemperatureThreshold:
      case feature::kErrorRecovery:
      case feature::kVolatileWriteCache:
      case feature::kNumberOfQueues:
      case feature::kKeepAliveTimer:
      case feature::kAsyncEventConfig: return {status::kSuccess, kCapChangeable};
      default: return {status::kInvalidField};
    }
  }
  const bool dflt = sel == kSelDefault;  // saved (010b) reads as current: nothing is saved
  switch (fid) {
    case feature::kNumberOfQueues: {
      const uint32_t n = ctrl.io_queues_granted && !dflt ? ctrl.io_queues_granted : ctx.core.opts.max_io_queues;
      return {status::kSuccess, ((n - 1) << 16) | (n - 1)};
    }
    case feature::kKeepAliveTimer: return {status::kSuccess, dflt ? 0 : ctrl.kato_ms};
    case feature::kAsyncEventConfig: return {status::kSuccess, dflt ? kAecAnaChange : ctrl.aec};
    case feature::kArbitration: return {status::kSuccess, dflt ? 0 : ctrl.arbitration};
    case feature::kPowerManagement: return {status::kSuccess, dflt ? 0 : ctrl.power_management};
    case feature::kTemperatureThreshold: {
      if (((c.cdw11 >> 16) & 0xf) != 0 || ((c.cdw11 >> 20) & 3) > kThselUnder) return {status::kInvalidField};
      const bool under = ((c.cdw11 >> 20) & 3) == kThselUnder;
      const uint16_t v = dflt ? (under ? uint16_t{0} : kDefaultTempOver) : (under ? ctrl.temp_under : ctrl.temp_over);
      return {status::kSuccess, v};
    }
    case feature::kErrorRecovery: return {status::kSuccess, dflt ? 0 : ctrl.error_recovery};
    case feature::kVolatileWriteCache:
      return {status::kSuccess, dflt || ctrl.write_cache.load(std::memory_order_acquire) ? 1u : 0u};
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
    case opcode::kKeepAlive:
      ctx.core.ports[ctx.ctrl.port()]->counters().keep_alive_commands.fetch_add(1, std::memory_order_relaxed);
      return {status::kSuccess};
    case opcode::kCrossControllerReset: return cross_controller_reset(ctx, c);
    default: return {status::kInvalidOpcode};
  }
}

// -- Cross-Controller Reset (declared in cross_controller_reset.hpp) --

namespace {

// True once `impacted` can execute nothing more: every queue stopped, no held write left to run.
bool quiesce(TargetCore& core, Controller& impacted, uint64_t deadline_ns) {
  return impacted.wait_quiesced(deadline_ns) && core.held.purge(impacted, deadline_ns);
}

}  // namespace

AdminResult cross_controller_reset(const AdminContext& ctx, const Sqe& c) {
  Controller& self = ctx.ctrl;
  Subsystem& subsys = self.subsystem();
  const TargetOptions& opts = ctx.core.opts;
  if (opts.ccr == CcrSupport::disabled || subsys.is_discovery()) return {status::kInvalidOpcode};
  Port::Counters& counters = ctx.core.ports[self.port()]->counters();
  counters.ccr_received.fetch_add(1, std::memory_order_relaxed);
  const auto icid = static_cast<uint16_t>(c.cdw10 & 0xffff);
  const auto ciu = static_cast<uint8_t>(c.cdw10 >> 16);
  const uint64_t cirn = c.cdw12 | (static_cast<uint64_t>(c.cdw13) << 32);
  if (icid == self.cntlid()) return {status::kInvalidField};
  switch (self.admit_ccr(icid, kCcrLimit)) {
    case Controller::CcrAdmission::admitted: break;
    case Controller::CcrAdmission::in_progress: return {ccr_status(ccr::kScInProgress)};
    case Controller::CcrAdmission::limit_exceeded: return {ccr_status(ccr::kScLimitExceeded)};
    case Controller::CcrAdmission::log_full: return {ccr_status(ccr::kScLogFull)};
  }
  std::shared_ptr<Controller> impacted = subsys.controller(icid);
  if (!impacted || impacted->is_torn_down() || impacted->hostnqn() != self.hostnqn() ||
      impacted->ciu() != ciu || impacted->cirn() != cirn)
    return {status::kInvalidField};

  // Fenced before the teardown: a held write must not slip through in the CQT window a
  // keep-alive expiry would leave it.
  impacted->fence();
  impacted->tear_down();
  subsys.remove_controller(impacted.get());
  const uint64_t start = now_ns();
  if (!opts.ccr_async) {
    const uint64_t deadline = start + uint64_t{opts.cqt_ms} * 1'000'000 + kCcrSyncSlackNs;
    if (quiesce(ctx.core, *impacted, deadline)) {
      counters.ccr_completed.fetch_add(1, std::memory_order_relaxed);
      return {status::kSuccess, ccr::kImmediateResetSuccessful | ccr::kValidated |
                                    ccr::kControllerLevelReset};
    }
  }
  self.add_ccr_entry(icid, ciu);
  const auto delay_ns = static_cast<uint64_t>(std::max<int64_t>(opts.ccr_async_delay.count(), 0)) * 1'000'000;
  ctx.core.ccr.submit({self.shared_from_this(), std::move(impacted), icid, start + delay_ns});
  return {status::kSuccess, 0};
}

CcrWorker::~CcrWorker() { stop(); }

void CcrWorker::start() { thread_ = std::thread([this] { run(); }); }

void CcrWorker::stop() {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  jobs_.clear();
}

void CcrWorker::submit(Job j) {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    jobs_.push_back(std::move(j));
  }
  cv_.notify_all();
}

void CcrWorker::run() noexcept {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    if (jobs_.empty()) {
      cv_.wait(lock);
      continue;
    }
    Job j = std::move(jobs_.front());
    jobs_.pop_front();
    lock.unlock();
    const bool ok = quiesce(core_, *j.impacted, now_ns() + kCcrAsyncBoundNs);
    lock.lock();
    // Jobs keep their order: with one delay for all, each one's report time comes after the
    // previous one's.
    while (!stopping_ && now_ns() < j.report_after_ns)
      cv_.wait_for(lock, std::chrono::nanoseconds(j.report_after_ns - now_ns()));
    if (stopping_) break;
    lock.unlock();
    j.issuer->finish_ccr_entry(j.icid, ok ? ccr::kStatusSuccess : ccr::kStatusFailed);
    if (ok)
      core_.ports[j.issuer->port()]->counters().ccr_completed.fetch_add(1, std::memory_order_relaxed);
    // No agreed AEC/OAES bit names this notice, so it is always sent.
    if (auto admin = j.issuer->admin_connection()) admin->post_event(kCcrCompletedEvent);
    lock.lock();
  }
}

}  // namespace nvmeof::target
