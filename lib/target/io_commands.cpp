#include "target/io_commands.hpp"

#include <cstring>

#include "core/fabrics_command.hpp"
#include "target/ns_store.hpp"
#include "target/subsystem.hpp"

namespace nvmeof::target {
namespace {

constexpr NvmeStatus kWriteFault = NvmeStatus::make(Sct::media, 0x80);
constexpr NvmeStatus kUnrecoveredReadError = NvmeStatus::make(Sct::media, 0x81);
constexpr uint32_t kBroadcastNsid = 0xffffffffu;

NvmeStatus plan_range(NsStore& ns, uint64_t slba, uint64_t nlb, IoPlan& plan) {
  if (slba > ns.blocks() || nlb > ns.blocks() - slba) return status::kLbaOutOfRange;
  plan.offset = slba << ns.lba_shift();
  plan.len = nlb << ns.lba_shift();
  return status::kSuccess;
}

}  // namespace

NvmeStatus plan_io(const Subsystem& subsys, const Sqe& c, uint32_t max_transfer, IoPlan& plan) noexcept {
  plan = IoPlan{};
  if (c.opcode == opcode::kFlush && c.nsid == kBroadcastNsid) return status::kSuccess;
  switch (c.opcode) {
    case opcode::kFlush:
    case opcode::kRead:
    case opcode::kWrite:
    case opcode::kWriteZeroes:
    case opcode::kDatasetManagement: break;
    default: return status::kInvalidOpcode;
  }
  plan.ns = subsys.ns(c.nsid);
  if (!plan.ns) return status::kInvalidNamespace;
  switch (c.opcode) {
    case opcode::kRead:
    case opcode::kWrite: {
      if (auto st = plan_range(*plan.ns, rw_slba(c), rw_nlb(c), plan); !st.is_success()) return st;
      if (plan.len > max_transfer) return status::kInvalidField;
      plan.data_len = static_cast<uint32_t>(plan.len);
      plan.to_host = c.opcode == opcode::kRead;
      return status::kSuccess;
    }
    case opcode::kWriteZeroes: return plan_range(*plan.ns, rw_slba(c), rw_nlb(c), plan);
    case opcode::kDatasetManagement:
      plan.data_len = ((c.cdw10 & 0xff) + 1) * static_cast<uint32_t>(sizeof(DsmRange));
      return status::kSuccess;
    default: return status::kSuccess;  // Flush
  }
}

NvmeStatus execute_io(const Subsystem& subsys, const Sqe& c, const IoPlan& plan,
                      std::span<const uint8_t> in, uint8_t* out) noexcept {
  // A range the namespace no longer has (it shrank after the command was planned) is LBA Out of
  // Range, as it would have been had it come later; other failures are the medium's.
  auto status_of = [](const Result<void>& r, NvmeStatus failed) {
    if (r) return status::kSuccess;
    return r.error() == make_error_code(Errc::invalid_argument) ? status::kLbaOutOfRange : failed;
  };
  switch (c.opcode) {
    case opcode::kRead: return status_of(plan.ns->read(plan.offset, out, plan.data_len), kUnrecoveredReadError);
    case opcode::kWrite:
      if (in.size() < plan.data_len) return status::kDataTransferError;
      return status_of(plan.ns->write(plan.offset, in.data(), plan.data_len), kWriteFault);
    case opcode::kWriteZeroes: return status_of(plan.ns->zero(plan.offset, plan.len), kWriteFault);
    case opcode::kFlush: {
      if (plan.ns) return plan.ns->flush() ? status::kSuccess : kWriteFault;
      for (const auto& ns : subsys.namespaces())
        if (!ns->flush()) return kWriteFault;
      return status::kSuccess;
    }
    case opcode::kDatasetManagement: {
      if ((c.cdw11 & kDsmDeallocate) == 0) return status::kSuccess;  // hints only
      if (in.size() < plan.data_len) return status::kDataTransferError;
      const size_t n = plan.data_len / sizeof(DsmRange);
      // Check every range first so a bad one leaves the namespace untouched.
      for (size_t i = 0; i < n; ++i) {
        DsmRange r;
        std::memcpy(&r, in.data() + i * sizeof r, sizeof r);
        IoPlan p;
        if (auto st = plan_range(*plan.ns, r.slba, r.nlb, p); !st.is_success()) return st;
      }
      for (size_t i = 0; i < n; ++i) {
        DsmRange r;
        std::memcpy(&r, in.data() + i * sizeof r, sizeof r);
        IoPlan p;
        (void)plan_range(*plan.ns, r.slba, r.nlb, p);
        if (p.len && !plan.ns->zero(p.offset, p.len)) return kWriteFault;
      }
      return status::kSuccess;
    }
    default: return status::kInvalidOpcode;
  }
}

}  // namespace nvmeof::target
