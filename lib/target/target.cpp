#include "nvmeof/target.hpp"

#include <cstdio>
#include <mutex>
#include <set>

#include "target/controller.hpp"
#include "target/host_access.hpp"
#include "target/tcp_connection.hpp"
#include "target/port.hpp"
#include "target/queue_auth.hpp"
#include "target/subsystem.hpp"
#include "target/target_core.hpp"
#include "tls/psk.hpp"

namespace nvmeof {

// Declared inside the header's default-visibility block, so no visibility attribute here (clang
// refuses one that differs from the declaration); it has no out-of-line members to export.
struct Target::Impl {
  target::TargetCore core;
  std::mutex stop_mu;  // serializes stop() from several threads
  bool stopped = false;
  std::mutex change_mu;  // one run-time change (port, namespace) at a time
};

namespace {

bool valid_ana_state(AnaState s) {
  switch (s) {
    case AnaState::optimized:
    case AnaState::non_optimized:
    case AnaState::inaccessible:
    case AnaState::persistent_loss:
    case AnaState::change: return true;
  }
  return false;
}

bool valid_options(const TargetOptions& o) {
  if (o.ports.empty() || o.ports.size() > 0xfff0) return false;
  if (o.max_queue_depth < 2 || o.max_queue_depth > 65536) return false;
  if (o.max_io_queues < 1 || o.max_io_queues > 65535) return false;
  if (o.in_capsule_data % 16 != 0 || o.in_capsule_data > (1u << 20)) return false;
  if (o.maxh2cdata < 4096 || o.maxh2cdata % 4 != 0) return false;
  if (o.mdts > 16) return false;
  if (o.ccr_async_delay.count() < 0) return false;
  if (o.auth_timeout.count() <= 0) return false;
  for (const auto& p : o.ports) {
    if (!valid_ana_state(p.ana_state)) return false;
    if (p.tls != PortTls::none && !tls::parse_interchange(p.tls_psk)) return false;
  }
  std::set<std::string> nqns;
  for (const auto& s : o.subsystems)
    if (!nqns.insert(s.nqn).second) return false;
  return true;
}

}  // namespace

Result<std::unique_ptr<Target>> Target::start(const TargetOptions& opts) {
  if (!valid_options(opts)) return Errc::invalid_argument;
  if (auto keys = target::valid_host_keys(opts); !keys) {
    std::fprintf(stderr, "nvmeof-target: %s\n", keys.message().c_str());
    return Errc::invalid_argument;
  }
  auto impl = std::make_unique<Impl>();
  target::TargetCore& core = impl->core;
  core.opts = opts;
  for (const auto& s : opts.subsystems) {
    auto sub = target::Subsystem::create(s, target::any_host_allowed(s, opts.ports));
    if (!sub) return sub.error();
    core.subsystems.push_back(std::move(*sub));
  }
  core.discovery = target::Subsystem::discovery();
  if (opts.ports.size() > target::PortTable::kMax) return Errc::invalid_argument;
  for (size_t i = 0; i < opts.ports.size(); ++i) {
    core.ports.push(std::make_unique<target::Port>(core, i, opts.ports[i]));
    if (auto r = core.ports[i]->listen(); !r) return r.error();
  }
  core.held.start();
  core.ccr.start();
  for (auto& p : core.ports) p->start();
  return std::unique_ptr<Target>(new Target(std::move(impl)));
}

Target::Target(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

namespace {

// The discovery log changed: its generation moves and every discovery controller is told (each
// sends the notice only if its host asked for them, once until the log is read).
void discovery_changed(target::TargetCore& core) {
  core.discovery_genctr.fetch_add(1, std::memory_order_acq_rel);
  for (const auto& c : core.discovery->controllers())
    if (auto admin = c->admin_connection()) admin->post_event(target::kDiscoveryChangeEvent);
}

// Namespace `nsid` of `sub` changed: in every controller's Changed Namespace List, and noticed.
void namespace_changed(target::Subsystem& sub, uint32_t nsid) {
  for (const auto& c : sub.controllers()) {
    c->note_ns_changed(nsid);
    if (auto admin = c->admin_connection()) admin->post_event(target::kNsAttrChangedEvent);
  }
}

target::Subsystem* nvm_subsystem(target::TargetCore& core, const std::string& nqn) {
  for (const auto& s : core.subsystems)
    if (s->nqn() == nqn) return s.get();
  return nullptr;
}

}  // namespace

Result<size_t> Target::add_port(const TargetPort& cfg) {
  if (!valid_ana_state(cfg.ana_state)) return {Errc::invalid_argument, "bad ANA state"};
  if (cfg.tls != PortTls::none && !tls::parse_interchange(cfg.tls_psk))
    return {Errc::invalid_argument, "bad TLS PSK (want the NVMe TLS PSK interchange format)"};
  std::lock_guard lock(impl_->change_mu);
  target::TargetCore& core = impl_->core;
  if (impl_->stopped) return {Errc::not_connected, "the target is stopped"};
  const size_t index = core.ports.size();
  if (index == target::PortTable::kMax)
    return {Errc::invalid_argument, "at most " + std::to_string(target::PortTable::kMax) + " ports"};
  auto p = std::make_unique<target::Port>(core, index, cfg);
  if (auto r = p->listen(); !r) return r.failure();
  target::Port* port = p.get();
  core.ports.push(std::move(p));
  port->start();
  discovery_changed(core);
  return index;
}

Result<void> Target::remove_port(size_t port) {
  std::lock_guard lock(impl_->change_mu);
  target::TargetCore& core = impl_->core;
  if (port >= core.ports.size() || core.ports[port]->stopped())
    return {Errc::invalid_argument, "no port " + std::to_string(port)};
  core.ports[port]->stop();
  discovery_changed(core);
  return {};
}

Result<void> Target::attach_namespace(const std::string& nqn, const TargetNamespace& ns) {
  std::lock_guard lock(impl_->change_mu);
  target::Subsystem* sub = nvm_subsystem(impl_->core, nqn);
  if (!sub) return {Errc::invalid_argument, "no subsystem " + nqn};
  if (auto r = sub->attach(ns); !r) return r;
  namespace_changed(*sub, ns.nsid);
  return {};
}

Result<void> Target::detach_namespace(const std::string& nqn, uint32_t nsid) {
  std::lock_guard lock(impl_->change_mu);
  target::Subsystem* sub = nvm_subsystem(impl_->core, nqn);
  if (!sub) return {Errc::invalid_argument, "no subsystem " + nqn};
  if (auto r = sub->detach(nsid); !r) return r;
  namespace_changed(*sub, nsid);
  return {};
}

Result<void> Target::resize_namespace(const std::string& nqn, uint32_t nsid, uint64_t size_bytes) {
  std::lock_guard lock(impl_->change_mu);
  target::Subsystem* sub = nvm_subsystem(impl_->core, nqn);
  if (!sub) return {Errc::invalid_argument, "no subsystem " + nqn};
  target::NsStore* ns = sub->ns(nsid);
  if (!ns) return {Errc::invalid_argument, "namespace " + std::to_string(nsid) + " is not active"};
  if (size_bytes == 0 || size_bytes % ns->block_size() != 0)
    return {Errc::invalid_argument, "size " + std::to_string(size_bytes) +
                                        " is not a non-zero multiple of the block size (" +
                                        std::to_string(ns->block_size()) + " bytes)"};
  if (size_bytes == ns->size_bytes()) return {};
  if (auto r = ns->resize(size_bytes); !r) return r;
  namespace_changed(*sub, nsid);
  return {};
}

std::vector<TargetNamespaceInfo> Target::namespaces(const std::string& nqn) const {
  std::vector<TargetNamespaceInfo> out;
  target::Subsystem* sub = nvm_subsystem(impl_->core, nqn);
  if (!sub) return out;
  for (const target::NsStore* ns : sub->namespaces()) out.push_back({ns->nsid(), ns->size_bytes(), ns->block_size()});
  return out;
}

uint64_t Target::discovery_generation() const {
  return impl_->core.discovery_genctr.load(std::memory_order_acquire);
}

size_t Target::port_count() const { return impl_->core.ports.size(); }

bool Target::port_removed(size_t port) const {
  return port < impl_->core.ports.size() && impl_->core.ports[port]->stopped();
}

Target::~Target() { stop(); }

void Target::stop() {
  std::lock_guard lock(impl_->stop_mu);
  if (impl_->stopped) return;
  impl_->stopped = true;
  for (auto& p : impl_->core.ports) p->stop();
  impl_->core.ccr.stop();
  impl_->core.held.stop();
}

std::string Target::port_address(size_t i) const {
  return i < impl_->core.ports.size() ? impl_->core.ports[i]->address() : std::string();
}

uint16_t Target::port_number(size_t i) const {
  return i < impl_->core.ports.size() ? impl_->core.ports[i]->number() : 0;
}

void Target::set_ana_state(size_t port, AnaState s) {
  if (port >= impl_->core.ports.size() || !valid_ana_state(s)) return;
  target::Port& p = *impl_->core.ports[port];
  if (!p.set_ana_state(s)) return;
  impl_->core.ana_chgcnt.fetch_add(1, std::memory_order_acq_rel);
  p.wake_connections();
}

AnaState Target::ana_state(size_t port) const {
  return port < impl_->core.ports.size() ? impl_->core.ports[port]->ana_state() : AnaState::optimized;
}

void Target::inject(size_t port, FaultKind kind) {
  if (port >= impl_->core.ports.size()) return;
  target::Port& p = *impl_->core.ports[port];
  switch (kind) {
    case FaultKind::reset: p.reset_connections(); break;
    case FaultKind::blackhole: p.set_blackhole(true); break;
    case FaultKind::refuse: p.set_refuse(true); break;
    case FaultKind::partition: p.set_partition(true); break;
  }
}

void Target::set_latency(size_t port, std::chrono::microseconds latency) {
  if (port < impl_->core.ports.size()) impl_->core.ports[port]->set_latency(latency);
}

void Target::set_bandwidth(size_t port, uint64_t bytes_per_second) {
  if (port < impl_->core.ports.size()) impl_->core.ports[port]->set_bandwidth(bytes_per_second);
}

void Target::fail_commands(size_t port, std::optional<NvmeStatus> status) {
  if (port < impl_->core.ports.size()) impl_->core.ports[port]->set_failing(status);
}

void Target::delay_writes(size_t port, std::chrono::milliseconds delay, QuiesceMode mode) {
  if (port < impl_->core.ports.size()) impl_->core.ports[port]->set_write_delay(delay, mode);
}

void Target::drop_commands(size_t port, uint32_t count) {
  if (port < impl_->core.ports.size()) impl_->core.ports[port]->set_drop_commands(count);
}

void Target::clear_faults(size_t port) {
  if (port >= impl_->core.ports.size()) return;
  target::Port& p = *impl_->core.ports[port];
  p.set_refuse(false);
  p.set_latency(std::chrono::microseconds(0));
  p.set_bandwidth(0);
  p.set_failing(std::nullopt);
  p.set_write_delay(std::chrono::milliseconds(0), QuiesceMode::honour);
  p.set_drop_commands(0);
  p.set_blackhole(false);
  p.set_partition(false);
}

PortStats Target::stats(size_t port) const {
  return port < impl_->core.ports.size() ? impl_->core.ports[port]->stats() : PortStats{};
}

PortStats Target::total_stats() const {
  PortStats t;
  for (const auto& p : impl_->core.ports) {
    const PortStats s = p->stats();
    t.connections += s.connections;
    t.live_connections += s.live_connections;
    t.commands += s.commands;
    t.reads += s.reads;
    t.writes += s.writes;
    t.errors += s.errors;
    t.delayed_writes_executed += s.delayed_writes_executed;
    t.delayed_writes_dropped += s.delayed_writes_dropped;
    t.writes_dropped_after_teardown += s.writes_dropped_after_teardown;
    t.commands_dropped += s.commands_dropped;
    t.ccr_received += s.ccr_received;
    t.ccr_completed += s.ccr_completed;
    t.keep_alive_expiries += s.keep_alive_expiries;
    t.keep_alive_commands += s.keep_alive_commands;
    t.poll_passes += s.poll_passes;
    t.poll_wakeups += s.poll_wakeups;
  }
  return t;
}

namespace {

target::NsStore* find_ns(const target::TargetCore& core, const std::string& nqn, uint32_t nsid) {
  for (const auto& s : core.subsystems)
    if (s->nqn() == nqn) return s->ns(nsid);
  return nullptr;
}

}  // namespace

Result<void> Target::read_ns(const std::string& nqn, uint32_t nsid, uint64_t offset, void* buf,
                             size_t len) {
  target::NsStore* ns = find_ns(impl_->core, nqn, nsid);
  if (!ns || !ns->contains(offset, len)) return Errc::invalid_argument;
  return ns->read(offset, buf, len);
}

Result<void> Target::write_ns(const std::string& nqn, uint32_t nsid, uint64_t offset,
                              const void* buf, size_t len) {
  target::NsStore* ns = find_ns(impl_->core, nqn, nsid);
  if (!ns || !ns->contains(offset, len)) return Errc::invalid_argument;
  return ns->write(offset, buf, len);
}

}  // namespace nvmeof
