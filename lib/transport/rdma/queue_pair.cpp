#include "transport/rdma/queue_pair.hpp"
#include "core/fabrics_command.hpp"
#include "core/log.hpp"

#include <nvme/types.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

namespace nvmeof::rdma {
namespace {

constexpr auto kDrainBound = std::chrono::seconds(2);
constexpr int kPollBatch = 32;
// wr_id: the slot or RECV buffer index above two bits that say which kind of request it was.
constexpr uint64_t kWrSend = 0;
constexpr uint64_t kWrRecv = 1;
// Keyed SGL data block, subtype address (type 4h << 4 | 0h).
constexpr uint8_t kKeyedDataBlock = 0x40;

uint64_t wr_id(uint64_t kind, uint32_t index) { return (uint64_t{index} << 2) | kind; }

void set_keyed_sgl(Sqe& c, uint64_t addr, uint32_t len, uint32_t rkey) noexcept {
  c.flags = static_cast<uint8_t>((c.flags & 0x3f) | sgl::kPsdtSgl);
  std::memcpy(c.dptr, &addr, 8);
  c.dptr[8] = static_cast<uint8_t>(len);
  c.dptr[9] = static_cast<uint8_t>(len >> 8);
  c.dptr[10] = static_cast<uint8_t>(len >> 16);
  std::memcpy(c.dptr + 11, &rkey, 4);
  c.dptr[15] = kKeyedDataBlock;
}

std::error_code wc_error(ibv_wc_status s) {
  switch (s) {
    case IBV_WC_RETRY_EXC_ERR:
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return make_error_code(Errc::timeout);
    case IBV_WC_WR_FLUSH_ERR:
      return make_error_code(Errc::connection_closed);
    default:
      return make_error_code(Errc::connection_reset);
  }
}

}  // namespace

using Dir = CommandSlot::Dir;

// The two io_uring polls (CQ completion channel, rdma_cm event channel) name this object. It
// normally dies with the pair; if a poll cannot be cancelled within the drain bound, it is left
// behind (qp == nullptr) and frees itself when the last poll completes.
struct QueuePair::Watch {
  struct Handler : IoHandler {
    Watch* w = nullptr;
  };
  Handler cq_h;
  Handler cm_h;
  QueuePair* qp = nullptr;
  bool cq_armed = false;
  bool cm_armed = false;
  bool orphaned = false;  // the pair is gone; the last poll to complete frees the watch

