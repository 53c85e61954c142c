// Reactor polling modes of a volume against the embedded target: every mode moves verified
// data; an idle adaptive (or sleeping) volume costs no CPU; a busy one keeps spinning while idle
// and says so in its stats. CPU is read from the reactor threads' own CPU clocks
// (VolumeStats::reactor_cpu_ns); no I/O is timed. The embedded target's own poll modes
// (TargetOptions::poll): a busy or adaptive target moves verified data, an idle adaptive one
// costs no CPU and an idle busy one keeps spinning (read from the process CPU clock).
#include <catch2/catch.hpp>

#include <chrono>
#include <future>
#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include <time.h>

#include "../common/verified_workload.hpp"
#include "nvmeof/controller.hpp"
#include "nvmeof/target.hpp"
#include "nvmeof/volume.hpp"

using namespace nvmeof;
using namespace std::chrono_literals;

namespace {

struct Rig {
  std::unique_ptr<Target> target;
  std::unique_ptr<Volume> vol;

  explicit Rig(PollMode mode, unsigned reactors = 1, TargetPoll target_poll = TargetPoll::adaptive) {
    TargetOptions to;
    to.poll = target_poll;
    to.ports.assign(1, TargetPort{});
    to.ports[0].trsvcid = "0";
    to.subsystems[0].namespaces[0].size_bytes = 16ull << 20;
    auto t = Target::start(to);
    REQUIRE(t);
    target = std::move(*t);
    VolumeOptions vo;
    TransportAddress a;
    a.traddr = "127.0.0.1";
    a.trsvcid = std::to_string(target->port_number(0));
    vo.paths.push_back(a);
    vo.connect.subnqn = to.subsystems[0].nqn;
    vo.connect.io_queue_depth = 64;
    vo.reactors = reactors;
    vo.poll = mode;
    vo.placement = PlacementMode::unpinned;
    vo.io_deadline = 5s;  // not a test of dead paths
    auto v = Volume::open(vo);
    REQUIRE(v);
    vol = std::move(*v);
  }

