// The data plane of a volume: one lane per reactor thread, one queue pair per path on it.
// Everything here runs on the lane's own thread except enqueue() and snapshot().
#include <pthread.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <string_view>

#include "core/spin_governor.hpp"
#include "multipath/retry_policy.hpp"
#include "multipath/volume_impl.hpp"
#include "multipath/volume_io_state.hpp"

namespace nvmeof::detail {
namespace {

constexpr uint64_t kMinDeadlineNs = 15'000'000;  // 15 ms: below this a loaded host misfires
constexpr uint64_t kMaxDeadlineNs = 25'000'000;  // ARCHITECTURE.md, "Failover": never above 25 ms
constexpr double kEwma = 0.1;
// Adaptive polling: spin at least this long after an event while commands are outstanding
// (a loopback or LAN completion lands within it), at most kSpinMaxNs; a path slower than
// kSpinCutoffNs is not spun for at all (its wake-up costs little next to its latency).
constexpr uint64_t kSpinMinNs = 20'000;
constexpr uint64_t kSpinMaxNs = 250'000;
constexpr uint64_t kSpinCutoffNs = 1'000'000;
constexpr size_t kAttemptsPerLane = 4096;
// How often a lane tells a controller with traffic-based keep-alive that its commands complete:
// far below any keep-alive period (KATO / 4, at least 25 ms), rare enough to cost nothing.
constexpr uint64_t kTrafficNoteNs = 1'000'000;
// Slow is not dead: a path whose oldest command is past the deadline while it completes nothing
// gets its reads hedged elsewhere and a probe; it is failed only once it has been silent for
// dead_silence_ns() (35 ms holding writes, 50 ms with reads only), so a path answering within
// 30 ms is never failed for being slow.
// A lane that was not run for this long (its reactor wakes at least every millisecond while
// commands are out) was held up by its host, not by its paths: the silence of every path
// counts again from that turn (ARCHITECTURE.md, "Failover budget").
constexpr uint64_t kLaneStallNs = 5'000'000;
// A command's deadline grows with the data ahead of it and its own (a 1 MiB read behind 31
// others is healthy long after 25 ms): that many bytes at half the path's measured drain rate
// (a loaded host drains slower than it did a moment ago), at kUnknownDrainRate before anything
// was measured, never faster than kMinDrainRate allows, at most kMaxTransferAllowanceNs. Small
// commands gain well under a millisecond; a silent path is still probed and failed by its
// silence (kDeadSilenceNs), not by this deadline.
constexpr double kUnknownDrainRate = 0.1;    // bytes/ns: 100 MB/s
constexpr double kMinDrainRate = 0.01;       // bytes/ns: 10 MB/s
constexpr uint64_t kMaxTransferAllowanceNs = 1'000'000'000;
// Drain-rate samples span at least this long: a reactor that was not run for a while then
// reads what piled up in its socket at once, which a shorter window would take for the link's
// speed. A lower rate is believed at once (weight kDrainDown), a higher one slowly (kEwma).
constexpr uint64_t kDrainWindowNs = 5'000'000;
constexpr double kDrainDown = 0.5;
// A path's latency and bandwidth estimates are only as fresh as its last completion: one that
// has completed nothing for this long while idle is shown to the selector as unmeasured (it costs
// nothing, so it gets the next I/O), and that I/O's sample replaces the old estimate instead of
// being averaged into it. Without it a path whose few samples came out slow (a connect on a
// loaded host, a slow spell now over) would never be chosen again, so never measured again.
constexpr uint64_t kStaleEstimateNs = 200'000'000;

bool mutates(IoOp op) noexcept {
  return op == IoOp::write || op == IoOp::write_zeroes || op == IoOp::dsm;
}

// Whether a command may still have executed (or may yet execute) on the controller: our
// transport failed under it (host pathing error), or the host's error recovery aborted it (the
// kernel completes the commands it cancels so; Linux uses both).
bool outcome_unknown(NvmeStatus st) noexcept {
  return st.sct() == Sct::path && (st.sc() == 0x70 || st.sc() == 0x71);
}

void trace(const VolumeIo& io, IoTraceEvent e, int path = -1, uint16_t status = 0) noexcept {
  if (g_io_trace_for_test) [[unlikely]]
    g_io_trace_for_test(io, e, path, status);
}

}  // namespace

void AttemptList::push_back(Attempt* a) noexcept {
  a->list = this;
  a->next = nullptr;
  a->prev = tail;
  if (tail) tail->next = a;
  else head = a;
  tail = a;
  ++size;
}

void AttemptList::remove(Attempt* a) noexcept {
  if (a->prev) a->prev->next = a->next;
  else head = a->next;
  if (a->next) a->next->prev = a->prev;
  else tail = a->prev;
  a->prev = a->next = nullptr;
  a->list = nullptr;
  --size;
}

Attempt* AttemptList::pop_front() noexcept {
  Attempt* a = head;
  if (a) remove(a);
  return a;
}

Lane::Lane(SubsystemPaths& vol, EngineReactor& reactor, int index) : sub_(vol), er_(reactor), index_(index) {
  const size_t n = vol.paths().size();
  for (size_t i = 0; i < n; ++i) make_path(i);
  views_.resize(n);
  const auto& r = vol.placement_.reactors[static_cast<size_t>(index)];
  for (size_t p = 0; p < views_.size() && p < r.distances.size(); ++p) views_[p].distance = r.distances[p];
}

Lane::~Lane() { stop(); }

bool Lane::on_lane_thread() const noexcept { return er_.on_thread(); }

Result<void> Lane::start() {
  er_.call([this] {
    // On the reactor's thread: its memory node is set, so the pool lands there.
    attempts_ = NodeArray<Attempt>(kAttemptsPerLane, er_.memory_node());
    free_ = nullptr;
    for (auto& a : attempts_) {
      a.lane = this;
      a.next = free_;
      free_ = &a;
    }
    reactor().add_poller(&Lane::poll_hook, this);
    er_.add_lane(this);
  });
  started_ = true;
  return {};
}

void Lane::stop() {
  if (!started_) return;
  started_ = false;
  stop_.store(true, std::memory_order_release);
  er_.call([this] { shutdown_on_reactor(); });
}

bool Lane::quiescent() const noexcept {
  return inflight_total_.load(std::memory_order_relaxed) == 0 && waiting_.empty() && fenced_.empty() &&
         overlapping_.empty() && delayed_.empty() && orphans_.empty() && backlog_head_ == nullptr && graveyard_.empty();
}

uint64_t Lane::spin_budget_ns() const noexcept {
  double fastest = 0;
  bool busy = false;
  for (size_t p = 0; p < views_.size(); ++p) {
    const auto& lp = paths_[p];
    if (lp->inflight.empty()) continue;
    if (!busy || lp->latency_ns < fastest) fastest = lp->latency_ns;
    busy = true;
  }
  if (!busy) return 0;
  // No history yet (a fresh connection): spin the most, the first completion teaches us.
  if (fastest <= 0) return kSpinMaxNs;
  if (fastest > static_cast<double>(kSpinCutoffNs)) return 0;
  return std::clamp(static_cast<uint64_t>(fastest * 1.5), kSpinMinNs, kSpinMaxNs);
}

void Lane::shutdown_on_reactor() noexcept {
  // Nothing is retried any more; whatever is still queued completes with a path error so that
  // no caller waits forever.
  const NvmeStatus gone = NvmeStatus::make(Sct::path, 0x70, true);
  while (VolumeIo* io = ring_.pop()) deliver(*io, gone);
  for (AttemptList* l : {&waiting_, &fenced_, &overlapping_, &delayed_})
    while (Attempt* a = l->pop_front()) finish_piece(*a, gone);
  for (auto& lp : paths_)
    if (lp && lp->qp) lp->qp->close();
  // Other volumes' lanes on this reactor keep running in these nested turns.
  const uint64_t give_up = Reactor::clock_ns() + 2'000'000'000ull;
  while (inflight_total_.load() > 0 && Reactor::clock_ns() < give_up)
    reactor().poll(std::chrono::microseconds(1000));
  for (auto& lp : paths_)
    if (lp) lp->qp.reset();
  graveyard_.clear();
  while (VolumeIo* io = backlog_head_) {
    backlog_head_ = io_state(*io).next;
    deliver(*io, gone);
  }
  reactor().remove_poller(&Lane::poll_hook, this);
  er_.remove_lane(this);
  *alive_ = false;
}

bool Lane::enqueue(VolumeIo* io) noexcept {
  if (!ring_.push(io)) return false;
  enqueued_.fetch_add(1, std::memory_order_relaxed);
  // Pairs with the fence after the loop clears spinning_: either it sees this entry or we see
  // the flag down and wake it.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (!er_.spinning()) er_.wake();
  return true;
}

void Lane::post(std::function<void()> fn) {
  er_.post([alive = alive_, fn = std::move(fn)] {
    if (*alive) fn();
  });
}

int Lane::poll_hook(void* self) noexcept { return static_cast<Lane*>(self)->turn(); }

Attempt* Lane::alloc_attempt() noexcept {
  Attempt* a = free_;
  if (a) free_ = a->next;
  return a;
}

void Lane::hold_write(Attempt& a) noexcept {
  if (a.held) return;
  a.held = true;
  VolumeNs& ns = *io_state(*a.io).ns;
  std::lock_guard lock(ns.held_mu);
  ns.held.push_back({a.slba, a.io->op == IoOp::dsm ? 0 : uint64_t{a.nlb}, &a});
  ns.held_count.store(static_cast<uint32_t>(ns.held.size()), std::memory_order_relaxed);
}

bool Lane::overlaps_held(const Attempt& a) noexcept {
  VolumeNs& ns = *io_state(*a.io).ns;
  if (ns.held_count.load(std::memory_order_relaxed) == 0 || g_no_overlap_hold_for_test) return false;
  const bool dsm = a.io->op == IoOp::dsm;
  std::lock_guard lock(ns.held_mu);
  for (const VolumeNs::HeldWrite& h : ns.held)
    if (dsm || h.nlb == 0 || (a.slba < h.slba + h.nlb && h.slba < a.slba + a.nlb)) return true;
  return false;
}

void Lane::free_attempt(Attempt* a) noexcept {
  if (a->held) [[unlikely]] {
    a->held = false;
    VolumeNs& ns = *io_state(*a->io).ns;
    std::lock_guard lock(ns.held_mu);
    std::erase_if(ns.held, [a](const VolumeNs::HeldWrite& h) { return h.owner == a; });
    ns.held_count.store(static_cast<uint32_t>(ns.held.size()), std::memory_order_relaxed);
  }
  a->role = Attempt::Role::plain;
  a->twin = nullptr;
  a->abandoned = false;
  a->hedge_won = false;
  a->hedge_failed = false;
  a->bounce.reset();
  a->next = free_;
  free_ = a;
}

uint32_t Lane::blocks_per_piece(const VolumeIo& io) const noexcept {
  return io.op == IoOp::write_zeroes ? 65536u : io_state(io).ns->max_blocks_per_cmd;
}

uint32_t Lane::pieces_of(const VolumeIo& io) const noexcept {
  if (io.op != IoOp::read && io.op != IoOp::write && io.op != IoOp::write_zeroes) return 1;
  const uint32_t per = blocks_per_piece(io);
  return (io.nlb + per - 1) / per;
}

bool Lane::has_free(uint32_t n) const noexcept {
  uint32_t count = 0;
  for (const Attempt* a = free_; a && count < n; a = a->next) ++count;
  return count >= n;
}

void Lane::start_io(VolumeIo& io) noexcept {
  // Not enough free attempts (or older I/O already waiting for them): park it, in order.
  if (backlog_head_ || !has_free(pieces_of(io))) {
    io_state(io).next = nullptr;
    if (backlog_tail_) io_state(*backlog_tail_).next = &io;
    else backlog_head_ = &io;
    backlog_tail_ = &io;
    return;
  }
  launch(io);
}

void Lane::launch(VolumeIo& io) noexcept {
  const uint32_t bs = io_state(io).ns->info.block_size;
  const uint32_t pieces = pieces_of(io);
  io_state(io).start_ns = Reactor::clock_ns();
  io_state(io).first_error = {};
  trace(io, IoTraceEvent::launch);
  io_state(io).parts_left = static_cast<uint16_t>(pieces);
  inflight_total_.fetch_add(pieces, std::memory_order_relaxed);
  const uint32_t per = pieces == 1 ? io.nlb : blocks_per_piece(io);
  for (uint32_t i = 0; i < pieces; ++i) {
    Attempt* a = alloc_attempt();
    a->io = &io;
    a->slba = io.slba + static_cast<uint64_t>(i) * per;
    a->nlb = std::min(per, io.nlb - i * per);
    a->byte_off = i * per * bs;
    a->bytes = (io.op == IoOp::read || io.op == IoOp::write) ? a->nlb * bs
               : io.op == IoOp::dsm ? io.nlb * static_cast<uint32_t>(sizeof(DsmRange)) : 0;
    a->path = -1;
    a->event = -1;
    a->exclude = -1;
    a->req.submit_ns = 0;
    a->issue_ns = 0;
    a->release_ns = 0;
    a->attempts = 0;
    a->status_failures = 0;
    if (mutates(io.op) && overlaps_held(*a)) [[unlikely]] {
      overlapping_.push_back(a);
      continue;
    }
    issue(*a);
  }
}

bool Lane::fill_command(Attempt& a, int p) noexcept {
  const uint32_t nsid = io_state(*a.io).ns->on[static_cast<size_t>(p)].nsid.load(std::memory_order_relaxed);
  IoRequest& r = a.req;
  auto* base = static_cast<uint8_t*>(a.io->buf);
  r.data = nullptr;
  r.data_len = 0;
  switch (a.io->op) {
    case IoOp::read:
      prep_read(r.cmd, nsid, a.slba, a.nlb);
      r.data = a.role == Attempt::Role::hedge ? a.bounce.get() : base + a.byte_off;
      r.data_len = a.bytes;
      break;
    case IoOp::write:
      prep_write(r.cmd, nsid, a.slba, a.nlb);
      r.data = base + a.byte_off;
      r.data_len = a.bytes;
      break;
    case IoOp::flush:
      prep_flush(r.cmd, nsid);
      break;
    case IoOp::write_zeroes:
      prep_write_zeroes(r.cmd, nsid, a.slba, a.nlb);
      break;
    case IoOp::dsm:
      prep_dsm(r.cmd, nsid, a.io->nlb, kDsmDeallocate);
      r.data = base;
      r.data_len = a.bytes;
      break;
  }
  r.on_complete = &Lane::on_complete;
  r.user = &a;
  return true;
}

void Lane::refresh_views(const VolumeNs* ns) noexcept {
  for (size_t p = 0; p < views_.size(); ++p) {
    const auto& sp = *sub_.paths_[p];
    auto& lp = *paths_[p];
    auto& v = views_[p];
    const bool live = sp.state.load(std::memory_order_acquire) == PathState::live && lp.qp &&
                      lp.qp->state() == QpState::live &&
                      lp.generation == sp.generation.load(std::memory_order_relaxed);
    const bool here = !ns || ns->on[p].nsid.load(std::memory_order_relaxed) != 0;
    v.use = live && here ? PathUse::usable : PathUse::unusable;
    v.ana = ns ? ns->on[p].ana.load(std::memory_order_relaxed) : AnaState::optimized;
    v.outstanding = lp.inflight.size;
    v.outstanding_bytes = lp.outstanding_bytes;
    const bool stale = lp.inflight.empty() && turn_ns_ > lp.last_completion_ns + kStaleEstimateNs;
    v.bytes_per_ns = stale ? 0 : lp.bytes_per_ns;
    v.latency_ns = stale ? 0 : lp.latency_ns;
  }
}

void Lane::issue(Attempt& a) noexcept {
  const VolumeNs& ns = *io_state(*a.io).ns;
  if (ns.removed.load(std::memory_order_relaxed)) [[unlikely]] {
    finish_piece(a, status::kInvalidNamespace);  // no path shows it: there is nowhere to send it
    return;
  }
  refresh_views(&ns);
  // A retry avoids the paths whose last completion was an error while a usable path without
  // one remains: a path that fails every command with a retryable status answers at once and
  // looks idle, so the selector would otherwise hand it the retries until they run out.
  if (a.attempts > 0) {
    bool clean = false;
    for (size_t p = 0; p < views_.size(); ++p)
      clean |= views_[p].use == PathUse::usable && ana_tier(views_[p].ana) >= 0 && paths_[p]->error_streak == 0;
    if (clean)
      for (size_t p = 0; p < views_.size(); ++p)
        if (paths_[p]->error_streak > 0) views_[p].use = PathUse::unusable;
  }
  const uint64_t now = Reactor::clock_ns();
  for (;;) {
    const int p = select_path(ns.selector.load(std::memory_order_relaxed), views_, selector_state_,
                              ns.round_robin_ios, a.bytes, a.exclude);
    if (p < 0) {
      a.release_ns = io_state(*a.io).start_ns + sub_.no_path_timeout_ns();
      trace(*a.io, IoTraceEvent::waiting);
      waiting_.push_back(&a);
      return;
    }
    auto& lp = *paths_[static_cast<size_t>(p)];
    fill_command(a, p);
    a.path = p;
    a.generation = lp.generation;
    a.issue_ns = now;
    const int rc = lp.qp->submit(a.req);
    if (rc == 0) {
      lp.inflight.push_back(&a);
      if (lp.inflight.size == 1) {  // idle until now: a new drain window
        lp.drain_window_ns = now;
        lp.drain_window_bytes = 0;
      }
      a.ahead_bytes = lp.outstanding_bytes;
      lp.outstanding_bytes += a.bytes;
      ++a.attempts;
      trace(*a.io, IoTraceEvent::issue, p);
      if (a.event >= 0 && a.exclude >= 0) stamp_event(a.exclude, a.event, false, a.io->op);
      return;
    }
    if (rc == -EAGAIN) {  // the pair is full: try again next turn
      a.release_ns = now;
      trace(*a.io, IoTraceEvent::delayed, p);
      delayed_.push_back(&a);
      return;
    }
    // Not live any more (its failure is being reported): never choose it again for this I/O.
    views_[static_cast<size_t>(p)].use = PathUse::unusable;
  }
}

void Lane::on_complete(IoRequest& req, const Cqe& cqe) noexcept {
  auto& a = *static_cast<Attempt*>(req.user);
  a.lane->handle_completion(a, cqe);
}

void Lane::handle_completion(Attempt& a, const Cqe& cqe) noexcept {
  auto& lp = *paths_[static_cast<size_t>(a.path)];
  // A completion from a queue pair this lane has already left behind (closed, or replaced by a
  // reconnect) says nothing about the pair that took its place.
  const bool current = a.generation == lp.generation;
  const bool counted = a.list == &lp.inflight;
  if (a.list) a.list->remove(&a);
  if (counted) lp.outstanding_bytes -= a.bytes;
  const NvmeStatus st = cqe.status();
  const uint64_t now = Reactor::clock_ns();
  if (!a.abandoned) trace(*a.io, IoTraceEvent::complete, a.path, st.raw);
  if (current) lp.error_streak = st.is_success() ? 0 : lp.error_streak + 1;
  if (st.is_success()) {
    if (current) {
      const uint64_t lat = now - a.issue_ns;
      const double dlat = static_cast<double>(lat);
      const bool fresh = lp.latency_ns == 0 || now > lp.last_completion_ns + kStaleEstimateNs;
      lp.latency_ns = fresh ? dlat : lp.latency_ns + kEwma * (dlat - lp.latency_ns);
      if (lat) {
        // Per-command bandwidth: queueing shows up in the latency, so a busier path looks slower
        // and the service-time selector spreads the load instead of feeding one path.
        const double bw = static_cast<double>(std::max<uint32_t>(a.bytes, 512)) / dlat;
        lp.bytes_per_ns = fresh || lp.bytes_per_ns == 0 ? bw : lp.bytes_per_ns + kEwma * (bw - lp.bytes_per_ns);
      }
      if (counted) {
        lp.drain_window_bytes += a.bytes;
        if (now - lp.drain_window_ns >= kDrainWindowNs) {
          const double rate =
              static_cast<double>(lp.drain_window_bytes) / static_cast<double>(now - lp.drain_window_ns);
          const double w = rate < lp.drain_bytes_per_ns ? kDrainDown : kEwma;
          lp.drain_bytes_per_ns = lp.drain_bytes_per_ns == 0 ? rate : lp.drain_bytes_per_ns + w * (rate - lp.drain_bytes_per_ns);
          lp.drain_window_ns = now;
          lp.drain_window_bytes = 0;
        }
      }
      lp.last_completion_ns = now;
      lp.last_completed_issue_ns = std::max(lp.last_completed_issue_ns, a.issue_ns);
      if (lp.traffic && now - lp.traffic_noted_ns >= kTrafficNoteNs) {
        lp.traffic->store(now, std::memory_order_relaxed);
        lp.traffic_noted_ns = now;
      }
      lp.latency.record(lat);
    }
    lp.ios.store(lp.ios.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    lp.bytes.store(lp.bytes.load(std::memory_order_relaxed) + a.bytes, std::memory_order_relaxed);
    // An abandoned attempt's twin may have delivered already, so its VolumeIo may be gone (and
    // the read it duplicated is counted once, by the twin).
    const IoOp op = a.abandoned ? IoOp::flush : a.io->op;
    if (op == IoOp::read) {
      lp.read_ios.store(lp.read_ios.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      lp.read_bytes.store(lp.read_bytes.load(std::memory_order_relaxed) + a.bytes, std::memory_order_relaxed);
    } else if (op == IoOp::write) {
      lp.write_ios.store(lp.write_ios.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      lp.write_bytes.store(lp.write_bytes.load(std::memory_order_relaxed) + a.bytes, std::memory_order_relaxed);
    }
    if (settle_hedge(a, st)) return;
    if (a.event >= 0 && a.exclude >= 0) stamp_event(a.exclude, a.event, true, a.io->op);
    finish_piece(a, st);
    return;
  }
  lp.errors.store(lp.errors.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  if (settle_hedge(a, st)) return;
  if (stop_.load(std::memory_order_relaxed)) {
    finish_piece(a, st);
    return;
  }
  refresh_views(io_state(*a.io).ns);
  OtherPath other = OtherPath::none;
  bool clean = false;      // a usable path whose last completion was not an error
  bool returning = false;  // a path not usable now, which may come back
  for (size_t p = 0; p < views_.size(); ++p) {
    const bool usable = views_[p].use == PathUse::usable && ana_tier(views_[p].ana) >= 0;
    if (static_cast<int>(p) != a.path && usable) other = OtherPath::usable;
    clean |= usable && paths_[p]->error_streak == 0;
    returning |= !usable;
  }
  auto& sp = *sub_.paths_[static_cast<size_t>(a.path)];
  RetryFacts facts;
  facts.status = st;
  facts.status_failures = a.status_failures;
  facts.max_attempts = sub_.attempts_per_io();
  facts.other = other;
  facts.clean = clean;
  facts.returning = returning;
  facts.now_ns = now;
  facts.start_ns = io_state(*a.io).start_ns;
  facts.no_path_timeout_ns = sub_.no_path_timeout_ns();
  if (const uint8_t crd = st.crd(); crd >= 1 && crd <= 3) facts.crd_ns = uint64_t{sp.crdt_100ms[crd - 1]} * 100'000'000ull;
  const RetryDecision d = decide_retry(facts);
  if (d.counted) ++a.status_failures;
  if (d.refresh_ana) sub_.request_ana_refresh();
  if (d.path_failed && current && lp.qp && lp.qp->state() == QpState::live)
    fail_path_here(a.path, "controller reported " + to_string(st));
  switch (d.action) {
    case RetryAction::complete:
      finish_piece(a, st);
      return;
    case RetryAction::fail:
      finish_piece(a, NvmeStatus::make(Sct::path, 0x70, true));
      return;
    case RetryAction::retry_same:
    case RetryAction::retry_later:
      lp.retries.store(lp.retries.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      a.release_ns = now + d.delay_ns;
      a.exclude = -1;
      trace(*a.io, IoTraceEvent::delayed, a.path, st.raw);
      delayed_.push_back(&a);
      return;
    case RetryAction::retry_other:
    case RetryAction::wait:
      break;
  }
  lp.retries.store(lp.retries.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  a.exclude = a.path;
  a.event = sp.event.load(std::memory_order_relaxed);
  // A command whose fate is unknown may still execute on the old controller. A read moves at
  // once (its buffer is ours again: the pair completed it only after no socket operation could
  // still write into it). A write moves only once that controller provably can execute nothing
  // more (FailoverMachine's rules, published as fenced_through), or, when the controller itself
  // closed this queue pair, once its quiesce time has passed since.
  if (outcome_unknown(st) && mutates(a.io->op)) {
    a.release_ns = current && lp.peer_closed_ns ? lp.peer_closed_ns + sp.quiesce_ns.load(std::memory_order_relaxed)
                                                : UINT64_MAX;
    trace(*a.io, IoTraceEvent::fenced, a.path);
    hold_write(a);
    fenced_.push_back(&a);
    return;
  }
  issue(a);
}

void Lane::finish_piece(Attempt& a, NvmeStatus st) noexcept {
  VolumeIo& io = *a.io;
  if (!st.is_success() && io_state(io).first_error.is_success()) io_state(io).first_error = st;
  free_attempt(&a);
  inflight_total_.fetch_sub(1, std::memory_order_relaxed);
  if (--io_state(io).parts_left != 0) return;
  const NvmeStatus final_status = io_state(io).first_error;
  trace(io, IoTraceEvent::finish, -1, final_status.raw);
  deliver(io, final_status);
}

void Lane::deliver(VolumeIo& io, NvmeStatus st) noexcept {
  VolumeNs& ns = *io_state(io).ns;
  (st.is_success() ? ns.completed : ns.failed).fetch_add(1, std::memory_order_relaxed);
  io.done(io, st);
  // Last: closing the volume waits for this, then frees `ns`.
  ns.inflight.fetch_sub(1, std::memory_order_release);
}

void Lane::stamp_event(int p, int event, bool success, IoOp op) noexcept {
  auto& lp = *paths_[static_cast<size_t>(p)];
  int& stamped = success ? lp.stamped_success : lp.stamped_resubmit;
  std::lock_guard lock(sub_.timeline_mu_);
  FailoverEvent* found = sub_.event_at(event);
  if (!found) return;
  FailoverEvent& e = *found;
  if (!success) ++(mutates(op) ? e.writes_moved : e.reads_moved);  // every moved piece counts
  if (stamped == event) return;
  stamped = event;
  const int64_t us = static_cast<int64_t>((Reactor::clock_ns() - e.detect_ns) / 1000);
  int64_t& field = success ? e.first_success_us : e.first_resubmit_us;
  if (field < 0 || us < field) field = us;
}

void Lane::drop_attempt(Attempt& a) noexcept {
  free_attempt(&a);
  inflight_total_.fetch_sub(1, std::memory_order_relaxed);
}

bool Lane::settle_hedge(Attempt& a, NvmeStatus st) noexcept {
  if (a.abandoned) {  // its twin already delivered, or failed over without it
    drop_attempt(a);
    return true;
  }
  if (a.hedge_won) {  // the hedge's data is in the buffer; now nothing can write there any more
    a.hedge_won = false;
    finish_piece(a, NvmeStatus{});
    return true;
  }
  Attempt* t = a.twin;
  if (a.role == Attempt::Role::plain) return false;
  if (a.role == Attempt::Role::primary) {
    // First back: the hedge (writing only its own bounce buffer) is no longer wanted. A failed
    // primary takes the ordinary retry path, into the application's buffer.
    if (t) {
      t->twin = nullptr;
      t->abandoned = true;
    }
    a.twin = nullptr;
    if (!st.is_success()) a.role = Attempt::Role::plain;  // may be hedged again where it goes
    return false;
  }
  // The hedge is back first.
  if (!t || !st.is_success()) {
    // A refused hedge must not end the hedging: otherwise the primary stays on its silent path
    // until that path is failed for its silence. The primary may be hedged again at its next
    // deadline check, on a path whose last completion was not an error (hedge() requires one).
    if (t) {
      t->twin = nullptr;
      t->role = Attempt::Role::plain;
      t->hedge_failed = true;
    }
    drop_attempt(a);
    return true;
  }
  auto& plp = *paths_[static_cast<size_t>(t->path)];
  plp.hedge_wins.store(plp.hedge_wins.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  // Detach first, then copy: whatever the primary wrote before is the same data.
  const bool detached = plp.qp && plp.qp->detach_data(t->req);
  std::memcpy(static_cast<uint8_t*>(a.io->buf) + a.byte_off, a.bounce.get(), a.bytes);
  t->twin = nullptr;
  if (detached) {
    t->abandoned = true;
    finish_piece(a, st);
  } else {
    t->hedge_won = true;  // the piece completes when the primary does
    drop_attempt(a);
  }
  return true;
}

bool Lane::other_path_usable(int p, uint64_t now, bool& any) noexcept {
  // Asked for the oldest command on path p: the paths as its volume sees them (an abandoned
  // attempt's I/O may be gone: the next one's, else the paths' own state alone).
  const VolumeNs* ns = nullptr;
  for (const Attempt* a = paths_[static_cast<size_t>(p)]->inflight.head; a && !ns; a = a->next)
    if (!a->abandoned) ns = io_state(*a->io).ns;
  refresh_views(ns);
  any = false;
  for (size_t q = 0; q < views_.size(); ++q) {
    if (static_cast<int>(q) == p || views_[q].use != PathUse::usable || ana_tier(views_[q].ana) < 0) continue;
    any = true;
    // A path silent past its own deadline too is no better: when every path is silent at once
    // the cause is likelier shared (this lane or the target not run on a loaded host) than
    // every path dead, and failing them all would leave no path and cost a reconnect each (the
    // time fence first, with no live controller to send a CCR through). The keep-alive tells a
    // dead controller from a slow one then, as with a single path.
    const LanePath& lq = *paths_[q];
    if (lq.inflight.head) {
      const uint64_t since = std::max(lq.inflight.head->issue_ns, lq.last_completion_ns);
      if (now > since && now - since > deadline_ns(lq)) continue;
    }
    return true;
  }
  return false;
}

bool Lane::hedge(Attempt& a) noexcept {
  if (a.role != Attempt::Role::plain || a.io->op != IoOp::read || a.abandoned || a.hedge_won) return false;
  const VolumeNs& ns = *io_state(*a.io).ns;
  refresh_views(&ns);
  // Like a retry (issue()), a hedge avoids the paths whose last completion was an error while a
  // usable path without one remains: a path failing every command with a retryable status
  // answers at once and looks idle and fast, so hedges sent to it would fail and leave their
  // reads waiting for the silent path to be failed.
  bool clean = false;
  for (size_t p = 0; p < views_.size(); ++p)
    clean |= static_cast<int>(p) != a.path && views_[p].use == PathUse::usable && ana_tier(views_[p].ana) >= 0 &&
             paths_[p]->error_streak == 0;
  if (clean) {
    for (size_t p = 0; p < views_.size(); ++p)
      if (paths_[p]->error_streak > 0) views_[p].use = PathUse::unusable;
  } else if (a.hedge_failed) {
    return false;  // a hedge failed already, and every other path is refusing too
  }
  const int p = select_path(ns.selector.load(std::memory_order_relaxed), views_, selector_state_,
                            ns.round_robin_ios, a.bytes, a.path);
  if (p < 0 || p == a.path) return false;
  Attempt* h = alloc_attempt();
  if (!h) return false;
  h->io = a.io;
  h->slba = a.slba;
  h->nlb = a.nlb;
  h->byte_off = a.byte_off;
  h->bytes = a.bytes;
  h->role = Attempt::Role::hedge;
  h->bounce = std::make_unique_for_overwrite<uint8_t[]>(a.bytes);
  h->event = -1;
  h->exclude = -1;
  h->attempts = 1;
  h->status_failures = 0;
  h->release_ns = 0;
  auto& lp = *paths_[static_cast<size_t>(p)];
  fill_command(*h, p);
  h->path = p;
  h->generation = lp.generation;
  h->issue_ns = Reactor::clock_ns();
  if (lp.qp->submit(h->req) != 0) {
    free_attempt(h);
    return false;
  }
  lp.inflight.push_back(h);
  lp.outstanding_bytes += h->bytes;
  inflight_total_.fetch_add(1, std::memory_order_relaxed);
  trace(*a.io, IoTraceEvent::hedge, p);
  a.role = Attempt::Role::primary;
  a.twin = h;
  h->twin = &a;
  auto& slow = *paths_[static_cast<size_t>(a.path)];
  slow.hedges.store(slow.hedges.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  return true;
}

void Lane::send_probe(int p, uint64_t now) noexcept {
  auto& lp = *paths_[static_cast<size_t>(p)];
  const auto& sp = *sub_.paths_[static_cast<size_t>(p)];
  const uint32_t bs = sp.probe_block_size.load(std::memory_order_relaxed);
  if (lp.probe_buf_size < bs) {
    lp.probe_buf = std::make_unique_for_overwrite<uint8_t[]>(bs);
    lp.probe_buf_size = bs;
  }
  IoRequest& r = lp.probe;
  r = IoRequest{};
  prep_read(r.cmd, sp.probe_nsid.load(std::memory_order_relaxed), 0, 1);
  r.data = lp.probe_buf.get();
  r.data_len = bs;
  r.on_complete = &Lane::on_probe;
  r.user = &lp;
  if (lp.qp->submit(r) != 0) return;
  lp.probe_inflight = true;
  lp.probe_sent_ns = now;
  lp.probe_generation = lp.generation;
}

void Lane::on_probe(IoRequest& req, const Cqe& cqe) noexcept {
  auto& lp = *static_cast<LanePath*>(req.user);
  lp.probe_inflight = false;
  if (!cqe.status().is_success() || lp.probe_generation != lp.generation) return;
  lp.last_completion_ns = Reactor::clock_ns();
  lp.last_completed_issue_ns = std::max(lp.last_completed_issue_ns, lp.probe_sent_ns);
}

uint64_t Lane::dead_after_ns(const LanePath& lp) const noexcept {
  // Asked only for a path past its deadline (rare), so the walk over its commands costs nothing
  // on the I/O path. An abandoned attempt's I/O may be gone: it holds nothing of the caller's.
  bool writes = false;
  for (const Attempt* a = lp.inflight.head; a && !writes; a = a->next)
    writes = !a->abandoned && a->io->op != IoOp::read;
  const uint64_t explicit_ns = sub_.opts_.io_deadline.count() > 0 ? deadline_ns(lp) : 0;
  return dead_silence_ns(writes, explicit_ns);
}

// Past the deadline (judge_deadline): expired reads are hedged on another usable path; a lost
// command fails the path; a silent one is probed and fails only once it stays silent past
// dead_after_ns(). With no other usable path nothing fails on a silent deadline: the keep-alive
// (control plane) is what tells a dead controller from a slow one then.
void Lane::check_deadline(int p, uint64_t now) noexcept {
  auto& lp = *paths_[static_cast<size_t>(p)];
  DeadlineFacts f;
  f.now_ns = now;
  f.oldest_issue_ns = lp.inflight.head->issue_ns;
  if (now <= f.oldest_issue_ns || now - f.oldest_issue_ns <= deadline_ns(lp)) return;  // the common case
  bool any_other = false;
  f.other = other_path_usable(p, now, any_other) ? OtherPath::usable : OtherPath::none;
  // While every usable path was silent, none of them was judged; once one answers again the
  // others' silence counts from then, not from before: they answer in turn after a shared
  // stall, and the first answer must not fail the ones whose answers come right after it.
  if (f.other == OtherPath::none && any_other) all_silent_ns_ = now;
  f.last_completion_ns = std::max(lp.last_completion_ns, all_silent_ns_);
  f.last_completed_issue_ns = lp.last_completed_issue_ns;
  f.silence_ns = deadline_ns(lp);
  f.deadline_ns = deadline_ns(lp, *lp.inflight.head);
  f.dead_after_ns = dead_after_ns(lp);
  const DeadlineVerdict v = judge_deadline(f);
  char cause[112];
  switch (v) {
    case DeadlineVerdict::wait:
      return;
    case DeadlineVerdict::fail_lost:
      std::snprintf(cause, sizeof cause, "command lost, deadline %.1f ms", static_cast<double>(f.deadline_ns) / 1e6);
      fail_path_here(p, cause);
      return;
    case DeadlineVerdict::fail_silent:
      std::snprintf(cause, sizeof cause, "command deadline exceeded: %.1f ms, silent %.1f ms, probe unanswered",
                    static_cast<double>(f.silence_ns) / 1e6,
                    static_cast<double>(now - std::max(f.oldest_issue_ns, f.last_completion_ns)) / 1e6);  // > 0 here
      fail_path_here(p, cause);
      return;
    case DeadlineVerdict::hedge:
    case DeadlineVerdict::hedge_probe:
      break;
  }
  // In issue order: none after the first within the base deadline can be past its own.
  for (Attempt* a = lp.inflight.head; a && now > a->issue_ns && now - a->issue_ns > f.silence_ns; a = a->next)
    if (now - a->issue_ns > deadline_ns(lp, *a)) hedge(*a);
  if (v == DeadlineVerdict::hedge_probe && !lp.probe_inflight) send_probe(p, now);
}

uint64_t Lane::deadline_ns(const LanePath& lp) const noexcept {
  if (sub_.opts_.io_deadline.count() > 0)
    return static_cast<uint64_t>(sub_.opts_.io_deadline.count()) * 1000;
  const auto derived = static_cast<uint64_t>(lp.latency_ns * 10);
  return std::clamp(derived, kMinDeadlineNs, kMaxDeadlineNs);
}

uint64_t Lane::deadline_ns(const LanePath& lp, const Attempt& a) const noexcept {
  const uint64_t base = deadline_ns(lp);
  if (sub_.opts_.io_deadline.count() > 0) return base;  // the caller's figure, as given
  const double rate = lp.drain_bytes_per_ns > 0 ? std::max(lp.drain_bytes_per_ns / 2, kMinDrainRate) : kUnknownDrainRate;
  const double allowance = static_cast<double>(a.ahead_bytes + a.bytes) / rate;
  return base + std::min(static_cast<uint64_t>(allowance), kMaxTransferAllowanceNs);
}

void Lane::orphan_inflight(LanePath& lp) noexcept {
  while (Attempt* a = lp.inflight.pop_front()) {
    if (!a->abandoned) trace(*a->io, IoTraceEvent::orphaned, a->path);
    orphans_.push_back(a);
  }
  lp.outstanding_bytes = 0;
}

void Lane::fail_path_here(int p, const std::string& cause) noexcept {
  auto& lp = *paths_[static_cast<size_t>(p)];
  if (!lp.qp || lp.qp->state() != QpState::live) return;
  lp.teardown_ns = Reactor::clock_ns();
  report_failure(p, cause, LossCause::local, lp.teardown_ns);
  lp.qp->close();  // on_queue_failed moves its commands to the orphans
}

void Lane::on_queue_failed(QueuePair& qp, std::error_code why) noexcept {
  for (size_t p = 0; p < views_.size(); ++p) {
    auto& lp = *paths_[p];
    if (lp.qp.get() != &qp) continue;
    const uint64_t now = Reactor::clock_ns();
    const LossCause loss = classify_loss(why);
    if (loss == LossCause::peer_closed) lp.peer_closed_ns = now;
    if (!lp.teardown_ns) {
      lp.teardown_ns = now;
      report_failure(static_cast<int>(p), why.message(), loss, now);
    }
    orphan_inflight(lp);
    return;
  }
}

void Lane::report_failure(int p, const std::string& cause, LossCause loss, uint64_t now) noexcept {
  auto& lp = *paths_[static_cast<size_t>(p)];
  if (sub_.report_path_failure(p, lp.generation, cause, loss, now)) return;
  // Refused: this generation is not published yet (the queue pair failed between its attach and
  // publish_live), or it is stale. turn() reports again once it is published; without that the
  // path would go live on a dead queue pair and nothing would ever fail it again.
  lp.unpublished_failure = true;
  lp.unpublished_loss = loss;
  lp.unpublished_ns = now;
  lp.unpublished_cause = cause;
}

void Lane::recheck_paths() noexcept {
  for (size_t p = 0; p < views_.size(); ++p) {
    auto& lp = *paths_[p];
    const auto& sp = *sub_.paths_[p];
    if (sp.state.load(std::memory_order_acquire) != PathState::live ||
        sp.generation.load(std::memory_order_acquire) != lp.generation)
      continue;
    if (lp.qp && lp.qp->state() == QpState::live) continue;
    report_failure(static_cast<int>(p), lp.qp ? "I/O queue failed while the volume opened" : "no I/O queue",
                   LossCause::local, Reactor::clock_ns());
  }
}

void Lane::close_path(int p, uint64_t) {
  auto& lp = *paths_[static_cast<size_t>(p)];
  if (!lp.qp || lp.qp->state() != QpState::live) return;
  lp.teardown_ns = Reactor::clock_ns();
  lp.qp->close();
}

void Lane::add_path_slot(int p, int distance) {
  const size_t i = static_cast<size_t>(p);
  if (i >= views_.size()) views_.resize(i + 1);
  views_[i] = PathView{};
  views_[i].distance = distance;
  // A slot taken again (the same address back, or another): its measurements and counters are
  // the new path's from here on.
  auto& lp = *paths_[i];
  lp.latency_ns = lp.bytes_per_ns = lp.drain_bytes_per_ns = 0;
  lp.error_streak = 0;
  for (auto* c : {&lp.ios, &lp.bytes, &lp.errors, &lp.retries, &lp.hedges, &lp.hedge_wins, &lp.read_ios,
                  &lp.read_bytes, &lp.write_ios, &lp.write_bytes})
    c->store(0, std::memory_order_relaxed);
  lp.latency = LatencyHistogram{};
}

void Lane::drain_path(int p) {
  auto& lp = *paths_[static_cast<size_t>(p)];
  if (lp.draining) return;
  lp.draining = true;  // turn() closes the pair once its commands here are done
  if (lp.inflight.empty() && !lp.probe_inflight) finish_drain(p);
}

void Lane::finish_drain(int p) noexcept {
  auto& lp = *paths_[static_cast<size_t>(p)];
  lp.draining = false;
  close_path(p, Reactor::clock_ns());
  sub_.lane_drained(p);
}

Result<void> Lane::attach_prepared(int p, uint32_t generation, PreparedQueue& pq) {
  auto q = pq.start();
  if (!q) return q.error();
  auto& lp = *paths_[static_cast<size_t>(p)];
  (*q)->set_listener(this);
  if (lp.qp) {
    if (lp.qp->state() == QpState::live) lp.qp->close();
    orphan_inflight(lp);
    graveyard_.push_back(std::move(lp.qp));
  }
  lp.qp = std::move(*q);
  lp.traffic = pq.traffic;
  lp.generation = generation;
  lp.unpublished_failure = false;
  lp.teardown_ns = 0;
  lp.peer_closed_ns = 0;
  lp.error_streak = 0;
  lp.last_completion_ns = 0;
  lp.last_completed_issue_ns = 0;
  if (g_fail_after_attach_for_test && g_fail_after_attach_for_test(p, generation))
    fail_path_here(p, "failed by the test before the path went live");
  return {};
}

int Lane::turn() noexcept {
  if (g_lane_turn_for_test) [[unlikely]]
    g_lane_turn_for_test(index_);
  int events = 0;
  while (VolumeIo* io = ring_.pop()) {
    dequeued_.store(dequeued_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    start_io(*io);
    ++events;
  }
  const uint64_t now = Reactor::clock_ns();
  if (turn_ns_ && now - turn_ns_ > kLaneStallNs && !g_no_stall_rule_for_test)
    all_silent_ns_ = now;  // held up by the host: not the paths' silence
  turn_ns_ = now;
  if (g_lane_gap_for_test) [[unlikely]] {
    const uint64_t cpu = cpu_ns();
    if (last_turn_ns_ && now - last_turn_ns_ > 5'000'000 && !quiescent())
      g_lane_gap_for_test(index_, last_turn_ns_, now, cpu - last_turn_cpu_ns_);
    last_turn_ns_ = now;
    last_turn_cpu_ns_ = cpu;
  }
  // Failed pairs are destroyed once every operation on their socket has completed.
  for (size_t i = 0; i < graveyard_.size();) {
    if (graveyard_[i]->state() == QpState::closed && graveyard_[i]->outstanding() == 0) {
      graveyard_[i] = std::move(graveyard_.back());
      graveyard_.pop_back();
    } else {
      ++i;
    }
  }
  // A queue pair that failed before its generation was published: report it now that it is.
  for (size_t p = 0; p < views_.size(); ++p) {
    auto& lp = *paths_[p];
    if (!lp.unpublished_failure) continue;
    const uint32_t published = sub_.paths_[p]->generation.load(std::memory_order_acquire);
    if (published == lp.generation) {
      lp.unpublished_failure = false;
      sub_.report_path_failure(static_cast<int>(p), lp.generation, lp.unpublished_cause, lp.unpublished_loss,
                               lp.unpublished_ns);
    } else if (static_cast<int32_t>(published - lp.generation) > 0) {
      lp.unpublished_failure = false;  // a newer generation replaced it
    }
  }
  // Every command has a deadline (check_deadline: lost fails the path, silent hedges and
  // probes first). A path that is merely slow keeps completing in order and stays.
  for (size_t p = 0; p < views_.size(); ++p) {
    auto& lp = *paths_[p];
    if (lp.draining && lp.inflight.empty() && !lp.probe_inflight) [[unlikely]] {
      finish_drain(static_cast<int>(p));
      continue;
    }
    if (!lp.inflight.head || !lp.qp || lp.qp->state() != QpState::live) continue;
    check_deadline(static_cast<int>(p), now);
  }
  // Each list is walked once per turn, over the attempts it held when the walk began: issue()
  // may put an attempt straight back on the list it came from (no path, or a full pair), and a
  // walk that followed the links would meet it again and again and never leave the turn (no
  // I/O would complete, and the reactor's posted work, reconnects included, would pile up).
  auto release = [&](AttemptList& list) {
    for (uint32_t n = list.size; n > 0; --n) {
      Attempt* a = list.pop_front();
      if (a->release_ns <= now) {
        issue(*a);
        ++events;
      } else {
        list.push_back(a);
      }
    }
  };
  // Writes waiting for their old controller's fence: released by the fence itself, or by the
  // quiesce time after the controller closed their queue pair.
  for (uint32_t n = fenced_.size; n > 0; --n) {
    Attempt* a = fenced_.pop_front();
    const auto& sp = *sub_.paths_[static_cast<size_t>(a->path)];
    if (a->release_ns <= now || sp.fenced_through.load(std::memory_order_acquire) > a->generation) {
      issue(*a);
      ++events;
    } else {
      fenced_.push_back(a);
    }
  }
  // New writes overlapping a held one: out once it has completed (from whichever lane).
  for (uint32_t n = overlapping_.size; n > 0; --n) {
    Attempt* a = overlapping_.pop_front();
    if (overlaps_held(*a)) {
      overlapping_.push_back(a);
    } else {
      issue(*a);
      ++events;
    }
  }
  release(delayed_);
  if (!waiting_.empty()) {
    // Whether a path is usable is asked once per volume per turn (ANA and presence are per
    // namespace), not after each release.
    const VolumeNs* seen = nullptr;
    bool any = false;
    for (uint32_t n = waiting_.size; n > 0; --n) {
      Attempt* a = waiting_.pop_front();
      if (const VolumeNs* ns = io_state(*a->io).ns; ns != seen) {
        seen = ns;
        refresh_views(ns);
        any = false;
        for (auto& v : views_) any |= v.use == PathUse::usable && ana_tier(v.ana) >= 0;
      }
      // no_path_timeout first: a path that looks usable but takes nothing must not hold the
      // I/O past it either.
      if (a->release_ns <= now) {
        finish_piece(*a, NvmeStatus::make(Sct::path, 0x70, true));
      } else if (any || io_state(*a->io).ns->removed.load(std::memory_order_relaxed)) {
        a->exclude = -1;
        issue(*a);
      } else {
        waiting_.push_back(a);
      }
    }
  }
  while (backlog_head_ && has_free(pieces_of(*backlog_head_))) {
    VolumeIo* io = backlog_head_;
    backlog_head_ = io_state(*io).next;
    if (!backlog_head_) backlog_tail_ = nullptr;
    launch(*io);
  }
  return events;
}

std::future<Lane::Snapshot> Lane::snapshot_request() {
  auto take = [this] {
    Snapshot s;
    for (size_t p = 0; p < views_.size(); ++p) {
      s.latency.push_back(paths_[p]->latency);
      s.outstanding.push_back(paths_[p]->inflight.size);
    }
    s.waiting = waiting_.size;
    return s;
  };
  // The promise is shared with the posted function: it may run after its asker gave up.
  auto pr = std::make_shared<std::promise<Snapshot>>();
  auto fut = pr->get_future();
  if (on_lane_thread())
    pr->set_value(take());
  else
    post([pr, take] { pr->set_value(take()); });
  return fut;
}

Lane::Snapshot Lane::snapshot_wait(std::future<Snapshot>& f, std::chrono::steady_clock::time_point deadline) {
  if (g_snapshot_wait_for_test) [[unlikely]]
    if (f.wait_for(std::chrono::seconds(0)) != std::future_status::ready) g_snapshot_wait_for_test(deadline);
  if (f.wait_until(deadline) == std::future_status::ready) return f.get();
  Snapshot s;
  s.answered = false;
  return s;
}

}  // namespace nvmeof::detail
