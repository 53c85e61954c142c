// Reactor polling modes of a volume against the embedded target: every mode moves verified
// data; an idle adaptive (or sleeping) volume's reactors sleep, a busy one keeps spinning while
// idle and says so in its stats. Whether a loop sleeps or spins is read from counts of its
// events (VolumeStats::reactor_turns and reactor_wakeups), never from a CPU clock or a timer:
// load and sanitizers slow a spinning loop down and delay a sleeping one's wake-ups, but they
// never make a sleeping loop turn more. The embedded target's own poll modes
// (TargetOptions::poll): a busy or adaptive target moves verified data, an idle adaptive one
// sleeps and an idle busy one keeps spinning (PortStats::poll_passes and poll_wakeups).
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../common/rig.hpp"
#include "../common/verified_workload.hpp"
#include "multipath/io_trace.hpp"
#include "multipath/option_text.hpp"
#include "nvmeof/controller.hpp"
#include "nvmeof/target.hpp"
#include "nvmeof/volume.hpp"

using namespace nvmeof;
using namespace std::chrono_literals;

namespace {

using test::Rig;

// One path; the engine's reactors in `mode`, the target's connections in `target_poll`.
// Not a test of dead paths: a long per-command deadline.
Rig::Tweak polling(PollMode mode, unsigned reactors = 1, TargetPoll target_poll = TargetPoll::adaptive,
                uint32_t kato_ms = kKatoShortest) {
  return [=](TargetOptions& to, VolumeOptions& vo) {
    to.poll = target_poll;
    vo.connect.kato_ms = kato_ms;
    vo.reactors = reactors;
    vo.poll = mode;
    vo.placement = PlacementMode::unpinned;
    vo.io_deadline = 5s;
  };
}

// Each call on its own LBAs (`base_lba`): a workload checks blocks against its own writes.
void run_verified(Rig& rig, uint32_t qd, uint64_t base_lba) {
  test::VerifiedWorkload w(*rig.vol, qd, 32, base_lba);
  w.start();
  test::wait_until([&] { return w.completed() >= 2000; }, 20s);
  REQUIRE(w.finish(15s));
  INFO(to_text(rig.vol->stats()));
  INFO("first error: " << w.first_error());
  CHECK(w.completed() >= 2000);
  CHECK(w.errors() == 0);
  CHECK(w.mismatches() == 0);
  CHECK(w.reads() > 0);
}

// Each reactor's loop turns and wake-ups over `interval` of wall time with nothing submitted;
// of the wake-ups, those for the end of a wait (a timeout or a timer's deadline).
struct IdleCounts {
  std::vector<uint64_t> turns, wakeups, timeouts;
};
IdleCounts idle_counts(Rig& rig, std::chrono::milliseconds interval) {
  const VolumeStats before = rig.vol->stats();
  std::this_thread::sleep_for(interval);
  const VolumeStats after = rig.vol->stats();
  IdleCounts c;
  for (size_t i = 0; i < after.reactor_turns.size(); ++i) {
    c.turns.push_back(after.reactor_turns[i] - before.reactor_turns.at(i));
    c.wakeups.push_back(after.reactor_wakeups.at(i) - before.reactor_wakeups.at(i));
    c.timeouts.push_back(after.reactor_timeouts.at(i) - before.reactor_timeouts.at(i));
  }
  return c;
}

// An idle reactor sleeps in its ring and turns only for its own 200 ms timeout and the stats()
// snapshots posted to it: about ten turns a second. A spinning one turns once every microsecond
// or so; slowed by a sanitizer and sharing a loaded core it still makes tens of thousands a
// second. Load only delays a sleeping reactor's wake-ups and never adds any, so this bound sits
// far above the one and far below the other.
constexpr uint64_t kIdleTurnsPerSecond = 1000;

// A target connection's loop over one idle second: how many passes, and how many of them
// followed a sleep in ppoll.
struct TargetIdle {
  uint64_t passes = 0, wakeups = 0;
};
TargetIdle target_idle(const Target& t, std::chrono::milliseconds interval) {
  const PortStats before = t.stats(0);
  std::this_thread::sleep_for(interval);
  const PortStats after = t.stats(0);
  return {after.poll_passes - before.poll_passes, after.poll_wakeups - before.poll_wakeups};
}

// A connection that sleeps between commands passes once per wake-up, plus at most poll_spin_us
// (50 us) of non-blocking receives after each command: each pass is at least one system call,
// so a spin window holds a few hundred passes at most, whatever the machine. A connection that
// never sleeps makes all its passes without a single wake-up, hundreds of thousands a second
// (tens of thousands on a sanitized build sharing a loaded core). Load shortens spin windows
// (the governor ends a spin that lost its CPU) and never adds a wake-up.
constexpr uint64_t kPassesPerWakeup = 1000;

}  // namespace

