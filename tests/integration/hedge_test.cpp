// Slow is not dead, against the embedded target: a read past its deadline is hedged on another
// path (first answer wins, the loser's data never reaches the application's buffer after it is
// handed back), a path is failed only when it stays silent and its probe goes unanswered, and a
// single slow path is never failed on a deadline. Every run verifies its data; what failed a
// path is read from the volume's own failover timeline (how fast is bench/failover_runs.sh's).
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "../common/rig.hpp"
#include "../common/tracked_io.hpp"
#include "../common/verified_workload.hpp"
#include "multipath/io_trace.hpp"
#include "nvmeof/target.hpp"
#include "nvmeof/volume.hpp"

using namespace nvmeof;
using namespace std::chrono_literals;

using test::Rig;
using test::wait_for;

namespace {

// Round-robin: half the reads keep going to a slowed path. The derived per-command deadline
// (15 to 25 ms) is the one these tests are about, unless a case sets one.
void round_robin(TargetOptions&, VolumeOptions& vo) { vo.selector = SelectorKind::round_robin; }

}  // namespace

// Reads only once the latency jumps: a path holding writes is failed after 35 ms of silence (the
// failover budget's share for detection, tested below), one holding only reads after 50 ms,
// while its reads are hedged.
TEST_CASE("a path holding reads whose latency jumps to 40 ms is hedged, not failed", "[hedge]") {
  Rig rig(2, round_robin);
  test::VerifiedWorkload w(*rig.vol, 8);
  w.start();
  REQUIRE(wait_for(*rig.vol, 10s, [](const VolumeStats& s) { return s.completed > 200; }).completed > 200);
  w.reads_only(true);
  REQUIRE(test::wait_until([&] { return w.writes_done() == w.writes(); }));
  rig.target->set_latency(0, 40ms);
  // Runs until enough reads were hedged (every read sent to path 0 from now on passes its
  // deadline there), bounded.
  const auto st = wait_for(*rig.vol, 20s, [](const VolumeStats& s) { return s.paths.at(0).hedge_wins >= 20; });
  REQUIRE(w.finish(15s));
  const auto end = rig.vol->stats();
  INFO(to_text(end));
  INFO("first error: " << w.first_error());
  CHECK(end.paths.at(0).hedges >= 20);
  CHECK(end.paths.at(0).hedge_wins >= 20);
  CHECK(end.paths.at(0).failovers == 0);
  CHECK(end.paths.at(1).failovers == 0);
  CHECK(end.timeline.empty());
  CHECK(w.errors() == 0);
  CHECK(w.mismatches() == 0);
  CHECK(w.writes() + w.reads() == w.completed());
  CHECK(end.failed == 0);
  (void)st;
}

TEST_CASE("a silent path is failed for its silence: deadline, then an unanswered probe", "[hedge]") {
  Rig rig(2, round_robin);
  test::VerifiedWorkload w(*rig.vol, 8);
  w.start();
  REQUIRE(wait_for(*rig.vol, 10s, [](const VolumeStats& s) { return s.completed > 200; }).completed > 200);
  REQUIRE(rig.vol->stats().timeline.empty());  // nothing failed before the cut
  const uint64_t cut_ns = Reactor::clock_ns();
  rig.target->inject(0, FaultKind::blackhole);
  // The timeline's entry is written where the failure is reported, the path's failover count
  // once the control thread has failed it: both are waited for.
  const auto st = wait_for(*rig.vol, 10s, [](const VolumeStats& s) {
    return !s.timeline.empty() && s.paths.at(0).failovers >= 1;
  });
  REQUIRE_FALSE(st.timeline.empty());
  const FailoverEvent& ev = st.timeline.at(0);
  INFO(to_text(st));
  // What failed it, and in what order, not how fast: the lane's deadline check judged the path
  // silent past its deadline and past the failover budget with its probe unanswered, after the
  // cut, and nothing else failed first (a keep-alive timeout or a reset would name another
  // cause). How soon after the cut is a figure of bench/failover_runs.sh, not a test's.
  CHECK(ev.path == 0);
  CHECK(ev.detect_ns > cut_ns);
  CHECK(ev.cause.find("command deadline exceeded") != std::string::npos);
  CHECK(ev.cause.find("probe unanswered") != std::string::npos);
  CHECK(st.paths.at(0).failovers == 1);
  CHECK(st.paths.at(1).failovers == 0);
  // The other path carries the workload on: it completes I/O after the failure.
  const uint64_t p1_at_detect = st.paths.at(1).ios;
  REQUIRE(wait_for(*rig.vol, 10s, [&](const VolumeStats& s) { return s.paths.at(1).ios > p1_at_detect + 100; })
              .paths.at(1).ios > p1_at_detect + 100);
  REQUIRE(w.finish(15s));
  INFO("first error: " << w.first_error());
  CHECK(w.errors() == 0);
  CHECK(w.mismatches() == 0);
  CHECK(w.writes() + w.reads() == w.completed());
}

