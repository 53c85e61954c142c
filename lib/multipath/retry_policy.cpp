#include "multipath/retry_policy.hpp"

namespace nvmeof::detail {

namespace {
constexpr uint32_t kSamePathAttempts = 2;
}  // namespace

const char* to_string(DeadlineVerdict v) noexcept {
  switch (v) {
    case DeadlineVerdict::wait: return "wait";
    case DeadlineVerdict::hedge: return "hedge";
    case DeadlineVerdict::hedge_probe: return "hedge and probe";
    case DeadlineVerdict::fail_lost: return "fail (lost)";
    case DeadlineVerdict::fail_silent: return "fail (silent)";
  }
  return "unknown";
}

DeadlineVerdict judge_deadline(const DeadlineFacts& f) noexcept {
  // `now` is the turn's clock; completions and issues stamped during the turn may be newer.
  auto since = [&](uint64_t t) { return f.now_ns > t ? f.now_ns - t : 0; };
  if (since(f.oldest_issue_ns) <= f.deadline_ns) return DeadlineVerdict::wait;
  if (f.last_completed_issue_ns > f.oldest_issue_ns) return DeadlineVerdict::fail_lost;
  if (f.other == OtherPath::none) return DeadlineVerdict::wait;
  const uint64_t silent_since = f.oldest_issue_ns > f.last_completion_ns ? f.oldest_issue_ns : f.last_completion_ns;
  const uint64_t silent = since(silent_since);
  if (silent <= f.deadline_ns) return DeadlineVerdict::hedge;
  if (silent <= f.dead_after_ns) return DeadlineVerdict::hedge_probe;
  return DeadlineVerdict::fail_silent;
}

const char* to_string(RetryAction a) noexcept {
  switch (a) {
    case RetryAction::complete: return "complete";
    case RetryAction::retry_same: return "retry_same";
    case RetryAction::retry_other: return "retry_other";
    case RetryAction::wait: return "wait";
    case RetryAction::fail: return "fail";
  }
  return "unknown";
}

RetryDecision decide_retry(NvmeStatus status, uint32_t attempts, uint32_t max_attempts,
                           OtherPath other) noexcept {
  RetryDecision d;
  if (status.is_success()) return d;
  const bool exhausted = attempts >= max_attempts;
  const RetryAction move = other == OtherPath::usable ? RetryAction::retry_other : RetryAction::wait;

  if (status.sct() == Sct::path) {
    switch (status.sc()) {
      case 0x01:  // ANA persistent loss
      case 0x02:  // ANA inaccessible
      case 0x03:  // ANA transition: the path holds its I/O; another path takes it if it can
        d.refresh_ana = true;
        d.action = move;
        return d;
      case 0x00:  // internal path error
      case 0x60:  // controller pathing error
      case 0x70:  // host pathing error: our transport failed under the command
      case 0x71:  // aborted by host
        // The path itself is broken (not just this command): it is torn down and reconnected.
        // A DNR from the controller on a path error says nothing about the other paths, so the
        // I/O moves either way.
        d.path_failed = true;
        d.action = move;
        return d;
      default:
        break;
    }
  }
  if (status.dnr() || exhausted) {
    d.action = RetryAction::complete;
    return d;
  }
  // A retryable error is retried where it happened first (honouring CRD); when it repeats,
  // another path may do better.
  if (attempts >= kSamePathAttempts && other == OtherPath::usable) {
    d.action = RetryAction::retry_other;
    return d;
  }
  d.action = RetryAction::retry_same;
  d.crd = status.crd();
  return d;
}

}  // namespace nvmeof::detail
