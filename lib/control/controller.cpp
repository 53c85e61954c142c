#include "nvmeof/controller.hpp"

#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <unordered_map>

#include "control/control_plane.hpp"
#include "auth/dhchap.hpp"
#include "control/controller_access.hpp"
#include "control/queue_limits.hpp"
#include "core/fabrics_command.hpp"
#include "core/node_memory.hpp"
#include "fabric/admin.hpp"
#include "tls/psk.hpp"
#include "transport/rdma/connect.hpp"
#include "transport/tcp/queue_pair.hpp"
#include "core/log.hpp"
#include "core/key_text.hpp"

namespace nvmeof {
namespace {

constexpr uint32_t kCcEnable = 1u;
constexpr uint32_t kCcIosqes = 6u << 16;  // 64-byte SQ entries
constexpr uint32_t kCcIocqes = 4u << 20;  // 16-byte CQ entries
constexpr uint32_t kCstsRdy = 1u;
constexpr uint32_t kCstsCfs = 2u;
constexpr uint8_t kCntrltypeDiscovery = 3;
constexpr uint32_t kAenNsAttrChanged = 1u << 8;
constexpr uint32_t kAenAnaChange = 1u << 11;
constexpr uint32_t kAenDiscoveryLogChange = 1u << 31;
// Connect asks for this when the caller wants the shortest KATO: KAS is not known before
// Identify, and every controller accepts a second.
constexpr uint32_t kProvisionalKatoMs = 1000;
constexpr uint32_t kKasUnitMs = 100;
constexpr auto kCcrLogPoll = std::chrono::milliseconds(5);

bool is_ccr_completed_event(uint32_t dw0) noexcept {
  return (dw0 & 0x7) == 0x2 && ((dw0 >> 8) & 0xff) == ccr::kEventInfoCompleted;
}

const std::array<uint8_t, 16>& process_hostid() {
  static const std::array<uint8_t, 16> id = [] {
    std::array<uint8_t, 16> v{};
    std::random_device rd;
    for (auto& b : v) b = static_cast<uint8_t>(rd());
    v[6] = static_cast<uint8_t>((v[6] & 0x0f) | 0x40);  // UUID version 4
    v[8] = static_cast<uint8_t>((v[8] & 0x3f) | 0x80);  // RFC 4122 variant
    return v;
  }();
  return id;
}

std::string uuid_string(const std::array<uint8_t, 16>& id) {
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < id.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) s += '-';
    s += hex[id[i] >> 4];
    s += hex[id[i] & 0xf];
  }
  return s;
}

Cqe failed_cqe(NvmeStatus st) {
  Cqe c{};
  c.status_field = st.cqe_field();
  return c;
}

// What a queue pair of either transport needs beyond the connect options.
struct PairParams {
  uint16_t qid = 0;
  uint32_t depth = 0;
  uint32_t kato_ms = 0;
  uint16_t cntlid = 0xffff;
  uint32_t in_capsule_data = 0;
  uint32_t max_transfer = 0;
  uint32_t recv_buffer = 256u << 10;  // TCP only
  std::function<void()> on_destroy;
  fabric::Authenticator authenticate;  // DH-HMAC-CHAP after Connect, when the options have a key
  std::shared_ptr<const tls::TlsPsk> tls;  // NVMe/TCP secure channel (null: plaintext)
};

// A DH-HMAC-CHAP secret from ConnectOptions: the interchange form, or "@PATH" of a file.
Result<auth::Secret> load_secret(const std::string& text, const char* what) {
  auto key = nvmeof::detail::read_key_text(text);
  if (!key) {
    nvmeof::detail::log_warning("nvmeof: %s: cannot read the key file %s: %s\n", what, text.c_str() + 1,
                                key.error().message().c_str());
    return key.error();
  }
  auto s = auth::parse_secret(*key);
  if (!s) nvmeof::detail::log_warning("nvmeof: %s: %s\n", what, s.message().c_str());
  return s;
}

// The post-connect step of every queue of a controller whose options carry a DH-HMAC-CHAP
// secret: the host's transaction over Authentication Send/Receive on that very queue.
Result<fabric::Authenticator> make_authenticator(const ConnectOptions& o) {
  if (o.dhchap_secret.empty()) {
    if (!o.dhchap_ctrl_secret.empty()) {
      nvmeof::detail::log_warning("nvmeof: dhchap_ctrl_secret needs dhchap_secret\n");
      return Errc::invalid_argument;
    }
    return fabric::Authenticator{};
  }
  auto host = load_secret(o.dhchap_secret, "dhchap_secret");
  if (!host) return Errc::invalid_argument;
  std::optional<auth::Secret> ctrl;
  if (!o.dhchap_ctrl_secret.empty()) {
    auto c = load_secret(o.dhchap_ctrl_secret, "dhchap_ctrl_secret");
    if (!c) return Errc::invalid_argument;
    ctrl = std::move(*c);
  }
  auto tid = std::make_shared<std::atomic<uint16_t>>(0);
  return fabric::Authenticator(
      [host = std::move(*host), ctrl = std::move(ctrl), tid](
          fabric::CommandChannel& ch, const fabric::PostConnect& ctx) -> Result<void> {
        auth::HostAuthConfig cfg;
        cfg.hostnqn = std::string(ctx.hostnqn);
        cfg.subnqn = std::string(ctx.subnqn);
        cfg.host_secret = host;
        cfg.ctrl_secret = ctrl;
        cfg.tid = tid->fetch_add(1);
        auto send = [&](std::span<const uint8_t> m) -> Result<void> {
          return fabric::auth_send(ch, m, ctx.deadline);
        };
        auto receive = [&](size_t max_len) -> Result<auth::Bytes> {
          auth::Bytes buf(max_len);
          if (auto r = fabric::auth_receive(ch, buf, ctx.deadline); !r) return r.failure();
          return buf;
        };
        return auth::run_host_authentication(cfg, ctx.qid, ctx.cntlid, send, receive);
      });
}