TEST_CASE("a single slow path is never failed on a deadline", "[hedge]") {
  Rig rig(1, round_robin);
  test::VerifiedWorkload w(*rig.vol, 4);
  w.start();
  REQUIRE(wait_for(*rig.vol, 10s, [](const VolumeStats& s) { return s.completed > 100; }).completed > 100);
  rig.target->set_latency(0, 40ms);
  const uint64_t at = rig.vol->stats().completed;
  // 100 commands at 40 ms each, four at a time: a second of deadlines passed and not acted on.
  const auto st = wait_for(*rig.vol, 30s, [at](const VolumeStats& s) { return s.completed > at + 100; });
  REQUIRE(st.completed > at + 100);
  REQUIRE(w.finish(15s));
  const auto end = rig.vol->stats();
  INFO(to_text(end));
  CHECK(end.paths.at(0).failovers == 0);
  CHECK(end.paths.at(0).hedges == 0);
  CHECK(end.timeline.empty());
  CHECK(w.errors() == 0);
  CHECK(w.mismatches() == 0);
}

// Found by the soak run (reads of 50 ms outside its all-down windows): a read stuck on a silent
// path was hedged on a path that refused every command with a retryable status (it answers at
// once, so it looks idle and fast, and here it is also in the better ANA tier), the hedge
// failed, and the read was never hedged again: it waited until the silent path was failed for
// its silence. A hedge now avoids the paths whose last completion was an error while a clean
// one is usable, and a primary whose hedge failed is hedged again on a clean path. Path 0 is
// silent for I/O (2 s latency; a long KATO keeps its keep-alive from failing it), path 1 refuses
// (Internal Error), path 2 is clean but non-optimized: whichever of 0 and 1 the read meets
// first, it must be hedged on path 2. Without the fix no hedge ever goes to path 2 (the read
// reaches it only as a plain retry, once path 0 has been failed).
namespace rehedge {
std::mutex mu;
const VolumeIo* io = nullptr;
std::vector<std::pair<detail::IoTraceEvent, int>> steps;
void hook(const VolumeIo& i, detail::IoTraceEvent ev, int path, uint16_t) {
  std::lock_guard lock(mu);
  if (&i == io) steps.emplace_back(ev, path);
}
}  // namespace rehedge

