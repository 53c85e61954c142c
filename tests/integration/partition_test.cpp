// The multipath volume across a real network partition: the embedded target lives in a network
// namespace of its own behind one veth pair per path (tests/common/netns.hpp), and a path is cut
// by taking its link down, so nothing comes back on it (no RST, no FIN, no ICMP), unlike the
// target's own blackhole fault, which still answers TCP itself.
//
// Needs root and network namespaces; exits 77 (skipped) with the reason on stderr otherwise.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "../common/netns.hpp"
#include "../common/verified_workload.hpp"
#include "nvmeof/reactor.hpp"
#include "nvmeof/target.hpp"
#include "nvmeof/volume.hpp"

using namespace nvmeof;
using namespace std::chrono_literals;

namespace {

using Clock = std::chrono::steady_clock;

// Bounds on waiting for something the volume must do; generous because a loaded two-core
// machine may be slow to get there, and a bound only ever ends a wait that failed anyway.
constexpr auto kDetectBound = 10s;
constexpr auto kRecoverBound = 15s;
constexpr auto kDrainBound = 15s;

// Declared in this order so that they go in reverse: the volume disconnects while the target
// still answers, and the target's sockets are closed before its namespace is removed.
struct Rig {
  test::PartitionNet net;
  std::unique_ptr<Target> target;
  std::unique_ptr<Volume> vol;

  explicit Rig(size_t npaths) : net(npaths) {
    TargetOptions to;
    to.ports.clear();
    for (size_t i = 0; i < npaths; ++i) {
      TargetPort p;
      p.traddr = net.target_addr(i);
      p.trsvcid = "0";
      to.ports.push_back(p);
    }
    to.subsystems[0].namespaces[0].size_bytes = 16ull << 20;
    // Bound inside the namespace: the listening sockets, and so every connection they accept,
    // belong to it whichever thread serves them.
    auto t = net.run_in_ns([&] { return Target::start(to); });
    REQUIRE(t);
    target = std::move(*t);
    VolumeOptions vo;
    for (size_t i = 0; i < npaths; ++i) {
      TransportAddress a;
      a.traddr = net.target_addr(i);
      a.trsvcid = std::to_string(target->port_number(i));
      vo.paths.push_back(a);
    }
    vo.connect.subnqn = to.subsystems[0].nqn;
    vo.connect.io_queue_depth = 64;
    vo.connect.kato_ms = 2000;
    vo.no_path_timeout = 10s;
    auto v = Volume::open(vo);
    REQUIRE(v);
    vol = std::move(*v);
  }
};

// Polls the volume's stats until `done` holds or `bound` passes; returns the last snapshot.
VolumeStats wait_for(const Volume& vol, std::chrono::milliseconds bound,
                     const std::function<bool(const VolumeStats&)>& done) {
  const auto until = Clock::now() + bound;
  VolumeStats st = vol.stats();
  while (!done(st) && Clock::now() < until) {
    std::this_thread::sleep_for(5ms);
    st = vol.stats();
  }
  return st;
}

const FailoverEvent* event_of(const VolumeStats& st, int path) {
  for (const auto& e : st.timeline)
    if (e.path == path) return &e;
  return nullptr;
}

double ms_between(uint64_t from_ns, uint64_t to_ns) {
  return (static_cast<double>(to_ns) - static_cast<double>(from_ns)) / 1e6;
}

}  // namespace