  Watch() {
    cq_h.w = cm_h.w = this;
    cq_h.fn = [](IoHandler* h, const io_uring_cqe&) noexcept {
      Watch* w = static_cast<Handler*>(h)->w;
      w->cq_armed = false;
      if (w->qp) w->qp->on_cq_event();
      else if (w->orphaned && !w->cm_armed) delete w;
    };
    cm_h.fn = [](IoHandler* h, const io_uring_cqe&) noexcept {
      Watch* w = static_cast<Handler*>(h)->w;
      w->cm_armed = false;
      if (w->qp) w->qp->on_cm_event();
      else if (w->orphaned && !w->cq_armed) delete w;
    };
  }
};

Result<Connected> connect(Reactor& reactor, const QpConfig& cfg) { return QueuePair::connect(reactor, cfg); }

void start(nvmeof::QueuePair& qp) noexcept { static_cast<QueuePair&>(qp).start(); }

Result<Connected> QueuePair::connect(Reactor& reactor, const QpConfig& cfg) {
  const std::string label = detail::make_label(cfg);
  if (cfg.depth < 1 || cfg.depth > kMaxQueueDepth || cfg.subnqn.empty()) {
    nvmeof::detail::log_warning("nvmeof: %s: invalid queue depth %u or empty subsystem NQN\n", label.c_str(), cfg.depth);
    return Errc::invalid_argument;
  }
  const auto deadline = detail::Clock::now() + cfg.connect_timeout;
  const Layout l = Layout::make(cfg);
  auto res = std::make_unique<Resources>();
  if (auto r = detail::resolve_and_create(*res, cfg, l, deadline, label); !r) return r.error();
  std::unique_ptr<QueuePair> qp(new QueuePair(reactor, cfg, l, std::move(res), label));
  // A pair that never connected gives nothing back to the caller's pools.
  auto give_up = [&qp](std::error_code ec) {
    qp->cfg_.on_destroy = nullptr;
    return ec;
  };
  // Responses may arrive as soon as the connection is up: every RECV is posted before.
  for (uint32_t i = 0; i < l.depth; ++i) {
    if (!qp->post_recv(i)) {
      nvmeof::detail::log_warning("nvmeof: %s: ibv_post_recv failed\n", label.c_str());
      return give_up(errno_code(EIO));
    }
  }
  auto crq = detail::establish(*qp->res_, cfg, deadline, label);
  if (!crq) return give_up(crq.error());
  // The controller may hold fewer commands than we asked for: use only the first CRQSIZE slots.
  qp->limit_depth(*crq);
  // Fabrics Connect and the post-connect step, their completions reaped here (not started yet).
  struct Channel final : fabric::CommandChannel {
    explicit Channel(QueuePair& q) : qp(q) {}
    Result<Cqe> execute(const Sqe& cmd, std::span<const uint8_t> out, std::span<uint8_t> in,
                        fabric::Clock::time_point until) override {
      return qp.execute_setup(cmd, out, in, until);
    }
    QueuePair& qp;
  } channel(*qp);
  const fabric::ConnectParams params{cfg.qid, qp->depth(), cfg.kato_ms, cfg.cntlid, cfg.subnqn, cfg.hostnqn, cfg.hostid};
  auto rsp = fabric::connect_queue(channel, params, cfg.authenticate, deadline, label);
  if (!rsp) return give_up(rsp.error());
  Connected out;
  out.cntlid = rsp.value().cntlid;
  out.label = label;
  out.qp = std::move(qp);
  return out;
}

QueuePair::QueuePair(Reactor& reactor, const QpConfig& cfg, const Layout& l,
                     std::unique_ptr<Resources> res, std::string label)
    : QueuePairBase(std::move(label), l.depth),
      reactor_(reactor),
      cfg_(cfg),
      layout_(l),
      res_(std::move(res)),
      pool_(l.pool_order) {
  recv_wr_ = std::make_unique<ibv_recv_wr[]>(l.depth);
  recv_sge_ = std::make_unique<ibv_sge[]>(l.depth);
  for (uint32_t i = 0; i < l.depth; ++i) {
    recv_sge_[i].addr = reinterpret_cast<uintptr_t>(res_->region + l.recv_off + size_t{i} * kResponseLen);
    recv_sge_[i].length = kResponseLen;
    recv_sge_[i].lkey = res_->mr->lkey;
    recv_wr_[i] = ibv_recv_wr{};
    recv_wr_[i].wr_id = wr_id(kWrRecv, i);
    recv_wr_[i].sg_list = &recv_sge_[i];
    recv_wr_[i].num_sge = 1;
    Slot& s = slots_[i];
    s.sge.lkey = res_->mr->lkey;
    s.wr.wr_id = wr_id(kWrSend, i);
    s.wr.sg_list = &s.sge;
    s.wr.num_sge = 1;
    s.wr.opcode = IBV_WR_SEND;
    s.wr.send_flags = IBV_SEND_SIGNALED;
  }
  watch_ = new Watch();
  watch_->qp = this;
}

QueuePair::~QueuePair() {
  teardown();
  if (started_) reactor_.remove_poller(&QueuePair::poll_fn, this);
  Watch* w = watch_;
  watch_ = nullptr;
  w->qp = nullptr;
  if (started_ && (w->cq_armed || w->cm_armed)) {
    for (IoHandler* h : {static_cast<IoHandler*>(&w->cq_h), static_cast<IoHandler*>(&w->cm_h)}) {
      if ((h == &w->cq_h && !w->cq_armed) || (h == &w->cm_h && !w->cm_armed)) continue;
      if (io_uring_sqe* sqe = reactor_.get_sqe()) {
        io_uring_prep_poll_remove(sqe, reinterpret_cast<uintptr_t>(h));
        io_uring_sqe_set_data(sqe, nullptr);
      }
    }
    const uint64_t deadline = Reactor::clock_ns() + static_cast<uint64_t>(std::chrono::nanoseconds(kDrainBound).count());
    while ((w->cq_armed || w->cm_armed) && Reactor::clock_ns() < deadline)
      reactor_.poll(std::chrono::milliseconds(1));
    if (w->cq_armed || w->cm_armed) {
      w->orphaned = true;  // it frees itself when the polls complete
      w = nullptr;
    }
  }
  delete w;
  res_.reset();
  if (cfg_.on_destroy) cfg_.on_destroy();
}

// Fails the pair, waits for the flushed work requests (bounded), destroys the QP and completes
// whatever is left. Idempotent.
void QueuePair::teardown() noexcept {
  if (torn_down_) return;
  close();
  const uint64_t deadline = Reactor::clock_ns() + static_cast<uint64_t>(std::chrono::nanoseconds(kDrainBound).count());
  while (!drained() && Reactor::clock_ns() < deadline) {
    if (started_) {
      reactor_.poll(std::chrono::milliseconds(1));
    } else if (reap() == 0) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
  if (!drained())
    nvmeof::detail::log_warning("nvmeof: %s: %u sends and %u receives not flushed within 2 s; destroying the QP\n",
                 label_.c_str(), posted_sends_, posted_recvs_);
  torn_down_ = true;
  res_->destroy_qp();
  posted_sends_ = posted_recvs_ = 0;
  settle();
}

void QueuePair::start() noexcept {
  if (started_ || !go_live()) return;
  started_ = true;
  reactor_.add_poller(&QueuePair::poll_fn, this);
  arm_watches();
}

uint8_t* QueuePair::cmd_buf(uint32_t cid) const noexcept {
  return res_->region + layout_.cmd_off + size_t{cid} * layout_.cmd_stride;
}

bool QueuePair::post_recv(uint32_t index) noexcept {
  ibv_recv_wr* bad = nullptr;
  recv_wr_[index].next = nullptr;
  if (ibv_post_recv(res_->id->qp, &recv_wr_[index], &bad) != 0) return false;
  ++posted_recvs_;
  return true;
}

int QueuePair::submit(IoRequest& req) noexcept {
  if (state_ != QpState::live) [[unlikely]] return -ENOTCONN;
  return queue_command(req);
}

int QueuePair::queue_command(IoRequest& req) noexcept {
  const uint32_t len = req.data_len;
  if (len > layout_.max_transfer) [[unlikely]] return -EINVAL;
  Dir dir = Dir::none;
  if (len) {
    if (is_host_to_controller(req.cmd)) dir = Dir::to_controller;
    else if (is_controller_to_host(req.cmd)) dir = Dir::from_controller;
    else return -EINVAL;
    if (!req.data) return -EINVAL;
  }
  if (!has_free_slot()) [[unlikely]] return -EAGAIN;
  const uint16_t cid = next_slot();
  Slot& s = slots_[cid];
  uint8_t* cmd = cmd_buf(cid);
  uint32_t send_len = kCapsuleLen;
  s.page = BuddyPool::kNone;
  s.pages = 0;
  if (dir == Dir::to_controller && len <= layout_.in_capsule) {
    std::memcpy(cmd + kCapsuleLen, req.data, len);
    set_sgl(req.cmd, sgl::kDataBlockOffset, 0, len);
    send_len += len;
  } else if (len) {
    const uint32_t pages = (len + kPageSize - 1) / kPageSize;
    const uint32_t page = pool_.alloc(pages);
    if (page == BuddyPool::kNone) [[unlikely]] return -EAGAIN;  // staging memory busy
    uint8_t* buf = res_->region + layout_.pool_off + size_t{page} * kPageSize;
    if (dir == Dir::to_controller) std::memcpy(buf, req.data, len);
    set_keyed_sgl(req.cmd, reinterpret_cast<uintptr_t>(buf), len, res_->mr->rkey);
    s.page = page;
    s.pages = pages;
  } else {
    set_keyed_sgl(req.cmd, 0, 0, 0);
  }
  take_slot(req);  // `cid`, written into req.cmd.cid
  req.submit_ns = reactor_.now_ns();
  std::memcpy(cmd, &req.cmd, kCapsuleLen);
  s.answered = false;
  s.send_posted = false;
  s.dir = dir;
  s.sge.addr = reinterpret_cast<uintptr_t>(cmd);
  s.sge.length = send_len;
  s.wr.next = nullptr;
  if (pend_tail_) pend_tail_->next = &s.wr;
  else pend_head_ = &s.wr;
  pend_tail_ = &s.wr;
  return 0;
}

// Posts the SENDs queued since the last turn as one chain (one doorbell).
int QueuePair::post_sends() noexcept {
  if (!pend_head_) return 0;
  ibv_send_wr* head = pend_head_;
  pend_head_ = pend_tail_ = nullptr;
  if (state_ == QpState::failed || state_ == QpState::closed) return 0;  // complete at drain
  ibv_send_wr* bad = nullptr;
  const int rc = ibv_post_send(res_->id->qp, head, &bad);
  int n = 0;
  for (ibv_send_wr* w = head; w && w != bad; w = w->next) {
    slots_[w->wr_id >> 2].send_posted = true;
    ++posted_sends_;
    ++n;
  }
  if (rc != 0) fail(errno_code(rc), "ibv_post_send");
  return n;
}

int QueuePair::poll_fn(void* self) noexcept { return static_cast<QueuePair*>(self)->turn(); }

int QueuePair::turn() noexcept {
  if (state_ == QpState::closed) return 0;
  int n = reap();
  n += post_sends();
  // A reactor may sleep (or, on the control thread, not turn at all) until io_uring reports
  // something: while commands are in flight the CQ stays armed and its channel polled.
  if ((outstanding() || state_ == QpState::failed) && !cq_notify_armed_) {
    arm_cq();
    n += reap();  // what arrived before the CQ was armed raises no event
    n += post_sends();
  }
  arm_watches();
  return n;
}

int QueuePair::reap() noexcept {
  if (!res_->cq) return 0;
  ibv_wc wc[kPollBatch];
  int total = 0;
  for (;;) {
    const int n = ibv_poll_cq(res_->cq, kPollBatch, wc);
    if (n < 0) {
      fail(errno_code(EIO), "ibv_poll_cq");
      break;
    }
    for (int i = 0; i < n; ++i) {
      const ibv_wc& c = wc[i];
      const uint32_t index = static_cast<uint32_t>(c.wr_id >> 2);
      const bool is_recv = (c.wr_id & 3) == kWrRecv;
      if (index >= layout_.depth) {
        fail(make_error_code(Errc::protocol_error), "completion names an unknown work request");
        continue;
      }
      if (is_recv) --posted_recvs_;
      else {
        --posted_sends_;
        slots_[index].send_posted = false;
      }
      if (c.status != IBV_WC_SUCCESS) {
        if (state_ == QpState::live || state_ == QpState::connecting) {
          char why[96];
          std::snprintf(why, sizeof why, "%s completion: %s", is_recv ? "RECV" : "SEND",
                        ibv_wc_status_str(c.status));
          fail(wc_error(c.status), why);
        }
        continue;
      }
      if (is_recv) on_response(index, c.byte_len);
      else maybe_finish(static_cast<uint16_t>(index));
    }
    total += n;
    if (n < kPollBatch) break;
  }
  if (state_ == QpState::failed) settle();
  return total;
}

void QueuePair::on_response(uint32_t index, uint32_t len) noexcept {
  if (state_ != QpState::live && state_ != QpState::connecting) return;
  if (len < kResponseLen) {
    fail(make_error_code(Errc::protocol_error), "response shorter than a completion entry");
    return;
  }
  Cqe cqe;
  std::memcpy(&cqe, res_->region + layout_.recv_off + size_t{index} * kResponseLen, sizeof cqe);
  if (!post_recv(index)) {
    fail(errno_code(EIO), "ibv_post_recv");
    return;
  }
  if (!is_outstanding(cqe.cid) || slots_[cqe.cid].answered) {
    fail(make_error_code(Errc::protocol_error), "response for a CID with no command outstanding");
    return;
  }
  Slot& s = slots_[cqe.cid];
  s.cqe = cqe;
  s.answered = true;
  maybe_finish(cqe.cid);
}

void QueuePair::maybe_finish(uint16_t cid) noexcept {
  Slot& s = slots_[cid];
  if (!s.req || !s.answered || s.send_posted) return;
  if (state_ != QpState::live && state_ != QpState::connecting) return;
  if (s.dir == Dir::from_controller && s.cqe.status().is_success())
    std::memcpy(s.req->data, res_->region + layout_.pool_off + size_t{s.page} * kPageSize, s.req->data_len);
  release(cid, s.cqe);
}

void QueuePair::release(uint16_t cid, const Cqe& cqe) noexcept {
  QueuePair::retire_slot(cid);  // qualified: a direct call on the hot path
  complete_slot(cid, cqe);
}

void QueuePair::retire_slot(uint16_t cid) noexcept {
  Slot& s = slots_[cid];
  if (s.page != BuddyPool::kNone) pool_.free(s.page, s.pages);
  s.page = BuddyPool::kNone;
  s.answered = false;
}

void QueuePair::stop_transport() noexcept {
  pend_head_ = pend_tail_ = nullptr;  // never posted: they complete at the drain
  if (res_->id && res_->id->qp) {
    // The error state makes the device flush every posted request and refuse the target's
    // RDMA operations on our memory; the disconnect tells the target at once.
    rdma_disconnect(res_->id);
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_ERR;
    ibv_modify_qp(res_->id->qp, &a, IBV_QP_STATE);
  }
  // The flushed completions wake a reactor that sleeps in io_uring.
  if (started_) arm_cq();
}

void QueuePair::arm_cq() noexcept {
  if (cq_notify_armed_ || !res_->cq) return;
  if (ibv_req_notify_cq(res_->cq, 0) == 0) cq_notify_armed_ = true;
  arm_watches();
}

void QueuePair::arm_watches() noexcept {
  if (!started_ || !watch_) return;
  if (cq_notify_armed_ && !watch_->cq_armed) {
    if (io_uring_sqe* sqe = reactor_.get_sqe()) {
      io_uring_prep_poll_add(sqe, res_->comp->fd, POLLIN);
      io_uring_sqe_set_data(sqe, &watch_->cq_h);
      watch_->cq_armed = true;
    }
  }
  if (state_ != QpState::closed && !watch_->cm_armed) {
    if (io_uring_sqe* sqe = reactor_.get_sqe()) {
      io_uring_prep_poll_add(sqe, res_->cm_channel->fd, POLLIN);
      io_uring_sqe_set_data(sqe, &watch_->cm_h);
      watch_->cm_armed = true;
    }
  }
}

void QueuePair::on_cq_event() noexcept {
  ibv_cq* cq = nullptr;
  void* ctx = nullptr;
  while (ibv_get_cq_event(res_->comp, &cq, &ctx) == 0) {
    cq_notify_armed_ = false;
    // Acknowledged in batches: each ack takes a lock; the destructor acks the rest.
    if (++res_->unacked_cq_events >= 64) {
      ibv_ack_cq_events(res_->cq, res_->unacked_cq_events);
      res_->unacked_cq_events = 0;
    }
  }
  // The poller reaps in this same reactor turn; reaping here too keeps a failed pair draining
  // while nothing else runs.
  if (state_ == QpState::failed) reap();
}

void QueuePair::on_cm_event() noexcept {
  rdma_cm_event* ev = nullptr;
  while (rdma_get_cm_event(res_->cm_channel, &ev) == 0) {
    const rdma_cm_event_type type = ev->event;
    rdma_ack_cm_event(ev);
    if (state_ != QpState::live) continue;
    char why[96];
    std::snprintf(why, sizeof why, "rdma_cm event %s", rdma_event_str(type));
    fail(make_error_code(type == RDMA_CM_EVENT_DISCONNECTED ? Errc::connection_closed : Errc::connection_reset), why);
  }
}

Result<Cqe> QueuePair::execute_setup(const Sqe& cmd, std::span<const uint8_t> out,
                                     std::span<uint8_t> in, detail::Clock::time_point deadline) {
  const char* what = fabrics_type(cmd) == fctype::kConnect ? "Connect" : "set-up command";
  if (!out.empty() && !in.empty()) {
    nvmeof::detail::log_warning("nvmeof: %s: a %s with data in both directions\n", label_.c_str(), what);
    return Errc::invalid_argument;
  }
  struct Done {
    bool done = false;
    Cqe cqe{};
  } d;
  IoRequest req{};
  req.cmd = cmd;
  // Data out is only read (copied into registered memory) by queue_command.
  req.data = out.empty() ? static_cast<void*>(in.data()) : const_cast<uint8_t*>(out.data());
  req.data_len = static_cast<uint32_t>(out.empty() ? in.size() : out.size());
  req.user = &d;
  req.on_complete = [](IoRequest& r, const Cqe& c) noexcept {
    auto* dd = static_cast<Done*>(r.user);
    dd->cqe = c;
    dd->done = true;
  };
  if (const int rc = queue_command(req); rc != 0) {
    nvmeof::detail::log_warning("nvmeof: %s: cannot queue %s: %s\n", label_.c_str(), what, std::strerror(-rc));
    return errno_code(-rc);
  }
  post_sends();
  while (!d.done && detail::Clock::now() < deadline) {
    if (reap() == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  if (!d.done) {
    nvmeof::detail::log_warning("nvmeof: %s: timed out waiting for the %s response\n", label_.c_str(), what);
    teardown();  // completes `req` while it is still alive
    return Errc::timeout;
  }
  if (d.cqe.status() == status::kHostPathError && state_ != QpState::connecting) {
    nvmeof::detail::log_warning("nvmeof: %s: connection failed during %s\n", label_.c_str(), what);
    return error_ ? error_ : make_error_code(Errc::connection_reset);
  }
  return d.cqe;
}

}  // namespace nvmeof::rdma
