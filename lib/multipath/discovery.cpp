// Persistent discovery: the watchers of discovery controllers, and how their logs become paths
// of the open subsystems (ARCHITECTURE.md, "Persistent discovery").
#include "multipath/discovery.hpp"

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <cerrno>
#include <set>
#include <thread>

#include "core/log.hpp"
#include "multipath/engine.hpp"
#include "multipath/volume_impl.hpp"

namespace nvmeof::detail {
namespace {

constexpr uint8_t kTrtypeTcp = 3;
constexpr uint8_t kSubtypeReferral = 1;
constexpr uint8_t kTreqRequired = 1, kTreqChannelMask = 3, kSectypeTls13 = 2;
// Default keep-alive of a discovery connection: a lost discovery controller is noticed within
// it; its traffic is one Keep Alive every KATO / 4.
constexpr uint32_t kDiscoveryKatoMs = 4000;

bool is_discovery_change_notice(uint32_t dw0) noexcept {
  const uint32_t type = dw0 & 0x7;
  const uint32_t info = (dw0 >> 8) & 0xff;
  return type == 0x2 && info == 0xf0;  // notice, discovery log page change
}

bool wants_tls(const ConnectOptions& co) noexcept {
  return co.tls == TlsUse::on || (co.tls == TlsUse::when_keyed && !co.tls_psk.empty());
}

}  // namespace

std::vector<TransportAddress> usable_ports(const std::vector<DiscoveryEntry>& entries, const std::string& subnqn,
                                           const ConnectOptions& co, size_t* need_tls, size_t* no_tls) {
  std::vector<TransportAddress> out;
  const bool tls = wants_tls(co);
  for (const auto& e : entries) {
    if (e.subnqn != subnqn || e.trtype != kTrtypeTcp || e.subtype == kSubtypeReferral) continue;
    if (tls && e.sectype != kSectypeTls13) {
      if (no_tls) ++*no_tls;
      continue;
    }
    if (!tls && (e.treq & kTreqChannelMask) == kTreqRequired) {
      if (need_tls) ++*need_tls;
      continue;
    }
    TransportAddress a;
    a.traddr = e.traddr;
    a.trsvcid = e.trsvcid;
    // Several entries of one port (one per subsystem port ID) are one path.
    if (std::none_of(out.begin(), out.end(), [&](const TransportAddress& b) {
          return b.traddr == a.traddr && b.trsvcid == a.trsvcid;
        }))
      out.push_back(a);
  }
  return out;
}

DiscoveryWatcher::DiscoveryWatcher(Engine& engine, TransportAddress addr, ConnectOptions co, int depth)
    : engine_(engine), addr_(std::move(addr)), co_(std::move(co)), depth_(depth) {}

template <class F>
void DiscoveryWatcher::on_pool(F&& fn) {
  tasks_.fetch_add(1);
  boost::asio::post(engine_.pool, [self = shared_from_this(), f = std::forward<F>(fn)]() mutable {
    if (!self->stopping_.load()) f();
    self->tasks_.fetch_sub(1);
  });
}

void DiscoveryWatcher::start() {
  on_pool([this] { connect_now(); });
}

void DiscoveryWatcher::connect_now() {
  ConnectOptions co = co_;
  co.subnqn = kDiscoveryNqn;
  if (co.kato_ms == 0 || co.kato_ms == kKatoShortest) co.kato_ms = kDiscoveryKatoMs;
  auto c = Controller::connect(*engine_.cp, addr_, co);
  if (!c && c.error() == make_error_code(Errc::tls_not_offered) && co.tls == TlsUse::when_keyed) {
    co.tls = TlsUse::off;  // a plaintext discovery port may still list TLS ports
    c = Controller::connect(*engine_.cp, addr_, co);
  }
  if (!c) {
    lost("connect: " + c.message());
    return;
  }
  std::shared_ptr<Controller> ctrl = *c;
  std::weak_ptr<DiscoveryWatcher> weak = weak_from_this();
  ctrl->on_async_event([weak](uint32_t dw0) {
    auto self = weak.lock();
    if (!self || !is_discovery_change_notice(dw0)) return;
    self->events_.fetch_add(1);
    self->on_pool([s = self.get()] { s->read_log(); });
  });
  ctrl->on_failure([weak](std::error_code ec) {
    if (auto self = weak.lock()) self->lost("connection: " + ec.message());
  });
  {
    std::lock_guard lock(mu_);
    if (ctrl_) ctrl_->disconnect();
    ctrl_ = ctrl;
  }
  connected_.store(true);
  backoff_ = kMinBackoff;
  if (!ctrl->is_live()) {  // failed before its callback was set
    lost("connection lost while it connected");
    return;
  }
  read_log();  // at every connect: what changed while it was away
}

void DiscoveryWatcher::read_log() {
  std::shared_ptr<Controller> ctrl;
  {
    std::lock_guard lock(mu_);
    ctrl = ctrl_;
  }
  if (!ctrl) return;
  auto log = ctrl->discovery_log();
  if (!log) {
    // A log whose generation counter never held still, or a malformed one: the last good one
    // stays in force; the controller's next event (or the next connect) reads it again.
    nvmeof::detail::log_warning("nvmeof: discovery %s: log: %s\n", addr_.to_string().c_str(), log.message().c_str());
    std::lock_guard lock(mu_);
    last_error_ = "log: " + log.message();
    return;
  }
  log_reads_.fetch_add(1);
  {
    std::lock_guard lock(mu_);
    entries_ = std::move(log->entries);
    genctr_ = log->genctr;
    last_error_.clear();
  }
  engine_.apply_discovery();
}

void DiscoveryWatcher::lost(const std::string& why) {
  if (stopping_.load()) return;
  {
    // The dead controller stays until the next connect replaces it (or stop()): this may run
    // inside that controller's own failure callback, which must not tear it down under itself.
    std::lock_guard lock(mu_);
    last_error_ = why;
  }
  if (connected_.exchange(false))
    nvmeof::detail::log_warning("nvmeof: discovery %s lost: %s (reconnecting)\n", addr_.to_string().c_str(),
                                why.c_str());
  if (reconnect_armed_.exchange(true)) return;
  const auto wait = backoff_;
  backoff_ = std::min(kMaxBackoff, backoff_ * 2);
  auto t = std::make_shared<boost::asio::steady_timer>(engine_.io(), wait);
  t->async_wait([self = shared_from_this(), t](const boost::system::error_code& ec) {
    self->reconnect_armed_.store(false);
    if (ec || self->stopping_.load()) return;
    self->reconnects_.fetch_add(1);
    self->on_pool([s = self.get()] { s->connect_now(); });
  });
}

void DiscoveryWatcher::stop() {
  stopping_.store(true);
  while (tasks_.load() != 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::lock_guard lock(mu_);
  if (ctrl_) {
    ctrl_->disconnect();
    ctrl_.reset();
  }
  connected_.store(false);
}

std::vector<DiscoveryEntry> DiscoveryWatcher::entries() const {
  std::lock_guard lock(mu_);
  return entries_;
}

HostDiscoveryStats DiscoveryWatcher::stats() const {
  HostDiscoveryStats s;
  s.address = addr_.to_string();
  s.connected = connected_.load();
  s.referral = depth_ > 0;
  s.log_reads = log_reads_.load();
  s.change_events = events_.load();
  s.reconnects = reconnects_.load();
  std::lock_guard lock(mu_);
  s.genctr = genctr_;
  s.entries = static_cast<uint32_t>(entries_.size());
  s.last_error = last_error_;
  return s;
}

}  // namespace nvmeof::detail

namespace nvmeof {

void Engine::add_referral(const TransportAddress& addr, const ConnectOptions& co, int depth) {
  if (depth > detail::kMaxReferralDepth) return;
  std::shared_ptr<detail::DiscoveryWatcher> w;
  {
    std::lock_guard lock(discovery_mu);
    auto [it, added] = discoveries.emplace(addr.to_string(), nullptr);
    if (!added) return;  // watched already: a loop of referrals ends here
    it->second = w = std::make_shared<detail::DiscoveryWatcher>(*this, addr, co, depth);
  }
  nvmeof::detail::log_info("nvmeof: discovery %s: following a referral\n", addr.to_string().c_str());
  w->start();
}

void Engine::apply_discovery() {
  std::lock_guard apply(apply_mu);
  std::vector<std::shared_ptr<detail::DiscoveryWatcher>> watchers;
  {
    std::lock_guard lock(discovery_mu);
    for (const auto& [key, w] : discoveries) watchers.push_back(w);
  }
  // Every log's entries together: several discovery controllers listing one port give one path.
  std::vector<DiscoveryEntry> all;
  for (const auto& w : watchers) {
    auto e = w->entries();
    for (const auto& entry : e) {
      if (entry.subtype != 1) continue;  // referral: another discovery controller
      TransportAddress r;
      r.transport = entry.trtype == 1 ? Transport::rdma : Transport::tcp;
      r.traddr = entry.traddr;
      r.trsvcid = entry.trsvcid;
      add_referral(r, w->connect_options(), w->depth() + 1);  // the referring one's identity and keys
    }
    all.insert(all.end(), e.begin(), e.end());
  }
  std::vector<std::shared_ptr<detail::SubsystemPaths>> subs;
  {
    std::lock_guard lock(subsystems_mu);
    for (const auto& [key, weak] : subsystems)
      if (auto sub = weak.lock(); sub && sub->ready()) subs.push_back(std::move(sub));
  }
  for (const auto& sub : subs) sub->apply_discovered(all);
}

void Engine::stop_discovery() {
  std::map<std::string, std::shared_ptr<detail::DiscoveryWatcher>> all;
  {
    std::lock_guard lock(discovery_mu);
    all.swap(discoveries);
  }
  for (auto& [key, w] : all) w->stop();
}

Result<void> Host::add_discovery(const TransportAddress& addr, const ConnectOptions& opts) {
  Engine& e = engine_of(*this);
  if (e.current_reactor()) return errno_code(EDEADLK);
  std::shared_ptr<detail::DiscoveryWatcher> w;
  {
    std::lock_guard lock(e.discovery_mu);
    auto [it, added] = e.discoveries.emplace(addr.to_string(), nullptr);
    if (!added) return {errno_code(EEXIST), addr.to_string() + " is watched already"};
    it->second = w = std::make_shared<detail::DiscoveryWatcher>(e, addr, opts, 0);
  }
  w->start();
  return {};
}

Result<void> Host::remove_discovery(const TransportAddress& addr) {
  Engine& e = engine_of(*this);
  std::vector<std::shared_ptr<detail::DiscoveryWatcher>> gone;
  {
    std::lock_guard lock(e.discovery_mu);
    auto it = e.discoveries.find(addr.to_string());
    if (it == e.discoveries.end() || it->second->depth() != 0)
      return {errno_code(ENOENT), addr.to_string() + " is not watched"};
    gone.push_back(it->second);
    e.discoveries.erase(it);
    // What it referred to goes with it (referrals of another watched controller come back at
    // that one's next read).
    for (auto r = e.discoveries.begin(); r != e.discoveries.end();) {
      if (r->second->depth() > 0) {
        gone.push_back(r->second);
        r = e.discoveries.erase(r);
      } else {
        ++r;
      }
    }
  }
  for (auto& w : gone) w->stop();
  return {};
}

}  // namespace nvmeof