  uint64_t cpu_ns() const {
    const auto s = vol->stats();
    return std::accumulate(s.reactor_cpu_ns.begin(), s.reactor_cpu_ns.end(), uint64_t{0});
  }
};

// Each call on its own LBAs (`base_lba`): a workload checks blocks against its own writes.
void run_verified(Rig& rig, uint32_t qd, uint64_t base_lba) {
  test::VerifiedWorkload w(*rig.vol, qd, 32, base_lba);
  w.start();
  const uint64_t give_up = Reactor::clock_ns() + 20'000'000'000ull;
  while (w.completed() < 2000 && Reactor::clock_ns() < give_up) std::this_thread::sleep_for(1ms);
  REQUIRE(w.finish(15s));
  INFO(to_text(rig.vol->stats()));
  INFO("first error: " << w.first_error());
  CHECK(w.completed() >= 2000);
  CHECK(w.errors() == 0);
  CHECK(w.mismatches() == 0);
  CHECK(w.reads() > 0);
}

// CPU the reactors use over `interval` of wall time with nothing submitted.
uint64_t idle_cpu_ns(Rig& rig, std::chrono::milliseconds interval) {
  const uint64_t before = rig.cpu_ns();
  std::this_thread::sleep_for(interval);
  return rig.cpu_ns() - before;
}

uint64_t process_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

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

TEST_CASE("an adaptive volume moves verified data, then idles at no CPU", "[poll]") {
  Rig rig(PollMode::adaptive, 2);
  CHECK(rig.vol->stats().poll == PollMode::adaptive);
  run_verified(rig, 1, 0);  // QD1: the spin window after each submission
  run_verified(rig, 16, 1024);
  // Right after the load the lanes may still be in a spin window (at most 250 us) and the
  // control plane's keep-alive comes and goes; 1 s idle must cost the two reactors well under
  // 2% of a core (a spinning reactor would show the whole interval).
  const uint64_t idle = idle_cpu_ns(rig, 1000ms);
  INFO("idle reactor CPU over 1 s: " << idle / 1000 << " us");
  CHECK(idle < 20'000'000);
  const auto st = rig.vol->stats();
  REQUIRE(st.reactor_cpu_ns.size() == 2);
  CHECK(st.reactor_cpu_ns[0] + st.reactor_cpu_ns[1] > 0);  // the clocks are read at all
}

TEST_CASE("an adaptive volume whose reads outlast its spin sleeps on an armed receive", "[poll]") {
  // While it spins the lane's pair reads its socket itself; once the spin window (at most
  // 250 us) ends before the answer, the pair must arm a ring receive before the lane sleeps, or
  // the answer would go unseen (the lane wakes only to spin after a submission or a deadline).
  // Every read here takes 3 ms at the target.
  Rig rig(PollMode::adaptive);
  rig.target->set_latency(0, 3ms);
  test::VerifiedWorkload w(*rig.vol, 1, 32, 0);
  w.start();
  const uint64_t give_up = Reactor::clock_ns() + 20'000'000'000ull;
  while (w.completed() < 200 && Reactor::clock_ns() < give_up) std::this_thread::sleep_for(1ms);
  REQUIRE(w.finish(15s));
  const auto st = rig.vol->stats();
  INFO(to_text(st));
  INFO("first error: " << w.first_error());
  CHECK(w.completed() >= 200);
  CHECK(w.errors() == 0);
  CHECK(w.mismatches() == 0);
  CHECK(st.paths.at(0).hedges == 0);  // every answer was seen as it came, none waited out a deadline
  CHECK(st.paths.at(0).latency.max_us < 1'000'000);
}

TEST_CASE("a sleeping volume moves verified data and idles cheaply", "[poll]") {
  Rig rig(PollMode::sleep);
  run_verified(rig, 4, 0);
  // Today's loop wakes once a millisecond while idle: cheap, not free.
  CHECK(idle_cpu_ns(rig, 1000ms) < 100'000'000);
}

TEST_CASE("a busy volume moves verified data and keeps spinning while idle", "[poll]") {
  Rig rig(PollMode::busy);
  run_verified(rig, 1, 0);
  run_verified(rig, 16, 1024);
  // Nothing submitted: the reactor still burns CPU and its clock shows it. Waited for as an
  // event (however loaded the machine, a spinning thread gets 100 ms of CPU eventually).
  const uint64_t before = rig.cpu_ns();
  const uint64_t give_up = Reactor::clock_ns() + 30'000'000'000ull;
  while (rig.cpu_ns() - before < 100'000'000 && Reactor::clock_ns() < give_up)
    std::this_thread::sleep_for(10ms);
  CHECK(rig.cpu_ns() - before >= 100'000'000);
}

TEST_CASE("a busy target moves verified data and keeps spinning while idle", "[poll][target]") {
  Rig rig(PollMode::adaptive, 1, TargetPoll::busy);
  run_verified(rig, 1, 0);
  run_verified(rig, 16, 1024);
  // Nothing submitted: the target's connection threads (admin and I/O queue) still spin, and
  // the process clock shows it. Waited for as an event, as for a busy volume.
  const uint64_t before = process_cpu_ns();
  const uint64_t give_up = Reactor::clock_ns() + 30'000'000'000ull;
  while (process_cpu_ns() - before < 100'000'000 && Reactor::clock_ns() < give_up)
    std::this_thread::sleep_for(10ms);
  CHECK(process_cpu_ns() - before >= 100'000'000);
}

TEST_CASE("a busy target spins on I/O queues only: an admin queue alone idles at no CPU", "[poll][target]") {
  // A busy admin queue was a second never-sleeping thread beside the I/O queue's on the
  // target's CPU; every so often the I/O queue waited out a whole scheduler slice behind it.
  TargetOptions to;
  to.poll = TargetPoll::busy;
  to.ports.assign(1, TargetPort{});
  to.ports[0].trsvcid = "0";
  auto t = Target::start(to);
  REQUIRE(t);
  TransportAddress a;
  a.traddr = "127.0.0.1";
  a.trsvcid = std::to_string((*t)->port_number(0));
  ControlPlane cp;
  ConnectOptions co;
  co.subnqn = to.subsystems[0].nqn;
  auto ctrl = Controller::connect(cp, a, co);
  REQUIRE(ctrl);
  REQUIRE((*ctrl)->keep_alive());  // the admin queue serves commands
  const uint64_t before = process_cpu_ns();
  std::this_thread::sleep_for(1000ms);
  const uint64_t idle = process_cpu_ns() - before;
  INFO("idle process CPU over 1 s with an admin queue on a busy target: " << idle / 1000 << " us");
  CHECK(idle < 20'000'000);
}

TEST_CASE("an adaptive target moves verified data, then idles at no CPU", "[poll][target]") {
  Rig rig(PollMode::adaptive, 1, TargetPoll::adaptive);
  run_verified(rig, 1, 0);
  run_verified(rig, 16, 1024);
  // The whole process (an adaptive volume idles at about 0.02% of a core): a target thread
  // that kept spinning would show most of the interval.
  const uint64_t before = process_cpu_ns();
  std::this_thread::sleep_for(1000ms);
  const uint64_t idle = process_cpu_ns() - before;
  INFO("idle process CPU over 1 s: " << idle / 1000 << " us");
  CHECK(idle < 20'000'000);
}

TEST_CASE("a sleeping target moves verified data", "[poll][target]") {
  Rig rig(PollMode::busy, 1, TargetPoll::sleep);
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
  Rig rig(PollMode::adaptive);
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
// answer comes after one wait (200 ms), not one per held reactor (4 x 200 ms here).
TEST_CASE("stats() waits once for all held-up reactors, not once per reactor", "[poll][stats]") {
  constexpr unsigned kLanes = 4;
  Rig rig(PollMode::adaptive, kLanes);
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

  const auto t0 = std::chrono::steady_clock::now();
  auto during = std::async(std::launch::async, [&] { return rig.vol->stats(); });
  const bool answered = during.wait_for(10s) == std::future_status::ready;
  const auto waited = std::chrono::steady_clock::now() - t0;
  release.set_value();  // before any REQUIRE: the reactors must not stay held if this fails
  REQUIRE(answered);
  const VolumeStats s = during.get();
  CHECK(s.lanes_unanswered == kLanes);
  // One 200 ms wait; one per reactor would be at least 800 ms.
  INFO("stats() took " << std::chrono::duration_cast<std::chrono::milliseconds>(waited).count() << " ms");
  CHECK(waited < 700ms);

  for (unsigned l = 0; l < kLanes; ++l) {
    CHECK(held[l].status.is_success());
    CHECK(got[l] == pattern[l]);
  }
  CHECK(rig.vol->stats().lanes_unanswered == 0);
}
