// The engine (nvmeof/host.hpp): its reactor threads and their loops, the process-wide registry
// of shared engines. ARCHITECTURE.md, "The engine", says why volumes share it.
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <system_error>
#include <tuple>

#include "core/log.hpp"
#include "core/node_memory.hpp"
#include "core/spin_governor.hpp"
#include "multipath/discovery.hpp"
#include "multipath/engine.hpp"
#include "multipath/observers.hpp"
#include "multipath/volume_impl.hpp"
#include "multipath/engine_internal.hpp"

namespace nvmeof::detail {
namespace {

thread_local EngineReactor* tls_reactor = nullptr;

// How long a sleeping reactor waits per turn while one of its lanes has work in flight or waiting
// on a list (the turn also runs deadlines and releases); a quiescent adaptive or sleeping reactor
// only wakes for a completion, a posted function, a submission or a reactor timer.
constexpr auto kSleepTurn = std::chrono::microseconds(1000);
constexpr auto kQuiescentTurn = std::chrono::microseconds(200'000);

std::vector<int> allowed_cpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

}  // namespace

EngineReactor::EngineReactor(const HostOptions& opts, const ReactorPlacement& place) : opts_(opts), place_(place) {}

EngineReactor::~EngineReactor() { stop(); }

int EngineReactor::memory_node() const noexcept {
  return opts_.memory_node >= 0 ? opts_.memory_node : place_.node;
}

bool EngineReactor::on_thread() const noexcept { return tls_reactor == this; }

Result<void> EngineReactor::start() {
  std::promise<std::error_code> ready;
  auto fut = ready.get_future();
  thread_ = std::thread([this, &ready] {
    tls_reactor = this;
    if (pthread_getcpuclockid(pthread_self(), &cpu_clock_) == 0)
      cpu_clock_ok_.store(true, std::memory_order_release);
    place_thread();
    ReactorOptions ro;
    ro.big_entries = opts_.big_entries;
    // A polling reactor takes its completions when it looks, never as an interruption. The ring
    // is made here, on the reactor thread, the only one that submits to it (others post).
    // Callers that drive it (caller_drive) enter the ring from their own threads.
    ro.single_issuer = opts_.poll != PollMode::sleep && opts_.single_issuer && !opts_.caller_drive;
    auto r = Reactor::create(ro);
    if (!r) {
      ready.set_value(r.error());
      return;
    }
    reactor_ = std::move(*r);
    ready.set_value({});
    run();
    // reactor_ lives until stop() has joined this thread: stop() wakes it after raising stop_,
    // so it must still be there if this thread has seen stop_ and left run() meanwhile.
  });
  const std::error_code ec = fut.get();
  if (ec) {
    thread_.join();
    return ec;
  }
  return {};
}

void EngineReactor::stop() {
  if (!thread_.joinable()) return;
  stop_.store(true, std::memory_order_release);
  {
    std::lock_guard lk(park_mu_);
    park_cv_.notify_all();
  }
  reactor_->wake();
  thread_.join();
  reactor_.reset();
}

// The reactor's thread, asked to park at the top of a turn: it sleeps while callers drive, and
// takes the reactor back once none has for kDriveLeaseNs (or the engine stops).
void EngineReactor::park() {
  int s = kParkAsked;
  // The caller that asked gets a whole lease to take the parked reactor, however late it runs.
  drive_end_ns_.store(Reactor::clock_ns(), std::memory_order_relaxed);
  if (!drive_state_.compare_exchange_strong(s, kParked, std::memory_order_acq_rel)) return;
  parks_.fetch_add(1, std::memory_order_relaxed);
  std::unique_lock lk(park_mu_);
  for (;;) {
    park_cv_.wait_for(lk, std::chrono::nanoseconds(kDriveLeaseNs));
    s = drive_state_.load(std::memory_order_acquire);
    if (s != kParked) continue;  // a caller drives now
    const bool stopping = stop_.load(std::memory_order_acquire);
    if (!stopping && Reactor::clock_ns() - drive_end_ns_.load(std::memory_order_relaxed) < kDriveLeaseNs) continue;
    if (drive_state_.compare_exchange_strong(s, kRun, std::memory_order_acq_rel)) break;
  }
  // The caller left the reactor spinning; a sleeping loop must not (submitters would not wake
  // it), an adaptive one stops at its next turn by itself.
  if (opts_.poll == PollMode::sleep) {
    reactor_->set_spinning(false);
    spinning_.store(false, std::memory_order_seq_cst);
  }
}

bool EngineReactor::drive(const std::function<bool()>& until, uint64_t deadline_ns) {
  if (!opts_.caller_drive || tls_reactor != nullptr || stop_.load(std::memory_order_acquire)) return false;
  for (;;) {
    int s = drive_state_.load(std::memory_order_acquire);
    if (s == kParked) {
      if (drive_state_.compare_exchange_strong(s, kDriven, std::memory_order_acq_rel)) break;
    } else if (s == kDriven) {
      return false;  // another caller drives it
    } else if (s == kRun) {
      if (drive_state_.compare_exchange_strong(s, kParkAsked, std::memory_order_acq_rel))
        reactor_->wake();  // out of a sleeping turn
    } else if (Reactor::clock_ns() >= deadline_ns) {
      // Still asked and not parked: take the request back (if it parked meanwhile, drive).
      if (drive_state_.compare_exchange_strong(s, kRun, std::memory_order_acq_rel)) return false;
    } else {
      std::this_thread::yield();
    }
  }
  tls_reactor = this;
  const int node = thread_memory_node();
  set_thread_memory_node(memory_node());
  spinning_.store(true, std::memory_order_relaxed);
  reactor_->set_spinning(opts_.spin_sockets);
  uint64_t turns = 0;
  do {
    reactor_->poll(std::chrono::microseconds{0});
    ++turns;
  } while (!until() && Reactor::clock_ns() < deadline_ns);
  set_thread_memory_node(node);
  tls_reactor = nullptr;
  driven_turns_.fetch_add(turns, std::memory_order_relaxed);
  drive_end_ns_.store(Reactor::clock_ns(), std::memory_order_relaxed);
  drive_state_.store(kParked, std::memory_order_release);
  return true;
}

void EngineReactor::place_thread() noexcept {
  if (place_.cpu >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(place_.cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0)
      log_warning("nvmeof: reactor %d: cannot pin to cpu %d (%s): runs unpinned\n", place_.index, place_.cpu,
                  std::strerror(errno));
  }
  // Queue pairs and lanes created on this thread read it: their slots and buffers follow.
  set_thread_memory_node(memory_node());
}

void EngineReactor::post(std::function<void()> fn) {
  while (!reactor_->post(fn)) std::this_thread::yield();
}

void EngineReactor::call(const std::function<void()>& fn) {
  if (on_thread()) {
    fn();
    return;
  }
  std::promise<void> done;
  auto fut = done.get_future();
  post([&] {
    fn();
    done.set_value();
  });
  fut.wait();
}

void EngineReactor::add_lane(Lane* lane) { lanes_.push_back(lane); }

void EngineReactor::remove_lane(Lane* lane) noexcept {
  lanes_.erase(std::remove(lanes_.begin(), lanes_.end(), lane), lanes_.end());
}

uint64_t EngineReactor::cpu_ns() const noexcept {
  if (!cpu_clock_ok_.load(std::memory_order_acquire)) return 0;
  timespec ts{};
  if (clock_gettime(cpu_clock_, &ts) != 0) return 0;
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

bool EngineReactor::quiescent() const noexcept {
  for (const Lane* l : lanes_)
    if (!l->quiescent()) return false;
  return true;
}

uint64_t EngineReactor::spin_budget_ns() const noexcept {
  // The lane with the most reason to spin decides: a completion due soon on any of them is worth
  // the spin, and the others' turns cost little beside it.
  uint64_t budget = 0;
  for (const Lane* l : lanes_) budget = std::max(budget, l->spin_budget_ns());
  return budget;
}

void EngineReactor::run_adaptive() {
  uint64_t spin_until = 0;
  // A spin that lost its CPU stops, and none starts for a while (core/spin_governor.hpp).
  SpinGovernor governor;
  while (!stop_.load(std::memory_order_acquire)) {
    if (drive_state_.load(std::memory_order_relaxed) != kRun) [[unlikely]] {
      park();
      continue;
    }
    if (spinning_.load(std::memory_order_relaxed)) {
      const int n = reactor_->poll(std::chrono::microseconds{0});
      const uint64_t now = reactor_->now_ns();  // when the turn started
      governor.turn_start(now);
      if (n > 0) {
        const uint64_t budget = spin_budget_ns();
        spin_until = budget ? now + budget : 0;
      }
      if (now < spin_until && governor.may_spin(now)) {
        governor.turn_end(Reactor::clock_ns());
        continue;
      }
      governor.stopped();
      reactor_->set_spinning(false);  // the sleeping turn below arms the sockets' receives
      spinning_.store(false, std::memory_order_seq_cst);
      std::atomic_thread_fence(std::memory_order_seq_cst);
    }
    // Asleep: the turn inside poll() sees a submission that raced with the flag going down
    // (enqueue() saw the flag down and wrote the eventfd, or we see its ring entry).
    const int n = reactor_->poll(quiescent() ? kQuiescentTurn : kSleepTurn);
    if (n > 0) {
      const uint64_t budget = spin_budget_ns();
      const uint64_t now = reactor_->now_ns();
      if (budget && governor.may_spin(now)) {
        spin_until = now + budget;
        spinning_.store(true, std::memory_order_relaxed);
        reactor_->set_spinning(opts_.spin_sockets);
        governor.turn_end(Reactor::clock_ns());
      }
    }
  }
}

void EngineReactor::run() {
  switch (opts_.poll) {
    case PollMode::busy:
      spinning_.store(true, std::memory_order_relaxed);
      reactor_->set_spinning(opts_.spin_sockets);
      while (!stop_.load(std::memory_order_acquire)) {
        if (drive_state_.load(std::memory_order_relaxed) != kRun) [[unlikely]] park();
        reactor_->poll(std::chrono::microseconds{0});
      }
      break;
    case PollMode::adaptive:
      run_adaptive();
      break;
    case PollMode::sleep:
      while (!stop_.load(std::memory_order_acquire)) {
        if (drive_state_.load(std::memory_order_relaxed) != kRun) [[unlikely]] park();
        reactor_->poll(quiescent() ? kQuiescentTurn : kSleepTurn);
      }
      break;
  }
  spinning_.store(false, std::memory_order_seq_cst);
  // Every volume's lanes left before the engine stops (each volume holds the engine); what is
  // still posted runs now, so that no promise waits forever.
  reactor_->poll(std::chrono::microseconds{0});
}

// ---- the engine ---------------------------------------------------------------------------------

namespace {

// The process's shared engines, by their options. A weak reference: the engine stops when its
// last volume closes. An entry made before a fork() names an engine whose threads the child
// does not have: the child makes its own (`pid`).
struct Registry {
  struct Entry {
    HostOptions opts;
    pid_t pid;
    std::weak_ptr<Host> engine;
  };
  std::mutex mu;
  std::vector<Entry> engines;
};
Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: volumes may close during exit
  return *r;
}

bool same_options(const HostOptions& a, const HostOptions& b) {
  return std::tie(a.reactors, a.poll, a.placement, a.cpus, a.sysfs_root, a.memory_node, a.big_entries,
                  a.single_issuer, a.spin_sockets, a.caller_drive, a.metrics_listen) ==
         std::tie(b.reactors, b.poll, b.placement, b.cpus, b.sysfs_root, b.memory_node, b.big_entries,
                  b.single_issuer, b.spin_sockets, b.caller_drive, b.metrics_listen);
}

}  // namespace

Result<std::shared_ptr<Host>> make_engine(const HostOptions& opts, const std::vector<TransportAddress>& paths) {
  if (opts.reactors == 0) return Errc::invalid_argument;
  auto impl = std::make_shared<Engine>();
  auto cp = ControlPlane::create();
  if (!cp) return cp.failure();
  impl->cp = std::move(*cp);
  impl->opts = opts;
  auto topo = Topology::read(opts.sysfs_root);
  if (topo) {
    impl->topology = std::move(*topo);
  } else {
    log_warning("nvmeof: no NUMA topology under %s (%s): one node assumed\n", opts.sysfs_root.c_str(),
                topo.error().message().c_str());
    impl->topology = Topology::single_node(allowed_cpus());
  }
  std::vector<PathPlacement> placed;
  for (size_t i = 0; i < paths.size(); ++i) placed.push_back(place_path(impl->topology, paths[i], static_cast<int>(i)));
  PlacementRequest req;
  req.mode = opts.placement;
  req.reactors = opts.reactors;
  req.cpus = opts.cpus;
  req.allowed_cpus = allowed_cpus();
  req.memory_node = opts.memory_node;
  impl->placement = plan_placement(impl->topology, req, std::move(placed));
  // The engine's own plan knows no volume: each volume adds its paths to a copy of it.
  impl->placement.paths.clear();
  for (auto& r : impl->placement.reactors) r.distances.clear();
  for (const auto& rp : impl->placement.reactors) {
    auto er = std::make_unique<EngineReactor>(opts, rp);
    if (auto r = er->start(); !r) return r.error();
    impl->reactors.push_back(std::move(er));
  }
  // ~Engine stops them before anything they read.
  auto observers = start_host_observers(*impl);
  if (!observers) return observers.error();
  impl->observers = std::move(*observers);
  return std::shared_ptr<Host>(std::move(impl));
}

}  // namespace nvmeof::detail

namespace nvmeof {

Engine::Engine() = default;

Engine::~Engine() {
  stop_discovery();   // its connections use the control plane and the pool
  observers.reset();  // no scrape reads the engine after this
  // Pool work may still post to the control loop; it finishes first, then the reactors.
  pool.join();
  for (auto& r : reactors) r->stop();
}

detail::EngineReactor* Engine::current_reactor() const noexcept {
  for (const auto& r : reactors)
    if (r->on_thread()) return r.get();
  return nullptr;
}

Host::~Host() = default;

Result<std::shared_ptr<Host>> Host::create(const HostOptions& opts) {
  try {
    return detail::make_engine(opts, {});
  } catch (const std::system_error& e) {  // a reactor or pool thread the machine cannot start
    return e.code();
  }
}

Result<std::shared_ptr<Host>> Host::shared(const HostOptions& opts) { return detail::shared_engine(opts, {}); }

const HostOptions& Host::options() const noexcept { return engine_of(*this).opts; }
const Placement& Host::placement() const noexcept { return engine_of(*this).placement; }
const char* to_string(NamespaceEvent::Kind k) noexcept {
  switch (k) {
    case NamespaceEvent::Kind::added: return "added";
    case NamespaceEvent::Kind::resized: return "resized";
    case NamespaceEvent::Kind::removed: return "removed";
  }
  return "unknown";
}

void Engine::report(NamespaceEvent e) {
  std::shared_ptr<std::function<void(const NamespaceEvent&)>> cb;
  {
    std::lock_guard lock(events_mu);
    ns_events.push_back(e);
    while (ns_events.size() > kMaxNamespaceEvents) ns_events.pop_front();
    cb = ns_callback;
  }
  if (cb && *cb) (*cb)(e);
}

std::vector<NamespaceEvent> Host::take_namespace_events() {
  Engine& e = engine_of(*this);
  std::lock_guard lock(e.events_mu);
  std::vector<NamespaceEvent> out(e.ns_events.begin(), e.ns_events.end());
  e.ns_events.clear();
  return out;
}

void Host::on_namespace_event(std::function<void(const NamespaceEvent&)> fn) {
  Engine& e = engine_of(*this);
  auto cb = fn ? std::make_shared<std::function<void(const NamespaceEvent&)>>(std::move(fn)) : nullptr;
  std::lock_guard lock(e.events_mu);
  e.ns_callback = std::move(cb);
}

uint16_t Host::metrics_port() const noexcept {
  const auto& o = engine_of(*this).observers;
  return o ? o->metrics_port() : 0;
}

HostStats Host::stats() const {
  HostStats s;
  const Engine& e = engine_of(*this);
  s.reactors = static_cast<unsigned>(e.reactors.size());
  s.threads = s.reactors + 1 + Engine::kPoolThreads;
  s.volumes = e.volumes.load(std::memory_order_relaxed);
  std::vector<std::shared_ptr<detail::SubsystemPaths>> subs;
  {
    std::lock_guard lock(e.subsystems_mu);
    for (const auto& [key, w] : e.subsystems)
      if (auto sub = w.lock(); sub && sub->ready()) subs.push_back(std::move(sub));
  }
  for (const auto& sub : subs) {
    ++s.subsystems;
    const unsigned vols = static_cast<unsigned>(sub->bound().size());
    for (const auto& sp : sub->paths()) {
      if (sp->state.load(std::memory_order_relaxed) == PathState::removed) continue;
      HostControllerStats c;
      c.subnqn = sub->opts_.connect.subnqn;
      c.address = sp->address().to_string();
      if (auto ctrl = sp->endpoint()) c.cntlid = ctrl->info().cntlid;
      c.state = sp->state.load(std::memory_order_relaxed);
      c.volumes = vols;
      c.keep_alives = sp->keep_alives.load(std::memory_order_relaxed);
      c.keep_alives_per_s = sp->keep_alives_per_s.load(std::memory_order_relaxed);
      for (const auto& l : sub->lanes_) c.ios += l->path(sp->index).ios.load(std::memory_order_relaxed);
      c.failovers = sp->failovers.load(std::memory_order_relaxed);
      c.reconnects = sp->reconnects.load(std::memory_order_relaxed);
      c.write_fence_ms = sp->write_fence_ms.load(std::memory_order_relaxed);
      c.write_fence_rule = to_string(sp->write_fence_rule.load(std::memory_order_relaxed));
      s.controllers.push_back(std::move(c));
    }
  }
  for (const auto& r : e.reactors) {
    s.reactor_cpu_ns.push_back(r->cpu_ns());
    s.reactor_wakeups.push_back(r->wakeups());
    s.reactor_driven_turns.push_back(r->driven_turns());
    s.reactor_parks.push_back(r->parks());
  }
  {
    std::lock_guard lock(e.discovery_mu);
    for (const auto& [key, w] : e.discoveries) s.discovery.push_back(w->stats());
  }
  return s;
}

}  // namespace nvmeof

namespace nvmeof::detail {

Result<std::shared_ptr<Host>> shared_engine(const HostOptions& opts, const std::vector<TransportAddress>& paths) {
  auto& reg = registry();
  std::lock_guard lock(reg.mu);
  const pid_t self = getpid();
  reg.engines.erase(std::remove_if(reg.engines.begin(), reg.engines.end(),
                                   [&](const auto& e) { return e.pid != self || e.engine.expired(); }),
                    reg.engines.end());
  for (auto& e : reg.engines)
    if (same_options(e.opts, opts))
      if (auto h = e.engine.lock()) return h;
  try {
    auto h = make_engine(opts, paths);
    if (!h) return h.error();
    reg.engines.push_back({opts, self, *h});
    return *h;
  } catch (const std::system_error& e) {  // as in Host::create
    return e.code();
  }
}

}  // namespace nvmeof::detail
