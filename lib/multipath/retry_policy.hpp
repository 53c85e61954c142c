// The one decision taken after every completion on a volume (ARCHITECTURE.md, "Failover"): a pure
// function of the completion status, the attempt count and whether another path is usable.
#pragma once

#include <cstdint>

#include "nvmeof/status.hpp"

namespace nvmeof::detail {

enum class RetryAction : uint8_t {
  complete,     ///< hand the status to the application (success, or a final error)
  retry_same,   ///< resubmit on the same path after the CRD delay
  retry_other,  ///< resubmit on another usable path (writes only once the old path is fenced)
  wait,         ///< no other usable path: queue until one is, up to no_path_timeout
  fail,         ///< give up with a path error (the caller's no_path_timeout ran out)
};
const char* to_string(RetryAction a) noexcept;

enum class OtherPath : uint8_t { none, usable };

struct RetryDecision {
  RetryAction action = RetryAction::complete;
  bool path_failed = false;   ///< the transport failed: the path takes no new I/O
  bool refresh_ana = false;   ///< a path-related status: read the ANA log again
  uint8_t crd = 0;            ///< retry delay index for retry_same
};

/// `attempts` counts the submissions already made for this I/O (1 after the first). Attempts
/// bound retries of command errors; path errors are bounded by the caller's no_path_timeout,
/// since a path may come back.
RetryDecision decide_retry(NvmeStatus status, uint32_t attempts, uint32_t max_attempts,
                           OtherPath other) noexcept;

/// What a path's oldest command past its deadline means (slow is not dead).
enum class DeadlineVerdict : uint8_t {
  wait,          ///< nothing to do (within the deadline, or no other path: slow is all we know)
  hedge,         ///< re-issue its expired reads on another path; the path keeps answering
  hedge_probe,   ///< silent past the deadline: hedge, and probe the path
  fail_lost,     ///< commands sent after the oldest completed: it was lost, fail the path
  fail_silent,   ///< silent past `dead_after` with its probe unanswered: fail the path
};
const char* to_string(DeadlineVerdict v) noexcept;

struct DeadlineFacts {
  uint64_t now_ns = 0;
  uint64_t oldest_issue_ns = 0;          ///< the oldest outstanding command's issue time
  uint64_t last_completion_ns = 0;       ///< any completion (the probe's too), 0 if none
  uint64_t last_completed_issue_ns = 0;  ///< newest issue time among completed commands
  uint64_t deadline_ns = 0;
  uint64_t dead_after_ns = 0;            ///< silence that makes a probed path dead (> deadline)
  OtherPath other = OtherPath::none;
};

/// A lost command fails the path whatever else is usable (it would wait forever); otherwise a
/// path is failed only when another is usable and it has been silent past `dead_after_ns` (its
/// probe went out when the silence passed the deadline and got no answer either, since any
/// answer ends the silence).
DeadlineVerdict judge_deadline(const DeadlineFacts& f) noexcept;

}  // namespace nvmeof::detail