TEST_CASE("poll modes parse and print", "[poll]") {
  for (auto m : {PollMode::busy, PollMode::adaptive, PollMode::sleep}) {
    auto p = parse_poll_mode(to_string(m));
    REQUIRE(p);
    CHECK(*p == m);
  }
  CHECK_FALSE(parse_poll_mode("spin"));
  CHECK(VolumeOptions{}.poll == PollMode::adaptive);
}

TEST_CASE("an adaptive volume moves verified data, then its idle reactors sleep", "[poll]") {
  Rig rig(1, polling(PollMode::adaptive, 2));
  CHECK(rig.vol->stats().poll == PollMode::adaptive);
  run_verified(rig, 1, 0);  // QD1: the spin window after each submission
  run_verified(rig, 16, 1024);
  // Once the last completion is reaped the lanes have nothing outstanding, so no spin window
  // follows it: from here on they sleep, and only their own timeout and the stats() snapshots
  // wake them.
  const IdleCounts idle = idle_counts(rig, 1000ms);
  REQUIRE(idle.turns.size() == 2);
  for (size_t i = 0; i < idle.turns.size(); ++i) {
    INFO("reactor " << i << " over 1 idle second: " << idle.turns[i] << " turns, " << idle.wakeups[i] << " wake-ups");
    CHECK(idle.turns[i] < kIdleTurnsPerSecond);
    CHECK(idle.wakeups[i] >= 1);  // it sleeps in the ring, not in a loop of zero-length waits
  }
  const auto st = rig.vol->stats();
  REQUIRE(st.reactor_cpu_ns.size() == 2);
  CHECK(st.reactor_cpu_ns[0] + st.reactor_cpu_ns[1] > 0);  // the clocks are read at all
}

TEST_CASE("an adaptive volume whose reads outlast its spin sleeps on an armed receive", "[poll]") {
  // While it spins the lane's pair reads its socket itself; once the spin window (at most
  // 250 us) ends before the answer, the pair must arm a ring receive before the lane sleeps, or
  // the answer would go unseen (the lane wakes only to spin after a submission or a deadline).
  // Every read here takes 3 ms at the target.
  Rig rig(1, polling(PollMode::adaptive));
  rig.target->set_latency(0, 3ms);
  const VolumeStats before = rig.vol->stats();
  test::VerifiedWorkload w(*rig.vol, 1, 32, 0);
  w.start();
  test::wait_until([&] { return w.completed() >= 200; }, 20s);
  REQUIRE(w.finish(15s));
  const auto st = rig.vol->stats();
  INFO(to_text(st));
  INFO("first error: " << w.first_error());
  CHECK(w.completed() >= 200);
  CHECK(w.errors() == 0);
  CHECK(w.mismatches() == 0);
  CHECK(st.paths.at(0).hedges == 0);
  // Each answer lands 3 ms after its command, while the lane sleeps (the workload resubmits
  // from the completion, on the lane, so nothing else wakes it): the armed receive's completion
  // is what wakes it. An answer nothing waited for in the ring would be found only by a turn
  // after the lane's own 1 ms timeout, and no wake-up would be for it. Some answers may land
  // while the lane is awake anyway (load makes that likelier), hence half, not all.
  const uint64_t wakeups = st.reactor_wakeups.at(0) - before.reactor_wakeups.at(0);
  const uint64_t timeouts = st.reactor_timeouts.at(0) - before.reactor_timeouts.at(0);
  INFO(wakeups << " wake-ups, " << timeouts << " of them timeouts, for " << w.completed() << " I/Os");
  CHECK(wakeups - timeouts >= w.completed() / 2);
}