TEST_CASE("a read stuck on a silent path is hedged on a clean path, not on one that refuses every command",
          "[hedge][rehedge]") {
  struct Hook {
    Hook() { detail::g_io_trace_for_test = &rehedge::hook; }
    ~Hook() { detail::g_io_trace_for_test = nullptr; }
  } hook;
  Rig rig(3, [](TargetOptions& to, VolumeOptions& vo) {
    to.ports[2].ana_state = AnaState::non_optimized;
    vo.connect.kato_ms = 10000;     // the 2 s latency must not fail path 0 by keep-alive
    vo.io_deadline = 100ms;         // hedge at 100 ms, fail a silent path at 200 ms
  });
  Target& target = *rig.target;
  Volume& vol = *rig.vol;
  constexpr uint32_t kBs = 4096;
  constexpr uint64_t kLba = 7;
  std::vector<uint8_t> w(kBs), r(kBs, 0);
  test::fill_block(w.data(), kBs, kLba, 5);
  test::TrackedIo wr(IoOp::write, w.data(), kLba);
  REQUIRE(vol.submit(wr.io) == 0);
  REQUIRE(wr.wait());
  REQUIRE(wr.status().is_success());
  target.fail_commands(1, status::kInternalError);
  target.set_latency(0, 2s);

  test::TrackedIo rd(IoOp::read, r.data(), kLba);
  {
    std::lock_guard lock(rehedge::mu);
    rehedge::io = &rd.io;
    rehedge::steps.clear();
  }
  REQUIRE(vol.submit(rd.io) == 0);
  REQUIRE(rd.wait());
  std::vector<std::pair<detail::IoTraceEvent, int>> steps;
  {
    std::lock_guard lock(rehedge::mu);
    rehedge::io = nullptr;
    steps = rehedge::steps;
  }
  std::string story;
  bool hedged_clean = false, hedged_refusing = false;
  for (const auto& [ev, path] : steps) {
    story += " " + std::to_string(static_cast<int>(ev)) + "@p" + std::to_string(path);
    hedged_clean |= ev == detail::IoTraceEvent::hedge && path == 2;
    hedged_refusing |= ev == detail::IoTraceEvent::hedge && path == 1;
  }
  INFO("steps (event@path; 0 launch, 1 issue, 2 hedge, 3 complete, 6 delayed, 7 orphaned, 8 finish):" << story);
  INFO(to_text(vol.stats()));
  CHECK(rd.status().is_success());
  CHECK(test::block_matches(r.data(), kBs, kLba, 5));
  CHECK(hedged_clean);
  // A hedge of it may have gone to the refusing path only before that path had refused anything.
  if (hedged_refusing) CHECK(hedged_clean);
  target.set_latency(0, 0ms);
  target.fail_commands(1, std::nullopt);
}

// Found by the soak run: on the loaded machine the lane (or the target) was not run for over
// 50 ms, and when it ran again it found every path silent past the deadline; each path saw the
// other as usable and both were failed in one turn (silent 66.7 and 70.9 ms), leaving no
// controller to send a CCR through, so each waited for the time fence before it reconnected and
// the reads outside the soak's windows waited hundreds of ms. A path silent past its own
// deadline no longer counts as the other path that lets a silent one be failed: when every path
// is silent at once none is failed on a deadline (the keep-alive still judges them). Here both
// paths answer I/O after 400 ms (a long KATO keeps the keep-alive out of it) with a 50 ms
// deadline, so each is silent past twice its deadline while the other is too: no path may be
// failed, and every read completes with its data. Without the fix both paths fail.
TEST_CASE("paths that are all silent at once are not failed on a deadline", "[hedge][all-silent]") {
  Rig rig(2, [](TargetOptions& to, VolumeOptions& vo) {
    round_robin(to, vo);         // the reads go to both paths at once
    vo.connect.kato_ms = 10000;  // the 400 ms latency must not fail a path by keep-alive
    vo.io_deadline = 50ms;       // silent past 100 ms: failed, were another path answering
  });
  Target& target = *rig.target;
  Volume& vol = *rig.vol;
  constexpr uint32_t kBs = 4096;
  constexpr int kReads = 8;
  std::vector<std::vector<uint8_t>> wbufs(kReads, std::vector<uint8_t>(kBs)), rbufs(kReads, std::vector<uint8_t>(kBs, 0));
  auto wait_all = [](std::vector<std::unique_ptr<test::TrackedIo>>& v) {  // bounded
    return std::all_of(v.begin(), v.end(), [](const auto& x) { return x->wait(20s); });
  };
  std::vector<std::unique_ptr<test::TrackedIo>> writes, reads;
  for (int i = 0; i < kReads; ++i) {
    test::fill_block(wbufs[static_cast<size_t>(i)].data(), kBs, 100 + i, 9);
    writes.push_back(std::make_unique<test::TrackedIo>(IoOp::write, wbufs[static_cast<size_t>(i)].data(), 100 + i));
    REQUIRE(vol.submit(writes.back()->io) == 0);
  }
  REQUIRE(wait_all(writes));
  for (auto& x : writes) REQUIRE(x->status().is_success());
  target.set_latency(0, 400ms);
  target.set_latency(1, 400ms);
  for (int i = 0; i < kReads; ++i) {
    reads.push_back(std::make_unique<test::TrackedIo>(IoOp::read, rbufs[static_cast<size_t>(i)].data(), 100 + i));
    REQUIRE(vol.submit(reads.back()->io) == 0);
  }
  REQUIRE(wait_all(reads));
  const VolumeStats st = vol.stats();
  INFO(to_text(st));
  for (int i = 0; i < kReads; ++i) {
    CHECK(reads[static_cast<size_t>(i)]->status().is_success());
    CHECK(test::block_matches(rbufs[static_cast<size_t>(i)].data(), kBs, 100 + i, 9));
  }
  CHECK(st.paths.at(0).ios > 0);  // both paths carried reads
  CHECK(st.paths.at(1).ios > 0);
  CHECK(st.paths.at(0).failovers == 0);
  CHECK(st.paths.at(1).failovers == 0);
  CHECK(st.timeline.empty());
  CHECK(st.failed == 0);
  target.set_latency(0, 0ms);
  target.set_latency(1, 0ms);
}