TEST_CASE("a partitioned path fails over without errors or lost data", "[partition]") {
  Rig rig(2);
  REQUIRE(rig.vol->usable_paths() == 2);
  test::VerifiedWorkload w(*rig.vol);
  w.start();
  std::this_thread::sleep_for(300ms);
  const uint64_t before = w.completed();
  REQUIRE(before > 0);

  const auto cut_at = Clock::now();
  const uint64_t cut_ns = Reactor::clock_ns();
  rig.net.partition(0);
  const auto detected = wait_for(*rig.vol, kDetectBound,
                                 [](const VolumeStats& s) { return event_of(s, 0) != nullptr; });
  INFO(to_text(detected));
  const FailoverEvent* ev = event_of(detected, 0);
  REQUIRE(ev != nullptr);
  const double detect_ms = ms_between(cut_ns, ev->detect_ns);
  const uint64_t p1_at_detect = detected.paths.at(1).ios;

  std::this_thread::sleep_until(cut_at + 1500ms);
  const uint64_t during = w.completed() - before;
  rig.net.heal(0);
  std::this_thread::sleep_for(1s);
  REQUIRE(w.finish(kDrainBound));

  const auto st = rig.vol->stats();
  INFO(to_text(st));
  INFO("first error: " << w.first_error());
  CHECK(w.errors() == 0);
  CHECK(w.mismatches() == 0);
  CHECK(w.writes() + w.reads() == w.completed());  // nothing lost
  CHECK(during > 50);                               // I/O kept flowing across the partition
  CHECK(st.paths.at(1).ios > p1_at_detect);         // path 1 took over
  CHECK(st.paths.at(0).failovers >= 1);
  const FailoverEvent* e = event_of(st, 0);
  REQUIRE(e != nullptr);
  CHECK(e->first_success_us >= e->first_resubmit_us);
  std::printf("partition: path 0 failed %.1f ms after the cut (%s); fenced +%lld us, first "
              "resubmit +%lld us, first success +%lld us, reconnected +%lld us, %u reads / %u "
              "writes moved; longest I/O %llu us, longest stall %llu us, %llu I/Os\n",
              detect_ms, e->cause.c_str(), static_cast<long long>(e->fenced_us),
              static_cast<long long>(e->first_resubmit_us),
              static_cast<long long>(e->first_success_us),
              static_cast<long long>(e->reconnected_us), e->reads_moved, e->writes_moved,
              static_cast<unsigned long long>(w.longest_io_us()),
              static_cast<unsigned long long>(w.longest_gap_us()),
              static_cast<unsigned long long>(w.completed()));
}

TEST_CASE("healing the partition brings the path back into service", "[partition]") {
  Rig rig(2);
  test::VerifiedWorkload w(*rig.vol);
  w.start();
  std::this_thread::sleep_for(300ms);

  const auto cut_at = Clock::now();
  rig.net.partition(0);
  REQUIRE(event_of(wait_for(*rig.vol, kDetectBound,
                            [](const VolumeStats& s) { return event_of(s, 0) != nullptr; }),
                   0) != nullptr);
  // Held long enough for reconnects to fail against the dead link (each gives up after 500 ms):
  // the path must come back because the link did, not because it never really went.
  std::this_thread::sleep_until(cut_at + 1200ms);
  const auto failed = rig.vol->stats();
  INFO(to_text(failed));
  REQUIRE(rig.net.link_state(0) == test::LinkState::down);
  CHECK(failed.paths.at(0).state != PathState::live);
  CHECK(failed.paths.at(0).reconnects == 0);

  const uint64_t heal_ns = Reactor::clock_ns();
  rig.net.heal(0);
  REQUIRE(rig.net.link_state(0) == test::LinkState::up);
  // Live again is not enough: it must carry I/O again (the selector takes it back).
  const auto back = wait_for(*rig.vol, kRecoverBound, [&](const VolumeStats& s) {
    return s.paths.at(0).state == PathState::live && s.paths.at(0).reconnects >= 1 &&
           s.paths.at(0).ios > failed.paths.at(0).ios;
  });
  const double back_ms = ms_between(heal_ns, Reactor::clock_ns());
  REQUIRE(w.finish(kDrainBound));

  const auto st = rig.vol->stats();
  INFO(to_text(st));
  INFO("first error: " << w.first_error());
  CHECK(back.paths.at(0).state == PathState::live);
  CHECK(back.paths.at(0).reconnects >= 1);
  CHECK(back.paths.at(0).ios > failed.paths.at(0).ios);
  CHECK(w.errors() == 0);
  CHECK(w.mismatches() == 0);
  CHECK(w.writes() + w.reads() == w.completed());
  const FailoverEvent* e = event_of(st, 0);
  REQUIRE(e != nullptr);
  CHECK(e->reconnected_us >= 0);
  std::printf("heal: path 0 live and carrying I/O %.1f ms after the heal (reconnected +%lld us "
              "after detection)\n",
              back_ms, static_cast<long long>(e->reconnected_us));
}

int main(int argc, char** argv) {
  std::string why;
  if (!test::PartitionNet::available(&why)) {
    std::fprintf(stderr, "partition test skipped: %s\n", why.c_str());
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
