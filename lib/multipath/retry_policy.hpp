// The one decision taken after every completion on a volume (design.md, "Decisions"): a pure
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

}  // namespace nvmeof::detail
