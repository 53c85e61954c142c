// Volume::stats and its text and JSON forms (snake_case keys, arrays always arrays, enums as
// lower-case words).
#include <nlohmann/json.hpp>

#include <cstdio>

#include "multipath/option_text.hpp"
#include "multipath/volume_impl.hpp"

namespace nvmeof {
namespace {
// How long stats() waits for each reactor's answer (VolumeStats::lanes_unanswered).
constexpr std::chrono::milliseconds kSnapshotWait{200};
}  // namespace

const char* to_string(SelectorKind k) noexcept {
  switch (k) {
    case SelectorKind::round_robin: return "round-robin";
    case SelectorKind::queue_depth: return "queue-depth";
    case SelectorKind::numa: return "numa";
    case SelectorKind::service_time: return "service-time";
  }
  return "unknown";
}

Result<SelectorKind> parse_selector(std::string_view s) {
  for (auto k : {SelectorKind::round_robin, SelectorKind::queue_depth, SelectorKind::numa, SelectorKind::service_time}) {
    std::string name = to_string(k);
    std::string under = name;
    for (auto& c : under)
      if (c == '-') c = '_';
    if (s == name || s == under) return k;
  }
  return Errc::invalid_argument;
}

const char* to_string(PollMode m) noexcept {
  switch (m) {
    case PollMode::busy: return "busy";
    case PollMode::adaptive: return "adaptive";
    case PollMode::sleep: return "sleep";
  }
  return "unknown";
}

Result<PollMode> parse_poll_mode(std::string_view s) {
  for (auto m : {PollMode::busy, PollMode::adaptive, PollMode::sleep})
    if (s == to_string(m)) return m;
  return Errc::invalid_argument;
}

const char* to_string(PathState s) noexcept {
  switch (s) {
    case PathState::connecting: return "connecting";
    case PathState::live: return "live";
    case PathState::failed: return "failed";
    case PathState::fenced: return "fenced";
    case PathState::draining: return "draining";
    case PathState::removed: return "removed";
  }
  return "unknown";
}

VolumeStats Volume::stats() const { return impl_->collect_stats(); }
uint16_t Volume::metrics_port() const noexcept { return impl_->metrics_port(); }
std::string Volume::control_socket_path() const { return impl_->control_socket_path(); }

VolumeStats detail::SubsystemPaths::collect_stats(const VolumeNs& ns, LatencyHistogram* all) const {
  auto& v = *this;
  VolumeStats s;
  s.ns = ns.info;
  s.ns.size_blocks = ns.size_blocks.load(std::memory_order_relaxed);
  s.namespace_removed = ns.removed.load(std::memory_order_relaxed);
  s.selector = ns.selector.load();
  const double secs = static_cast<double>(Reactor::clock_ns() - v.open_ns_) / 1e9;
  // A lane held up (a completion callback that blocks) must not hold up stats() with it: every
  // lane is asked first, then all are waited for by one deadline.
  std::vector<std::future<detail::Lane::Snapshot>> asked;
  for (auto& l : v.lanes_) asked.push_back(l->snapshot_request());
  const auto deadline = std::chrono::steady_clock::now() + kSnapshotWait;
  std::vector<detail::Lane::Snapshot> snaps;
  for (auto& f : asked) {
    snaps.push_back(detail::Lane::snapshot_wait(f, deadline));
    if (!snaps.back().answered) ++s.lanes_unanswered;
  }
  // After the lanes answered: the counts include every I/O completed before their snapshots.
  s.completed = ns.completed.load();
  s.failed = ns.failed.load();
  const auto slots = v.paths();
  for (size_t p = 0; p < slots.size(); ++p) {
    const auto& sp = *v.paths_[p];
    if (sp.state.load() == PathState::removed) continue;  // gone: its index stays unused
    PathStats ps;
    ps.index = static_cast<int>(p);
    ps.address = sp.address().to_string();
    ps.state = sp.state.load();
    ps.ana_state = ns.on[p].ana.load();
    ps.ana_group = ns.on[p].anagrpid.load();
    if (auto ctrl = sp.endpoint()) ps.cntlid = ctrl->info().cntlid;
    ps.failovers = sp.failovers.load();
    ps.keep_alives = sp.keep_alives.load(std::memory_order_relaxed);
    ps.keep_alives_per_s = sp.keep_alives_per_s.load(std::memory_order_relaxed);
    ps.reconnects = sp.reconnects.load();
    ps.connect_failures = sp.connect_failures.load();
    {
      std::lock_guard lock(sp.error_mu);
      ps.last_connect_error = sp.last_connect_error;
    }
    ps.cqt_ms = sp.cqt_ms;
    ps.write_fence_ms = sp.write_fence_ms.load(std::memory_order_relaxed);
    ps.write_fence_rule = to_string(sp.write_fence_rule.load(std::memory_order_relaxed));
    ps.transport = sp.address().transport == Transport::tcp    ? "tcp"
                   : sp.address().transport == Transport::rdma ? "rdma"
                                                          : "passthrough";
    ps.traddr = sp.address().traddr;
    ps.trsvcid = sp.address().trsvcid;
    ps.numa_node = sp.numa_node.load();
    LatencyHistogram h;
    for (size_t l = 0; l < v.lanes_.size(); ++l) {
      auto& lp = v.lanes_[l]->path(static_cast<int>(p));
      ps.ios += lp.ios.load(std::memory_order_relaxed);
      ps.bytes += lp.bytes.load(std::memory_order_relaxed);
      ps.errors += lp.errors.load(std::memory_order_relaxed);
      ps.retries += lp.retries.load(std::memory_order_relaxed);
      ps.hedges += lp.hedges.load(std::memory_order_relaxed);
      ps.hedge_wins += lp.hedge_wins.load(std::memory_order_relaxed);
      ps.reads += lp.read_ios.load(std::memory_order_relaxed);
      ps.read_bytes += lp.read_bytes.load(std::memory_order_relaxed);
      ps.writes += lp.write_ios.load(std::memory_order_relaxed);
      ps.write_bytes += lp.write_bytes.load(std::memory_order_relaxed);
      if (p < snaps[l].latency.size()) {
        h.merge(snaps[l].latency[p]);
        ps.outstanding += snaps[l].outstanding[p];
      }
    }
    if (all) all->merge(h);
    ps.iops = secs > 0 ? static_cast<double>(ps.ios) / secs : 0;
    ps.latency.p50_us = static_cast<double>(h.percentile(50)) / 1e3;
    ps.latency.p99_us = static_cast<double>(h.percentile(99)) / 1e3;
    ps.latency.p999_us = static_cast<double>(h.percentile(99.9)) / 1e3;
    ps.latency.max_us = static_cast<double>(h.max()) / 1e3;
    ps.latency.mean_us = h.mean() / 1e3;
    s.paths.push_back(std::move(ps));
  }
  for (auto& sn : snaps) s.waiting += sn.waiting;
  s.poll = v.host_->options().poll;
  for (auto& l : v.lanes_) {
    s.reactor_cpu_ns.push_back(l->cpu_ns());
    s.reactor_turns.push_back(l->turns());
    s.reactor_wakeups.push_back(l->wakeups());
    s.reactor_timeouts.push_back(l->timeouts());
  }
  std::lock_guard lock(v.timeline_mu_);
  s.timeline.assign(v.timeline_.begin(), v.timeline_.end());
  s.timeline_dropped = v.timeline_dropped_;
  return s;
}

std::string to_json(const VolumeStats& s) {
  using nlohmann::json;
  json j;
  j["namespace"] = {{"nsid", s.ns.nsid}, {"id", s.ns.id.to_string()}, {"block_size", s.ns.block_size},
                    {"size_blocks", s.ns.size_blocks}, {"state", s.namespace_removed ? "removed" : "active"}};
  j["selector"] = to_string(s.selector);
  j["completed"] = s.completed;
  j["failed"] = s.failed;
  j["waiting"] = s.waiting;
  j["poll"] = to_string(s.poll);
  j["reactor_cpu_ns"] = s.reactor_cpu_ns;
  j["reactor_turns"] = s.reactor_turns;
  j["reactor_wakeups"] = s.reactor_wakeups;
  j["reactor_timeouts"] = s.reactor_timeouts;
  j["lanes_unanswered"] = s.lanes_unanswered;
  j["paths"] = json::array();
  for (const auto& p : s.paths) {
    j["paths"].push_back({{"index", p.index}, {"address", p.address}, {"state", to_string(p.state)},
                          {"ana_state", to_string(p.ana_state)}, {"ana_group", p.ana_group}, {"cntlid", p.cntlid},
                          {"outstanding", p.outstanding}, {"ios", p.ios}, {"bytes", p.bytes},
                          {"iops", p.iops},
                          {"latency_us", {{"p50", p.latency.p50_us}, {"p99", p.latency.p99_us},
                                          {"p99_9", p.latency.p999_us}, {"max", p.latency.max_us},
                                          {"mean", p.latency.mean_us}}},
                          {"errors", p.errors}, {"retries", p.retries}, {"hedges", p.hedges},
                          {"hedge_wins", p.hedge_wins}, {"failovers", p.failovers}, {"keep_alives", p.keep_alives},
                          {"keep_alives_per_s", p.keep_alives_per_s},
                          {"reconnects", p.reconnects}, {"connect_failures", p.connect_failures},
                          {"last_connect_error", p.last_connect_error}, {"cqt_ms", p.cqt_ms},
                          {"write_fence_ms", p.write_fence_ms}, {"write_fence_rule", p.write_fence_rule},
                          {"transport", p.transport}, {"traddr", p.traddr}, {"trsvcid", p.trsvcid},
                          {"numa_node", p.numa_node}, {"reads", p.reads}, {"writes", p.writes},
                          {"read_bytes", p.read_bytes}, {"write_bytes", p.write_bytes}});
  }
  j["timeline"] = json::array();
  for (const auto& e : s.timeline) {
    j["timeline"].push_back({{"path", e.path}, {"cause", e.cause}, {"detect_ns", e.detect_ns},
                             {"fenced_us", e.fenced_us}, {"fence_rule", e.fence_rule},
                             {"first_resubmit_us", e.first_resubmit_us},
                             {"first_success_us", e.first_success_us}, {"reconnected_us", e.reconnected_us},
                             {"reads_moved", e.reads_moved}, {"writes_moved", e.writes_moved}});
  }
  return j.dump(2);
}

std::string to_text(const VolumeStats& s) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "namespace %u (%s), %u-byte blocks, %llu blocks, selector %s\n",
                s.ns.nsid, s.ns.id.to_string().c_str(), s.ns.block_size,
                static_cast<unsigned long long>(s.ns.size_blocks), to_string(s.selector));
  out += line;
  uint64_t cpu_ns = 0;
  for (uint64_t c : s.reactor_cpu_ns) cpu_ns += c;
  std::snprintf(line, sizeof line, "  poll %s, %zu reactors, reactor CPU %.3f s, %.2f us per completed I/O\n",
                to_string(s.poll), s.reactor_cpu_ns.size(), static_cast<double>(cpu_ns) / 1e9,
                s.completed ? static_cast<double>(cpu_ns) / 1e3 / static_cast<double>(s.completed) : 0.0);
  out += line;
  for (const auto& p : s.paths) {
    std::snprintf(line, sizeof line,
                  "  path %d %-22s %-10s ana %-15s grp %u  ios %llu  iops %.0f  lat p50 %.1f us p99 %.1f us  "
                  "err %llu retry %llu hedge %llu/%llu failover %llu reconnect %llu  keep-alive %.1f/s  write fence %u ms%s%s\n",
                  p.index, p.address.c_str(), to_string(p.state), to_string(p.ana_state), p.ana_group,
                  static_cast<unsigned long long>(p.ios), p.iops, p.latency.p50_us, p.latency.p99_us,
                  static_cast<unsigned long long>(p.errors), static_cast<unsigned long long>(p.retries),
                  static_cast<unsigned long long>(p.hedge_wins), static_cast<unsigned long long>(p.hedges),
                  static_cast<unsigned long long>(p.failovers), static_cast<unsigned long long>(p.reconnects),
                  p.keep_alives_per_s, p.write_fence_ms, p.write_fence_rule.empty() ? "" : " by ", p.write_fence_rule.c_str());
    out += line;
  }
  if (s.lanes_unanswered) {
    std::snprintf(line, sizeof line, "  (%u reactors did not answer in time: their latency and outstanding counts are missing)\n",
                  s.lanes_unanswered);
    out += line;
  }
  if (s.timeline_dropped) {
    std::snprintf(line, sizeof line, "  (%llu older failovers no longer kept)\n",
                  static_cast<unsigned long long>(s.timeline_dropped));
    out += line;
  }
  for (const auto& e : s.timeline) {
    std::snprintf(line, sizeof line,
                  "  failover path %d: %s; fenced +%lld us%s%s, first resubmit +%lld us, first success +%lld us, "
                  "reconnected +%lld us (%u reads, %u writes moved)\n",
                  e.path, e.cause.c_str(), static_cast<long long>(e.fenced_us),
                  e.fence_rule.empty() ? "" : " by ", e.fence_rule.c_str(),
                  static_cast<long long>(e.first_resubmit_us), static_cast<long long>(e.first_success_us),
                  static_cast<long long>(e.reconnected_us), e.reads_moved, e.writes_moved);
    out += line;
  }
  return out;
}

}  // namespace nvmeof
