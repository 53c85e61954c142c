#include <catch2/catch.hpp>

#include "multipath/retry_policy.hpp"

using namespace nvmeof;
using namespace nvmeof::detail;

// One test per row of the decision table.
TEST_CASE("success completes", "[retry]") {
  auto d = decide_retry(status::kSuccess, 1, 16, OtherPath::usable);
  CHECK(d.action == RetryAction::complete);
  CHECK_FALSE(d.path_failed);
}

TEST_CASE("a transport failure moves the I/O and fails the path", "[retry]") {
  auto d = decide_retry(status::kHostPathError, 1, 16, OtherPath::usable);
  CHECK(d.action == RetryAction::retry_other);
  CHECK(d.path_failed);
  CHECK(decide_retry(status::kHostPathError, 1, 16, OtherPath::none).action == RetryAction::wait);
  // Path errors are bounded by no_path_timeout, not by attempts.
  CHECK(decide_retry(status::kHostPathError, 16, 16, OtherPath::usable).action == RetryAction::retry_other);
  CHECK(decide_retry(NvmeStatus::make(Sct::path, 0x00), 1, 16, OtherPath::usable).path_failed);
}

TEST_CASE("ANA inaccessible and persistent loss move the I/O and refresh ANA", "[retry]") {
  for (auto s : {status::kAnaInaccessible, status::kAnaPersistentLoss}) {
    auto d = decide_retry(s, 1, 16, OtherPath::usable);
    CHECK(d.action == RetryAction::retry_other);
    CHECK(d.refresh_ana);
    CHECK_FALSE(d.path_failed);
    CHECK(decide_retry(s, 1, 16, OtherPath::none).action == RetryAction::wait);
  }
}

TEST_CASE("ANA transition waits when no other path can take the I/O", "[retry]") {
  auto d = decide_retry(status::kAnaTransition, 2, 16, OtherPath::none);
  CHECK(d.action == RetryAction::wait);
  CHECK(d.refresh_ana);
  CHECK(decide_retry(status::kAnaTransition, 2, 16, OtherPath::usable).action == RetryAction::retry_other);
}

TEST_CASE("DNR completes at once with the status", "[retry]") {
  auto d = decide_retry(status::kLbaOutOfRange, 1, 16, OtherPath::usable);
  CHECK(d.action == RetryAction::complete);
  CHECK(decide_retry(status::kInvalidField, 1, 16, OtherPath::usable).action == RetryAction::complete);
}

TEST_CASE("a retryable status retries on the same path honouring CRD", "[retry]") {
  NvmeStatus s = NvmeStatus::from_cqe_field(static_cast<uint16_t>((2u << 12) | (0x06u << 1)));
  auto d = decide_retry(s, 1, 16, OtherPath::usable);
  CHECK(d.action == RetryAction::retry_same);
  CHECK(d.crd == 2);
  CHECK(decide_retry(status::kNamespaceNotReady, 1, 16, OtherPath::none).action == RetryAction::retry_same);
}

TEST_CASE("a repeating retryable status moves to another path when there is one", "[retry]") {
  CHECK(decide_retry(status::kInternalError, 2, 16, OtherPath::usable).action == RetryAction::retry_other);
  CHECK(decide_retry(status::kInternalError, 2, 16, OtherPath::none).action == RetryAction::retry_same);
}

TEST_CASE("a retryable status completes once attempts are exhausted", "[retry]") {
  CHECK(decide_retry(status::kInternalError, 16, 16, OtherPath::usable).action == RetryAction::complete);
}
