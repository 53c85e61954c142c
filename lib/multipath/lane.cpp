// The data plane of a volume: one lane per reactor thread, one queue pair per path on it.
// Everything here runs on the lane's own thread except enqueue() and snapshot().
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <future>

#include "multipath/retry_policy.hpp"
#include "multipath/volume_impl.hpp"

namespace nvmeof::detail {
namespace {

thread_local Lane* tls_lane = nullptr;
constexpr uint64_t kMinDeadlineNs = 15'000'000;  // 15 ms: below this a loaded host misfires
constexpr uint64_t kMaxDeadlineNs = 25'000'000;  // design.md: never above 25 ms
constexpr double kEwma = 0.1;

bool mutates(IoOp op) noexcept {
  return op == IoOp::write || op == IoOp::write_zeroes || op == IoOp::dsm;
}

// Whether a command may still have executed (or may yet execute) on the controller: our
// transport failed under it (host pathing error), or the host's error recovery aborted it (the
// kernel completes the commands it cancels so; Linux uses both).
bool outcome_unknown(NvmeStatus st) noexcept {
  return st.sct() == Sct::path && (st.sc() == 0x70 || st.sc() == 0x71);
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

Lane::Lane(VolumeImpl& vol, int index) : vol_(vol), index_(index) {
  for (size_t i = 0; i < vol.paths_.size(); ++i) paths_.push_back(std::make_unique<LanePath>());
  views_.resize(vol.paths_.size());
  const auto& r = vol.placement_.reactors[static_cast<size_t>(index)];
  for (size_t p = 0; p < views_.size() && p < r.distances.size(); ++p) views_[p].distance = r.distances[p];
}

Lane::~Lane() { stop(); }

bool Lane::on_lane_thread() const noexcept { return tls_lane == this; }

Result<void> Lane::start() {
  std::promise<std::error_code> ready;
  auto fut = ready.get_future();
  thread_ = std::thread([this, &ready] {
    tls_lane = this;
    place_thread();
    // Kernel paths' passthrough commands share the lane's ring when it has big entries.
    ReactorOptions ro;
    for (const auto& sp : vol_.paths_) ro.big_entries |= sp->addr.transport == Transport::passthrough;
    auto r = Reactor::create(ro);
    if (!r) {
      ready.set_value(r.error());
      return;
    }
    reactor_ = std::move(*r);
    reactor_->add_poller(&Lane::poll_hook, this);
    // Queue pairs arrive later, connected off this thread (VolumeImpl::attach_all).
    ready_.store(true, std::memory_order_release);
    ready.set_value({});
    run();
  });
  const std::error_code ec = fut.get();
  if (ec) {
    thread_.join();
    return ec;
  }
  return {};
}

void Lane::stop() {
  if (!thread_.joinable()) return;
  stop_.store(true, std::memory_order_release);
  if (ready_.load(std::memory_order_acquire)) reactor_->wake();
  thread_.join();
}

void Lane::run() {
  while (!stop_.load(std::memory_order_acquire)) reactor_->poll(std::chrono::microseconds(1000));
  // Shutdown: nothing is retried any more; whatever is still queued completes with a path error
  // so that no caller waits forever.
  const NvmeStatus gone = NvmeStatus::make(Sct::path, 0x70, true);
  for (AttemptList* l : {&waiting_, &fenced_, &delayed_})
    while (Attempt* a = l->pop_front()) finish_piece(*a, gone);
  for (auto& lp : paths_)
    if (lp->qp) lp->qp->close();
  const uint64_t give_up = Reactor::clock_ns() + 2'000'000'000ull;
  while (inflight_total_.load() > 0 && Reactor::clock_ns() < give_up)
    reactor_->poll(std::chrono::microseconds(1000));
  for (auto& lp : paths_) lp->qp.reset();
  graveyard_.clear();
  while (VolumeIo* io = backlog_head_) {
    backlog_head_ = io->next;
    io->done(*io, gone);
  }
  reactor_.reset();
}

bool Lane::enqueue(VolumeIo* io) noexcept {
  if (!ring_.push(io)) return false;
  reactor_->wake();
  return true;
}

void Lane::post(std::function<void()> fn) {
  while (!reactor_->post(fn)) std::this_thread::yield();
}

int Lane::poll_hook(void* self) noexcept { return static_cast<Lane*>(self)->turn(); }

Attempt* Lane::alloc_attempt() noexcept {
  Attempt* a = free_;
  if (a) free_ = a->next;
  return a;
}

void Lane::free_attempt(Attempt* a) noexcept {
  a->next = free_;
  free_ = a;
}

uint32_t Lane::blocks_per_piece(const VolumeIo& io) const noexcept {
  return io.op == IoOp::write_zeroes ? 65536u : vol_.max_blocks_per_cmd_;
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
    io.next = nullptr;
    if (backlog_tail_) backlog_tail_->next = &io;
    else backlog_head_ = &io;
    backlog_tail_ = &io;
    return;
  }
  launch(io);
}

void Lane::launch(VolumeIo& io) noexcept {
  const uint32_t bs = vol_.ns_.block_size;
  const uint32_t pieces = pieces_of(io);
  io.start_ns = Reactor::clock_ns();
  io.first_error = {};
  io.parts_left = static_cast<uint16_t>(pieces);
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
    issue(*a);
  }
}

bool Lane::fill_command(Attempt& a, int p) noexcept {
  const uint32_t nsid = vol_.paths_[static_cast<size_t>(p)]->nsid;
  IoRequest& r = a.req;
  auto* base = static_cast<uint8_t*>(a.io->buf);
  r.data = nullptr;
  r.data_len = 0;
  switch (a.io->op) {
    case IoOp::read:
      prep_read(r.cmd, nsid, a.slba, a.nlb);
      r.data = base + a.byte_off;
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

void Lane::refresh_views() noexcept {
  for (size_t p = 0; p < paths_.size(); ++p) {
    const auto& sp = *vol_.paths_[p];
    auto& lp = *paths_[p];
    auto& v = views_[p];
    const bool live = sp.state.load(std::memory_order_acquire) == PathState::live && lp.qp &&
                      lp.qp->state() == QpState::live &&
                      lp.generation == sp.generation.load(std::memory_order_relaxed);
    v.use = live ? PathUse::usable : PathUse::unusable;
    v.ana = sp.ana.load(std::memory_order_relaxed);
    v.outstanding = lp.inflight.size;
    v.outstanding_bytes = lp.outstanding_bytes;
    v.bytes_per_ns = lp.bytes_per_ns;
    v.latency_ns = lp.latency_ns;
  }
}

void Lane::issue(Attempt& a) noexcept {
  refresh_views();
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
    const int p = select_path(vol_.selector_.load(std::memory_order_relaxed), views_, selector_state_,
                              vol_.opts_.round_robin_ios, a.bytes, a.exclude);
    if (p < 0) {
      a.release_ns = a.io->start_ns + vol_.no_path_timeout_ns();
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
      lp.outstanding_bytes += a.bytes;
      ++a.attempts;
      if (a.event >= 0 && a.exclude >= 0) stamp_event(a.exclude, a.event, false, a.io->op);
      return;
    }
    if (rc == -EAGAIN) {  // the pair is full: try again next turn
      a.release_ns = now;
      delayed_.push_back(&a);
      return;
    }
    // Not live any more (its failure is being reported): never choose it again for this I/O.
    views_[static_cast<size_t>(p)].use = PathUse::unusable;
  }
}

void Lane::on_complete(IoRequest& req, const Cqe& cqe) noexcept {
  tls_lane->handle_completion(*static_cast<Attempt*>(req.user), cqe);
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
  if (current) lp.error_streak = st.is_success() ? 0 : lp.error_streak + 1;
  if (st.is_success()) {
    if (current) {
      const uint64_t lat = now - a.issue_ns;
      const double dlat = static_cast<double>(lat);
      lp.latency_ns = lp.latency_ns == 0 ? dlat : lp.latency_ns + kEwma * (dlat - lp.latency_ns);
      if (lat) {
        // Per-command bandwidth: queueing shows up in the latency, so a busier path looks slower
        // and the service-time selector spreads the load instead of feeding one path.
        const double bw = static_cast<double>(std::max<uint32_t>(a.bytes, 512)) / dlat;
        lp.bytes_per_ns = lp.bytes_per_ns == 0 ? bw : lp.bytes_per_ns + kEwma * (bw - lp.bytes_per_ns);
      }
      lp.last_completion_ns = now;
      lp.last_completed_issue_ns = std::max(lp.last_completed_issue_ns, a.issue_ns);
      lp.latency.record(lat);
    }
    lp.ios.store(lp.ios.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    lp.bytes.store(lp.bytes.load(std::memory_order_relaxed) + a.bytes, std::memory_order_relaxed);
    if (a.event >= 0 && a.exclude >= 0) stamp_event(a.exclude, a.event, true, a.io->op);
    finish_piece(a, st);
    return;
  }
  lp.errors.store(lp.errors.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  if (stop_.load(std::memory_order_relaxed)) {
    finish_piece(a, st);
    return;
  }
  refresh_views();
  OtherPath other = OtherPath::none;
  for (size_t p = 0; p < views_.size(); ++p)
    if (static_cast<int>(p) != a.path && views_[p].use == PathUse::usable && ana_tier(views_[p].ana) >= 0)
      other = OtherPath::usable;
  RetryDecision d = decide_retry(st, a.attempts, vol_.attempts_per_io(), other);
  // Path trouble is bounded by time (no_path_timeout), not by attempts: paths come back.
  if (d.action != RetryAction::complete && now - a.io->start_ns > vol_.no_path_timeout_ns())
    d.action = RetryAction::fail;
  if (d.refresh_ana) vol_.request_ana_refresh();
  if (d.path_failed && current && lp.qp && lp.qp->state() == QpState::live)
    fail_path_here(a.path, "controller reported " + to_string(st));
  auto& sp = *vol_.paths_[static_cast<size_t>(a.path)];
  switch (d.action) {
    case RetryAction::complete:
      finish_piece(a, st);
      return;
    case RetryAction::fail:
      finish_piece(a, NvmeStatus::make(Sct::path, 0x70, true));
      return;
    case RetryAction::retry_same: {
      lp.retries.store(lp.retries.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      const uint16_t crdt = d.crd ? sp.crdt_100ms[d.crd - 1] : 0;
      a.release_ns = now + crdt * 100'000'000ull;
      a.exclude = -1;
      delayed_.push_back(&a);
      return;
    }
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
    fenced_.push_back(&a);
    return;
  }
  issue(a);
}

void Lane::finish_piece(Attempt& a, NvmeStatus st) noexcept {
  VolumeIo& io = *a.io;
  if (!st.is_success() && io.first_error.is_success()) io.first_error = st;
  free_attempt(&a);
  inflight_total_.fetch_sub(1, std::memory_order_relaxed);
  if (--io.parts_left != 0) return;
  const NvmeStatus final_status = io.first_error;
  (final_status.is_success() ? vol_.completed_ : vol_.failed_).fetch_add(1, std::memory_order_relaxed);
  io.done(io, final_status);
}

void Lane::stamp_event(int p, int event, bool success, IoOp op) noexcept {
  auto& lp = *paths_[static_cast<size_t>(p)];
  int& stamped = success ? lp.stamped_success : lp.stamped_resubmit;
  std::lock_guard lock(vol_.timeline_mu_);
  if (event >= static_cast<int>(vol_.timeline_.size())) return;
  FailoverEvent& e = vol_.timeline_[static_cast<size_t>(event)];
  if (!success) ++(mutates(op) ? e.writes_moved : e.reads_moved);  // every moved piece counts
  if (stamped == event) return;
  stamped = event;
  const int64_t us = static_cast<int64_t>((Reactor::clock_ns() - e.detect_ns) / 1000);
  int64_t& field = success ? e.first_success_us : e.first_resubmit_us;
  if (field < 0 || us < field) field = us;
}

uint64_t Lane::deadline_ns(const LanePath& lp) const noexcept {
  if (vol_.opts_.io_deadline.count() > 0)
    return static_cast<uint64_t>(vol_.opts_.io_deadline.count()) * 1000;
  const auto derived = static_cast<uint64_t>(lp.latency_ns * 10);
  return std::clamp(derived, kMinDeadlineNs, kMaxDeadlineNs);
}

void Lane::orphan_inflight(LanePath& lp) noexcept {
  while (Attempt* a = lp.inflight.pop_front()) orphans_.push_back(a);
  lp.outstanding_bytes = 0;
}

void Lane::fail_path_here(int p, const std::string& cause) noexcept {
  auto& lp = *paths_[static_cast<size_t>(p)];
  if (!lp.qp || lp.qp->state() != QpState::live) return;
  lp.teardown_ns = Reactor::clock_ns();
  vol_.report_path_failure(p, lp.generation, cause, LossCause::local, lp.teardown_ns);
  lp.qp->close();  // on_queue_failed moves its commands to the orphans
}

void Lane::on_queue_failed(QueuePair& qp, std::error_code why) noexcept {
  for (size_t p = 0; p < paths_.size(); ++p) {
    auto& lp = *paths_[p];
    if (lp.qp.get() != &qp) continue;
    const uint64_t now = Reactor::clock_ns();
    const LossCause loss = classify_loss(why);
    if (loss == LossCause::peer_closed) lp.peer_closed_ns = now;
    if (!lp.teardown_ns) {
      lp.teardown_ns = now;
      vol_.report_path_failure(static_cast<int>(p), lp.generation, why.message(), loss, now);
    }
    orphan_inflight(lp);
    return;
  }
}

void Lane::close_path(int p, uint64_t) {
  auto& lp = *paths_[static_cast<size_t>(p)];
  if (!lp.qp || lp.qp->state() != QpState::live) return;
  lp.teardown_ns = Reactor::clock_ns();
  lp.qp->close();
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
  lp.generation = generation;
  lp.teardown_ns = 0;
  lp.peer_closed_ns = 0;
  lp.error_streak = 0;
  lp.last_completion_ns = 0;
  lp.last_completed_issue_ns = 0;
  return {};
}

int Lane::turn() noexcept {
  int events = 0;
  while (VolumeIo* io = ring_.pop()) {
    start_io(*io);
    ++events;
  }
  const uint64_t now = Reactor::clock_ns();
  // Failed pairs are destroyed once every operation on their socket has completed.
  for (size_t i = 0; i < graveyard_.size();) {
    if (graveyard_[i]->state() == QpState::closed && graveyard_[i]->outstanding() == 0) {
      graveyard_[i] = std::move(graveyard_.back());
      graveyard_.pop_back();
    } else {
      ++i;
    }
  }
  // Every command has a deadline. Past it, the path is dead when it also completed nothing for
  // a whole deadline (silent), or when commands sent after it have completed (this one was
  // lost); either way it is torn down like a failed one, which frees the commands stuck on it.
  // A path that is merely slow keeps completing in order and stays.
  for (size_t p = 0; p < paths_.size(); ++p) {
    auto& lp = *paths_[p];
    if (!lp.inflight.head || !lp.qp || lp.qp->state() != QpState::live) continue;
    const uint64_t deadline = deadline_ns(lp);
    const uint64_t oldest = lp.inflight.head->issue_ns;
    if (now - oldest <= deadline) continue;
    const uint64_t silent_since = std::max(oldest, lp.last_completion_ns);
    const bool silent = now - silent_since > deadline;
    const bool lost = lp.last_completed_issue_ns > oldest;
    if (!silent && !lost) continue;
    char cause[80];
    std::snprintf(cause, sizeof cause, "%s %.1f ms", silent ? "command deadline exceeded:" : "command lost, deadline",
                  static_cast<double>(deadline) / 1e6);
    fail_path_here(static_cast<int>(p), cause);
  }
  auto release = [&](AttemptList& list) {
    for (Attempt* a = list.head; a;) {
      Attempt* next = a->next;
      if (a->release_ns <= now) {
        list.remove(a);
        issue(*a);
        ++events;
      }
      a = next;
    }
  };
  // Writes waiting for their old controller's fence: released by the fence itself, or by the
  // quiesce time after the controller closed their queue pair.
  for (Attempt* a = fenced_.head; a;) {
    Attempt* next = a->next;
    const auto& sp = *vol_.paths_[static_cast<size_t>(a->path)];
    if (a->release_ns <= now || sp.fenced_through.load(std::memory_order_acquire) > a->generation) {
      fenced_.remove(a);
      issue(*a);
      ++events;
    }
    a = next;
  }
  release(delayed_);
  if (!waiting_.empty()) {
    refresh_views();
    bool any = false;
    for (auto& v : views_) any |= v.use == PathUse::usable && ana_tier(v.ana) >= 0;
    for (Attempt* a = waiting_.head; a;) {
      Attempt* next = a->next;
      if (any) {
        waiting_.remove(a);
        a->exclude = -1;
        issue(*a);
      } else if (a->release_ns <= now) {
        waiting_.remove(a);
        finish_piece(*a, NvmeStatus::make(Sct::path, 0x70, true));  // no_path_timeout
      }
      a = next;
    }
  }
  while (backlog_head_ && has_free(pieces_of(*backlog_head_))) {
    VolumeIo* io = backlog_head_;
    backlog_head_ = io->next;
    if (!backlog_head_) backlog_tail_ = nullptr;
    launch(*io);
  }
  return events;
}

Lane::Snapshot Lane::snapshot() {
  auto take = [this] {
    Snapshot s;
    for (auto& lp : paths_) {
      s.latency.push_back(lp->latency);
      s.outstanding.push_back(lp->inflight.size);
    }
    s.waiting = waiting_.size;
    return s;
  };
  if (on_lane_thread()) return take();
  std::promise<Snapshot> pr;
  auto fut = pr.get_future();
  post([&pr, &take] { pr.set_value(take()); });
  return fut.get();
}

}  // namespace nvmeof::detail