// The fields every fabric's queue pair configuration shares.
template <class Config>
void fill_fabric_config(Config& qc, const TransportAddress& addr, const ConnectOptions& o, PairParams& p) {
  qc.traddr = addr.traddr;
  qc.trsvcid = addr.trsvcid;
  qc.qid = p.qid;
  qc.depth = p.depth;
  qc.kato_ms = p.kato_ms;
  qc.cntlid = p.cntlid;
  qc.subnqn = o.subnqn;
  qc.hostnqn = o.hostnqn;
  qc.hostid = o.hostid;
  qc.in_capsule_data = p.in_capsule_data;
  qc.max_transfer = p.max_transfer;
  qc.connect_timeout = o.connect_timeout;
  qc.on_destroy = std::move(p.on_destroy);
  qc.authenticate = p.authenticate;
}

Result<PreparedQueue> connect_rdma_pair(Reactor& reactor, const TransportAddress& addr, const ConnectOptions& o,
                                  PairParams p) {
  rdma::QpConfig qc;
  fill_fabric_config(qc, addr, o, p);
  auto c = rdma::connect(reactor, qc);
  if (!c) return c.error();
  PreparedQueue out;
  out.cntlid = c->cntlid;
  out.label = std::move(c->label);
  // std::function copies its target: the connected pair waits in a shared holder.
  out.start = [held = std::make_shared<std::unique_ptr<QueuePair>>(std::move(c->qp))]()
      -> Result<std::unique_ptr<QueuePair>> {
    rdma::start(**held);
    return std::move(*held);
  };
  return out;
}

Result<PreparedQueue> connect_tcp_pair(Reactor& reactor, const TransportAddress& addr, const ConnectOptions& o,
                                 PairParams p) {
  tcp::QpConfig qc;
  fill_fabric_config(qc, addr, o, p);
  qc.host_iface = addr.host_iface;
  qc.digest = o.digest;
  qc.recv_buffer = p.recv_buffer;
  qc.tls = p.tls;
  qc.ktls = o.tls_kernel;
  // Every queue asks for SQ flow control off (nothing here reads SQHD): a read then ends with its
  // C2HData. The admin queue asks too, because some controllers (SPDK's) decide this per
  // controller, from the admin queue's Connect. A controller that cannot do that refuses the
  // Connect with Connect Invalid Parameters; the queue is connected again without the request.
  qc.disable_sq_flow_control = true;
  auto qp = tcp::QueuePair::connect(reactor, qc);
  if (!qp && qc.disable_sq_flow_control && qp.error().category() == nvme_category() &&
      NvmeStatus{static_cast<uint16_t>(qp.error().value())}.code() ==
          status::kConnectInvalidParameters.code()) {
    qc.disable_sq_flow_control = false;
    qp = tcp::QueuePair::connect(reactor, qc);
  }
  if (!qp) return qp.error();
  PreparedQueue out;
  out.cntlid = (*qp)->session().cntlid;
  out.label = (*qp)->label();
  out.start = [held = std::make_shared<std::unique_ptr<tcp::QueuePair>>(std::move(*qp))]()
      -> Result<std::unique_ptr<QueuePair>> {
    (*held)->start();
    return std::unique_ptr<QueuePair>(std::move(*held));
  };
  return out;
}

// The fabrics a controller can be reached over, and how each connects a queue pair. A new
// fabric is a row here (and its limits in transport/transport_limits.hpp).
struct Fabric {
  Transport transport;
  bool tls;  // whether NVMe/TLS is defined on it
  Result<PreparedQueue> (*connect)(Reactor&, const TransportAddress&, const ConnectOptions&, PairParams);
};
constexpr Fabric kFabrics[] = {
    {Transport::tcp, true, &connect_tcp_pair},
    {Transport::rdma, false, &connect_rdma_pair},
};

const Fabric* fabric_of(Transport t) noexcept {
  for (const Fabric& f : kFabrics)
    if (f.transport == t) return &f;
  return nullptr;
}

Result<PreparedQueue> connect_pair(Reactor& reactor, const TransportAddress& addr, const ConnectOptions& o,
                             PairParams p) {
  const Fabric* f = fabric_of(addr.transport);
  if (!f) return Errc::unsupported;
  return f->connect(reactor, addr, o, std::move(p));
}

