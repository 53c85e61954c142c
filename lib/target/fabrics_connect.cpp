#include "target/fabrics_connect.hpp"

#include <nvme/types.h>

#include <cstddef>
#include <cstring>
#include <string>

#include "core/fabrics_command.hpp"
#include "target/clock.hpp"
#include "target/controller.hpp"
#include "target/queue_auth.hpp"
#include "target/subsystem.hpp"
#include "target/target_core.hpp"

namespace nvmeof::target {
namespace {

constexpr NvmeStatus kIncompatibleFormat = NvmeStatus::make(Sct::command_specific, 0x80, true);
constexpr NvmeStatus kControllerBusy = NvmeStatus::make(Sct::command_specific, 0x81, true);
// Byte offsets in the Connect SQE of the fields IPO may name.
constexpr uint32_t kSqeQidOffset = 42;
constexpr uint32_t kSqeSqsizeOffset = 44;
constexpr uint32_t kSqeCattrOffset = 46;

// Connect Invalid Parameters: DW0 bit 16 IATTR (1: in the connect data), bits 15:0 IPO; `why`
// for the line the connection logs.
ConnectResult invalid(bool in_data, uint32_t offset, const char* why) {
  ConnectResult r;
  r.status = status::kConnectInvalidParameters;
  r.dw0 = (in_data ? 1u << 16 : 0u) | offset;
  r.refused_why = why;
  return r;
}

ConnectResult failed(NvmeStatus st) {
  ConnectResult r;
  r.status = st;
  return r;
}

// An NQN as the log prints it: what a host sent may hold any byte.
std::string printable(const std::string& s) {
  std::string out = s;
  for (char& ch : out)
    if (ch < 0x20 || ch > 0x7e) ch = '?';
  return out;
}

template <size_t N>
std::string bounded(const char (&s)[N]) {
  return std::string(s, ::strnlen(s, N));
}

}  // namespace

ConnectResult accept_connect(TargetCore& core, size_t port, const Sqe& c,
                             std::span<const uint8_t> data, const std::shared_ptr<TcpConnection>& conn) {
  const uint16_t recfmt = c.cdw10 & 0xffff;
  const auto qid = static_cast<uint16_t>(c.cdw10 >> 16);
  const uint32_t sqsize = c.cdw11 & 0xffff;
  if (recfmt != 0) return failed(kIncompatibleFormat);
  if (data.size() < sizeof(nvmf_connect_data)) return failed(status::kInvalidField);
  nvmf_connect_data d;
  std::memcpy(&d, data.data(), sizeof d);
  const std::string subnqn = bounded(d.subsysnqn);
  const std::string hostnqn = bounded(d.hostnqn);

  // Who connects must be named: allow lists and CCR's same-host rule rest on it.
  if (hostnqn.empty())
    return invalid(true, offsetof(nvmf_connect_data, hostnqn), "the Connect names no host (HOSTNQN is empty)");
  Subsystem* subsys = core.subsystem(subnqn);
  if (!subsys) {
    ConnectResult r = invalid(true, offsetof(nvmf_connect_data, subsysnqn), "no such subsystem (SUBNQN)");
    r.refused_subsystem = printable(subnqn);
    return r;
  }
  // Access control, admin and I/O queues alike (the discovery subsystem allows any host).
  if (!subsys->allows(hostnqn)) {
    ConnectResult r = failed(status::kConnectInvalidHost);
    r.refused_host = printable(hostnqn);
    r.refused_subsystem = printable(subnqn);
    return r;
  }
  if (sqsize == 0 || sqsize + 1 > core.opts.max_queue_depth)
    return invalid(false, kSqeSqsizeOffset, "SQSIZE is 0 or above the maximum queue depth");

  ConnectResult r;
  r.subsys = subsys;
  r.qid = qid;
  r.sq_entries = sqsize + 1;
  r.sq_flow_control = ((c.cdw11 >> 16) & kConnectDisableSqFlowControl) == 0;
  if (!r.sq_flow_control && !core.opts.allow_sq_flow_control_disable)
    return invalid(false, kSqeCattrOffset, "SQ flow control may not be disabled (CATTR)");
  if (qid == 0) {
    r.ctrl = subsys->create_controller(port, hostnqn, d.hostid);
    if (!r.ctrl) return failed(kControllerBusy);
    r.ctrl->set_kato(c.cdw12);
    r.ctrl->attach_admin(conn);
  } else {
    if (subsys->is_discovery() || qid > core.opts.max_io_queues)
      return invalid(false, kSqeQidOffset, "no such I/O queue (QID)");
    r.ctrl = subsys->controller(d.cntlid);
    if (!r.ctrl) return invalid(true, offsetof(nvmf_connect_data, cntlid), "no such controller (CNTLID)");
    if (!r.ctrl->same_host(hostnqn, d.hostid))
      return invalid(true, offsetof(nvmf_connect_data, hostnqn), "another host's controller (HOSTNQN or HOSTID)");
    if (auto st = r.ctrl->bind_io_queue(qid, conn); !st.is_success()) return failed(st);
  }
  r.ctrl->touch(now_ns());
  r.host = find_host_entry(core.opts, subnqn, hostnqn);
  r.status = status::kSuccess;
  r.dw0 = r.ctrl->cntlid();
  return r;
}

}  // namespace nvmeof::target