// The failover budget's share for detection (ARCHITECTURE.md, "Failover budget"), and silence
// that is the host's, not the path's. Path 1 is the only optimized path, so the one I/O of each
// case goes there, into a blackhole (the target neither reads nor answers, and answers what it
// holds once the fault is cleared); path 0 (non-optimized) is the other usable path. A long
// KATO keeps the keep-alive out of it. Every block is read back.
namespace stall {
Target* target = nullptr;
const VolumeIo* io = nullptr;     // the I/O whose issue on path 1 arms the hold
std::atomic<int> hold_ms{0};      // how long the lane's next turn after that issue is held up
std::atomic<bool> armed{false};
void trace(const VolumeIo& i, detail::IoTraceEvent ev, int path, uint16_t) {
  if (&i == io && ev == detail::IoTraceEvent::issue && path == 1 && hold_ms.load() > 0) armed.store(true);
}
// Held up as a loaded host holds a lane up. The path's answer is let out as the hold begins, so
// it waits in the socket while the lane is held: the path was silent for no time the lane could
// have seen, and the lane judges its deadlines (in this turn) before it reads that answer.
void turn(int) {
  if (!armed.exchange(false)) return;
  target->clear_faults(1);
  std::this_thread::sleep_for(std::chrono::milliseconds(hold_ms.load()));
}
struct Hooks {
  Hooks() {
    detail::g_io_trace_for_test = &trace;
    detail::g_lane_turn_for_test = &turn;
  }
  ~Hooks() {
    detail::g_io_trace_for_test = nullptr;
    detail::g_lane_turn_for_test = nullptr;
    detail::g_no_stall_rule_for_test = false;
    io = nullptr;
    target = nullptr;
    hold_ms.store(0);
    armed.store(false);
  }
};

// Block 9 written (path 1 answering), then `op` on it with path 1 in a blackhole and the lane
// held up `hold` right after issuing it (0: not held); the fault is cleared once the I/O is done
// (and, with `until_failed`, once path 1 has failed too). Returns the volume's stats then.
double silent_ms(const VolumeStats& s, int path);
VolumeStats one_io(IoOp op, std::chrono::milliseconds hold, bool until_failed) {
  Hooks hooks;
  Rig rig(2, [](TargetOptions& to, VolumeOptions& vo) {
    to.ports[0].ana_state = AnaState::non_optimized;
    vo.connect.kato_ms = 10000;
  });
  target = rig.target.get();
  constexpr uint32_t kBs = 4096;
  constexpr uint64_t kLba = 9;
  std::vector<uint8_t> w(kBs), r(kBs, 0);
  test::fill_block(w.data(), kBs, kLba, 3);
  REQUIRE(test::run_io(*rig.vol, IoOp::write, w.data(), kLba, 1).is_success());
  test::fill_block(w.data(), kBs, kLba, 4);
  rig.target->inject(1, FaultKind::blackhole);
  test::TrackedIo x(op, op == IoOp::write ? w.data() : r.data(), kLba);
  io = &x.io;
  hold_ms.store(static_cast<int>(hold.count()));
  REQUIRE(rig.vol->submit(x.io) == 0);
  REQUIRE(x.wait(20s));
  io = nullptr;
  if (until_failed) CHECK(test::wait_until([&] { return silent_ms(rig.vol->stats(), 1) > 0; }, 10s));
  rig.target->clear_faults(1);
  CHECK(x.status().is_success());
  const uint64_t seq = op == IoOp::write ? 4 : 3;
  if (op == IoOp::read) CHECK(test::block_matches(r.data(), kBs, kLba, seq));
  std::fill(r.begin(), r.end(), uint8_t{0});
  CHECK(test::run_io(*rig.vol, IoOp::read, r.data(), kLba, 1).is_success());
  CHECK(test::block_matches(r.data(), kBs, kLba, seq));
  return rig.vol->stats();
}

// The silence (ms) path `path` was failed for, as its failover's cause says; -1: not failed so.
double silent_ms(const VolumeStats& s, int path) {
  for (const FailoverEvent& e : s.timeline) {
    const size_t at = e.cause.find("silent ");
    if (e.path == path && at != std::string::npos) return std::stod(e.cause.substr(at + 7));
  }
  return -1;
}
}  // namespace stall