// The TLS PSK every NVMe/TCP queue of the controller offers (ConnectOptions::tls_psk, the
// interchange form or "@PATH"), derived once for (hostnqn, subnqn); null without TLS.
Result<std::shared_ptr<const tls::TlsPsk>> make_tls(const ConnectOptions& o, const TransportAddress& addr) {
  const bool want = o.tls == TlsUse::on || (o.tls == TlsUse::when_keyed && !o.tls_psk.empty());
  if (!want) return std::shared_ptr<const tls::TlsPsk>{};
  if (o.tls_psk.empty()) {
    nvmeof::detail::log_warning("nvmeof: tls is on but no tls_psk is set\n");
    return Errc::invalid_argument;
  }
  if (const Fabric* f = fabric_of(addr.transport); !f || !f->tls) {
    nvmeof::detail::log_warning("nvmeof: %s: TLS is defined for NVMe/TCP only\n", addr.to_string().c_str());
    return Errc::unsupported;
  }
  auto text = nvmeof::detail::read_key_text(o.tls_psk);
  if (!text) {
    nvmeof::detail::log_warning("nvmeof: tls_psk: cannot read the key file %s: %s\n", o.tls_psk.c_str() + 1,
                                text.error().message().c_str());
    return Errc::invalid_argument;
  }
  auto configured = tls::parse_interchange(*text);
  if (!configured) {
    nvmeof::detail::log_warning("nvmeof: tls_psk: %s\n", configured.error().message().c_str());
    return Errc::invalid_argument;
  }
  auto psk = tls::derive_tls_psk(*configured, o.hostnqn, o.subnqn);
  if (!psk) {
    nvmeof::detail::log_warning("nvmeof: tls_psk: %s\n", psk.error().message().c_str());
    return Errc::invalid_argument;
  }
  return std::shared_ptr<const tls::TlsPsk>(std::make_shared<tls::TlsPsk>(std::move(*psk)));
}

// Threading: acquire() runs on whichever thread creates a queue pair (a lane, the connect pool)
// and release() on the thread that destroys it; both under `mu_`.
// Queue ids 1..N for I/O queues, handed out round-robin so that a just-released id (whose old
// connection the controller may still be tearing down) is reused last.
class QidPool {
 public:
  explicit QidPool(uint32_t n) : used_(n + 1, false) {}
  std::optional<uint16_t> acquire() {
    std::lock_guard lock(mu_);
    const size_t n = used_.size() - 1;
    for (size_t i = 0; i < n; ++i) {
      const size_t q = (next_ - 1 + i) % n + 1;
      if (!used_[q]) {
        used_[q] = true;
        next_ = q % n + 1;
        return static_cast<uint16_t>(q);
      }
    }
    return std::nullopt;
  }
  void release(uint16_t q) {
    std::lock_guard lock(mu_);
    if (q < used_.size()) used_[q] = false;
  }

 private:
  std::mutex mu_;
  std::vector<bool> used_;
  size_t next_ = 1;
};

}  // namespace

struct ControllerCore;

// One admin command in flight. Its data goes through `buf`, never the caller's memory, so a
// command the caller stopped waiting for can still complete safely.
struct AdminOp {
  IoRequest req;
  std::vector<uint8_t> buf;
  std::function<void(AdminOp&, const Cqe&)> done;  // control thread
  int submit_error = 0;
  // Sync waiters: written on the control thread under `mu`, read by the waiting thread.
  std::mutex mu;
  std::condition_variable cv;
  bool finished = false;
  Cqe cqe{};
  std::error_code queue_error;
  ControllerCore* impl = nullptr;
};

