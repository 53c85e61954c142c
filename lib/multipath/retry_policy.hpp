// The one decision taken after every failed completion (ARCHITECTURE.md, "Failover"): a pure
// function of every fact it needs (RetryFacts), and the one the lanes run.
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
  /// Refused (a retryable controller status) by every usable path while another may come
  /// back: retry on any path after delay_ns, without counting the refusal.
  retry_later,
};
const char* to_string(RetryAction a) noexcept;

enum class OtherPath : uint8_t { none, usable };

struct RetryDecision {
  RetryAction action = RetryAction::complete;
  bool path_failed = false;   ///< the transport failed: the path takes no new I/O
  bool refresh_ana = false;   ///< a path-related status: read the ANA log again
  uint8_t crd = 0;            ///< retry delay index for retry_same
  uint64_t delay_ns = 0;      ///< how long retry_same (its CRD) or retry_later waits
  bool counted = false;       ///< the status counts as one of the controllers' refusals
};

/// Everything the decision needs, gathered by the lane at the completion.
struct RetryFacts {
  NvmeStatus status;
  uint32_t status_failures = 0;  ///< the I/O's controller refusals before this completion
  uint32_t max_attempts = 16;    ///< bound on those refusals
  OtherPath other = OtherPath::none;  ///< a usable path other than the one that answered
  bool clean = false;        ///< a usable path whose last completion was not an error
  bool returning = false;    ///< a path not usable now that may come back
  uint64_t now_ns = 0;
  uint64_t start_ns = 0;     ///< when the volume accepted the I/O
  uint64_t no_path_timeout_ns = 0;  ///< the I/O's budget for waiting on paths and controllers
  uint64_t crd_ns = 0;       ///< the delay the status's CRD asks for (CRDT), 0 for none
};

/// How long a refused I/O waits before it tries again (RetryAction::retry_later).
inline constexpr uint64_t kRefusedRetryNs = 10'000'000;

/// The decision after a failed completion:
///  * a path status moves the I/O (another path, or wait for one) and may fail the path;
///  * a retryable controller status is retried where it happened (after its CRD), then
///    elsewhere, bounded by max_attempts refusals; one refused by every usable path while
///    another may come back waits for it instead (retry_later) and is not counted;
///  * nothing waits past the no-path deadline (start + no_path_timeout): the I/O fails with a
///    path error, and a CRD ending past it is not waited out (another path now, else the
///    controller's own status).
RetryDecision decide_retry(const RetryFacts& f) noexcept;

/// The status table alone (decide_retry(facts) with no deadline, CRD or refusal in play):
/// `attempts` counts the refusals so far, this one included.
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
  uint64_t deadline_ns = 0;              ///< the oldest command's deadline (its transfer included)
  uint64_t silence_ns = 0;               ///< silence past which the path is probed (0: deadline_ns)
  uint64_t dead_after_ns = 0;            ///< silence that makes a probed path dead (> silence)
  OtherPath other = OtherPath::none;
};

/// The failover budget's share for detection (ARCHITECTURE.md, "Failover budget"): how long a
/// probed path may stay silent before it is failed. A path holding writes: kWriteDeadSilenceNs,
/// since its writes move only after detection and then the fence, and both must fit in the
/// 50 ms with the resubmission. One holding only reads: kReadDeadSilenceNs, since its reads are
/// hedged at the base deadline already, so failing it sooner would gain its reads nothing and
/// fail more slow-but-alive paths. With an explicit io_deadline (`explicit_deadline_ns` > 0):
/// twice that deadline, either way.
inline constexpr uint64_t kWriteDeadSilenceNs = 35'000'000;
inline constexpr uint64_t kReadDeadSilenceNs = 50'000'000;
uint64_t dead_silence_ns(bool holds_writes, uint64_t explicit_deadline_ns) noexcept;

/// A lost command fails the path whatever else is usable (it would wait forever); otherwise a
/// path is failed only when another is usable and it has been silent past `dead_after_ns` (its
/// probe went out when the silence passed `silence_ns` and got no answer either, since any
/// answer ends the silence). A command's deadline may exceed the silence bound (a large
/// transfer behind others): a path that keeps answering is then neither probed nor hedged
/// until the command is past its own deadline, while a silent one is probed on time.
DeadlineVerdict judge_deadline(const DeadlineFacts& f) noexcept;

}  // namespace nvmeof::detail
