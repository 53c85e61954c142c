#include "multipath/retry_policy.hpp"

namespace nvmeof::detail {

namespace {
constexpr uint32_t kSamePathAttempts = 2;
}  // namespace

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