// Threading: `addr`, `opts`, `info`, `cap`, `cntlid`, `granted` are written during connect()
// before the Controller object is published and are read-only afterwards. `live` is atomic.
// Callbacks are guarded by `cb_mu`. Everything else belongs to the control thread.
struct NVMEOF_LOCAL ControllerCore final : QueuePairListener, fabric::AdminChannel,
                                           std::enable_shared_from_this<ControllerCore> {
  ControllerCore(ControlPlaneImpl& c, const TransportAddress& a, const ConnectOptions& o)
      : cp(c), addr(a), opts(o), limits(detail::transport_limits(a.transport)), ka_timer(c.io),
        ka_deadline(c.io) {}

  ControlPlaneImpl& cp;
  TransportAddress addr;
  ConnectOptions opts;
  const TransportLimits& limits;  // of addr's transport: every queue of this controller is sized by them
  ControllerInfo info;
  uint64_t cap = 0;
  uint16_t cntlid = 0;
  uint32_t granted = 0;
  uint32_t kato = 0;  // in force, ms
  std::shared_ptr<QidPool> qids;
  std::atomic<bool> live{false};
  std::string label;
  fabric::Authenticator authenticate;  // every queue's post-connect step (empty: none)
  std::shared_ptr<const tls::TlsPsk> tls;  // every TCP queue's secure channel (null: none)

  std::unique_ptr<QueuePair> admin_qp;
  std::unordered_map<AdminOp*, std::shared_ptr<AdminOp>> ops;
  std::deque<std::shared_ptr<AdminOp>> waiting;
  boost::asio::steady_timer ka_timer;
  boost::asio::steady_timer ka_deadline;
  bool ka_outstanding = false;
  // Traffic-based keep-alive (TBKAS): the newest time (Reactor::clock_ns) an I/O command of this
  // controller completed, stored by the lanes at most once a millisecond each (relaxed: a stale
  // value only sends one keep-alive more). Read by the keep-alive tick on the control thread.
  // Shared with the lanes (traffic_clock), which may complete a command of an old queue after
  // this controller has been replaced and freed.
  std::shared_ptr<std::atomic<uint64_t>> traffic_ns = std::make_shared<std::atomic<uint64_t>>(0);
  std::atomic<uint64_t> keep_alives_sent{0};  // control thread writes, stats read (relaxed)
  bool failed = false;
  bool disconnecting = false;
  std::error_code failure;

  std::mutex cb_mu;
  std::function<void(uint32_t)> on_aen;
  std::function<void(std::error_code)> on_fail;
  // CCR-completed events: counted on the control thread, waited for by cross_controller_reset
  // callers on other threads (a missed wake-up costs one log poll period, never correctness).
  std::mutex ccr_mu;
  std::condition_variable ccr_cv;
  uint64_t ccr_events = 0;

  void on_queue_failed(QueuePair&, std::error_code why) noexcept override { fail(why); }

  static void op_complete(IoRequest& req, const Cqe& cqe) noexcept {
    auto* op = static_cast<AdminOp*>(req.user);
    op->impl->finish_op(op, cqe);
  }

  void start_op(const std::shared_ptr<AdminOp>& op);
  void finish_op(AdminOp* op, const Cqe& cqe);
  void drain_waiting();
  Result<AdminResult> execute(const Sqe& cmd, void* data, uint32_t len);
  Result<AdminResult> execute(const Sqe& cmd, void* data, uint32_t len, std::chrono::milliseconds timeout);
  // fabric::AdminChannel: the admin queue for the shared readers (fabric/admin.hpp).
  Result<uint32_t> admin_command(const Sqe& cmd, void* data, uint32_t len) override;
  uint32_t admin_max_transfer() const noexcept override;
  void fail(std::error_code why);
  void schedule_keep_alive();
  void send_keep_alive();
  void arm_aer();
  void shutdown();
};

void ControllerCore::start_op(const std::shared_ptr<AdminOp>& op) {
  op->impl = this;
  if (!admin_qp || admin_qp->state() != QpState::live) {
    op->done(*op, failed_cqe(status::kHostPathError));
    return;
  }
  op->req.data = op->buf.empty() ? nullptr : op->buf.data();
  op->req.data_len = static_cast<uint32_t>(op->buf.size());
  op->req.on_complete = &ControllerCore::op_complete;
  op->req.user = op.get();
  const int rc = admin_qp->submit(op->req);
  if (rc == -EAGAIN) {
    waiting.push_back(op);
    return;
  }
  if (rc < 0) {
    op->submit_error = rc;
    op->done(*op, failed_cqe(status::kInvalidField));
    return;
  }
  ops.emplace(op.get(), op);
  // Outside a reactor turn nothing else would send the capsule now.
  if (cp.polling == 0) cp.kick();
}

void ControllerCore::finish_op(AdminOp* op, const Cqe& cqe) {
  auto it = ops.find(op);
  if (it == ops.end()) return;
  std::shared_ptr<AdminOp> hold = std::move(it->second);
  ops.erase(it);
  hold->done(*hold, cqe);
  drain_waiting();
}

void ControllerCore::drain_waiting() {
  while (!waiting.empty()) {
    if (admin_qp && admin_qp->state() == QpState::live &&
        admin_qp->outstanding() >= admin_qp->depth())
      return;
    std::shared_ptr<AdminOp> op = std::move(waiting.front());
    waiting.pop_front();
    start_op(op);
  }
}

Result<AdminResult> ControllerCore::execute(const Sqe& cmd, void* data, uint32_t len) {
  return execute(cmd, data, len, opts.admin_timeout);
}

Result<AdminResult> ControllerCore::execute(const Sqe& cmd, void* data, uint32_t len,
                                              std::chrono::milliseconds timeout) {
  const bool to_ctrl = is_host_to_controller(cmd);
  const bool from_ctrl = is_controller_to_host(cmd);
  if (len && ((!to_ctrl && !from_ctrl) || !data)) return Errc::invalid_argument;
  auto op = std::make_shared<AdminOp>();
  op->req.cmd = cmd;
  op->buf.resize(len);
  if (len && to_ctrl) std::memcpy(op->buf.data(), data, len);
  op->done = [this](AdminOp& o, const Cqe& c) {
    std::lock_guard lock(o.mu);
    o.cqe = c;
    if (c.status() == status::kHostPathError && failed) o.queue_error = failure;
    o.finished = true;
    o.cv.notify_all();
  };
  if (cp.on_control_thread()) {
    start_op(op);
    cp.run_until([&] { return op->finished; }, timeout);
  } else {
    std::weak_ptr<ControllerCore> w = weak_from_this();
    boost::asio::post(cp.io, [w, op] {
      if (auto self = w.lock()) self->start_op(op);
    });
    std::unique_lock lock(op->mu);
    op->cv.wait_for(lock, timeout, [&] { return op->finished; });
  }
  std::lock_guard lock(op->mu);
  if (!op->finished) return Errc::timeout;
  if (op->submit_error == -ENOTCONN) return Errc::not_connected;
  if (op->submit_error) return Errc::invalid_argument;
  if (op->queue_error) return op->queue_error;
  if (op->cqe.status() == status::kHostPathError && !live.load()) return Errc::not_connected;
  if (len && from_ctrl) std::memcpy(data, op->buf.data(), len);
  return AdminResult{op->cqe.status(), op->cqe.dw0, op->cqe.dw1};
}

