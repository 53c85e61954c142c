#include <catch2/catch.hpp>

#include <string>

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

// Deadlines: slow is not dead (judge_deadline). Times in ms from an arbitrary origin.
namespace {
DeadlineFacts facts(uint64_t now_ms, uint64_t oldest_ms, uint64_t last_done_ms, uint64_t last_done_issue_ms,
                    OtherPath other = OtherPath::usable) {
  DeadlineFacts f;
  f.now_ns = now_ms * 1'000'000;
  f.oldest_issue_ns = oldest_ms * 1'000'000;
  f.last_completion_ns = last_done_ms * 1'000'000;
  f.last_completed_issue_ns = last_done_issue_ms * 1'000'000;
  f.deadline_ns = 15'000'000;
  f.dead_after_ns = 50'000'000;
  f.other = other;
  return f;
}
}  // namespace

TEST_CASE("within its deadline a command is left alone", "[retry][deadline]") {
  CHECK(judge_deadline(facts(1010, 1000, 900, 890)) == DeadlineVerdict::wait);
  CHECK(judge_deadline(facts(1015, 1000, 900, 890)) == DeadlineVerdict::wait);  // at it, not past
}

TEST_CASE("a slow path that keeps answering gets its late reads hedged, nothing more", "[retry][deadline]") {
  // Oldest sent at 1000, past the deadline at 1020; the path answered an older command at 1012.
  CHECK(judge_deadline(facts(1020, 1000, 1012, 995)) == DeadlineVerdict::hedge);
  // Silent past the deadline but not past dead_after: hedge and probe.
  CHECK(judge_deadline(facts(1040, 1000, 990, 980)) == DeadlineVerdict::hedge_probe);
  // An answer at 1045 (the oldest's neighbour, sent before it) ends the silence: not failed at
  // 1060, although the oldest is 60 ms old.
  CHECK(judge_deadline(facts(1060, 1000, 1045, 990)) == DeadlineVerdict::hedge);
}

TEST_CASE("a path silent past dead_after, its probe unanswered, fails", "[retry][deadline]") {
  CHECK(judge_deadline(facts(1050, 1000, 990, 980)) == DeadlineVerdict::hedge_probe);  // at the bound
  CHECK(judge_deadline(facts(1051, 1000, 990, 980)) == DeadlineVerdict::fail_silent);
  // Silence counts from the oldest command's issue when the last answer came before it.
  CHECK(judge_deadline(facts(1049, 1000, 0, 0)) == DeadlineVerdict::hedge_probe);
}

TEST_CASE("an answer stamped after the turn's clock is no silence", "[retry][deadline]") {
  // The probe answered during this turn, after `now` was read: not 2^64 ns of silence.
  auto f = facts(1060, 1000, 0, 990);
  f.last_completion_ns = f.now_ns + 1000;
  CHECK(judge_deadline(f) == DeadlineVerdict::hedge);
  f.oldest_issue_ns = f.now_ns + 500;  // sent during this turn
  CHECK(judge_deadline(f) == DeadlineVerdict::wait);
}

TEST_CASE("with no other usable path nothing fails on a silent deadline", "[retry][deadline]") {
  CHECK(judge_deadline(facts(1020, 1000, 990, 980, OtherPath::none)) == DeadlineVerdict::wait);
  CHECK(judge_deadline(facts(5000, 1000, 990, 980, OtherPath::none)) == DeadlineVerdict::wait);
}

TEST_CASE("a large transfer behind others waits for its own deadline; silence is judged on time", "[retry][deadline]") {
  // The oldest (1 MiB behind 31 others, say) may take 90 ms; the path answered 2 ms ago.
  auto f = facts(1060, 1000, 1058, 990);
  f.silence_ns = 15'000'000;
  f.deadline_ns = 90'000'000;
  CHECK(judge_deadline(f) == DeadlineVerdict::wait);  // without the allowance: hedge
  f.now_ns = 1091'000'000;
  f.last_completion_ns = 1089'000'000;
  CHECK(judge_deadline(f) == DeadlineVerdict::hedge);  // past its own deadline
  // A silent path with such a command is probed and failed by its silence, not its deadline.
  f = facts(1020, 1000, 990, 980);
  f.silence_ns = 15'000'000;
  f.deadline_ns = 90'000'000;
  CHECK(judge_deadline(f) == DeadlineVerdict::hedge_probe);
  f.now_ns = 1051'000'000;
  CHECK(judge_deadline(f) == DeadlineVerdict::fail_silent);
}