TEST_CASE("a sleeping volume moves verified data, then wakes only a few times a second", "[poll]") {
  Rig rig(1, polling(PollMode::sleep));
  run_verified(rig, 4, 0);
  // PollMode::sleep: a wake-up per completion, and with nothing in flight no wake-up every
  // millisecond (the 1 ms wake-up is for the deadlines of commands in flight only). Counted, not
  // read off a CPU clock: over at least a second of idling, a reactor that woke every millisecond
  // would count about a thousand wake-ups, every one of them a timeout (load only delays its
  // wake-ups, so a loaded machine shows fewer, never more, and still far above the bound). Its
  // own 200 ms timeout and the two stats() snapshots make a handful.
  constexpr uint64_t kIdleWakeups = 100;
  const IdleCounts idle = idle_counts(rig, 1000ms);
  REQUIRE(idle.turns.size() == 1);
  INFO("over 1 idle second: " << idle.turns[0] << " turns, " << idle.wakeups[0] << " wake-ups, "
                              << idle.timeouts[0] << " of them timeouts");
  CHECK(idle.wakeups[0] >= 1);  // it sleeps in the ring, not in a loop of zero-length waits
  CHECK(idle.wakeups[0] < kIdleWakeups);
  CHECK(idle.timeouts[0] < kIdleWakeups);
  CHECK(idle.turns[0] < kIdleTurnsPerSecond);
}