// The silence at the failing turn is at most the bound plus one turn's gap (a longer gap is the
// host's and counts the silence again), so these bounds hold on a loaded machine too.
TEST_CASE("a silent path holding a write is failed after 35 ms of silence, one holding only reads after 50",
          "[hedge][budget]") {
  SECTION("a write: failed within the budget's share for detection, then moved after the fence") {
    const VolumeStats s = stall::one_io(IoOp::write, 0ms, true);
    INFO(to_text(s));
    const double silent = stall::silent_ms(s, 1);
    CHECK(silent >= 35);  // the cause prints one decimal: 35.04 ms reads 35.0
    CHECK(silent <= 35 + 5 + 1);
    CHECK(s.failed == 0);
  }
  SECTION("a read: hedged at once, its path failed only after the reads' 50 ms") {
    const VolumeStats s = stall::one_io(IoOp::read, 0ms, true);
    INFO(to_text(s));
    CHECK(stall::silent_ms(s, 1) >= 50);  // one decimal, as above
    CHECK(s.paths.at(1).hedges >= 1);
    CHECK(s.failed == 0);
  }
}

TEST_CASE("a lane held up by its host does not count that time as its paths' silence", "[hedge][stall]") {
  // The lane is not run for 60 ms right after the write goes out, while the path's answer waits
  // for it: by the clock 60 ms of silence, of which the path owns none. Without the rule (the
  // negative control) the lane wakes to 60 ms of silence and fails the path in that same turn,
  // before it reads the answer.
  SECTION("with the rule: the write completes on its path, nothing fails") {
    const VolumeStats s = stall::one_io(IoOp::write, 60ms, false);
    INFO(to_text(s));
    CHECK(s.paths.at(1).failovers == 0);
    CHECK(s.timeline.empty());
  }
  SECTION("negative control, the rule off: failed for silence") {
    detail::g_no_stall_rule_for_test = true;
    const VolumeStats s = stall::one_io(IoOp::write, 60ms, true);
    INFO(to_text(s));
    CHECK(stall::silent_ms(s, 1) >= 60);
  }
}

