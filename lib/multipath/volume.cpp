// The control side of a volume: opening paths, matching the namespace across them, ANA,
// failure handling, fencing and reconnects. Runs on the volume's control thread (a Boost.Asio
// io_context) and, for the blocking connects and admin reads, on a small connect pool, so that a
// dead path never blocks the handling of another one.
#include <boost/asio/post.hpp>

#include <boost/asio/steady_timer.hpp>

#include <cstdio>
#include <future>

#include "multipath/engine_internal.hpp"
#include "multipath/discovery.hpp"
#include "multipath/volume_impl.hpp"
#include "multipath/volume_io_state.hpp"
#include "core/log.hpp"

namespace nvmeof {
namespace detail {
namespace {

constexpr uint32_t kMaxPiecesPerIo = 1024;
constexpr std::chrono::milliseconds kReconnectTimeout{500};
constexpr std::chrono::milliseconds kAttachTimeout{3000};
constexpr std::chrono::milliseconds kAnaPollPeriod{200};
// The keep-alive rate in the stats is the count over windows at least this long: a few
// ana_poll() periods, so one keep-alive more or less in a window moves it little.
constexpr uint64_t kKeepAliveRateWindowNs = 1'000'000'000;

// Closes the path's keep-alive window once it is long enough and publishes its rate. A count
// that went down belongs to a new controller: its whole count is this window's.
void note_keep_alive_rate(SharedPath& sp, uint64_t now) {
  const uint64_t count = sp.keep_alives.load(std::memory_order_relaxed);
  if (sp.ka_window_ns == 0) {
    sp.ka_window_ns = now;
    sp.ka_window_count = count;
    return;
  }
  const uint64_t span = now - sp.ka_window_ns;
  if (span < kKeepAliveRateWindowNs) return;
  const uint64_t sent = count >= sp.ka_window_count ? count - sp.ka_window_count : count;
  sp.keep_alives_per_s.store(static_cast<double>(sent) * 1e9 / static_cast<double>(span), std::memory_order_relaxed);
  sp.ka_window_ns = now;
  sp.ka_window_count = count;
}
// How often a live path that does not show a volume's namespace is asked for it again.
constexpr uint64_t kLookAgainNs = 1'000'000'000;

bool is_ana_change_notice(uint32_t dw0) noexcept {
  const uint32_t type = dw0 & 0x7;
  const uint32_t info = (dw0 >> 8) & 0xff;
  return type == 0x2 && info == 0x03;  // notice, asymmetric namespace access change
}

bool is_namespace_change_notice(uint32_t dw0) noexcept {
  const uint32_t type = dw0 & 0x7;
  const uint32_t info = (dw0 >> 8) & 0xff;
  return type == 0x2 && info == 0x00;  // notice, namespace attribute changed
}

// A controller's answer that a namespace is not active (Invalid Namespace or Format, or Invalid
// Field for an NSID it does not know), as opposed to a controller that could not answer.
bool says_not_active(std::error_code ec) noexcept {
  if (ec.category() != nvme_category()) return false;
  const NvmeStatus st{static_cast<uint16_t>(ec.value())};
  return st.sct() == Sct::generic && (st.sc() == 0x0b || st.sc() == 0x02);
}

uint32_t next_subsystem_serial() noexcept {
  static std::atomic<uint32_t> next{0};
  return next.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

SubsystemPaths::SubsystemPaths(std::shared_ptr<Host> host, const VolumeOptions& opts)
    : host_(std::move(host)), opts_(opts), serial_(next_subsystem_serial()) {
  engine_of(*host_).subsystems_open.fetch_add(1, std::memory_order_relaxed);
  size_t i = 0;
  for (const auto& a : opts.paths) {
    if (i == kMaxPaths) break;  // open() refuses more
    auto sp = std::make_unique<SharedPath>();
    sp->index = static_cast<int>(i);
    sp->set_address(a);
    paths_[i++] = std::move(sp);
  }
  npaths_.store(i, std::memory_order_release);
}

SubsystemPaths::~SubsystemPaths() {
  shutdown();
  engine_of(*host_).subsystems_open.fetch_sub(1, std::memory_order_relaxed);
}

VolumeImpl::VolumeImpl(std::shared_ptr<SubsystemPaths> sub, std::shared_ptr<VolumeNs> ns, const VolumeOptions& opts)
    : sub_(std::move(sub)), ns_(std::move(ns)), opts_(opts), open_ns_(Reactor::clock_ns()) {
  engine_of(*sub_->host_).volumes.fetch_add(1, std::memory_order_relaxed);
}

VolumeImpl::~VolumeImpl() {
  shutdown();
  engine_of(*sub_->host_).volumes.fetch_sub(1, std::memory_order_relaxed);
}

Result<void> VolumeImpl::start_observers() {
  auto o = start_volume_observers(*this);
  if (!o) return o.error();
  observers_ = std::move(*o);
  return {};
}

void VolumeImpl::shutdown() {
  if (shut_) return;
  shut_ = true;
  stop_observers();
  accepting_.store(false, std::memory_order_release);
  // Its own I/O finishes first (bounded: the lanes give up on it after no_path_timeout); the
  // other volumes on the same controllers are not disturbed.
  const uint64_t give_up = Reactor::clock_ns() + sub_->no_path_timeout_ns() + 1'000'000'000ull;
  while (ns_->inflight.load() != 0 && Reactor::clock_ns() <= give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  sub_->unbind(*ns_);
  if (ns_->inflight.load() != 0) {
    // Still referenced by I/O a lane holds past every bound: kept until the lanes stop.
    std::lock_guard lock(sub_->ns_mu_);
    sub_->retired_.push_back(ns_);
  }
}

std::string subsystem_key(const VolumeOptions& vo) {
  const ConnectOptions& c = vo.connect;
  std::string k;
  auto add = [&k](const auto& v) {
    if constexpr (std::is_convertible_v<decltype(v), std::string_view>) {
      k += std::to_string(std::string_view(v).size());
      k += ':';
      k += v;
    } else {
      k += std::to_string(v);
    }
    k += '|';
  };
  add(c.subnqn);
  add(c.hostnqn);
  for (uint8_t b : c.hostid) add(unsigned{b});
  add(static_cast<int>(c.digest));
  add(c.io_queue_depth);
  add(c.admin_queue_depth);
  add(c.max_io_queues);
  add(c.kato_ms);
  add(c.connect_timeout.count());
  add(c.admin_timeout.count());
  add(c.dhchap_secret);
  add(c.dhchap_ctrl_secret);
  add(c.tls_psk);
  add(static_cast<int>(c.tls));
  add(int{c.tls_kernel});
  add(vo.paths.size());
  for (const auto& a : vo.paths) add(a.to_string());
  add(vo.io_deadline.count());
  add(vo.no_path_timeout.count());
  add(vo.fence_bound.count());
  add(static_cast<int>(vo.fence));
  add(vo.ccr_timeout.count());
  add(int{vo.use_ccr});
  add(vo.reconnect_min.count());
  add(vo.reconnect_max.count());
  add(vo.max_attempts);
  add(vo.timeline_max);
  return k;
}

uint64_t SubsystemPaths::no_path_timeout_ns() const noexcept {
  return static_cast<uint64_t>(opts_.no_path_timeout.count()) * 1'000'000ull;
}

Result<void> SubsystemPaths::connect_path(SharedPath& sp, std::chrono::milliseconds timeout) {
  ConnectOptions co = opts_.connect;
  co.connect_timeout = std::min(co.connect_timeout, timeout);
  auto c = open_endpoint(cp_, sp.address(), co);
  if (!c) return c.error();
  std::shared_ptr<PathEndpoint> ctrl = *c;
  const ControllerInfo& ci = ctrl->info();
  // The volumes' commands are already split for the largest transfer every path took at open: a
  // path added later must take it too.
  if (ready() && ci.max_transfer && ci.max_transfer < max_transfer_) {
    ctrl->close();
    return {Errc::unsupported, "its largest transfer (" + std::to_string(ci.max_transfer) +
                                   " bytes) is below the " + std::to_string(max_transfer_) +
                                   " bytes the volume's commands may move"};
  }
  PathFacts facts;
  facts.times = hold_times(ctrl->kato_ms(), ci.traffic_based_keep_alive(), ci.cqt_ms,
                           static_cast<uint32_t>(std::max<int64_t>(opts_.fence_bound.count(), 0)));
  facts.can_reset_others = opts_.use_ccr && ctrl->can_reset_others();
  facts.can_be_reset = opts_.use_ccr && sp.address().transport != Transport::passthrough;
  facts.ccrl = ci.ccrl;
  // Every open volume's namespace behind the new controller (one ANA log read for all of them,
  // and kept for the volumes bound later).
  // A namespace this controller no longer shows leaves the path unusable for that volume only.
  const auto vols = bound();
  std::optional<AnaLog> log;
  if (ci.anacap != 0 || ci.cmic & 0x8)
    if (auto l = ctrl->ana_log(); l) log = std::move(*l);
  for (const auto& ns : vols) {
    const uint32_t was = ns->on[static_cast<size_t>(sp.index)].nsid.load();
    if (auto r = bind_path(*ns, sp, *ctrl, 0, log ? &*log : nullptr); !r) {
      ns->on[static_cast<size_t>(sp.index)].nsid.store(0);
      nvmeof::detail::log_warning("nvmeof: path %s: namespace %u: %s\n", sp.address().to_string().c_str(), was,
                                  r.error().message().c_str());
    }
  }
  {
    std::lock_guard lock(ns_mu_);
    sp.ana_log = log ? std::make_shared<const AnaLog>(std::move(*log)) : nullptr;
    sp.ana_log_of = ctrl.get();
  }
  sp.cqt_ms = ci.cqt_ms;
  sp.crdt_100ms = ci.crdt_100ms;
  sp.facts = facts;
  // Said before it bites: a controller whose writes would wait past the failover budget.
  const WriteFenceBound wb =
      sp.address().transport == Transport::passthrough
          ? WriteFenceBound{WriteFenceRule::none, 0}
          : write_fence_bound(facts.times, facts.can_be_reset && facts.can_reset_others && paths_in_use() > 1,
                              ci.cqt_ms != 0);
  sp.write_fence_ms.store(static_cast<uint32_t>(std::min<uint64_t>(wb.ms, UINT32_MAX)));
  sp.write_fence_rule.store(wb.rule);
  if (wb.ms > kFailoverBudgetMs && !sp.write_fence_logged.exchange(true))
    nvmeof::detail::log_warning("nvmeof: path %s: after a failure its writes may wait up to %llu ms to move: %s\n",
                                sp.address().to_string().c_str(), static_cast<unsigned long long>(wb.ms),
                                explain(wb, ctrl->kato_ms(), ci.traffic_based_keep_alive(), ci.cqt_ms).c_str());
  sp.quiesce_ns.store(facts.times.quiesce_ns);
  std::lock_guard lock(sp.ctrl_mu);
  sp.ctrl = std::move(ctrl);
  return {};
}

Result<void> SubsystemPaths::bind_path(VolumeNs& ns, SharedPath& sp, PathEndpoint& ctrl, uint32_t first,
                                       const AnaLog* log) {
  // The namespace is matched by its identifiers, never by NSID alone.
  auto& on = ns.on[static_cast<size_t>(sp.index)];
  uint32_t nsid = 0;
  NamespaceInfo info;
  if (first) {
    const uint32_t id = ctrl.fixed_nsid().value_or(first);
    auto ni = ctrl.identify_namespace(id);
    if (!ni) return ni.error();
    if (ni->size_blocks == 0) return Errc::invalid_argument;  // not an active namespace
    info = *ni;
    nsid = id;
  } else {
    auto try_nsid = [&](uint32_t id) {
      auto ni = ctrl.identify_namespace(id);
      if (ni && ni->size_blocks && ni->id.same_namespace_as(ns.info.id)) {
        info = *ni;
        nsid = id;
      }
    };
    const uint32_t known = on.nsid.load();
    try_nsid(ctrl.fixed_nsid().value_or(known ? known : ns.info.nsid));
    if (!nsid) {
      auto list = ctrl.active_namespaces();
      if (list)
        for (uint32_t id : *list) {
          try_nsid(id);
          if (nsid) break;
        }
    }
    if (!nsid) return Errc::namespace_mismatch;
  }
  auto state_in = [&](const AnaLog* l) {
    const AnaGroup* g = l ? l->group(info.anagrpid) : nullptr;
    return g ? g->state : AnaState::optimized;
  };
  auto set = [&](AnaState ana) {
    if (first) {
      ns.info = info;
      ns.size_blocks.store(info.size_blocks);
    }
    on.anagrpid.store(info.anagrpid);
    on.ana.store(ana);
  };
  if (log || (ctrl.info().anacap == 0 && !(ctrl.info().cmic & 0x8))) {
    set(state_in(log));
  } else {
    bool cached = false;
    {
      // The controller's newest log, read by its connect or its last refresh: the state every
      // volume already bound on it has. Set under the lock a refresh stores its log under.
      std::lock_guard lock(ns_mu_);
      if (sp.ana_log && sp.ana_log_of == &ctrl) {
        set(state_in(sp.ana_log.get()));
        cached = true;
      }
    }
    if (!cached) {
      auto l = ctrl.ana_log();
      set(state_in(l ? &*l : nullptr));
    }
  }
  on.nsid.store(nsid, std::memory_order_release);
  ns.removed.store(false);  // a path shows it (again)
  sp.probe_block_size.store(ns.info.block_size);
  sp.probe_nsid.store(nsid);
  return {};
}

std::vector<std::shared_ptr<VolumeNs>> SubsystemPaths::bound() const {
  std::lock_guard lock(ns_mu_);
  return bound_;
}

bool VolumeNs::usable_on(size_t p) const noexcept {
  return on[p].nsid.load(std::memory_order_relaxed) != 0 && ana_tier(on[p].ana.load(std::memory_order_relaxed)) >= 0;
}

Result<std::shared_ptr<VolumeNs>> SubsystemPaths::open_volume(const VolumeOptions& vo) {
  std::lock_guard lock(open_mu_);
  if (opened_) {
    if (open_error_) return open_error_;
    return bind(vo);
  }
  opened_ = true;
  std::shared_ptr<VolumeNs> ns;
  if (auto r = open(vo, ns); !r) {
    open_error_ = r.error();
    return r.error();
  }
  ready_.store(true, std::memory_order_release);
  return ns;
}

Result<void> SubsystemPaths::open(const VolumeOptions& vo, std::shared_ptr<VolumeNs>& first) {
  if (paths().empty() || opts_.connect.subnqn.empty()) return Errc::invalid_argument;
  if (opts_.paths.size() > kMaxPaths)
    return {Errc::invalid_argument, "more than " + std::to_string(kMaxPaths) + " paths"};
  for (const auto& sp : paths())
    if (sp->address().transport == Transport::passthrough && !host_->options().big_entries)
      return Errc::invalid_argument;  // its commands need the engine's big ring entries
  open_ns_ = Reactor::clock_ns();
  FailoverMachine::Timing timing{opts_.reconnect_min, opts_.reconnect_max, !g_no_early_reconnect_for_test};
  machine_ = std::make_unique<FailoverMachine>(*this, paths().size(), timing, opts_.fence);

  std::error_code first_error;
  bool any = false;
  for (auto& sp : paths()) {
    auto r = connect_path(*sp, opts_.connect.connect_timeout);
    if (!r) {
      if (!first_error) first_error = r.error();
      sp->connect_failures.fetch_add(1);
      {
        std::lock_guard lock(sp->error_mu);
        sp->last_connect_error = r.error().message();
      }
      nvmeof::detail::log_warning("nvmeof: path %s: %s (will retry)\n", sp->address().to_string().c_str(),
                   r.error().message().c_str());
      continue;
    }
    sp->state.store(PathState::live, std::memory_order_release);
    any = true;
  }
  if (!any) return first_error;

  for (auto& sp : paths())
    if (sp->ctrl && sp->ctrl->info().max_transfer) max_transfer_ = std::min(max_transfer_, sp->ctrl->info().max_transfer);
  // The first volume's namespace, on the controllers just connected (before their I/O queues,
  // whose failure could take a path down before it is asked).
  auto ns = bind(vo);
  if (!ns) return ns.error();
  first = std::move(*ns);
  // The namespaces there are now: a change is reported against these (refresh_namespaces).
  for (auto& sp : paths())
    if (auto ctrl = sp->endpoint()) {
      if (auto list = ctrl->active_namespaces(); list) {
        std::lock_guard lock(known_mu_);
        for (uint32_t id : *list) known_ns_.emplace(id, 0);
        known_ns_[first->on[static_cast<size_t>(sp->index)].nsid.load()] = first->size_blocks.load();
      }
      break;
    }

  plan_placement();
  auto& reactors = engine_of(*host_).reactors;
  for (size_t i = 0; i < reactors.size(); ++i)
    lanes_.push_back(std::make_unique<Lane>(*this, *reactors[i], static_cast<int>(i)));
  for (auto& l : lanes_)
    if (auto r = l->start(); !r) return r.error();
  index_lanes();
  for (auto& sp : paths()) {
    if (sp->state.load() != PathState::live) continue;
    if (auto r = attach_all(sp->index, 0, kAttachTimeout); !r)
      nvmeof::detail::log_warning("nvmeof: path %s: I/O queues: %s\n", sp->address().to_string().c_str(),
                   r.error().message().c_str());
  }

  for (auto& sp : paths()) {
    const bool live = sp->state.load() == PathState::live;
    boost::asio::post(ctx_, [this, i = sp->index, live, f = sp->facts] {
      if (live) machine_->opened(i, f);
      else machine_->unreachable_at_open(i);
    });
    // After the machine hears of the path: a failure it reports now reaches a live path.
    if (live) watch_controller(sp->index);
  }
  // A queue pair that failed (or never attached) while it opened reported it before the machine
  // knew the path, which dropped it: each lane checks again, its reports now queued behind the
  // machine's opened().
  for (auto& l : lanes_) {
    Lane* lane = l.get();
    lane->post([lane] { lane->recheck_paths(); });
  }
  // Keep polling ANA while a path is in a state that should not last (change, inaccessible):
  // an event may be lost when two changes come faster than the AER is re-armed.
  boost::asio::post(ctx_, [this] { ana_poll(); });
  return {};
}

Result<std::shared_ptr<VolumeNs>> SubsystemPaths::bind(const VolumeOptions& vo) {
  auto ns = std::make_shared<VolumeNs>();
  ns->selector.store(vo.selector);
  ns->round_robin_ios = std::max<uint32_t>(vo.round_robin_ios, 1);
  // The first live path names the namespace (vo.nsid); the others must show the same one. Only
  // a named volume is tracked (its identifiers are what a reconnecting path looks for); a path
  // that reconnects while this runs and misses it is healed by ana_poll().
  // A path whose controller is failing now is passed over; a namespace that is not active is
  // the answer.
  const size_t n = paths().size();
  size_t first = n;
  std::error_code why = make_error_code(Errc::no_path);
  for (auto& sp : paths()) {
    auto ctrl = sp->endpoint();
    if (!ctrl) continue;
    auto r = bind_path(*ns, *sp, *ctrl, vo.nsid, nullptr);
    if (!r && r.error() == make_error_code(Errc::invalid_argument)) return r.error();
    if (!r) {
      if (why == make_error_code(Errc::no_path)) why = r.error();
      continue;
    }
    first = static_cast<size_t>(sp->index);
    break;
  }
  if (first == n) return why;
  ns->max_blocks_per_cmd = std::clamp<uint32_t>(max_transfer_ / ns->info.block_size, 1, 65536);
  const auto first_ctrl = paths_[first]->endpoint();
  {
    std::lock_guard lock(ns_mu_);
    // A refresh that stored a newer log after the first path was bound did not see this volume
    // yet: its state comes from that log now, in the same critical section as joining bound_.
    const SharedPath& fp = *paths_[first];
    auto& on = ns->on[first];
    if (fp.ana_log && fp.ana_log_of == first_ctrl.get())
      if (const AnaGroup* g = fp.ana_log->group(on.anagrpid.load())) on.ana.store(g->state);
    bound_.push_back(ns);
  }
  for (auto& sp : paths()) {
    auto ctrl = sp->endpoint();
    if (static_cast<size_t>(sp->index) == first || !ctrl) continue;
    if (auto r = bind_path(*ns, *sp, *ctrl, 0, nullptr); !r) {
      if (r.error() == make_error_code(Errc::namespace_mismatch)) {
        unbind(*ns);
        return r.error();
      }
      // A path failing under us reconnects and looks for the namespace then.
    }
  }
  return ns;
}

void SubsystemPaths::unbind(const VolumeNs& ns) {
  std::lock_guard lock(ns_mu_);
  std::erase_if(bound_, [&](const auto& p) { return p.get() == &ns; });
}

Result<void> SubsystemPaths::attach_all(int path, uint32_t generation, std::chrono::milliseconds timeout) {
  auto& sp = *paths_[static_cast<size_t>(path)];
  Result<void> result;
  for (auto& l : lanes_) {
    Lane* lane = l.get();
    auto q = sp.ctrl->prepare_io_queue(lane->reactor(), opts_.connect.io_queue_depth, lane->node());
    if (!q) {
      nvmeof::detail::log_warning("nvmeof: path %s: I/O queue for reactor: %s\n", sp.address().to_string().c_str(),
                   q.error().message().c_str());
      if (result) result = q.error();
      continue;
    }
    auto pq = std::make_shared<PreparedQueue>(std::move(*q));
    auto pr = std::make_shared<std::promise<std::error_code>>();
    auto fut = pr->get_future();
    lane->post([lane, pr, pq, path, generation] { pr->set_value(lane->attach_prepared(path, generation, *pq).error()); });
    if (fut.wait_for(timeout) != std::future_status::ready) {
      if (result) result = Errc::timeout;
      continue;
    }
    if (auto ec = fut.get(); ec && result) result = ec;
  }
  return result;
}

void SubsystemPaths::ana_poll() {
  if (stopping_.load()) return;
  bool unsettled = false;
  const uint64_t now = Reactor::clock_ns();
  const auto vols = bound();
  for (auto& sp : paths()) {
    if (sp->ctrl) sp->keep_alives.store(sp->ctrl->keep_alives_sent(), std::memory_order_relaxed);
    note_keep_alive_rate(*sp, now);
    const bool live = sp->state.load() == PathState::live;
    const size_t p = static_cast<size_t>(sp->index);
    for (const auto& ns : vols) {
      auto& on = ns->on[p];
      const AnaState a = on.ana.load();
      unsettled |= live && a != AnaState::optimized && a != AnaState::non_optimized;
      // A path holds its I/O through an ANA transition for at most ANATT; past it the controller
      // is not coming back by itself, and the path fails over like a dead one (its I/O moves, or
      // waits for another path up to no_path_timeout) and reconnects.
      if (live && a == AnaState::change) {
        if (on.change_since_ns == 0) on.change_since_ns = now;
        const uint64_t anatt_ns = anatt_ns_of(*sp);
        if (now - on.change_since_ns > anatt_ns) {
          char cause[80];
          std::snprintf(cause, sizeof cause, "ana change longer than ANATT (%.1f s)",
                        static_cast<double>(anatt_ns) / 1e9);
          for (const auto& other : vols) other->on[p].change_since_ns = 0;
          report_path_failure(sp->index, sp->generation.load(), cause, LossCause::local, now);
        }
      } else {
        on.change_since_ns = 0;
      }
      // A live path that does not show a volume's namespace (it reconnected while the volume
      // was being opened, or the namespace was not attached there): looked for again.
      if (live && sp->ctrl && on.nsid.load() == 0 && now >= on.next_look_ns) {
        on.next_look_ns = now + kLookAgainNs;
        const int i = sp->index;
        post_blocking([this, i, ns, ctrl = sp->ctrl] {
          if (!stopping_.load()) (void)bind_path(*ns, *paths_[static_cast<size_t>(i)], *ctrl, 0, nullptr);
        });
      }
    }
    // A kernel path tells us nothing by itself (the kernel owns its events and keep-alive): its
    // ANA state is polled, and its controller's state checked, every period.
    if (live && sp->ctrl && !sp->ctrl->has_async_events()) {
      unsettled = true;
      const int i = sp->index;
      const uint32_t gen = sp->generation.load();
      post_blocking([this, i, gen, ctrl = sp->ctrl] {
        if (auto ec = ctrl->health())
          report_path_failure(i, gen, "kernel controller: " + ec.message(), LossCause::local,
                              Reactor::clock_ns());
      });
    }
  }
  if (unsettled) request_ana_refresh();
  auto t = std::make_shared<boost::asio::steady_timer>(ctx_, kAnaPollPeriod);
  keep_timer(t);
  t->async_wait([this, t](const boost::system::error_code& ec) {
    if (!ec) ana_poll();
  });
}

uint64_t SubsystemPaths::anatt_ns_of(const SharedPath& sp) const noexcept {
  // ANATT 0 means not reported: allow the longest the field could have said.
  const uint8_t anatt = sp.ctrl ? sp.ctrl->info().anatt_s : 0;
  return static_cast<uint64_t>(anatt ? anatt : 255) * 1'000'000'000ull;
}

void SubsystemPaths::watch_controller(int path) {
  auto& sp = *paths_[static_cast<size_t>(path)];
  const uint32_t gen = sp.generation.load();
  sp.ctrl->on_async_event([this, path](uint32_t dw0) {
    if (is_ana_change_notice(dw0)) request_ana_refresh();
    if (is_namespace_change_notice(dw0)) request_namespace_refresh(path);
  });
  sp.ctrl->on_failure([this, path, gen](std::error_code ec) {
    report_path_failure(path, gen, "admin queue: " + ec.message(), classify_loss(ec), Reactor::clock_ns());
  });
  // An admin queue that failed before the callback was set (between the connect and now) told
  // no one; report it here (a second report of the same generation is ignored).
  if (!sp.ctrl->is_live())
    report_path_failure(path, gen, "admin queue: failed before the path went live", LossCause::local,
                        Reactor::clock_ns());
  // A notice sent before the callback above was set told no one: look once now.
  post_blocking([this, path] { revalidate_namespaces(path); });
}

int SubsystemPaths::push_event(FailoverEvent e) {
  timeline_.push_back(std::move(e));
  while (timeline_.size() > std::max<size_t>(opts_.timeline_max, 1)) {
    timeline_.pop_front();
    ++timeline_dropped_;
  }
  return static_cast<int>(timeline_dropped_ + timeline_.size() - 1);
}

FailoverEvent* SubsystemPaths::event_at(int number) noexcept {
  if (number < 0 || static_cast<uint64_t>(number) < timeline_dropped_) return nullptr;
  const uint64_t i = static_cast<uint64_t>(number) - timeline_dropped_;
  return i < timeline_.size() ? &timeline_[i] : nullptr;
}

bool SubsystemPaths::report_path_failure(int path, uint32_t generation, std::string cause, LossCause loss,
                                     uint64_t detect_ns) {
  auto& sp = *paths_[static_cast<size_t>(path)];
  {
    std::lock_guard lock(timeline_mu_);
    if (sp.generation.load() != generation) return false;
    // The first report of a generation opens its failover; later ones (another lane, the admin
    // queue) only tell the machine more, e.g. that the controller closed on us.
    const PathState st = sp.state.load();
    if (sp.reported_generation != generation && (st == PathState::live || st == PathState::draining)) {
      sp.reported_generation = generation;
      FailoverEvent e;
      e.path = path;
      e.cause = cause;
      e.detect_ns = detect_ns;
      sp.event.store(push_event(std::move(e)));
    }
  }
  boost::asio::post(ctx_, [this, path, generation, cause = std::move(cause), loss, detect_ns] {
    if (stopping_.load()) return;
    auto& s = *paths_[static_cast<size_t>(path)];
    // The lanes stop choosing the path the moment the state says failed.
    if (!machine_->on_failure(path, generation, loss, detect_ns)) return;
    s.failovers.fetch_add(1);
    nvmeof::detail::log_warning("nvmeof: path %s failed: %s\n", s.address().to_string().c_str(), cause.c_str());
  });
  return true;
}

// ---- FailoverEnv: what the machine asks for, on the control thread ---------------------------

uint64_t SubsystemPaths::now_ns() { return Reactor::clock_ns(); }

void SubsystemPaths::keep_timer(const std::shared_ptr<boost::asio::steady_timer>& t) {
  if (timers_.size() >= 64)
    timers_.erase(std::remove_if(timers_.begin(), timers_.end(), [](const auto& w) { return w.expired(); }),
                  timers_.end());
  timers_.push_back(t);
}

void SubsystemPaths::arm_timer(int path, uint64_t at_ns, uint64_t token) {
  const uint64_t now = Reactor::clock_ns();
  auto t = std::make_shared<boost::asio::steady_timer>(
      ctx_, std::chrono::nanoseconds(at_ns > now ? at_ns - now : 0));
  keep_timer(t);
  t->async_wait([this, t, path, token](const boost::system::error_code& ec) {
    if (ec || stopping_.load()) return;
    machine_->on_timer(path, token);
  });
}

void SubsystemPaths::close_lanes(int path) {
  auto& sp = *paths_[static_cast<size_t>(path)];
  sp.state.store(PathState::failed, std::memory_order_release);
  for (auto& l : lanes_) {
    Lane* lane = l.get();
    lane->post([lane, path] { lane->close_path(path, Reactor::clock_ns()); });
  }
}

void SubsystemPaths::fence_endpoint(int path) {
  if (auto ctrl = paths_[static_cast<size_t>(path)]->ctrl) post_blocking([ctrl] { ctrl->fence(); });
}

void SubsystemPaths::start_ccr(int failed, int via, uint32_t generation) {
  auto& f = *paths_[static_cast<size_t>(failed)];
  auto& v = *paths_[static_cast<size_t>(via)];
  if (!f.ctrl || !v.ctrl) {
    boost::asio::post(ctx_, [this, failed, via, generation] { machine_->on_ccr_done(failed, via, generation, false); });
    return;
  }
  // The failed controller's identity as it was when it failed (a reconnect replaces f.ctrl only
  // after the fence, and this copy does not care).
  const ControllerInfo impacted = f.ctrl->info();
  const auto timeout = opts_.ccr_timeout.count() > 0
                           ? opts_.ccr_timeout
                           : std::chrono::duration_cast<std::chrono::milliseconds>(
                                 std::chrono::nanoseconds(f.facts.times.hold_ns)) + std::chrono::milliseconds(1);
  const uint64_t t0 = Reactor::clock_ns();
  post_blocking([this, failed, via, generation, impacted, timeout, t0, vctrl = v.ctrl] {
    auto r = vctrl->cross_controller_reset(impacted, timeout);
    const double ms = static_cast<double>(Reactor::clock_ns() - t0) / 1e6;
    if (r)
      nvmeof::detail::log_warning("nvmeof: path %s: controller %u reset through path %s in %.1f ms\n",
                   paths_[static_cast<size_t>(failed)]->address().to_string().c_str(), impacted.cntlid,
                   paths_[static_cast<size_t>(via)]->address().to_string().c_str(), ms);
    else
      nvmeof::detail::log_warning("nvmeof: path %s: cross-controller reset through path %s: %s\n",
                   paths_[static_cast<size_t>(failed)]->address().to_string().c_str(),
                   paths_[static_cast<size_t>(via)]->address().to_string().c_str(), r.error().message().c_str());
    boost::asio::post(ctx_, [this, failed, via, generation, ok = r.has_value()] {
      if (!stopping_.load()) machine_->on_ccr_done(failed, via, generation, ok);
    });
  });
}

void SubsystemPaths::publish_fenced(int path, uint32_t generation, FenceRule rule) {
  auto& s = *paths_[static_cast<size_t>(path)];
  if (s.fenced_through.load() < generation + 1) s.fenced_through.store(generation + 1, std::memory_order_release);
  // An older generation fenced after the path reconnected: the path stays as it is.
  const bool current = s.generation.load() == generation;
  if (current) s.state.store(PathState::fenced, std::memory_order_release);
  std::lock_guard lock(timeline_mu_);
  if (FailoverEvent* found = event_at(current ? s.event.load() : s.unfenced_event)) {
    auto& ev = *found;
    ev.fenced_us = static_cast<int64_t>((Reactor::clock_ns() - ev.detect_ns) / 1000);
    ev.fence_rule = to_string(rule);
  }
}

void SubsystemPaths::start_connect(int path, uint32_t generation) {
  if (stopping_.load()) return;
  post_blocking([this, path, generation] { try_connect(path, generation); });
}

void SubsystemPaths::try_connect(int path, uint32_t next_gen) {
  auto& sp = *paths_[static_cast<size_t>(path)];
  if (stopping_.load()) return;
  if (g_reconnect_for_test) [[unlikely]]
    g_reconnect_for_test(path, false, {});
  auto r = connect_path(sp, kReconnectTimeout);
  if (r) r = attach_all(path, next_gen, kAttachTimeout);
  if (g_reconnect_for_test) [[unlikely]]
    g_reconnect_for_test(path, true, r ? std::error_code{} : r.error());
  if (!r) {
    // Kept for stats(): an authentication failure (or any other) of a path that keeps being
    // retried, with the failover machine's backoff between attempts.
    sp.connect_failures.fetch_add(1);
    std::lock_guard lock(sp.error_mu);
    sp.last_connect_error = r.error().message();
  }
  boost::asio::post(ctx_, [this, path, ok = r.has_value(), facts = sp.facts] {
    if (!stopping_.load()) machine_->on_connect_done(path, ok, facts);
  });
}

void SubsystemPaths::publish_live(int path, uint32_t generation) {
  auto& sp = *paths_[static_cast<size_t>(path)];
  sp.generation.store(generation);
  sp.state.store(PathState::live, std::memory_order_release);
  sp.reconnects.fetch_add(1);
  {
    std::lock_guard lock(timeline_mu_);
    if (FailoverEvent* found = event_at(sp.event.load())) {
      auto& ev = *found;
      ev.reconnected_us = static_cast<int64_t>((Reactor::clock_ns() - ev.detect_ns) / 1000);
    }
    // Reconnected before the old generation's fence: that failover's fence is stamped later.
    if (sp.fenced_through.load() < generation) sp.unfenced_event = sp.event.load();
    sp.event.store(-1);
  }
  nvmeof::detail::log_info("nvmeof: path %s reconnected\n", sp.address().to_string().c_str());
  watch_controller(path);
}

void SubsystemPaths::namespace_gone_on(VolumeNs& ns, size_t p, uint32_t id) {
  ns.on[p].nsid.store(0);
  bool anywhere = false;
  for (const auto& other : paths())
    anywhere |= other->state.load() != PathState::removed && ns.on[static_cast<size_t>(other->index)].nsid.load() != 0;
  if (anywhere || ns.removed.exchange(true)) return;
  {
    std::lock_guard lock(known_mu_);
    known_ns_.erase(id);
  }
  nvmeof::detail::log_warning("nvmeof: namespace %u of %s was removed: its I/O fails\n", id,
                              opts_.connect.subnqn.c_str());
  NamespaceEvent ev;
  ev.subnqn = opts_.connect.subnqn;
  ev.nsid = id;
  ev.block_size = ns.info.block_size;
  ev.kind = NamespaceEvent::Kind::removed;
  engine_of(*host_).report(ev);
}

void SubsystemPaths::revalidate_namespaces(int path) {
  if (stopping_.load()) return;
  auto ctrl = paths_[static_cast<size_t>(path)]->endpoint();
  if (!ctrl) return;
  auto active = ctrl->active_namespaces();
  if (!active) return;  // a failing controller: its path fails over, nothing is judged gone
  const size_t p = static_cast<size_t>(path);
  for (const auto& ns : bound()) {
    const uint32_t id = ns->on[p].nsid.load();
    if (id != 0 && std::find(active->begin(), active->end(), id) == active->end()) namespace_gone_on(*ns, p, id);
  }
}

void SubsystemPaths::request_namespace_refresh(int path) {
  post_blocking([this, path] { refresh_namespaces(path); });
}

void SubsystemPaths::refresh_namespaces(int path) {
  if (stopping_.load()) return;
  auto& sp = *paths_[static_cast<size_t>(path)];
  auto ctrl = sp.endpoint();
  if (!ctrl) return;
  // Reading the list also lets the controller send the next such event.
  auto changed = ctrl->changed_namespaces();
  if (!changed) {
    nvmeof::detail::log_warning("nvmeof: path %s: changed namespace list: %s\n", sp.address().to_string().c_str(),
                                changed.message().c_str());
    return;
  }
  const bool all = changed->size() == 1 && changed->front() == log_page::kAllNamespacesChanged;
  auto listed = [&](uint32_t id) { return all || std::find(changed->begin(), changed->end(), id) != changed->end(); };
  Engine& engine = engine_of(*host_);
  const size_t p = static_cast<size_t>(path);
  std::vector<uint32_t> seen;  // NSIDs that are bound volumes' on this path
  for (const auto& ns : bound()) {
    const uint32_t id = ns->on[p].nsid.load();
    if (id == 0) continue;
    seen.push_back(id);
    if (!listed(id)) continue;
    auto ni = ctrl->identify_namespace(id);
    const bool here = ni && ni->size_blocks != 0 && ni->id.same_namespace_as(ns->info.id);
    NamespaceEvent ev;
    ev.subnqn = opts_.connect.subnqn;
    ev.nsid = id;
    ev.block_size = ns->info.block_size;
    if (here) {
      if (ni->block_size != ns->info.block_size) continue;  // reformatted: not a resize we can follow
      const uint64_t was = ns->size_blocks.exchange(ni->size_blocks);
      {
        std::lock_guard lock(known_mu_);
        known_ns_[id] = ni->size_blocks;
      }
      if (was == ni->size_blocks) continue;  // another controller of it reported it first
      nvmeof::detail::log_info("nvmeof: namespace %u: %llu blocks, was %llu\n", id,
                               static_cast<unsigned long long>(ni->size_blocks), static_cast<unsigned long long>(was));
      ev.kind = NamespaceEvent::Kind::resized;
      ev.size_blocks = ni->size_blocks;
      engine.report(ev);
      continue;
    }
    if (!ni && !says_not_active(ni.error()))
      continue;  // the controller failing: its path fails over, the namespace is not judged gone
    namespace_gone_on(*ns, p, id);
  }
  // Namespaces no volume is open on: a new one is reported, once.
  if (all) {
    auto list = ctrl->active_namespaces();
    if (!list) return;
    *changed = std::move(*list);
  }
  for (uint32_t id : *changed) {
    if (std::find(seen.begin(), seen.end(), id) != seen.end()) continue;
    auto ni = ctrl->identify_namespace(id);
    const bool active = ni && ni->size_blocks != 0;
    bool report = false;
    {
      std::lock_guard lock(known_mu_);
      if (active) report = known_ns_.emplace(id, ni->size_blocks).second;
      else if (ni || says_not_active(ni.error())) known_ns_.erase(id);
    }
    if (!report) continue;
    nvmeof::detail::log_info("nvmeof: namespace %u of %s added\n", id, opts_.connect.subnqn.c_str());
    NamespaceEvent ev;
    ev.kind = NamespaceEvent::Kind::added;
    ev.subnqn = opts_.connect.subnqn;
    ev.nsid = id;
    ev.size_blocks = ni->size_blocks;
    ev.block_size = ni->block_size;
    engine.report(ev);
  }
}

void SubsystemPaths::request_ana_refresh() {
  if (ana_refresh_pending_.exchange(true)) return;
  post_blocking([this] { refresh_ana_now(); });
}

void SubsystemPaths::refresh_ana_now() {
  ana_refresh_pending_.store(false);
  if (stopping_.load()) return;
  for (auto& sp : paths()) {
    if (sp->state.load() != PathState::live) continue;
    auto ctrl = sp->ctrl;  // a reconnect replaces it only while the path is not live
    if (!ctrl) continue;
    auto read = ctrl->ana_log();
    if (!read) continue;  // a failing path reports itself through its queues
    auto log = std::make_shared<const AnaLog>(std::move(*read));
    std::vector<std::shared_ptr<VolumeNs>> vols;
    {
      // A volume bound after this takes its state from this log; one bound before is in `vols`.
      std::lock_guard lock(ns_mu_);
      sp->ana_log = log;
      sp->ana_log_of = ctrl.get();
      vols = bound_;
    }
    // ANA state is per (controller, ANA group): one log read serves every volume on the path.
    bool left = false, back = false;
    AnaState newest = AnaState::optimized;
    for (const auto& ns : vols) {
      auto& on = ns->on[static_cast<size_t>(sp->index)];
      const AnaGroup* g = log->group(on.anagrpid.load());
      if (!g) continue;
      const AnaState old = on.ana.exchange(g->state);
      if (old == g->state) continue;
      left |= ana_tier(old) >= 0 && ana_tier(g->state) < 0;
      back |= ana_tier(g->state) >= 0;
      newest = g->state;
    }
    if (!left && !back) continue;
    // A path leaving the usable tiers is a failover of its own kind: record it so that the moved
    // I/O stamps its timeline; coming back closes it.
    std::lock_guard lock(timeline_mu_);
    const uint64_t now = Reactor::clock_ns();
    if (left && sp->event.load() < 0) {
      FailoverEvent e;
      e.path = sp->index;
      e.cause = std::string("ana ") + to_string(newest);
      e.detect_ns = now;
      e.fenced_us = 0;  // the controller answered: nothing is left running on the path
      sp->event.store(push_event(std::move(e)));
    } else if (!left && back && sp->event.load() >= 0 && sp->state.load() == PathState::live) {
      if (FailoverEvent* ev = event_at(sp->event.load()))
        ev->reconnected_us = static_cast<int64_t>((now - ev->detect_ns) / 1000);
      sp->event.store(-1);
    }
  }
}

void SubsystemPaths::shutdown() {
  {
    // An add_path in progress (persistent discovery may be adding one) finishes first: it posts
    // to the lanes, which go below.
    std::lock_guard lock(paths_mu_);
    if (stopping_.exchange(true)) return;
  }
  // Every volume has left (each waited for its own I/O); what a lane still holds finishes first
  // (bounded: a lane gives up after its own drain timeout).
  const uint64_t give_up = Reactor::clock_ns() + no_path_timeout_ns() + 1'000'000'000ull;
  for (;;) {
    uint64_t n = 0;
    for (auto& l : lanes_) n += l->inflight_total() + l->queued();
    if (n == 0 || Reactor::clock_ns() > give_up) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  // Its blocking work on the engine's pool (each task bounded by its own timeout).
  while (pool_tasks_.load() != 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  // The loop is shared with other subsystems: instead of stopping it, cancel its own timers
  // and let everything already queued for it run (and return, seeing stopping_) before the
  // lanes go; what the stopping lanes still post is flushed the same way after them.
  ControllerAccess::impl(cp_).call([this] {
    for (auto& w : timers_)
      if (auto t = w.lock()) t->cancel();
    timers_.clear();
  });
  ControllerAccess::impl(cp_).call([] {});
  for (auto& l : lanes_) l->stop();
  ControllerAccess::impl(cp_).call([] {});
  lanes_.clear();
  for (auto& sp : paths()) {
    if (sp->ctrl) sp->ctrl->close();
    std::lock_guard lock(sp->ctrl_mu);
    sp->ctrl.reset();
  }
}

// ---- paths at run time (ARCHITECTURE.md, "Paths at run time") ---------------------------------

namespace {
bool same_address(const TransportAddress& a, const TransportAddress& b) noexcept {
  return a.transport == b.transport && a.traddr == b.traddr && a.trsvcid == b.trsvcid &&
         a.host_iface == b.host_iface;
}
}  // namespace

size_t SubsystemPaths::paths_in_use() const noexcept {
  size_t n = 0;
  for (const auto& sp : paths()) {
    const PathState st = sp->state.load(std::memory_order_relaxed);
    n += st != PathState::removed && st != PathState::draining;
  }
  return n;
}

Result<int> SubsystemPaths::add_path(const TransportAddress& addr) {
  if (lane_for_submit()) return errno_code(EDEADLK);
  if (addr.transport == Transport::passthrough && !host_->options().big_entries)
    return {Errc::invalid_argument, "an io_uring passthrough path needs an engine made with big_entries"};
  std::lock_guard lock(paths_mu_);
  if (stopping_.load()) return Errc::not_connected;
  size_t slot = kMaxPaths, free = kMaxPaths;
  const auto slots = paths();
  for (const auto& sp : slots) {
    const PathState st = sp->state.load();
    if (st == PathState::removed && free == kMaxPaths) free = static_cast<size_t>(sp->index);
    if (!same_address(sp->address(), addr)) continue;
    if (st == PathState::draining) return {errno_code(EBUSY), addr.to_string() + " is being removed"};
    if (st != PathState::removed) return {errno_code(EEXIST), addr.to_string() + " is already a path"};
    slot = static_cast<size_t>(sp->index);  // added back: its old index
  }
  if (slot == kMaxPaths && slots.size() < kMaxPaths) {
    // A new slot: made whole (its SharedPath, a LanePath on every lane) before npaths_
    // publishes it.
    slot = slots.size();
    auto sp = std::make_unique<SharedPath>();
    sp->index = static_cast<int>(slot);
    sp->set_address(addr);
    paths_[slot] = std::move(sp);
    for (auto& l : lanes_) l->make_path(slot);
    npaths_.store(slot + 1, std::memory_order_release);
  }
  if (slot == kMaxPaths) slot = free;  // every slot used once: a removed path's is taken again
  if (slot == kMaxPaths)
    return {errno_code(ENOSPC), "the subsystem has " + std::to_string(kMaxPaths) + " paths"};
  SharedPath& sp = *paths_[slot];
  // A path taken again starts afresh: another address, or the same one back, has none of the
  // old connection's history.
  sp.set_address(addr);
  sp.numa_node.store(place_path(topology_, addr, sp.index).node);
  sp.failovers.store(0);
  sp.reconnects.store(0);
  sp.connect_failures.store(0);
  sp.keep_alives.store(0);
  sp.keep_alives_per_s.store(0);  // its window (control thread) restarts as the count drops to 0
  sp.write_fence_ms.store(0);
  sp.write_fence_rule.store(WriteFenceRule::unknown);
  sp.write_fence_logged.store(false);
  {
    std::lock_guard elock(sp.error_mu);
    sp.last_connect_error.clear();
  }
  // Under paths_mu_ with the check above: a second add of the address sees connecting.
  sp.state.store(PathState::connecting, std::memory_order_release);
  for (size_t l = 0; l < lanes_.size(); ++l) {
    Lane* lane = lanes_[l].get();
    lane->post([lane, slot, d = distance_to(l, sp.numa_node.load())] { lane->add_path_slot(static_cast<int>(slot), d); });
  }
  // Every bound volume looks for its namespace behind the new controller when it connects
  // (connect_path); the machine starts that connect and brings the path live.
  boost::asio::post(ctx_, [this, slot] {
    if (stopping_.load()) return;
    paths_[slot]->retiring = false;
    machine_->add_path(static_cast<int>(slot));
  });
  nvmeof::detail::log_info("nvmeof: path %s added\n", addr.to_string().c_str());
  return static_cast<int>(slot);
}

Result<void> SubsystemPaths::remove_path(const TransportAddress& addr) {
  if (lane_for_submit() || ControllerAccess::impl(cp_).on_control_thread()) return errno_code(EDEADLK);
  int slot = -1;
  uint32_t fence_ms = 0;
  {
    std::lock_guard lock(paths_mu_);
    for (const auto& sp : paths())
      if (same_address(sp->address(), addr) && sp->state.load() != PathState::removed) {
        slot = sp->index;
        fence_ms = sp->write_fence_ms.load();
      }
  }
  if (slot < 0) return {errno_code(ENOENT), addr.to_string() + " is not a path"};
  auto done = std::make_shared<std::promise<void>>();
  auto fut = done->get_future();
  boost::asio::post(ctx_, [this, slot, done] { start_remove(slot, [done] { done->set_value(); }); });
  // Its commands complete within no_path_timeout (the lanes' own bound), or, if it fails
  // meanwhile, its writes wait for the fence.
  const auto bound = opts_.no_path_timeout + std::chrono::milliseconds(fence_ms) + std::chrono::seconds(1);
  if (fut.wait_for(bound) != std::future_status::ready)
    return {Errc::timeout, addr.to_string() + " is still draining; it goes on being removed"};
  return {};
}

void SubsystemPaths::start_remove(int path, std::function<void()> done) {
  auto& sp = *paths_[static_cast<size_t>(path)];
  if (stopping_.load() || sp.state.load() == PathState::removed) {
    if (done) done();
    return;
  }
  if (done) sp.on_removed.push_back(std::move(done));
  if (sp.retiring) return;
  sp.retiring = true;
  nvmeof::detail::log_info("nvmeof: path %s: removing\n", sp.address().to_string().c_str());
  machine_->remove_path(path);
}

void SubsystemPaths::drain(int path) {
  auto& sp = *paths_[static_cast<size_t>(path)];
  // The lanes stop choosing it at once; each tells lane_drained() when its commands are done.
  sp.state.store(PathState::draining, std::memory_order_release);
  sp.drain_waiting = static_cast<uint32_t>(lanes_.size());
  for (auto& l : lanes_) {
    Lane* lane = l.get();
    lane->post([lane, path] { lane->drain_path(path); });
  }
  if (lanes_.empty()) machine_->drained(path);
}

void SubsystemPaths::lane_drained(int path) {
  boost::asio::post(ctx_, [this, path] {
    if (stopping_.load()) return;
    auto& sp = *paths_[static_cast<size_t>(path)];
    if (sp.drain_waiting == 0 || --sp.drain_waiting != 0) return;
    machine_->drained(path);
  });
}

void SubsystemPaths::removed(int path) {
  auto& sp = *paths_[static_cast<size_t>(path)];
  sp.state.store(PathState::removed, std::memory_order_release);
  sp.drain_waiting = 0;
  // No volume has its namespace there any more (added back, the path looks for it again).
  for (const auto& ns : bound()) ns->on[static_cast<size_t>(path)].nsid.store(0);
  // Nothing of it can execute any more (drained, fenced, or never used): close what is left,
  // its queue pairs on the lanes (a connect that ended after the removal left some) and its
  // controller.
  for (auto& l : lanes_) {
    Lane* lane = l.get();
    lane->post([lane, path] { lane->close_path(path, Reactor::clock_ns()); });
  }
  std::shared_ptr<PathEndpoint> ctrl;
  {
    std::lock_guard lock(sp.ctrl_mu);
    ctrl = std::move(sp.ctrl);
  }
  if (ctrl) post_blocking([ctrl] { ctrl->close(); });
  nvmeof::detail::log_info("nvmeof: path %s removed\n", sp.address().to_string().c_str());
  auto waiters = std::move(sp.on_removed);
  sp.on_removed.clear();
  for (auto& f : waiters) f();
}

void SubsystemPaths::apply_discovered(const std::vector<DiscoveryEntry>& entries) {
  if (stopping_.load()) return;
  const auto listed = usable_ports(entries, opts_.connect.subnqn, opts_.connect);
  std::vector<std::string> now;
  for (const auto& a : listed) now.push_back(a.to_string());
  const auto slots = paths();
  for (const auto& a : listed) {
    const bool known = std::any_of(slots.begin(), slots.end(), [&](const auto& sp) {
      return same_address(sp->address(), a) && sp->state.load() != PathState::removed;
    });
    if (known) continue;
    nvmeof::detail::log_info("nvmeof: discovery lists %s for %s: adding the path\n", a.to_string().c_str(),
                             opts_.connect.subnqn.c_str());
    if (auto r = add_path(a); !r)
      nvmeof::detail::log_warning("nvmeof: path %s: %s\n", a.to_string().c_str(), r.message().c_str());
  }
  for (const auto& sp : paths()) {
    const std::string addr = sp->address().to_string();
    if (sp->state.load() == PathState::removed) continue;
    const bool listed_now = std::find(now.begin(), now.end(), addr) != now.end();
    const bool listed_before = std::find(discovered_.begin(), discovered_.end(), addr) != discovered_.end();
    if (listed_now || !listed_before) continue;
    nvmeof::detail::log_info("nvmeof: discovery no longer lists %s for %s: removing the path\n", addr.c_str(),
                             opts_.connect.subnqn.c_str());
    // Not waited for here: its drain (or fence) ends on the control thread.
    boost::asio::post(ctx_, [this, i = sp->index] { start_remove(i, {}); });
  }
  for (auto& a : now)
    if (std::find(discovered_.begin(), discovered_.end(), a) == discovered_.end()) discovered_.push_back(a);
  std::erase_if(discovered_, [&](const std::string& a) { return std::find(now.begin(), now.end(), a) == now.end(); });
}

Lane* SubsystemPaths::lane_for_submit() noexcept {
  for (auto& l : lanes_)
    if (l->on_lane_thread()) return l.get();
  return nullptr;
}

}  // namespace detail

// ---- public API -------------------------------------------------------------------------------

Volume::Volume(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Volume::~Volume() { impl_->shutdown(); }

namespace {
HostOptions engine_options_of(const VolumeOptions& opts) {
  HostOptions h;
  h.reactors = opts.reactors;
  h.poll = opts.poll;
  h.placement = opts.placement;
  h.cpus = opts.cpus;
  h.sysfs_root = opts.sysfs_root;
  h.memory_node = opts.memory_node;
  h.single_issuer = opts.single_issuer;
  h.spin_sockets = opts.spin_sockets;
  for (const auto& a : opts.paths) h.big_entries |= a.transport == Transport::passthrough;
  return h;
}
}  // namespace

Result<std::unique_ptr<Volume>> Volume::open(const VolumeOptions& opts) {
  if (opts.reactors == 0) return Errc::invalid_argument;
  auto host = detail::shared_engine(engine_options_of(opts), opts.paths);
  if (!host) return host.error();
  return open(*host, opts);
}

Result<std::unique_ptr<Volume>> Volume::open(std::shared_ptr<Host> host, const VolumeOptions& opts) {
  if (!host) return Errc::invalid_argument;
  if (opts.paths.empty() || opts.connect.subnqn.empty()) return Errc::invalid_argument;
  // The controllers of this subsystem over these paths, shared with the volumes already open on
  // them (ARCHITECTURE.md, "Shared controllers"); made and connected by the first.
  std::shared_ptr<detail::SubsystemPaths> sub;
  {
    Engine& e = engine_of(*host);
    const std::string key = detail::subsystem_key(opts);
    std::lock_guard lock(e.subsystems_mu);
    std::erase_if(e.subsystems, [](const auto& kv) { return kv.second.expired(); });
    if (auto it = e.subsystems.find(key); it != e.subsystems.end()) sub = it->second.lock();
    if (!sub) {
      sub = std::make_shared<detail::SubsystemPaths>(host, opts);
      e.subsystems[key] = sub;
    }
  }
  auto ns = sub->open_volume(opts);
  if (!ns) {
    if (sub->failed_to_open()) {
      // Not kept: the next open connects afresh.
      Engine& e = engine_of(*host);
      std::lock_guard lock(e.subsystems_mu);
      std::erase_if(e.subsystems, [&](const auto& kv) { return kv.second.lock() == sub; });
    }
    return ns.error();
  }
  auto impl = std::make_unique<Impl>(std::move(sub), std::move(*ns), opts);
  if (auto r = impl->start_observers(); !r) {
    impl->shutdown();
    return r.error();
  }
  impl->accepting_.store(true, std::memory_order_release);
  return std::unique_ptr<Volume>(new Volume(std::move(impl)));
}

Result<std::unique_ptr<Volume>> Volume::open_discovered(const TransportAddress& discovery, VolumeOptions opts) {
  if (opts.reactors == 0) return Errc::invalid_argument;
  auto host = detail::shared_engine(engine_options_of(opts), {});
  if (!host) return host.error();
  return open_discovered(*host, discovery, std::move(opts));
}

Result<std::unique_ptr<Volume>> Volume::open_discovered(std::shared_ptr<Host> host, const TransportAddress& discovery,
                                                        VolumeOptions opts) {
  if (!host) return Errc::invalid_argument;
  ControlPlane& cp = *engine_of(*host).cp;
  ConnectOptions co = opts.connect;
  co.subnqn = kDiscoveryNqn;
  co.kato_ms = 0;
  auto ctrl = Controller::connect(cp, discovery, co);
  if (!ctrl && ctrl.error() == make_error_code(Errc::tls_not_offered) &&
      opts.connect.tls == TlsUse::when_keyed) {
    co.tls = TlsUse::off;  // a plaintext discovery port may still list TLS ports
    ctrl = Controller::connect(cp, discovery, co);
  }
  if (!ctrl) return ctrl.error();
  auto log = (*ctrl)->discovery_log();
  (*ctrl)->disconnect();
  if (!log) return log.error();
  // The secure channel is one choice for every path: with a key, the ports that offer TLS 1.3;
  // without, the ports that do not require it.
  size_t need_tls = 0, no_tls = 0;
  opts.paths = detail::usable_ports(log->entries, opts.connect.subnqn, opts.connect, &need_tls, &no_tls);
  if (no_tls)
    nvmeof::detail::log_warning("nvmeof: discovery: %zu port(s) skipped: they do not offer TLS 1.3\n", no_tls);
  if (need_tls)
    nvmeof::detail::log_warning("nvmeof: discovery: %zu port(s) skipped: they require TLS and no tls_psk is set\n",
                                need_tls);
  if (opts.paths.empty())
    return need_tls ? Errc::tls_required : no_tls ? Errc::tls_not_offered : Errc::no_path;
  return open(std::move(host), opts);
}

const NamespaceInfo& Volume::ns() const noexcept { return impl_->ns_->info; }
uint32_t Volume::block_size() const noexcept { return impl_->ns_->info.block_size; }
uint64_t Volume::size_blocks() const noexcept { return impl_->ns_->size_blocks.load(std::memory_order_relaxed); }
uint32_t Volume::max_transfer() const noexcept {
  return impl_->ns_->max_blocks_per_cmd * impl_->ns_->info.block_size;
}

namespace {
// 0 or -EINVAL: the checks every submission passes before it reaches a lane.
int check_io(const detail::VolumeImpl& v, const VolumeIo& io) noexcept {
  if (!io.done || !v.accepting_.load(std::memory_order_acquire)) return -EINVAL;
  const uint64_t size = v.ns_->size_blocks.load(std::memory_order_relaxed);  // follows resizes
  const uint32_t per = v.ns_->max_blocks_per_cmd;
  switch (io.op) {
    case IoOp::read:
    case IoOp::write:
    case IoOp::write_zeroes:
      if (io.nlb == 0 || io.slba >= size || io.nlb > size - io.slba) return -EINVAL;
      if (io.op != IoOp::write_zeroes && (!io.buf || (io.nlb + per - 1) / per > detail::kMaxPiecesPerIo))
        return -EINVAL;
      break;
    case IoOp::dsm:
      if (io.nlb == 0 || io.nlb > 256 || !io.buf) return -EINVAL;
      break;
    case IoOp::flush:
      break;
  }
  return 0;
}
}  // namespace

namespace {
// Hands an accepted I/O to `lane` (at once on its own thread), counted on its volume until it
// completes (Lane::deliver); -EAGAIN when the lane's ring is full.
int hand_to(detail::Lane* lane, detail::VolumeNs& ns, VolumeIo& io) noexcept {
  io_state(io).ns = &ns;
  ns.inflight.fetch_add(1, std::memory_order_relaxed);
  if (lane->on_lane_thread()) {
    lane->start_io(io);
    return 0;
  }
  if (lane->enqueue(&io)) return 0;
  ns.inflight.fetch_sub(1, std::memory_order_relaxed);
  return -EAGAIN;
}
}  // namespace

int Volume::submit(VolumeIo& io) noexcept {
  auto& v = *impl_;
  if (const int rc = check_io(v, io)) return rc;
  detail::Lane* own = v.sub_->lane_for_submit();
  return hand_to(own ? own : v.sub_->lane_for_caller(), *v.ns_, io);
}

int Volume::submit(VolumeIo& io, unsigned reactor) noexcept {
  auto& v = *impl_;
  if (const int rc = check_io(v, io)) return rc;
  return hand_to(v.sub_->lanes_[reactor % v.sub_->lanes_.size()].get(), *v.ns_, io);
}

bool Volume::drive(const std::function<bool()>& until, std::chrono::microseconds timeout) {
  auto& v = *impl_;
  if (v.sub_->lanes_.empty()) return false;
  // Saturated: a timeout of microseconds::max() means no deadline, not one that wrapped around.
  const uint64_t now = Reactor::clock_ns();
  const uint64_t us = static_cast<uint64_t>(std::max<int64_t>(timeout.count(), 0));
  const uint64_t deadline = us > (UINT64_MAX - now) / 1000 ? UINT64_MAX : now + us * 1000;
  return v.sub_->lanes_[0]->engine_reactor().drive(until, deadline);
}

bool Volume::on_reactor_thread() const noexcept { return impl_->sub_->lane_for_submit() != nullptr; }

const Placement& Volume::placement() const noexcept { return impl_->sub_->placement_; }

void Volume::set_selector(SelectorKind k) noexcept { impl_->ns_->selector.store(k, std::memory_order_relaxed); }

Result<int> Volume::add_path(const TransportAddress& addr) { return impl_->sub_->add_path(addr); }

std::shared_ptr<Host> Volume::host() const noexcept { return impl_->sub_->host_; }

Result<void> Volume::remove_path(const TransportAddress& addr) { return impl_->sub_->remove_path(addr); }

unsigned Volume::usable_paths() const noexcept {
  unsigned n = 0;
  for (auto& sp : impl_->sub_->paths())
    n += sp->state.load(std::memory_order_relaxed) == PathState::live &&
         impl_->ns_->usable_on(static_cast<size_t>(sp->index));
  return n;
}

namespace {
void resume_awaiter(VolumeIo& io, NvmeStatus st) noexcept {
  auto* aw = static_cast<Volume::Awaitable*>(io.user);
  aw->status = st;
  aw->handle.resume();
}
}  // namespace

bool Volume::Awaitable::await_suspend(std::coroutine_handle<> h) noexcept {
  handle = h;
  io.done = &resume_awaiter;
  io.user = this;
  // Once submit() accepted the I/O, the reactor may complete it, resume the coroutine and
  // destroy this frame before submit() even returns: nothing here may touch `this` after it.
  Volume* v = vol;
  const int r = v->submit(io);
  if (r == 0) return true;
  rc = r;  // refused: the I/O never left, the frame is still ours
  return false;
}

NvmeStatus Volume::Awaitable::await_resume() const noexcept {
  if (rc == 0) return status;
  return rc == -EAGAIN ? status::kCommandInterrupted : status::kInvalidField;
}

namespace {
Volume::Awaitable make_awaitable(Volume* v, IoOp op, void* buf, uint64_t slba, uint32_t nlb) noexcept {
  Volume::Awaitable a{v, {}, {}, {}, 0};
  a.io.op = op;
  a.io.buf = buf;
  a.io.slba = slba;
  a.io.nlb = nlb;
  return a;
}
}  // namespace

Volume::Awaitable Volume::read(void* buf, uint64_t slba, uint32_t nlb) noexcept {
  return make_awaitable(this, IoOp::read, buf, slba, nlb);
}
Volume::Awaitable Volume::write(const void* buf, uint64_t slba, uint32_t nlb) noexcept {
  return make_awaitable(this, IoOp::write, const_cast<void*>(buf), slba, nlb);
}
Volume::Awaitable Volume::flush() noexcept { return make_awaitable(this, IoOp::flush, nullptr, 0, 0); }
Volume::Awaitable Volume::write_zeroes(uint64_t slba, uint32_t nlb) noexcept {
  return make_awaitable(this, IoOp::write_zeroes, nullptr, slba, nlb);
}
Volume::Awaitable Volume::dsm(DsmRange* ranges, uint32_t nr) noexcept {
  return make_awaitable(this, IoOp::dsm, ranges, 0, nr);
}

}  // namespace nvmeof