Result<uint32_t> ControllerCore::admin_command(const Sqe& cmd, void* data, uint32_t len) {
  auto r = execute(cmd, data, len);
  if (!r) return r.error();
  if (!r->status.is_success()) return make_error_code(r->status);
  return r->dw0;
}

uint32_t ControllerCore::admin_max_transfer() const noexcept {
  return detail::admin_max_transfer(limits, info);
}

void ControllerCore::fail(std::error_code why) {
  if (failed) return;
  failed = true;
  failure = why;
  live.store(false);
  ka_timer.cancel();
  ka_deadline.cancel();
  if (!disconnecting) {
    std::function<void(std::error_code)> cb;
    {
      std::lock_guard lock(cb_mu);
      cb = on_fail;
    }
    // Posted, so the callback runs outside the reactor turn that noticed the failure.
    if (cb) boost::asio::post(cp.io, [cb, why] { cb(why); });
  }
  while (!waiting.empty()) {
    std::shared_ptr<AdminOp> op = std::move(waiting.front());
    waiting.pop_front();
    op->done(*op, failed_cqe(status::kHostPathError));
  }
}

void ControllerCore::schedule_keep_alive() {
  if (kato == 0 || failed) return;
  // Four keep-alives per KATO, not two: with the shortest KATO (100 ms) a control thread held
  // off for half of it on a loaded host must not let the controller's timer expire.
  const uint32_t period_ms = std::max<uint32_t>(kato / 4, 1);
  ka_timer.expires_after(std::chrono::milliseconds(period_ms));
  ka_timer.async_wait([w = weak_from_this(), period_ms](const boost::system::error_code& ec) {
    if (ec) return;
    auto self = w.lock();
    if (!self || self->failed) return;
    // With traffic-based keep-alive every completed command restarts the controller's timer
    // (NVMe base specification, Keep Alive Timer): a command completed within the last period
    // already did what a Keep Alive would, so none is sent while I/O flows.
    const uint64_t since = Reactor::clock_ns() - self->traffic_ns->load(std::memory_order_relaxed);
    if (!self->info.traffic_based_keep_alive() || since >= uint64_t{period_ms} * 1'000'000ull)
      self->send_keep_alive();
    self->schedule_keep_alive();
  });
}

