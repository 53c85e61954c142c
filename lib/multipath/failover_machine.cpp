#include "multipath/failover_machine.hpp"

#include <algorithm>
#include <cerrno>

namespace nvmeof::detail {

const char* to_string(FenceRule r) noexcept {
  switch (r) {
    case FenceRule::none: return "none";
    case FenceRule::ccr: return "ccr";
    case FenceRule::peer_closed: return "peer closed";
    case FenceRule::time: return "time";
    case FenceRule::skipped: return "skipped (unsafe)";
  }
  return "unknown";
}

LossCause classify_loss(std::error_code why) noexcept {
  if (why == make_error_code(Errc::connection_closed) || why == make_error_code(Errc::connection_reset) ||
      why == make_error_code(Errc::peer_terminated))
    return LossCause::peer_closed;
  if (why.category() == std::system_category() && (why.value() == ECONNRESET || why.value() == EPIPE))
    return LossCause::peer_closed;
  return LossCause::local;
}

HoldTimes hold_times(uint32_t kato_ms, bool traffic_based_keep_alive, uint16_t cqt_ms,
                     uint32_t bound_ms) noexcept {
  constexpr uint64_t kMs = 1'000'000;
  HoldTimes t;
  const uint64_t quiesce_ms = cqt_ms ? cqt_ms : (bound_ms ? bound_ms : kato_ms);
  t.quiesce_ns = quiesce_ms * kMs;
  t.hold_ns = (traffic_based_keep_alive ? 3u : 2u) * static_cast<uint64_t>(kato_ms) * kMs + t.quiesce_ns;
  return t;
}

const char* to_string(WriteFenceRule r) noexcept {
  switch (r) {
    case WriteFenceRule::unknown: return "";
    case WriteFenceRule::ccr: return "ccr";
    case WriteFenceRule::cqt: return "kato+cqt";
    case WriteFenceRule::kato: return "kato+bound";
    case WriteFenceRule::none: return "kernel";
  }
  return "";
}

WriteFenceBound write_fence_bound(const HoldTimes& t, bool ccr, bool cqt_reported) noexcept {
  constexpr uint64_t kMs = 1'000'000;
  // A CCR completes once the impacted controller's queues have quiesced: the target's CQT. The
  // hold stands behind it (a CCR refused or unanswered costs the hold), so it is the worst case
  // only when every CCR fails.
  if (ccr) return {WriteFenceRule::ccr, t.quiesce_ns / kMs};
  return {cqt_reported ? WriteFenceRule::cqt : WriteFenceRule::kato, t.hold_ns / kMs};
}

std::string explain(const WriteFenceBound& b, uint32_t kato_ms, bool traffic_based_keep_alive, uint16_t cqt_ms) {
  const std::string times = traffic_based_keep_alive ? "3" : "2";
  const std::string kato = times + " x KATO (" + std::to_string(kato_ms) + " ms";
  switch (b.rule) {
    case WriteFenceRule::ccr:
      return "a cross-controller reset through another path waits for the target's command quiesce time";
    case WriteFenceRule::cqt:
      return "the controller has no cross-controller reset (CCR), so writes wait " + kato + ") + CQT (" +
             std::to_string(cqt_ms) + " ms)";
    case WriteFenceRule::kato:
      return "the controller has no cross-controller reset (CCR) and reports no command quiesce time (CQT), so "
             "writes wait " + kato + ") + " + std::to_string(b.ms - uint64_t{kato_ms} * (traffic_based_keep_alive ? 3 : 2)) +
             " ms standing in for CQT (VolumeOptions::fence_bound, else the KATO)";
    case WriteFenceRule::unknown:
    case WriteFenceRule::none: break;
  }
  return {};
}

FailoverMachine::FailoverMachine(FailoverEnv& env, size_t npaths, Timing timing, FenceMode mode)
    : env_(env), timing_(timing), mode_(mode), paths_(npaths) {
  for (auto& p : paths_) {
    p.backoff = timing_.reconnect_min;
    p.ccr_tried.assign(npaths, false);
  }
}

void FailoverMachine::opened(int path, const PathFacts& facts) {
  auto& p = paths_[idx(path)];
  p.state = PathState::live;
  p.facts = facts;
}

void FailoverMachine::unreachable_at_open(int path) {
  auto& p = paths_[idx(path)];
  p.state = PathState::fenced;  // nothing was ever sent on it
  env_.arm_timer(path, env_.now_ns() + static_cast<uint64_t>(std::chrono::nanoseconds(timing_.reconnect_min).count()),
                 token(TimerKind::reconnect, p.generation));
}

bool FailoverMachine::on_failure(int path, uint32_t generation, LossCause cause, uint64_t detect_ns) {
  auto& p = paths_[idx(path)];
  if (generation != p.generation) return false;
  if (p.state == PathState::failed) {
    // Already failing on a silent-path report: the controller closing on us proves more, sooner.
    if (cause == LossCause::peer_closed && mode_ == FenceMode::safe) {
      const uint64_t at = detect_ns + p.facts.times.quiesce_ns;
      if (at < p.peer_fence_at && at < p.detect_ns + p.facts.times.hold_ns) {
        p.peer_fence_at = at;
        env_.arm_timer(path, at, token(TimerKind::peer_quiesce, generation));
      }
    }
    return false;
  }
  if (p.state != PathState::live || p.gone) return false;
  p.state = PathState::failed;
  p.rule = FenceRule::none;
  p.detect_ns = detect_ns;
  p.peer_fence_at = UINT64_MAX;
  std::fill(p.ccr_tried.begin(), p.ccr_tried.end(), false);
  p.torn_down = false;
  env_.close_lanes(path);
  if (mode_ == FenceMode::skip_unsafe) {
    fence(path, FenceRule::skipped);
    return true;
  }
  if (cause == LossCause::peer_closed) {
    tear_down(path);
    p.peer_fence_at = detect_ns + p.facts.times.quiesce_ns;
    env_.arm_timer(path, p.peer_fence_at, token(TimerKind::peer_quiesce, generation));
    reconnect_early(path);
    return true;
  }
  // The time rule always stands behind CCR: a reset that fails or never answers costs the hold.
  env_.arm_timer(path, detect_ns + p.facts.times.hold_ns, token(TimerKind::hold, generation));
  // Our own teardown waits for the CCR: were our admin queue's close to end the controller
  // first, the CCR would find nothing to reset and prove nothing.
  if (!(p.facts.can_be_reset && try_ccr(path))) {
    tear_down(path);
    reconnect_early(path);
  }
  return true;
}

// Only timers are left to fence the failed generation (our side is down, no CCR of it is in
// progress): connect a new one now instead of after them.
void FailoverMachine::reconnect_early(int path) {
  auto& p = paths_[idx(path)];
  if (!timing_.reconnect_before_fence || p.state != PathState::failed || !p.torn_down || p.connecting ||
      p.retired || p.unfenced)
    return;
  connect(path);
}

void FailoverMachine::tear_down(int path) {
  auto& p = paths_[idx(path)];
  if (p.torn_down) return;
  p.torn_down = true;
  env_.fence_endpoint(path);
}

bool FailoverMachine::try_ccr(int failed) {
  auto& f = paths_[idx(failed)];
  for (size_t v = 0; v < paths_.size(); ++v) {
    auto& via = paths_[v];
    if (static_cast<int>(v) == failed || f.ccr_tried[v] || via.state != PathState::live || via.gone ||
        !via.facts.can_reset_others || via.ccr_out >= via.facts.ccrl)
      continue;
    f.ccr_tried[v] = true;
    ++via.ccr_out;
    env_.start_ccr(failed, static_cast<int>(v), f.generation);
    return true;
  }
  return false;
}

void FailoverMachine::on_ccr_done(int failed, int via, uint32_t generation, bool ok) {
  auto& v = paths_[idx(via)];
  if (v.ccr_out > 0) --v.ccr_out;
  auto& f = paths_[idx(failed)];
  if (f.state != PathState::failed || f.generation != generation) return;
  if (ok) {
    fence(failed, FenceRule::ccr);
    return;
  }
  // Another controller may do better; the hold timer is armed regardless.
  if (!try_ccr(failed)) {
    tear_down(failed);
    reconnect_early(failed);
  }
}

void FailoverMachine::on_timer(int path, uint64_t tok) {
  auto& p = paths_[idx(path)];
  const auto kind = static_cast<TimerKind>(tok & 0xff);
  const auto generation = static_cast<uint32_t>(tok >> 8);
  if (p.unfenced && generation == p.unfenced_gen && kind != TimerKind::reconnect) {
    fence_old(path, kind == TimerKind::hold ? FenceRule::time : FenceRule::peer_closed);
    return;
  }
  if (generation != p.generation) return;
  switch (kind) {
    case TimerKind::hold:
      if (p.state == PathState::failed) fence(path, FenceRule::time);
      return;
    case TimerKind::peer_quiesce:
      if (p.state == PathState::failed) fence(path, FenceRule::peer_closed);
      return;
    case TimerKind::reconnect:
      if (p.state == PathState::fenced && !p.connecting && !p.retired) connect(path);
      else reconnect_early(path);
      return;
  }
}

void FailoverMachine::fence_old(int path, FenceRule rule) {
  auto& p = paths_[idx(path)];
  p.unfenced = false;
  env_.publish_fenced(path, p.unfenced_gen, rule);
  if (p.deferred) {
    p.deferred = false;
    env_.publish_fenced(path, p.deferred_gen, p.deferred_rule);
  }
  // A removal that waited for this fence (drained, or fenced itself meanwhile) ends now.
  if (p.retired && p.state == PathState::fenced && !p.connecting) finish_removal(path);
}

void FailoverMachine::fence(int path, FenceRule rule) {
  auto& p = paths_[idx(path)];
  tear_down(path);
  p.state = PathState::fenced;
  p.rule = rule;
  if (p.unfenced) {
    p.deferred = true;  // not before the older generation's fence (fence_old publishes both)
    p.deferred_gen = p.generation;
    p.deferred_rule = rule;
  } else {
    env_.publish_fenced(path, p.generation, rule);
  }
  p.backoff = timing_.reconnect_min;
  if (p.retired) {
    if (!p.unfenced && !p.connecting) finish_removal(path);
    return;
  }
  if (!p.connecting) connect(path);  // an early reconnect may be under way already
}

void FailoverMachine::connect(int path) {
  auto& p = paths_[idx(path)];
  p.connecting = true;
  env_.start_connect(path, p.generation + 1);
}

void FailoverMachine::on_connect_done(int path, bool ok, const PathFacts& facts) {
  auto& p = paths_[idx(path)];
  p.connecting = false;
  const bool early = p.state == PathState::failed;  // reconnect_early: the fence is still to come
  if (p.state != PathState::fenced && !early) return;
  if (p.retired) {
    // Removed while it connected: nothing was sent on the new connection; the owner closes it
    // once the path is removed (a failed one still waits for its fence).
    if (!early && !p.unfenced) finish_removal(path);
    return;
  }
  if (ok) {
    if (early) {
      p.unfenced = true;
      p.unfenced_gen = p.generation;
    }
    ++p.generation;
    p.state = PathState::live;
    p.facts = facts;
    p.backoff = timing_.reconnect_min;
    env_.publish_live(path, p.generation);
    return;
  }
  p.backoff = std::min(timing_.reconnect_max, std::max(timing_.reconnect_min, p.backoff * 2));
  env_.arm_timer(path, env_.now_ns() + static_cast<uint64_t>(std::chrono::nanoseconds(p.backoff).count()),
                 token(TimerKind::reconnect, p.generation));
}

void FailoverMachine::add_path(int path) {
  if (idx(path) >= paths_.size()) {
    paths_.resize(idx(path) + 1);
    for (auto& p : paths_) p.ccr_tried.resize(paths_.size(), false);
  }
  auto& p = paths_[idx(path)];
  if (p.retired && !p.gone) return;  // still being removed: the owner refuses this
  p.retired = false;
  p.gone = false;
  p.state = PathState::fenced;  // nothing runs on it: connect
  p.rule = FenceRule::none;
  p.backoff = timing_.reconnect_min;
  p.ccr_tried.assign(paths_.size(), false);
  if (!p.connecting) connect(path);
}

void FailoverMachine::remove_path(int path) {
  auto& p = paths_[idx(path)];
  if (p.retired) return;
  p.retired = true;
  switch (p.state) {
    case PathState::live:
      env_.drain(path);
      return;
    case PathState::failed:
      return;  // fence() removes it: its writes still wait for the fence
    case PathState::fenced:
    case PathState::connecting:
    case PathState::draining:
    case PathState::removed:
      // A connect in progress ends in on_connect_done, which removes it; an older generation
      // still waiting for its fence, fence_old.
      if (!p.connecting && !p.unfenced) finish_removal(path);
      return;
  }
}

void FailoverMachine::drained(int path) {
  auto& p = paths_[idx(path)];
  // A failure while it drained took over: the fence removes it.
  if (!p.retired || p.gone || p.state != PathState::live) return;
  p.state = PathState::fenced;  // every command it had completed: nothing of it can execute
  if (p.unfenced) return;       // but an older generation's writes still wait: fence_old removes it
  finish_removal(path);
}

void FailoverMachine::finish_removal(int path) {
  auto& p = paths_[idx(path)];
  if (p.gone) return;
  p.gone = true;
  p.state = PathState::removed;
  ++p.generation;  // a report of the old connection that arrives late finds nothing to fail
  env_.removed(path);
}

}  // namespace nvmeof::detail
