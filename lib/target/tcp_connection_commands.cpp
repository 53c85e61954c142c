// TcpConnection, part two: what happens to a command once its capsule arrived. Validation of
// its data descriptor, the port's faults (ANA state, failing, latency, held writes), and the
// dispatch to Fabrics, admin and I/O execution.
#include <poll.h>

#include <algorithm>
#include <cstring>

#include "core/fabrics_command.hpp"
#include "auth/messages.hpp"
#include "target/admin_commands.hpp"
#include "target/clock.hpp"
#include "target/controller.hpp"
#include "target/fabrics_connect.hpp"
#include "target/held_writes.hpp"
#include "target/identify_data.hpp"
#include "target/ns_store.hpp"
#include "target/port.hpp"
#include "target/queue_auth.hpp"
#include "target/subsystem.hpp"
#include "target/target_core.hpp"
#include "target/tcp_connection.hpp"

namespace nvmeof::target {
namespace {

constexpr NvmeStatus kSglDataLengthInvalid = NvmeStatus::make(Sct::generic, 0x0f, true);
constexpr NvmeStatus kSglOffsetInvalid = NvmeStatus::make(Sct::generic, 0x16, true);
constexpr NvmeStatus kAerLimitExceeded = NvmeStatus::make(Sct::command_specific, 0x05, true);
// Asynchronous event: type 2 (notice), information 03h (ANA change), log page 0Ch.
constexpr uint32_t kAnaChangeEvent = 0x000C0302;
constexpr NvmeStatus kWriteFault = NvmeStatus::make(Sct::media, 0x80);
constexpr size_t kMaxAers = 4;  // AERL + 1

bool is_connect(const Sqe& c) {
  return c.opcode == opcode::kFabrics && fabrics_type(c) == fctype::kConnect;
}

bool changes_data(const Sqe& c) {
  return c.opcode == opcode::kWrite || c.opcode == opcode::kWriteZeroes ||
         c.opcode == opcode::kDatasetManagement;
}

}  // namespace

void TcpConnection::start_command(Slot& s, uint32_t icd_len) {
  const uint64_t now = now_ns();
  port_.counters().commands.fetch_add(1, std::memory_order_relaxed);
  if (ctrl_) ctrl_->touch(now);
  if (sq_entries_) sq_head_ = (sq_head_ + 1) % sq_entries_;
  const Sqe& c = s.sqe;
  if (!s.early.is_success()) return complete(s, s.early);
  // Connect once, first; nothing else until it completed. A Connect in any other phase (one in
  // hand, the queue live) is refused and leaves the queue as it is.
  const bool connect = is_connect(c);
  if (connect ? phase_ != Phase::await_connect : phase_ != Phase::live)
    return complete(s, status::kCommandSequenceError);
  if (qid_ != 0 && c.opcode != opcode::kFabrics && port_.take_drop()) {
    // Lost on the way in: the host waits for an answer that never comes.
    port_.counters().commands_dropped.fetch_add(1, std::memory_order_relaxed);
    return free_slot(s);
  }
  if (auto st = classify_data(s, icd_len); !st.is_success()) return complete(s, st);
  if (qid_ != 0 && c.opcode != opcode::kFabrics) {
    if (auto st = check_io(s); !st.is_success()) return complete(s, st);
  }
  if (connect) {
    phase_ = Phase::connecting;
    connect_slot_ = s.index;
  }
  if (s.h2c && !s.in_capsule && s.xfer_len > 0) {
    s.buf.resize(s.xfer_len);
    s.received = 0;
    send_r2t(s);
    return;
  }
  command_ready(s);
}

NvmeStatus TcpConnection::classify_data(Slot& s, uint32_t icd_len) const {
  const Sqe& c = s.sqe;
  const bool sgl = (c.flags & 0xc0) == sgl::kPsdtSgl;
  if (!sgl) return icd_len ? status::kInvalidField : status::kSuccess;
  const uint32_t len = sgl_length(c);
  if (len == 0) return status::kSuccess;  // in-capsule bytes without a descriptor are ignored
  const bool to_ctrl = is_host_to_controller(c);
  if (!to_ctrl && !is_controller_to_host(c)) return status::kSuccess;  // a command without data
  if (len > max_transfer_) return status::kInvalidField;
  switch (sgl_id(c)) {
    case sgl::kDataBlockOffset:
      if (!to_ctrl) return status::kInvalidField;
      if (sgl_address(c) != 0) return kSglOffsetInvalid;  // ICDOFF is 0
      if (icd_len != len) return kSglDataLengthInvalid;
      break;
    case sgl::kTransportDataBlock:
      if (icd_len) return kSglDataLengthInvalid;
      break;
    default: return status::kSglInvalidType;
  }
  s.xfer_len = len;
  s.h2c = to_ctrl;
  s.in_capsule = icd_len > 0;
  return status::kSuccess;
}

NvmeStatus TcpConnection::check_io(Slot& s) {
  // Path status first: a host that sees it moves the I/O to another path.
  switch (port_.ana_state()) {
    case AnaState::inaccessible: return status::kAnaInaccessible;
    case AnaState::persistent_loss: return status::kAnaPersistentLoss;
    case AnaState::change: return status::kAnaTransition;
    default: break;
  }
  if (auto failing = port_.failing()) return *failing;
  const Sqe& c = s.sqe;
  if (auto st = plan_io(*subsys_, c, max_transfer_, s.plan); !st.is_success()) return st;
  if (s.xfer_len < s.plan.data_len) return kSglDataLengthInvalid;
  if (s.plan.data_len && s.plan.to_host == s.h2c) return status::kInvalidField;
  if (c.opcode == opcode::kRead) port_.counters().reads.fetch_add(1, std::memory_order_relaxed);
  if (c.opcode == opcode::kWrite) port_.counters().writes.fetch_add(1, std::memory_order_relaxed);
  return status::kSuccess;
}

void TcpConnection::command_ready(Slot& s) {
  const uint64_t latency = port_.latency_ns();
  const uint64_t bandwidth = qid_ != 0 && s.sqe.opcode != opcode::kFabrics ? port_.bandwidth() : 0;
  if (latency == 0 && bandwidth == 0) return execute(s);
  uint64_t due = now_ns() + latency;
  if (bandwidth && s.plan.data_len) {
    // The link carries one command's data after another: this one's starts when the earlier
    // ones' has passed.
    due = std::max(due, link_free_ns_) + static_cast<uint64_t>(s.plan.data_len) * 1'000'000'000ull / bandwidth;
    link_free_ns_ = due;
  }
  s.state = SlotState::waiting;
  delayed_.emplace(due, s.index);
}

void TcpConnection::run_due(uint64_t now) {
  if (now >= auth_deadline_ns_) end_after_auth_failure("authentication timed out");
  // A queue that stopped serving (Disconnect) executes nothing; the output bound holds for
  // delayed commands as for new ones.
  if (!ctrl_ && phase_ != Phase::connecting) return delayed_.clear();
  while (!delayed_.empty() && delayed_.begin()->first <= now && !backlog_full()) {
    Slot& s = *slots_[delayed_.begin()->second];
    delayed_.erase(delayed_.begin());
    execute(s);
  }
}

void TcpConnection::execute(Slot& s) {
  if (phase_ == Phase::connecting) {
    if (s.index == connect_slot_) return execute_connect(s);
    return complete(s, status::kCommandSequenceError);  // start_command refuses these already
  }
  if (phase_ != Phase::live || !ctrl_) return complete(s, status::kCommandSequenceError);
  if (s.sqe.opcode == opcode::kFabrics) return execute_fabrics(s);
  // An ended controller executes nothing more, not even what its queues already hold (a
  // latency-delayed command, one received just before the close request reached us). Such a
  // command gets no completion: its connection ends at the next pass, which ends it for the
  // host. The close request the teardown sends may still be on its way, so we raise our own:
  // the connection never stays open behind a command it dropped.
  if (ctrl_->is_torn_down()) {
    if (qid_ != 0 && changes_data(s.sqe))
      port_.counters().writes_dropped_after_teardown.fetch_add(1, std::memory_order_relaxed);
    request_close(CloseKind::association);
    return free_slot(s);
  }
  if (auth_ && !auth_->authenticated()) return complete(s, auth::kAuthRequired);
  if (qid_ == 0) return execute_admin(s);
  execute_io(s);
}

void TcpConnection::execute_fabrics(Slot& s) {
  const Sqe& c = s.sqe;
  const uint8_t type = fabrics_type(c);
  if (type == auth::kFctypeAuthSend || type == auth::kFctypeAuthReceive) return execute_auth(s);
  if (auth_ && !auth_->authenticated() && type != fctype::kDisconnect)
    return complete(s, auth::kAuthRequired);
  switch (type) {
    case fctype::kConnect: return complete(s, status::kCommandSequenceError);
    case fctype::kPropertyGet: {
      if (qid_ != 0) return complete(s, status::kInvalidField);
      uint64_t v = 0;
      const NvmeStatus st = ctrl_->property_get(c.cdw11, core_.opts, v);
      const bool size8 = (c.cdw10 & 0x7) == 1;
      return complete(s, st, static_cast<uint32_t>(v), size8 ? static_cast<uint32_t>(v >> 32) : 0);
    }
    case fctype::kPropertySet:
      if (qid_ != 0) return complete(s, status::kInvalidField);
      return complete(s, ctrl_->property_set(c.cdw11, c.cdw12 | (static_cast<uint64_t>(c.cdw13) << 32)));
    case fctype::kDisconnect: return execute_disconnect(s);
    default: return complete(s, status::kInvalidOpcode);
  }
}

void TcpConnection::execute_connect(Slot& s) {
  if (phase_ != Phase::connecting || s.index != connect_slot_) return complete(s, status::kCommandSequenceError);
  const ConnectResult r = accept_connect(core_, port_.index(), s.sqe,
                                         {s.buf.data(), s.in_capsule ? s.xfer_len : s.received},
                                         shared_from_this());
  uint32_t dw0 = r.dw0;
  if (r.status.is_success()) {
    if (r.host && !r.host->dhchap_key.empty() && !r.subsys->is_discovery()) {
      auto a = QueueAuth::create(*r.host, r.subsys->nqn());
      // Target::start validated the keys, so this does not fail.
      auth_ = a ? std::move(*a) : nullptr;
      if (!a) log("authentication set-up failed", a.message().c_str());
      dw0 |= kAuthReqAtr;
      auth_deadline_ns_ = now_ns() + static_cast<uint64_t>(core_.opts.auth_timeout.count()) * 1'000'000;
    }
    ctrl_ = r.ctrl;
    subsys_ = r.subsys;
    qid_ = r.qid;
    sq_entries_ = r.sq_entries;
    sq_head_ = 1 % sq_entries_;
    sq_flow_control_ = r.sq_flow_control;
    if (!sq_flow_control_)
      (qid_ ? port_.counters().io_queues_without_sq_flow_control : port_.counters().admin_queues_without_sq_flow_control)
          .fetch_add(1, std::memory_order_relaxed);
    c2h_success_ = !sq_flow_control_ || core_.opts.c2h_success == C2hSuccess::always;
    phase_ = Phase::live;
    icd_limit_ = qid_ ? core_.opts.in_capsule_data : kAdminInCapsuleData;
    reader_.set_max_data(std::max(icd_limit_, core_.opts.maxh2cdata));
    seen_ana_chgcnt_ = port_.ana_chgcnt();
    if (core_.opts.log_connections) {
      char detail[400];
      std::snprintf(detail, sizeof detail, "%s qid %u cntlid %u host %s", subsys_->nqn().c_str(),
                    qid_, ctrl_->cntlid(), ctrl_->hostnqn().c_str());
      log("connected", detail);
    }
  } else if (!r.refused_host.empty()) {
    // Always logged, once per refused Connect: a host the allow list does not name.
    char detail[600];
    std::snprintf(detail, sizeof detail, "host %s is not allowed to use %s (%s)",
                  r.refused_host.c_str(), r.refused_subsystem.c_str(), to_string(r.status).c_str());
    log("connect refused", detail);
  } else if (r.refused_why) {
    // Always logged too: a host that sends what this target cannot take (an initiator that
    // leaves HOSTNQN empty, say) learns why only from here; the status carries the offset.
    char detail[600];
    std::snprintf(detail, sizeof detail, "%s%s%s (%s)", r.refused_why, r.refused_subsystem.empty() ? "" : ": ",
                  r.refused_subsystem.c_str(), to_string(r.status).c_str());
    log("connect refused", detail);
  } else if (core_.opts.log_connections) {
    log("connect refused", to_string(r.status).c_str());
  }
  complete(s, r.status, dw0);
  if (r.status.is_success() && r.host && !r.host->dhchap_key.empty() && !auth_)
    end_after_auth_failure("no usable key");
}

void TcpConnection::execute_auth(Slot& s) {
  const Sqe& c = s.sqe;
  // A queue that was not asked to authenticate has no transaction to take part in.
  if (!auth_) return complete(s, status::kCommandSequenceError);
  const bool send = fabrics_type(c) == auth::kFctypeAuthSend;
  QueueAuth::Outcome o;
  if (send) {
    const size_t have = !s.h2c ? 0 : s.in_capsule ? s.xfer_len : s.received;
    o = auth_->on_send(c, {s.buf.data(), have});
    complete(s, o.status);
  } else {
    if (s.h2c || s.xfer_len == 0) return complete(s, status::kInvalidField);
    auth::Bytes out;
    o = auth_->on_receive(c, s.xfer_len, out);
    if (o.status.is_success()) {
      const auto n = static_cast<uint32_t>(out.size());
      std::memcpy(begin_c2h(c.cid, n, false), out.data(), n);
      seal_c2h(n);
    }
    complete(s, o.status);
  }
  if (auth_->authenticated()) {
    if (auth_deadline_ns_ != UINT64_MAX) port_.counters().authentications.fetch_add(1, std::memory_order_relaxed);
    auth_deadline_ns_ = UINT64_MAX;
    if (!o.log.empty() && core_.opts.log_connections) log("DH-HMAC-CHAP", o.log.c_str());
  } else if (!o.end_queue) {
    auth_deadline_ns_ = now_ns() + static_cast<uint64_t>(core_.opts.auth_timeout.count()) * 1'000'000;
  }
  if (o.end_queue) end_after_auth_failure(o.log.c_str());
}

void TcpConnection::end_after_auth_failure(const char* what) {
  // The queue ends once the host had its answer (a Failure1 included), as after a Disconnect;
  // a transaction that failed does not leave a queue the host may keep using.
  auth_deadline_ns_ = UINT64_MAX;
  port_.counters().auth_failures.fetch_add(1, std::memory_order_relaxed);
  char detail[400];
  std::snprintf(detail, sizeof detail, "qid %u cntlid %u host %s: %s", qid_, ctrl_ ? ctrl_->cntlid() : 0,
                ctrl_ ? ctrl_->hostnqn().c_str() : "?", what);
  log("DH-HMAC-CHAP", detail);
  if (phase_ == Phase::closing) return;
  stop_serving();
  begin_closing("closed after failed authentication");
}

void TcpConnection::execute_disconnect(Slot& s) {
  // Disconnect deletes its queue (on the admin queue, the association), and in NVMe/TCP a queue
  // is its connection. The controller answers the command itself; then the connection ends:
  // our FIN follows that completion and every reply queued before it (begin_closing waits for
  // the host to take them), and nothing behind the Disconnect executes.
  // A command the host pipelined behind it reached a queue that no longer exists, so it gets no
  // completion of its own: the FIN ends it, as it ends every command still outstanding. That
  // is how conforming hosts read a controller's close (Linux starts error recovery when its
  // socket closes, SPDK and our queue pair fail the pair on EOF), so they never wait on a
  // timer for it. Answering such commands with errors instead would keep a deleted queue's
  // connection open for as long as its host kept sending.
  complete(s, status::kSuccess);
  if (core_.opts.log_connections) log("disconnect", qid_ == 0 ? "association ends" : "I/O queue deleted");
  stop_serving();
  begin_closing("closed after a Disconnect");
}

void TcpConnection::execute_admin(Slot& s) {
  const Sqe& c = s.sqe;
  if (c.opcode == opcode::kAsyncEventRequest) return hold_aer(s);
  const AdminContext ctx{core_, *ctrl_, local_addr_};
  const AdminResult r = target::execute_admin(ctx, c, admin_out_);
  if (!r.status.is_success() || admin_out_.empty() || s.xfer_len == 0 || s.h2c)
    return complete(s, r.status, r.dw0);
  const auto n = static_cast<uint32_t>(std::min<size_t>(admin_out_.size(), s.xfer_len));
  // The SUCCESS flag stands for a completion with DW0 = 0; anything else needs a response.
  const bool success_flag = c2h_success_ && r.dw0 == 0;
  std::memcpy(begin_c2h(c.cid, n, success_flag), admin_out_.data(), n);
  seal_c2h(n);
  if (success_flag)
    free_slot(s);
  else
    complete(s, r.status, r.dw0);
}

void TcpConnection::execute_io(Slot& s) {
  const Sqe& c = s.sqe;
  if (c.opcode == opcode::kWrite) {
    if (const uint64_t delay = port_.write_delay_ns()) {
      HeldWrites::Write w;
      w.due_ns = now_ns() + delay;
      w.mode = port_.write_delay_mode();
      w.cqt_ns = static_cast<uint64_t>(core_.opts.cqt_ms) * 1'000'000;
      w.conn = shared_from_this();
      w.ctrl = ctrl_;
      w.port = &port_;
      w.ns = s.plan.ns;
      w.offset = s.plan.offset;
      w.data = std::move(s.buf);
      w.data.resize(s.plan.data_len);
      w.slot = s.index;
      w.cid = c.cid;
      s.state = SlotState::held;
      core_.held.hold(std::move(w));
      return;
    }
  }
  if (s.plan.to_host) {
    uint8_t* dst = begin_c2h(c.cid, s.plan.data_len, c2h_success_);
    const NvmeStatus st = target::execute_io(*subsys_, c, s.plan, {}, dst);
    if (st.is_success()) {
      seal_c2h(s.plan.data_len);
      if (c2h_success_)
        free_slot(s);
      else
        complete(s, st);
    } else {
      cancel_c2h();
      complete(s, st);
    }
    return;
  }
  // Command Quiesce Time, honoured: a command that changes data never executes once its
  // connection is known to be gone. Without this, a connection thread that the scheduler held
  // off for longer than CQT could land a write after the host has fenced the path and moved it.
  if (!s.plan.to_host && changes_data(c)) {
    // Behind a partition the host's close is not seen, so the socket is not asked.
    pollfd pfd{fd_, POLLRDHUP, 0};
    if (teardown_ns_.load(std::memory_order_acquire) != 0 ||
        (!port_.partitioned() && ::poll(&pfd, 1, 0) > 0 &&
         (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR)))) {
      port_.counters().writes_dropped_after_teardown.fetch_add(1, std::memory_order_relaxed);
      free_slot(s);
      return;
    }
  }
  const size_t have = s.in_capsule ? s.xfer_len : s.received;
  NvmeStatus st = target::execute_io(*subsys_, c, s.plan, {s.buf.data(), have}, nullptr);
  // With the volatile write cache off (Set Features 06h) a completed write is durable.
  if (st.is_success() && changes_data(c) && s.plan.ns && !ctrl_->write_cache.load(std::memory_order_acquire) &&
      !s.plan.ns->flush())
    st = kWriteFault;
  complete(s, st);
}

void TcpConnection::hold_aer(Slot& s) {
  if (aers_.size() >= kMaxAers) return complete(s, kAerLimitExceeded);
  if (!pending_events_.empty()) {
    const uint32_t e = pending_events_.front();
    pending_events_.erase(pending_events_.begin());
    return complete(s, status::kSuccess, e);
  }
  s.state = SlotState::aer;
  aers_.push_back(s.index);
}

void TcpConnection::raise_event(uint32_t dw0) {
  if (aers_.empty()) {
    // Reported by the next Asynchronous Event Request. One pending notice per kind: the host
    // reads the whole log page it names anyway.
    if (std::find(pending_events_.begin(), pending_events_.end(), dw0) == pending_events_.end())
      pending_events_.push_back(dw0);
    return;
  }
  Slot& s = *slots_[aers_.front()];
  aers_.erase(aers_.begin());
  complete(s, status::kSuccess, dw0);
}

void TcpConnection::raise_ana_event() {
  if (ctrl_->aec & kAecAnaChange) raise_event(kAnaChangeEvent);
}

}  // namespace nvmeof::target