void ControllerCore::send_keep_alive() {
  if (ka_outstanding || !admin_qp) return;  // the deadline timer watches the one in flight
  ka_outstanding = true;
  keep_alives_sent.store(keep_alives_sent.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  auto op = std::make_shared<AdminOp>();
  prep_keep_alive(op->req.cmd);
  op->done = [this](AdminOp&, const Cqe& c) {
    ka_outstanding = false;
    ka_deadline.cancel();
    if (failed || c.status().is_success()) return;
    nvmeof::detail::log_warning("nvmeof: %s: keep-alive failed: %s\n", label.c_str(),
                 to_string(c.status()).c_str());
    fail(make_error_code(c.status()));
    if (admin_qp) admin_qp->close();
  };
  ka_deadline.expires_after(std::chrono::milliseconds(kato));
  ka_deadline.async_wait([w = weak_from_this()](const boost::system::error_code& ec) {
    if (ec) return;
    auto self = w.lock();
    if (!self || self->failed || !self->ka_outstanding) return;
    // A control thread held off its CPU past KATO (a loaded host, a spinning data plane on the
    // same core) runs this timer and the answer's notification in whichever order: reap what
    // the admin queue has received before calling the controller silent.
    if (self->cp.polling == 0) self->cp.kick();
    if (self->failed || !self->ka_outstanding) return;
    nvmeof::detail::log_warning("nvmeof: %s: no keep-alive answer within %u ms\n", self->label.c_str(),
                 self->kato);
    self->fail(make_error_code(Errc::keep_alive_timeout));
    if (self->admin_qp) self->admin_qp->close();
  });
  start_op(op);
}

void ControllerCore::arm_aer() {
  if (failed || !admin_qp) return;
  auto op = std::make_shared<AdminOp>();
  prep_async_event_request(op->req.cmd);
  op->done = [this](AdminOp&, const Cqe& c) {
    // Any error (aborted at teardown, limit exceeded, unsupported) ends the chain.
    if (!c.status().is_success() || failed) return;
    const uint32_t dw0 = c.dw0;
    arm_aer();
    if (is_ccr_completed_event(dw0)) {
      std::lock_guard lock(ccr_mu);
      ++ccr_events;
      ccr_cv.notify_all();
    }
    std::function<void(uint32_t)> cb;
    {
      std::lock_guard lock(cb_mu);
      cb = on_aen;
    }
    if (cb) boost::asio::post(cp.io, [cb, dw0] { cb(dw0); });
  };
  start_op(op);
}

void ControllerCore::shutdown() {
  disconnecting = true;
  live.store(false);
  ka_timer.cancel();
  ka_deadline.cancel();
  if (admin_qp) {
    // The destructor drains the socket and completes every admin command (host path error).
    std::unique_ptr<QueuePair> qp = std::move(admin_qp);
    qp.reset();
  }
  failed = true;
  while (!waiting.empty()) {
    std::shared_ptr<AdminOp> op = std::move(waiting.front());
    waiting.pop_front();
    op->done(*op, failed_cqe(status::kHostPathError));
  }
}

namespace {

// What connect() returns: the public Controller over the state it shares with the work posted to
// the control thread (the public class has no members; the library reaches the state by
// static_cast, as it does a Host's engine).
struct ControllerHandle final : Controller {
  explicit ControllerHandle(std::shared_ptr<ControllerCore> c) : core(std::move(c)) {}
  ~ControllerHandle() override;
  std::shared_ptr<ControllerCore> core;
};

ControllerCore& core_of(const Controller& c) noexcept {
  return *static_cast<const ControllerHandle&>(c).core;
}

}  // namespace

Controller::~Controller() = default;

ControllerHandle::~ControllerHandle() {
  if (!core) return;
  ControlPlaneImpl& cp = core->cp;
  // The last reference goes on the control thread, where the timers live.
  cp.call([this] {
    core->shutdown();
    core.reset();
  });
}

Result<std::shared_ptr<Controller>> Controller::connect(ControlPlane& plane,
                                                        const TransportAddress& addr,
                                                        const ConnectOptions& o) {
  if (!fabric_of(addr.transport)) return Errc::unsupported;
  const TransportLimits& limits = detail::transport_limits(addr.transport);
  if (o.subnqn.empty() || o.admin_queue_depth < 2 || o.admin_queue_depth > limits.max_queue_depth ||
      o.io_queue_depth == 0 || o.io_queue_depth > limits.max_queue_depth || o.max_io_queues == 0)
    return Errc::invalid_argument;
  ConnectOptions opts = o;
  if (opts.hostid == std::array<uint8_t, 16>{}) opts.hostid = process_hostid();
  if (opts.hostnqn.empty()) opts.hostnqn = "nqn.2014-08.org.nvmexpress:uuid:" + uuid_string(opts.hostid);
  auto authenticator = make_authenticator(opts);
  if (!authenticator) return authenticator.error();
  auto tls = make_tls(opts, addr);
  if (!tls) return tls.error();

  ControlPlaneImpl& cp = ControllerAccess::impl(plane);
  const detail::QueueShape shape = detail::admin_queue_shape(limits, opts.admin_queue_depth);
  PairParams pp;
  pp.qid = 0;
  pp.depth = shape.depth;
  pp.in_capsule_data = shape.in_capsule_data;
  pp.max_transfer = shape.max_transfer;
  pp.kato_ms = opts.kato_ms == kKatoShortest ? kProvisionalKatoMs : opts.kato_ms;
  pp.cntlid = fabric::kAdminCntlid;
  pp.recv_buffer = 64u << 10;
  pp.authenticate = *authenticator;
  pp.tls = *tls;
  auto np = connect_pair(*cp.reactor, addr, opts, std::move(pp));
  if (!np) return np.error();

  auto impl = std::make_shared<ControllerCore>(cp, addr, opts);
  impl->kato = pp.kato_ms;
  impl->authenticate = std::move(*authenticator);
  impl->tls = std::move(*tls);
  impl->label = np->label;
  impl->cntlid = np->cntlid;
  cp.call([&] {
    auto qp = np->start();  // a fabric pair's start cannot fail
    qp.value()->set_listener(impl.get());
    impl->admin_qp = std::move(*qp);
    impl->live.store(true);
  });
  auto give_up = [&](std::error_code ec, const std::string& why) -> std::error_code {
    if (!why.empty()) nvmeof::detail::log_warning("nvmeof: %s: %s\n", impl->label.c_str(), why.c_str());
    cp.call([&] { impl->shutdown(); });
    return ec;
  };
  auto status_error = [&](const char* what, NvmeStatus st) {
    return give_up(make_error_code(st), std::string(what) + ": " + to_string(st));
  };

  Sqe c;
  prep_property_get(c, prop::kCap, true);
  auto r = impl->execute(c, nullptr, 0);
  if (!r) return give_up(r.error(), "Property Get CAP: " + r.error().message());
  if (!r->status.is_success()) return status_error("Property Get CAP", r->status);
  impl->cap = r->dw0 | (static_cast<uint64_t>(r->dw1) << 32);

  prep_property_set(c, prop::kCc, kCcEnable | kCcIosqes | kCcIocqes, false);
  r = impl->execute(c, nullptr, 0);
  if (!r) return give_up(r.error(), "Property Set CC: " + r.error().message());
  if (!r->status.is_success()) return status_error("Property Set CC", r->status);

  // CAP.TO is in 500 ms units.
  const auto ready_within = std::chrono::milliseconds(std::max<uint64_t>((impl->cap >> 24) & 0xff, 1) * 500);
  const auto ready_deadline = std::chrono::steady_clock::now() + ready_within;
  auto pause = std::chrono::milliseconds(1);
  for (;;) {
    prep_property_get(c, prop::kCsts, false);
    r = impl->execute(c, nullptr, 0);
    if (!r) return give_up(r.error(), "Property Get CSTS: " + r.error().message());
    if (!r->status.is_success()) return status_error("Property Get CSTS", r->status);
    if (r->dw0 & kCstsCfs) return give_up(Errc::controller_fatal, "controller fatal status (CSTS.CFS)");
    if (r->dw0 & kCstsRdy) break;
    if (std::chrono::steady_clock::now() >= ready_deadline)
      return give_up(Errc::controller_fatal, "controller not ready within CAP.TO");
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }

  auto info = fabric::identify_controller(*impl);
  if (!info) return give_up(info.error(), "Identify Controller: " + info.error().message());
  impl->info = std::move(*info);

  const bool discovery = impl->info.cntrltype == kCntrltypeDiscovery || opts.subnqn == kDiscoveryNqn;
  if (!discovery) {
    const uint32_t want = std::min<uint32_t>(opts.max_io_queues, 65535);
    prep_set_features(c, feature::kNumberOfQueues, (want - 1) | ((want - 1) << 16));
    r = impl->execute(c, nullptr, 0);
    if (!r) return give_up(r.error(), "Set Features Number of Queues: " + r.error().message());
    if (!r->status.is_success()) return status_error("Set Features Number of Queues", r->status);
    const uint32_t nsqa = (r->dw0 & 0xffff) + 1;
    const uint32_t ncqa = (r->dw0 >> 16) + 1;
    impl->granted = std::min({want, nsqa, ncqa});
    // Best effort: a controller without these events still works, it just never reports them.
    prep_set_features(c, feature::kAsyncEventConfig, kAenNsAttrChanged | kAenAnaChange);
    (void)impl->execute(c, nullptr, 0);
  } else {
    // Best effort too: a discovery controller that can tell us its log changed (persistent
    // discovery listens for it) turns it on; one that cannot refuses, and is polled instead.
    prep_set_features(c, feature::kAsyncEventConfig, kAenDiscoveryLogChange);
    (void)impl->execute(c, nullptr, 0);
  }
  // KATO at the controller's granularity: the shortest when asked for, else rounded up as the
  // controller itself will round it (the hold of a failover is computed from this value).
  if (impl->kato != 0) {
    const uint32_t unit = std::max<uint32_t>(impl->info.kas_100ms, 1) * kKasUnitMs;
    if (opts.kato_ms == kKatoShortest && !discovery) {
      prep_set_features(c, feature::kKeepAliveTimer, unit);
      r = impl->execute(c, nullptr, 0);
      if (r && r->status.is_success()) impl->kato = unit;
    } else {
      impl->kato = (impl->kato + unit - 1) / unit * unit;
    }
  }
  impl->qids = std::make_shared<QidPool>(impl->granted);
  cp.call([&] {
    impl->schedule_keep_alive();
    impl->arm_aer();
  });
  return std::shared_ptr<Controller>(std::make_shared<ControllerHandle>(std::move(impl)));
}

const ControllerInfo& Controller::info() const noexcept { return core_of(*this).info; }
const TransportAddress& Controller::address() const noexcept { return core_of(*this).addr; }
const ConnectOptions& Controller::options() const noexcept { return core_of(*this).opts; }
uint32_t Controller::io_queues() const noexcept { return core_of(*this).granted; }
uint32_t Controller::kato_ms() const noexcept { return core_of(*this).kato; }
std::shared_ptr<std::atomic<uint64_t>> traffic_clock(Controller& ctrl) noexcept {
  auto& impl = core_of(ctrl);
  return impl.info.traffic_based_keep_alive() ? impl.traffic_ns : nullptr;
}

uint64_t Controller::keep_alives_sent() const noexcept {
  return core_of(*this).keep_alives_sent.load(std::memory_order_relaxed);
}
bool Controller::is_live() const noexcept { return core_of(*this).live.load(); }

Result<std::unique_ptr<QueuePair>> create_io_queue(Controller& ctrl, Reactor& reactor,
                                                   uint32_t depth, uint32_t recv_buffer) {
  auto q = prepare_io_queue(ctrl, reactor, depth, detail::thread_memory_node(), recv_buffer);
  if (!q) return q.error();
  return q->start();
}

Result<PreparedQueue> prepare_io_queue(Controller& ctrl, Reactor& reactor, uint32_t depth,
                                         int memory_node, uint32_t recv_buffer) {
  ControllerCore* impl_ = &core_of(ctrl);
  if (!impl_->live.load()) return Errc::not_connected;
  const uint32_t mqes = static_cast<uint32_t>(impl_->cap & 0xffff) + 1;
  if (depth == 0) depth = impl_->opts.io_queue_depth;
  const detail::QueueShape shape = detail::io_queue_shape(impl_->limits, impl_->info, mqes, depth);
  const auto qid = impl_->qids->acquire();
  if (!qid) return Errc::queue_full;
  PairParams pp;
  pp.qid = *qid;
  pp.depth = shape.depth;
  pp.cntlid = impl_->cntlid;
  pp.in_capsule_data = shape.in_capsule_data;
  pp.max_transfer = shape.max_transfer;
  pp.on_destroy = [pool = impl_->qids, q = *qid] { pool->release(q); };
  pp.authenticate = impl_->authenticate;
  pp.tls = impl_->tls;
  if (recv_buffer) pp.recv_buffer = recv_buffer;
  // The transports place a pair's memory on the creating thread's node.
  const int saved_node = detail::thread_memory_node();
  if (memory_node >= 0) detail::set_thread_memory_node(memory_node);
  auto np = connect_pair(reactor, impl_->addr, impl_->opts, std::move(pp));
  detail::set_thread_memory_node(saved_node);
  if (!np) {
    impl_->qids->release(*qid);
    return np.error();
  }
  np->traffic = traffic_clock(ctrl);
  return std::move(*np);
}

Result<AdminResult> Controller::admin(const Sqe& cmd, void* data, uint32_t len) {
  return core_of(*this).execute(cmd, data, len);
}

Result<NamespaceInfo> Controller::identify_namespace(uint32_t nsid) {
  return fabric::identify_namespace(core_of(*this), nsid);
}

Result<std::vector<uint32_t>> Controller::active_namespaces() { return fabric::active_namespaces(core_of(*this)); }

Result<AnaLog> Controller::ana_log() {
  ControllerCore& core = core_of(*this);
  return fabric::ana_log(core, core.info.nn);
}

Result<DiscoveryLog> Controller::discovery_log() { return fabric::discovery_log(core_of(*this)); }

Result<std::vector<uint32_t>> changed_namespaces(Controller& ctrl) {
  return fabric::changed_namespaces(core_of(ctrl));
}

Result<void> Controller::keep_alive() {
  Sqe c;
  prep_keep_alive(c);
  auto r = core_of(*this).execute(c, nullptr, 0);
  if (!r) return r.error();
  if (!r->status.is_success()) return make_error_code(r->status);
  return {};
}

Result<void> Controller::cross_controller_reset(const ControllerInfo& impacted,
                                                std::chrono::milliseconds timeout) {
  ControllerCore& core = core_of(*this);
  if (core.info.ccrl == 0) return Errc::unsupported;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  uint64_t seen_events;
  {
    std::lock_guard lock(core.ccr_mu);
    seen_events = core.ccr_events;
  }
  Sqe c;
  prep_cross_controller_reset(c, impacted.cntlid, impacted.ciu, impacted.cirn);
  auto r = core.execute(c, nullptr, 0, timeout);
  if (!r) return r.error();
  const bool already = r->status.sct() == Sct::command_specific && r->status.sc() == ccr::kScInProgress;
  if (!r->status.is_success() && !already) return make_error_code(r->status);
  if (r->status.is_success() && (r->dw0 & ccr::kImmediateResetSuccessful)) return {};
  // In progress: the controller adds the reset to its CCR log and raises an event when it is
  // done. The log is polled as well, so a lost event only costs a poll period.
  for (;;) {
    auto hdr = fabric::get_log_page(core, log_page::kCrossControllerReset, 0xffffffffu, ccr::kLogHeaderLen);
    if (!hdr) return hdr.error();
    uint16_t ne;
    std::memcpy(&ne, hdr->data(), sizeof ne);
    ne = static_cast<uint16_t>(std::min<size_t>(ne, ccr::kMaxLogEntries));
    auto log = fabric::get_log_page(core, log_page::kCrossControllerReset, 0xffffffffu,
                                    static_cast<uint32_t>(ccr::kLogHeaderLen + ne * ccr::kLogEntryLen));
    if (!log) return log.error();
    for (size_t i = 0; i < ne; ++i) {
      const uint8_t* e = log->data() + ccr::kLogHeaderLen + i * ccr::kLogEntryLen;
      uint16_t icid;
      std::memcpy(&icid, e, sizeof icid);
      if (icid != impacted.cntlid || e[2] != impacted.ciu) continue;
      if (e[6] == ccr::kStatusSuccess) return {};
      if (e[6] == ccr::kStatusFailed) return Errc::controller_fatal;
    }
    std::unique_lock lock(core.ccr_mu);
    const auto wake = std::min(deadline, std::chrono::steady_clock::now() + kCcrLogPoll);
    core.ccr_cv.wait_until(lock, wake, [&] { return core.ccr_events != seen_events; });
    seen_events = core.ccr_events;
    if (std::chrono::steady_clock::now() >= deadline) return Errc::timeout;
  }
}

void Controller::on_async_event(std::function<void(uint32_t dw0)> fn) {
  ControllerCore& core = core_of(*this);
  std::lock_guard lock(core.cb_mu);
  core.on_aen = std::move(fn);
}

void Controller::on_failure(std::function<void(std::error_code)> fn) {
  ControllerCore& core = core_of(*this);
  std::lock_guard lock(core.cb_mu);
  core.on_fail = std::move(fn);
}

void Controller::disconnect() {
  ControllerCore& core = core_of(*this);
  core.cp.call([&core] { core.shutdown(); });
}

}  // namespace nvmeof