// The budget's share for detection: a path holding writes is failed after less silence than one
// holding only reads (those are hedged already); an explicit deadline doubles, either way.
TEST_CASE("a silent path holding writes is failed sooner than one holding only reads", "[retry][deadline]") {
  CHECK(dead_silence_ns(true, 0) == kWriteDeadSilenceNs);
  CHECK(dead_silence_ns(false, 0) == kReadDeadSilenceNs);
  CHECK(kWriteDeadSilenceNs < kReadDeadSilenceNs);
  // Detection, then a fence of a few ms (CCR) and the resubmission, inside the 50 ms budget.
  CHECK(kWriteDeadSilenceNs + 10'000'000 <= 50'000'000);
  CHECK(dead_silence_ns(true, 100'000'000) == 200'000'000);
  CHECK(dead_silence_ns(false, 100'000'000) == 200'000'000);
  // Judged on that figure: silent 40 ms with its probe unanswered fails a path holding writes
  // and leaves one holding only reads to its hedges.
  auto f = facts(1040, 1000, 990, 980);
  f.dead_after_ns = dead_silence_ns(true, 0);
  CHECK(judge_deadline(f) == DeadlineVerdict::fail_silent);
  f.dead_after_ns = dead_silence_ns(false, 0);
  CHECK(judge_deadline(f) == DeadlineVerdict::hedge_probe);
}

TEST_CASE("a command lost while later ones completed fails the path", "[retry][deadline]") {
  // Sent at 1000, a command sent at 1005 completed (the probe, say): this one was dropped.
  CHECK(judge_deadline(facts(1020, 1000, 1010, 1005)) == DeadlineVerdict::fail_lost);
  CHECK(judge_deadline(facts(1020, 1000, 1010, 1005, OtherPath::none)) == DeadlineVerdict::fail_lost);
  CHECK(std::string(to_string(DeadlineVerdict::fail_silent)) == "fail (silent)");
}

// The decision the lanes run: the facts beyond the status (the no-path deadline, the CRD budget,
// refusing and returning paths) are part of it, not overrides after it.
namespace {
RetryFacts facts_of(NvmeStatus s) {
  RetryFacts f;
  f.status = s;
  f.max_attempts = 16;
  f.other = OtherPath::usable;
  f.clean = true;
  f.now_ns = 1'000'000'000;
  f.start_ns = f.now_ns - 1'000'000;
  f.no_path_timeout_ns = 30'000'000'000ull;
  return f;
}
}  // namespace

TEST_CASE("past the no-path deadline an I/O fails with a path error instead of moving again", "[retry]") {
  RetryFacts f = facts_of(status::kHostPathError);
  CHECK(decide_retry(f).action == RetryAction::retry_other);
  f.start_ns = f.now_ns - f.no_path_timeout_ns - 1;
  CHECK(decide_retry(f).action == RetryAction::fail);
  f.status = status::kLbaOutOfRange;  // a final status is the application's, deadline or not
  CHECK(decide_retry(f).action == RetryAction::complete);
}

TEST_CASE("a CRD ending past the no-path deadline is not waited out", "[retry]") {
  NvmeStatus s = NvmeStatus::from_cqe_field(static_cast<uint16_t>((1u << 12) | (0x06u << 1)));  // CRD 1
  RetryFacts f = facts_of(s);
  f.crd_ns = 500'000'000;
  RetryDecision d = decide_retry(f);
  CHECK(d.action == RetryAction::retry_same);
  CHECK(d.delay_ns == 500'000'000);
  CHECK(d.counted);
  f.crd_ns = f.no_path_timeout_ns;  // past the budget: another path now
  CHECK(decide_retry(f).action == RetryAction::retry_other);
  f.other = OtherPath::none;  // none: the controller's own status
  f.clean = false;
  CHECK(decide_retry(f).action == RetryAction::complete);
}

TEST_CASE("refused by every usable path while another may come back: wait for it, uncounted", "[retry]") {
  RetryFacts f = facts_of(status::kInternalError);
  f.clean = false;
  f.returning = true;
  f.status_failures = 15;  // one more refusal would have used up max_attempts
  RetryDecision d = decide_retry(f);
  CHECK(d.action == RetryAction::retry_later);
  CHECK(d.delay_ns == kRefusedRetryNs);
  CHECK_FALSE(d.counted);
  f.returning = false;  // nothing to wait for: the refusals count, and the last one completes
  d = decide_retry(f);
  CHECK(d.action == RetryAction::complete);
  CHECK(d.counted);
  f.returning = true;  // nor past the deadline
  f.start_ns = f.now_ns - f.no_path_timeout_ns - 1;
  f.status_failures = 0;
  CHECK(decide_retry(f).action == RetryAction::fail);
}