TEST_CASE("a busy volume moves verified data and keeps spinning while idle", "[poll]") {
  Rig rig(1, polling(PollMode::busy));
  run_verified(rig, 1, 0);
  run_verified(rig, 16, 1024);
  // Nothing submitted: the reactor still turns without ever sleeping in its ring. Waited for as
  // an event: however loaded the machine, a spinning thread makes 100,000 turns eventually; a
  // sleeping one makes a handful a second, each after a wake-up.
  const VolumeStats before = rig.vol->stats();
  const auto turned = [&](const VolumeStats& s) { return s.reactor_turns.at(0) - before.reactor_turns.at(0); };
  const VolumeStats after =
      test::wait_for(*rig.vol, 30s, [&](const VolumeStats& s) { return turned(s) >= 100'000; });
  INFO("turns " << turned(after) << ", wake-ups " << after.reactor_wakeups.at(0) - before.reactor_wakeups.at(0));
  CHECK(turned(after) >= 100'000);
  CHECK(after.reactor_wakeups.at(0) == before.reactor_wakeups.at(0));
}

TEST_CASE("a busy target moves verified data and keeps spinning while idle", "[poll][target]") {
  // No keep-alive: with nothing submitted, a target whose connections sleep passes over its
  // sockets not at all.
  Rig rig(1, polling(PollMode::adaptive, 1, TargetPoll::busy, 0));
  run_verified(rig, 1, 0);
  run_verified(rig, 16, 1024);
  // Nothing submitted: the I/O queue's connection thread still passes over its socket without
  // sleeping. Waited for as an event: a spinning thread makes 10,000 passes eventually, in a few
  // milliseconds alone on a core and in a second or two on a loaded two-core machine under
  // sanitizers (it yields its core every 64 idle passes and waits out the others' slices). A
  // target whose connections sleep makes none.
  const PortStats before = rig.target->stats(0);
  test::wait_until([&] { return rig.target->stats(0).poll_passes - before.poll_passes >= 10'000; }, 30s);
  const PortStats after = rig.target->stats(0);
  INFO("passes " << after.poll_passes - before.poll_passes << ", wake-ups " << after.poll_wakeups - before.poll_wakeups);
  CHECK(after.poll_passes - before.poll_passes >= 10'000);
}

TEST_CASE("a busy target spins on I/O queues only: an admin queue alone sleeps between commands", "[poll][target]") {
  // A busy admin queue was a second never-sleeping thread beside the I/O queue's on the
  // target's CPU; every so often the I/O queue waited out a whole scheduler slice behind it.
  TargetOptions to = test::rig_target_options(1);
  to.poll = TargetPoll::busy;
  Rig rig(to);
  auto cp_made = ControlPlane::create();
  REQUIRE(cp_made);
  ControlPlane& cp = **cp_made;
  ConnectOptions co;
  co.subnqn = to.subsystems[0].nqn;
  auto ctrl = Controller::connect(cp, rig.addr(0), co);
  REQUIRE(ctrl);
  REQUIRE((*ctrl)->keep_alive());  // the admin queue serves commands
  // The host's keep-alives (every KATO / 4, 25 ms) wake the admin queue a few dozen times; after
  // each it spins at most poll_spin_us, then sleeps again.
  const TargetIdle idle = target_idle(*rig.target, 1000ms);
  INFO("an admin queue alone on a busy target over 1 s: " << idle.passes << " passes, " << idle.wakeups << " wake-ups");
  CHECK(idle.wakeups >= 1);
  CHECK(idle.passes <= (idle.wakeups + 1) * kPassesPerWakeup);
}

TEST_CASE("an adaptive target moves verified data, then sleeps while idle", "[poll][target]") {
  Rig rig(1, polling(PollMode::adaptive, 1, TargetPoll::adaptive));
  run_verified(rig, 1, 0);
  run_verified(rig, 16, 1024);
  // Both ends idle: the target's admin queue wakes for keep-alives only, its I/O queue not at
  // all, and the volume's reactor sleeps too.
  const VolumeStats vol_before = rig.vol->stats();
  const TargetIdle idle = target_idle(*rig.target, 1000ms);
  const VolumeStats vol_after = rig.vol->stats();
  INFO("an idle adaptive target over 1 s: " << idle.passes << " passes, " << idle.wakeups << " wake-ups");
  CHECK(idle.wakeups >= 1);
  CHECK(idle.passes <= (idle.wakeups + 1) * kPassesPerWakeup);
  const uint64_t turns = vol_after.reactor_turns.at(0) - vol_before.reactor_turns.at(0);
  INFO("the volume's reactor: " << turns << " turns");
  CHECK(turns < kIdleTurnsPerSecond);
}

TEST_CASE("a sleeping target moves verified data", "[poll][target]") {
  Rig rig(1, polling(PollMode::busy, 1, TargetPoll::sleep));
  run_verified(rig, 1, 0);
  run_verified(rig, 16, 1024);
}

// stats() asks each reactor for its own figures. A completion callback that blocks holds its
// reactor up; stats() then answers without that reactor's figures (and says so) instead of
// waiting with it: a caller that holds what the callback waits for (Python's GIL, say) would
// otherwise never get its answer.
namespace {
struct HeldRead {
  std::promise<void> entered;
  std::shared_future<void> release;
  NvmeStatus status{};
  static void done(VolumeIo& io, NvmeStatus st) noexcept {
    auto& h = *static_cast<HeldRead*>(io.user);
    h.status = st;
    h.entered.set_value();
    h.release.wait();
  }
};
void write_sync(Volume& v, const void* buf, uint64_t slba) {
  std::promise<NvmeStatus> p;
  VolumeIo io;
  io.op = IoOp::write;
  io.slba = slba;
  io.nlb = 1;
  io.buf = const_cast<void*>(buf);
  io.user = &p;
  io.done = [](VolumeIo& x, NvmeStatus st) noexcept { static_cast<std::promise<NvmeStatus>*>(x.user)->set_value(st); };
  REQUIRE(v.submit(io) == 0);
  auto f = p.get_future();
  REQUIRE(f.wait_for(10s) == std::future_status::ready);
  REQUIRE(f.get().is_success());
}
}  // namespace

TEST_CASE("stats() answers while a completion callback holds its reactor up", "[poll][stats]") {
  Rig rig(1, polling(PollMode::adaptive));
  const uint32_t bs = rig.vol->block_size();
  std::vector<uint8_t> pattern(bs), got(bs, 0);
  for (uint32_t i = 0; i < bs; ++i) pattern[i] = static_cast<uint8_t>(i * 7 + 3);
  write_sync(*rig.vol, pattern.data(), 9);
  CHECK(rig.vol->stats().lanes_unanswered == 0);

  std::promise<void> release;
  HeldRead held;
  held.release = release.get_future().share();
  VolumeIo io;
  io.op = IoOp::read;
  io.slba = 9;
  io.nlb = 1;
  io.buf = got.data();
  io.user = &held;
  io.done = &HeldRead::done;
  REQUIRE(rig.vol->submit(io) == 0);
  REQUIRE(held.entered.get_future().wait_for(10s) == std::future_status::ready);

  // The reactor is inside the callback now. Without a bounded wait, stats() never returns.
  auto during = std::async(std::launch::async, [&] { return rig.vol->stats(); });
  const bool answered = during.wait_for(10s) == std::future_status::ready;
  release.set_value();  // before any REQUIRE: the reactor must not stay held if this fails
  REQUIRE(answered);
  const VolumeStats s = during.get();
  CHECK(s.lanes_unanswered == 1);
  REQUIRE(s.paths.size() == 1);
  CHECK(to_json(s).find("\"lanes_unanswered\": 1") != std::string::npos);

  // Released, the reactor answers again, and the held read delivered the data written.
  CHECK(held.status.is_success());
  CHECK(got == pattern);
  const VolumeStats after = rig.vol->stats();
  CHECK(after.lanes_unanswered == 0);
  CHECK(after.paths[0].ios >= 2);
}

// With several reactors held up, stats() asks them all first and waits for them together: its
// answer comes after one wait (200 ms), not one per held reactor (4 x 200 ms here). Counted by
// the waits it starts (detail::g_snapshot_wait_for_test), not timed.
TEST_CASE("stats() waits once for all held-up reactors, not once per reactor", "[poll][stats]") {
  constexpr unsigned kLanes = 4;
  Rig rig(1, polling(PollMode::adaptive, kLanes));
  const uint32_t bs = rig.vol->block_size();
  std::vector<std::vector<uint8_t>> pattern(kLanes, std::vector<uint8_t>(bs)), got(kLanes, std::vector<uint8_t>(bs, 0));
  for (unsigned l = 0; l < kLanes; ++l) {
    for (uint32_t i = 0; i < bs; ++i) pattern[l][i] = static_cast<uint8_t>(i * 5 + l * 31 + 1);
    write_sync(*rig.vol, pattern[l].data(), 20 + l);
  }
  CHECK(rig.vol->stats().lanes_unanswered == 0);

  std::promise<void> release;
  const std::shared_future<void> go = release.get_future().share();
  std::vector<HeldRead> held(kLanes);
  std::vector<VolumeIo> ios(kLanes);
  for (unsigned l = 0; l < kLanes; ++l) {
    held[l].release = go;
    ios[l].op = IoOp::read;
    ios[l].slba = 20 + l;
    ios[l].nlb = 1;
    ios[l].buf = got[l].data();
    ios[l].user = &held[l];
    ios[l].done = &HeldRead::done;
    REQUIRE(rig.vol->submit(ios[l], l) == 0);  // one read on each reactor
  }
  bool all_entered = true;
  for (auto& h : held) all_entered &= h.entered.get_future().wait_for(10s) == std::future_status::ready;
  if (!all_entered) release.set_value();
  REQUIRE(all_entered);

  // Every stats() wait for a lane that had not answered yet, by its deadline.
  static std::mutex waits_mu;
  static std::vector<std::chrono::steady_clock::time_point> waits;
  {
    std::lock_guard lock(waits_mu);
    waits.clear();
  }
  detail::g_snapshot_wait_for_test = [](std::chrono::steady_clock::time_point deadline) {
    std::lock_guard lock(waits_mu);
    waits.push_back(deadline);
  };
  auto during = std::async(std::launch::async, [&] { return rig.vol->stats(); });
  const bool answered = during.wait_for(10s) == std::future_status::ready;
  release.set_value();  // before any REQUIRE: the reactors must not stay held if this fails
  during.wait();
  detail::g_snapshot_wait_for_test = nullptr;
  REQUIRE(answered);
  const VolumeStats s = during.get();
  CHECK(s.lanes_unanswered == kLanes);
  // It waited for each held reactor, all by one deadline: one 200 ms wait, whatever the
  // number of held reactors (one deadline per reactor would be four waits in a row).
  std::lock_guard lock(waits_mu);
  REQUIRE(waits.size() == kLanes);
  CHECK(std::count(waits.begin(), waits.end(), waits.front()) == static_cast<long>(waits.size()));

  for (unsigned l = 0; l < kLanes; ++l) {
    CHECK(held[l].status.is_success());
    CHECK(got[l] == pattern[l]);
  }
  CHECK(rig.vol->stats().lanes_unanswered == 0);
}