// Large transfers queued behind each other on a healthy but slow link: every 1 MiB read takes
// 5 ms of the link, so with 16 in flight per path the last waits about 80 ms, past the base
// deadline (15 to 25 ms). Each command's deadline counts the data ahead of it at the path's
// drain rate, so on a machine that runs the test promptly none is hedged. The same run with a
// fixed 25 ms deadline (an explicit io_deadline has no allowance) is the negative control, side
// by side: it hedges on both paths (about 1,200 hedges each). A loaded machine that stalls the
// reactor for longer than a command's whole deadline may hedge some with the allowance too, so
// the test asks for at most a tenth of the control's. Every read is verified, and nothing fails.
namespace large {

constexpr uint32_t kBytes = 1u << 20;
constexpr uint32_t kDepth = 32;
constexpr uint64_t kReads = 320;

struct Run;
struct Slot {
  VolumeIo io;
  std::vector<uint8_t> buf;
  uint64_t offset = 0;
  Run* run = nullptr;
};
struct Run {
  Volume* vol;
  const std::vector<uint8_t>* image;
  uint32_t bs;
  uint64_t chunks;
  std::vector<Slot> slots;
  std::atomic<uint64_t> issued{0}, done{0}, bad{0}, failed{0};
  void issue(Slot& s) noexcept {
    const uint64_t n = issued.fetch_add(1);
    if (n >= kReads) return;
    s.offset = (n % chunks) * kBytes;
    s.io = VolumeIo{};
    s.io.op = IoOp::read;
    s.io.slba = s.offset / bs;
    s.io.nlb = kBytes / bs;
    s.io.buf = s.buf.data();
    s.io.user = &s;
    s.io.done = &Run::on_done;
    if (vol->submit(s.io) != 0) {
      failed.fetch_add(1);
      done.fetch_add(1);
    }
  }
  static void on_done(VolumeIo& io, NvmeStatus st) noexcept {
    Slot& me = *static_cast<Slot*>(io.user);
    Run& r = *me.run;
    if (!st.is_success()) r.failed.fetch_add(1);
    else if (std::memcmp(me.buf.data(), r.image->data() + me.offset, kBytes) != 0) r.bad.fetch_add(1);
    r.done.fetch_add(1);
    r.issue(me);
  }
};

// kReads verified 1 MiB reads at kDepth over two slow links; the volume's stats at the end.
VolumeStats run(std::chrono::milliseconds io_deadline) {
  Rig rig(2, [io_deadline](TargetOptions&, VolumeOptions& vo) {
    vo.selector = SelectorKind::round_robin;
    vo.io_deadline = io_deadline;
  });
  const uint32_t bs = rig.vol->block_size();
  const uint64_t ns_bytes = rig.vol->size_blocks() * bs;
  REQUIRE(ns_bytes >= 8ull * kBytes);
  std::vector<uint8_t> image(ns_bytes);
  for (size_t i = 0; i < image.size(); ++i) image[i] = static_cast<uint8_t>((i * 131) ^ (i >> 12));
  REQUIRE(rig.target->write_ns(rig.to.subsystems.at(0).nqn, 1, 0, image.data(), image.size()));
  for (size_t p = 0; p < 2; ++p) rig.target->set_bandwidth(p, 200'000'000);  // 1 MiB: 5.2 ms

  Run r{rig.vol.get(), &image, bs, ns_bytes / kBytes, std::vector<Slot>(kDepth)};
  for (auto& s : r.slots) {
    s.buf.resize(kBytes);
    s.run = &r;
  }
  for (auto& s : r.slots) r.issue(s);
  wait_for(*rig.vol, 120s, [&](const VolumeStats&) { return r.done.load() >= kReads; });
  REQUIRE(r.done.load() == kReads);
  // Taken once every read is done: a snapshot from inside the wait may predate the last ones.
  const VolumeStats st = rig.vol->stats();
  INFO(to_text(st));
  CHECK(r.failed.load() == 0);
  CHECK(r.bad.load() == 0);
  for (size_t p = 0; p < 2; ++p) CHECK(st.paths.at(p).ios > 0);
  return st;
}

}  // namespace large

TEST_CASE("large reads queued behind each other on a slow link are not hedged", "[hedge][large]") {
  const VolumeStats with = large::run(0ms);      // derived deadlines: the transfer allowance
  const VolumeStats fixed = large::run(25ms);    // a fixed deadline: none
  uint64_t hedged = 0, control = 0;
  for (size_t p = 0; p < 2; ++p) {
    hedged += with.paths.at(p).hedges;
    control += fixed.paths.at(p).hedges;
  }
  INFO("hedges with the allowance " << hedged << ", with a fixed 25 ms deadline " << control);
  INFO(to_text(with));
  CHECK(control > 0);
  CHECK(hedged * 10 <= control);
}
