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

uint64_t dead_silence_ns(bool holds_writes, uint64_t explicit_deadline_ns) noexcept {
  if (explicit_deadline_ns > 0) return 2 * explicit_deadline_ns;
  return holds_writes ? kWriteDeadSilenceNs : kReadDeadSilenceNs;
}

DeadlineVerdict judge_deadline(const DeadlineFacts& f) noexcept {
  // `now` is the turn's clock; completions and issues stamped during the turn may be newer.
  auto since = [&](uint64_t t) { return f.now_ns > t ? f.now_ns - t : 0; };
  const uint64_t silence = f.silence_ns ? f.silence_ns : f.deadline_ns;
  const bool expired = since(f.oldest_issue_ns) > f.deadline_ns;
  if (expired && f.last_completed_issue_ns > f.oldest_issue_ns) return DeadlineVerdict::fail_lost;
  if (f.other == OtherPath::none) return DeadlineVerdict::wait;
  const uint64_t silent_since = f.oldest_issue_ns > f.last_completion_ns ? f.oldest_issue_ns : f.last_completion_ns;
  const uint64_t silent = since(silent_since);
  if (silent > f.dead_after_ns) return DeadlineVerdict::fail_silent;
  if (silent > silence) return DeadlineVerdict::hedge_probe;
  return expired ? DeadlineVerdict::hedge : DeadlineVerdict::wait;
}

const char* to_string(RetryAction a) noexcept {
  switch (a) {
    case RetryAction::complete: return "complete";
    case RetryAction::retry_same: return "retry_same";
    case RetryAction::retry_other: return "retry_other";
    case RetryAction::wait: return "wait";
    case RetryAction::fail: return "fail";
    case RetryAction::retry_later: return "retry_later";
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

RetryDecision decide_retry(const RetryFacts& f) noexcept {
  if (f.status.is_success()) return {};
  const uint64_t deadline = f.start_ns + f.no_path_timeout_ns;
  const bool refused = f.status.sct() != Sct::path && !f.status.dnr();
  // While every usable path refuses I/O with a retryable status and the others are down (a
  // healthy path failed by a keep-alive timeout, reconnecting), retries go round the refusing
  // paths in microseconds and would use up max_attempts before the healthy path is back, and
  // the application would see the refusal. Then the I/O is no better off
  // than one with no usable path: it waits (retrying the refusing paths now and then, in case
  // they heal) for a path that comes back, bounded by no_path_timeout like path trouble is, and
  // the refusals made meanwhile are not the controllers' verdict on it.
  if (refused && !f.clean && f.returning && f.now_ns <= deadline) {
    RetryDecision d;
    d.action = RetryAction::retry_later;
    d.delay_ns = kRefusedRetryNs;
    return d;
  }
  // Only the controllers' own refusals count towards max_attempts: an I/O moved by failovers
  // (path errors, ANA) still gets its retries when it meets a retryable error.
  const bool counted = f.status.sct() != Sct::path;
  RetryDecision d = decide_retry(f.status, f.status_failures + (counted ? 1 : 0), f.max_attempts, f.other);
  d.counted = counted;
  // Path trouble is bounded by time (no_path_timeout), not by attempts: paths come back.
  if (d.action != RetryAction::complete && f.now_ns > deadline) {
    d.action = RetryAction::fail;
    return d;
  }
  // A retry delay (CRD) that would end past that budget is not waited out: a controller may ask
  // for up to 6553 s per retry. Another usable path takes the I/O now; with none, it completes
  // with the controller's own status.
  if (d.action == RetryAction::retry_same) {
    if (d.crd && f.now_ns + f.crd_ns > deadline)
      d.action = f.other == OtherPath::usable ? RetryAction::retry_other : RetryAction::complete;
    else
      d.delay_ns = d.crd ? f.crd_ns : 0;
  }
  return d;
}

}  // namespace nvmeof::detail
