// One engine per process, against the embedded target: volumes share the engine's reactor
// threads, control thread and pool (counted in /proc/self/task, never timed) and the controllers
// of their subsystem (connections counted on the target), several namespaces move verified data
// at once through shared controllers and across a path reset and a partition (one CCR per failed
// controller), a volume closing and reopening disturbs none of the others, closing finishes a
// volume's own I/O first (even I/O still queued for its reactor), and a thousand of
// them leave descriptors, threads, connections and memory where they were.
#include <catch2/catch.hpp>

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "../common/rig.hpp"
#include "../common/tool_process.hpp"
#include "../common/verified_workload.hpp"
#include "core/log.hpp"
#include "nvmeof/host.hpp"
#include "nvmeof/target.hpp"
#include "nvmeof/volume.hpp"

using namespace nvmeof;
using namespace std::chrono_literals;

namespace {

constexpr int kNamespaces = 4;

// Entries of a /proc directory: the process's threads (task) or descriptors (fd).
size_t entries(const char* dir) {
  size_t n = 0;
  if (DIR* d = opendir(dir)) {
    while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
  }
  return n;
}
size_t thread_count() { return entries("/proc/self/task"); }
size_t fd_count() { return entries("/proc/self/fd"); }

uint64_t rss_bytes() {
  std::ifstream f("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  f >> size >> resident;
  return resident * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
}

// An engine of `reactors` unpinned reactors (the tests run on any machine).
std::shared_ptr<Host> make_host(unsigned reactors) {
  HostOptions ho;
  ho.reactors = reactors;
  ho.placement = PlacementMode::unpinned;
  auto host = Host::create(ho);
  REQUIRE(host);
  return *host;
}

using test::Rig;
using test::run_io;

// The rig's target with `ports` ports and one subsystem of kNamespaces namespaces of 8 MiB.
Rig engine_rig(size_t ports = 2) {
  TargetOptions to = test::rig_target_options(ports);
  to.subsystems[0].namespaces.clear();
  for (int i = 0; i < kNamespaces; ++i) {
    TargetNamespace ns;
    ns.nsid = static_cast<uint32_t>(i + 1);
    ns.size_bytes = 8ull << 20;
    to.subsystems[0].namespaces.push_back(ns);
  }
  return Rig(to);
}

// A volume of namespace `nsid` over every port, on unpinned reactors (the tests run on any
// machine); not a test of silent paths.
VolumeOptions options(const Rig& rig, uint32_t nsid) {
  VolumeOptions vo = rig.volume_options();
  vo.nsid = nsid;
  vo.placement = PlacementMode::unpinned;
  vo.io_deadline = 5s;
  return vo;
}
// For the cases that check nothing failed over: a keep-alive timeout a loaded machine cannot
// miss (the shortest, 100 ms, can be when the control thread waits for a CPU).
VolumeOptions steady_options(const Rig& rig, uint32_t nsid) {
  VolumeOptions vo = options(rig, nsid);
  vo.connect.kato_ms = 5000;
  return vo;
}
// Connections the target accepted, and those still open, on its first two ports.
uint64_t connections_accepted(const Rig& rig) {
  return rig.stats(0).connections + (rig.to.ports.size() > 1 ? rig.stats(1).connections : 0);
}
uint64_t connections_live(const Rig& rig) {
  return rig.stats(0).live_connections + (rig.to.ports.size() > 1 ? rig.stats(1).live_connections : 0);
}

void check_clean(test::VerifiedWorkload& w, const char* what) {
  INFO(what << ": first error: " << w.first_error());
  CHECK(w.completed() > 0);
  CHECK(w.errors() == 0);
  CHECK(w.mismatches() == 0);
}

}  // namespace

TEST_CASE("volumes on one engine start no threads of their own", "[engine]") {
  Rig rig = engine_rig();
  auto host = make_host(2);
  const size_t with_engine = thread_count();
  const HostStats hs = host->stats();
  CHECK(hs.reactors == 2);
  CHECK(hs.volumes == 0);
  CHECK(hs.threads == hs.reactors + 4);  // the control thread and a pool of three

  std::vector<std::unique_ptr<Volume>> vols;
  for (int i = 0; i < kNamespaces; ++i) {
    auto v = Volume::open(host, options(rig, static_cast<uint32_t>(i + 1)));
    REQUIRE(v);
    vols.push_back(std::move(*v));
  }
  // Four volumes of two paths each: no reactor, control or pool thread more than the engine's
  // (the embedded target's connection threads are the only new ones: one per connection).
  const uint64_t connections = rig.target->stats(0).live_connections + rig.target->stats(1).live_connections;
  INFO("threads: engine " << with_engine << ", now " << thread_count() << ", target connections " << connections);
  CHECK(thread_count() <= with_engine + connections);
  CHECK(host->stats().volumes == kNamespaces);
  for (auto& v : vols) CHECK(v->stats().reactor_cpu_ns.size() == 2);

  vols.clear();
  CHECK(host->stats().volumes == 0);
}

TEST_CASE("an engine stopped as soon as it starts stops cleanly, its reactors spinning, sleeping or parked",
          "[engine][stop]") {
  // stop() raises the stop flag and then wakes each reactor; a reactor that sees the flag first
  // leaves its loop at once. Many short lives make that race likely; each must end whole (no
  // crash under the sanitizers) and leave no thread behind.
  const size_t before = thread_count();
  using Set = void (*)(HostOptions&);
  for (Set set : {Set{[](HostOptions& o) { o.poll = PollMode::busy; }},
                  Set{[](HostOptions& o) { o.poll = PollMode::sleep; }},
                  Set{[](HostOptions& o) { o.poll = PollMode::adaptive; }},
                  Set{[](HostOptions& o) {
                    o.poll = PollMode::busy;
                    o.caller_drive = true;
                  }}}) {
    for (int i = 0; i < 150; ++i) {
      HostOptions ho;
      ho.reactors = 2;
      ho.placement = PlacementMode::unpinned;
      set(ho);
      auto host = Host::create(ho);
      REQUIRE(host);
      if (i % 2 == 1) std::this_thread::yield();  // some reactors get to turn before the stop
    }
  }
  CHECK(thread_count() == before);
}

TEST_CASE("Volume::open shares the process's engine between volumes of the same options", "[engine]") {
  Rig rig = engine_rig();
  auto a = Volume::open(options(rig, 1));
  REQUIRE(a);
  const size_t one = thread_count();
  const uint64_t conns_one = connections_accepted(rig);
  auto b = Volume::open(options(rig, 2));
  REQUIRE(b);
  // The second volume is a namespace of a subsystem already connected: no connection, no thread
  // (on either side).
  CHECK(connections_accepted(rig) == conns_one);
  CHECK(thread_count() == one);
  HostOptions same;
  same.placement = PlacementMode::unpinned;
  auto ha = Host::shared(same);
  REQUIRE(ha);
  CHECK((*ha)->stats().volumes == 2);
  // The ring set-up and the spinning sockets are the engine's: asking for another is another engine.
  using Flip = void (*)(HostOptions&);
  for (Flip flip : {Flip{[](HostOptions& o) { o.single_issuer = false; }},
                    Flip{[](HostOptions& o) { o.spin_sockets = false; }}}) {
    HostOptions other = same;
    flip(other);
    auto ho = Host::shared(other);
    REQUIRE(ho);
    CHECK(ho->get() != ha->get());
    CHECK((*ho)->stats().volumes == 0);
  }
}

TEST_CASE("volumes of one subsystem share its controllers: a second namespace opens no connection",
          "[engine][shared]") {
  Rig rig = engine_rig();
  auto host = make_host(2);
  std::vector<std::unique_ptr<Volume>> vols;
  auto first = Volume::open(host, steady_options(rig, 1));
  REQUIRE(first);
  vols.push_back(std::move(*first));
  const uint64_t one = connections_accepted(rig);
  CHECK(one == 2 * (1 + 2));  // per path: the admin queue and one I/O queue per reactor
  for (int i = 1; i < kNamespaces; ++i) {
    auto v = Volume::open(host, steady_options(rig, static_cast<uint32_t>(i + 1)));
    REQUIRE(v);
    vols.push_back(std::move(*v));
  }
  CHECK(connections_accepted(rig) == one);
  CHECK(connections_live(rig) == one);
  HostStats hs = host->stats();
  CHECK(hs.volumes == kNamespaces);
  CHECK(hs.subsystems == 1);
  REQUIRE(hs.controllers.size() == 2);
  for (const auto& c : hs.controllers) {
    CHECK(c.volumes == kNamespaces);
    CHECK(c.state == PathState::live);
    CHECK(c.cntlid != 0);
  }
  // Each volume is its own namespace: verified data on all four at once.
  std::vector<std::unique_ptr<test::VerifiedWorkload>> work;
  for (auto& v : vols) work.push_back(std::make_unique<test::VerifiedWorkload>(*v, 8));
  for (auto& w : work) w->start();
  REQUIRE(test::wait_until([&] {
    for (auto& w : work)
      if (w->completed() < 300) return false;
    return true;
  }));
  for (auto& w : work) REQUIRE(w->finish(15s));
  for (size_t i = 0; i < work.size(); ++i) {
    INFO("namespace " << i + 1);
    check_clean(*work[i], "namespace");
    CHECK(vols[i]->ns().nsid == i + 1);
  }
  // Other settings (here the keep-alive) are other controllers.
  auto apart = Volume::open(host, options(rig, 1));
  REQUIRE(apart);
  CHECK(connections_accepted(rig) == 2 * one);
  CHECK(host->stats().subsystems == 2);
  apart->reset();
  // The last volume of a subsystem closes its controllers; the others keep them.
  vols.resize(1);
  hs = host->stats();
  CHECK(hs.subsystems == 1);
  for (const auto& c : hs.controllers) CHECK(c.volumes == 1);
  CHECK(test::wait_until([&] { return connections_live(rig) == one; }));
  vols.clear();
  CHECK(host->stats().subsystems == 0);
  CHECK(test::wait_until([&] { return connections_live(rig) == 0; }));
}

TEST_CASE("a partition or a blackhole fails over every namespace on the shared controller with one CCR",
          "[engine][faults]") {
  const FaultKind kind = GENERATE(FaultKind::partition, FaultKind::blackhole);
  INFO((kind == FaultKind::partition ? "partition" : "blackhole"));
  Rig rig = engine_rig();
  auto host = make_host(2);
  std::vector<std::unique_ptr<Volume>> vols;
  std::vector<std::unique_ptr<test::VerifiedWorkload>> work;
  for (int i = 0; i < kNamespaces; ++i) {
    // Found silent by its I/O (the lanes' deadline); a keep-alive timeout the target keeps the
    // controller for, so that the CCR finds it (one that ended by itself needs no reset).
    VolumeOptions vo = steady_options(rig, static_cast<uint32_t>(i + 1));
    vo.io_deadline = 0us;
    auto v = Volume::open(host, vo);
    REQUIRE(v);
    vols.push_back(std::move(*v));
    work.push_back(std::make_unique<test::VerifiedWorkload>(*vols.back(), 8));
  }
  for (auto& w : work) w->start();
  REQUIRE(test::wait_until([&] {
    for (auto& w : work)
      if (w->completed() < 200) return false;
    return true;
  }));
  const uint64_t ccr_before = rig.target->stats(1).ccr_received;
  rig.target->inject(0, kind);
  // One failover of the shared controller, seen by every namespace, fenced before writes moved.
  REQUIRE(test::wait_until([&] {
    for (auto& v : vols) {
      const auto t = v->stats().timeline;
      if (t.empty() || t.front().fenced_us < 0) return false;
    }
    return true;
  }));
  std::vector<uint64_t> at_fault;
  for (auto& w : work) at_fault.push_back(w->completed());
  REQUIRE(test::wait_until([&] {
    for (size_t i = 0; i < work.size(); ++i)
      if (work[i]->completed() < at_fault[i] + 200) return false;
    return true;
  }));
  rig.target->clear_faults(0);
  for (auto& w : work) REQUIRE(w->finish(15s));
  const auto st = vols[0]->stats();
  INFO(to_text(st));
  size_t failovers_of_path0 = 0;
  for (const auto& e : st.timeline) failovers_of_path0 += e.path == 0;
  for (size_t i = 0; i < work.size(); ++i) {
    INFO("namespace " << i + 1);
    check_clean(*work[i], "namespace");
    CHECK(vols[i]->stats().failed == 0);
    CHECK(vols[i]->stats().timeline.size() == st.timeline.size());  // the controllers' failovers
  }
  CHECK(failovers_of_path0 >= 1);
  CHECK(st.timeline.front().fence_rule == std::string("ccr"));
  // One Cross-Controller Reset per failed controller, not one per namespace.
  CHECK(rig.target->stats(1).ccr_received - ccr_before == failovers_of_path0);
}

TEST_CASE("a thousand volumes opened and closed on a connected subsystem leave nothing behind", "[engine][shared]") {
  Rig rig = engine_rig();
  auto host = make_host(1);
  auto keep = Volume::open(host, steady_options(rig, 1));
  REQUIRE(keep);
  std::vector<uint8_t> buf(4096);
  auto cycle = [&](int i) {
    auto v = Volume::open(host, steady_options(rig, 2));
    REQUIRE(v);
    // Usable each time: a block written and read back.
    const uint32_t bs = (*v)->block_size();
    std::fill(buf.begin(), buf.begin() + bs, static_cast<uint8_t>(i));
    const uint64_t lba = static_cast<uint64_t>(i) % 64;
    REQUIRE(run_io(**v, IoOp::write, buf.data(), lba, 1).is_success());
    std::fill(buf.begin(), buf.begin() + bs, uint8_t{0});
    REQUIRE(run_io(**v, IoOp::read, buf.data(), lba, 1).is_success());
    REQUIRE(buf[bs - 1] == static_cast<uint8_t>(i));
  };
  for (int i = 0; i < 50; ++i) cycle(i);  // what the first ones allocate for good
  const size_t fds = fd_count(), threads = thread_count();
  const uint64_t rss = rss_bytes(), accepted = connections_accepted(rig);
  for (int i = 0; i < 1000; ++i) cycle(i);
  const double grew_mib = (static_cast<double>(rss_bytes()) - static_cast<double>(rss)) / (1 << 20);
  INFO("descriptors " << fds << " -> " << fd_count() << ", threads " << threads << " -> " << thread_count()
                      << ", RSS grew " << grew_mib << " MiB");
  CHECK(fd_count() == fds);
  CHECK(thread_count() == threads);
  CHECK(connections_accepted(rig) == accepted);  // not one connection for a thousand volumes
#if defined(__SANITIZE_ADDRESS__)
  // AddressSanitizer holds freed memory in its quarantine (256 MiB by default) on purpose: the
  // release run is the one that measures memory.
  (void)grew_mib;
#else
  CHECK(grew_mib < 4.0);
#endif
  CHECK(host->stats().volumes == 1);
  CHECK((*keep)->stats().timeline.empty());
}

TEST_CASE("namespaces on one engine move verified data through a path reset", "[engine][faults]") {
  Rig rig = engine_rig();
  auto host = make_host(2);
  std::vector<std::unique_ptr<Volume>> vols;
  std::vector<std::unique_ptr<test::VerifiedWorkload>> work;
  for (int i = 0; i < kNamespaces; ++i) {
    auto v = Volume::open(host, options(rig, static_cast<uint32_t>(i + 1)));
    REQUIRE(v);
    vols.push_back(std::move(*v));
    work.push_back(std::make_unique<test::VerifiedWorkload>(*vols.back(), 8));
  }
  for (auto& w : work) w->start();
  REQUIRE(test::wait_until([&] {
    for (auto& w : work)
      if (w->completed() < 200) return false;
    return true;
  }));
  rig.target->inject(0, FaultKind::reset);
  // Every namespace sees the path fail and keeps going on the other one.
  REQUIRE(test::wait_until([&] {
    for (auto& v : vols)
      if (v->stats().timeline.empty()) return false;
    return true;
  }));
  std::vector<uint64_t> at_reset;
  for (auto& w : work) at_reset.push_back(w->completed());
  REQUIRE(test::wait_until([&] {
    for (size_t i = 0; i < work.size(); ++i)
      if (work[i]->completed() < at_reset[i] + 200) return false;
    return true;
  }));
  for (auto& w : work) REQUIRE(w->finish(15s));
  for (size_t i = 0; i < work.size(); ++i) {
    INFO("namespace " << i + 1 << ": " << to_text(vols[i]->stats()));
    check_clean(*work[i], "namespace");
    CHECK(vols[i]->stats().failed == 0);
  }
}

TEST_CASE("a volume closing and reopening disturbs none of the others on its engine", "[engine]") {
  Rig rig = engine_rig();
  auto host = make_host(2);
  auto keep = Volume::open(host, steady_options(rig, 1));
  REQUIRE(keep);
  test::VerifiedWorkload w(**keep, 8);
  w.start();
  const uint64_t accepted = connections_accepted(rig);
  for (int round = 0; round < 20; ++round) {
    auto v = Volume::open(host, steady_options(rig, 2));  // on the same controllers
    REQUIRE(v);
    // Its own blocks each round: a workload checks what it reads against its own writes only.
    test::VerifiedWorkload other(**v, 2, 32, static_cast<uint64_t>(round) * 64);
    other.start();
    REQUIRE(test::wait_until([&] { return other.completed() >= 20; }));
    REQUIRE(other.finish(15s));
    check_clean(other, "reopened volume");
  }
  CHECK(connections_accepted(rig) == accepted);
  REQUIRE(w.finish(15s));
  check_clean(w, "volume kept open");
  INFO(to_text((*keep)->stats()));
  CHECK((*keep)->stats().failed == 0);
  CHECK((*keep)->stats().timeline.empty());
}

// Closing a volume finishes its I/O first: every write accepted by submit() completes, successfully,
// before the volume's destructor returns, including those still queued for the reactor (submitted
// from this thread, they reach the lane through its post ring), and their data is on the target.
TEST_CASE("closing a volume completes its I/O first, even I/O not yet taken by the reactor", "[engine][close]") {
  Rig rig = engine_rig();
  auto host = make_host(1);
  auto keep = Volume::open(host, steady_options(rig, 1));
  REQUIRE(keep);
  test::VerifiedWorkload w(**keep, 8);
  w.start();
  constexpr uint32_t kWrites = 512;
  struct Tally {
    std::atomic<uint32_t> ok{0}, failed{0};
  } tally;
  for (int round = 0; round < 5; ++round) {
    auto v = Volume::open(host, steady_options(rig, 2));
    REQUIRE(v);
    const uint32_t bs = (*v)->block_size();
    std::vector<uint8_t> data(static_cast<size_t>(kWrites) * bs);
    for (uint32_t i = 0; i < kWrites; ++i)
      std::fill_n(data.begin() + static_cast<std::ptrdiff_t>(i) * bs, bs, static_cast<uint8_t>(i * 7 + round + 1));
    std::vector<VolumeIo> ios(kWrites);
    tally.ok = 0;
    tally.failed = 0;
    for (uint32_t i = 0; i < kWrites; ++i) {
      VolumeIo& io = ios[i];
      io.op = IoOp::write;
      io.slba = i;
      io.nlb = 1;
      io.buf = data.data() + static_cast<size_t>(i) * bs;
      io.user = &tally;
      io.done = [](VolumeIo& x, NvmeStatus s) noexcept {
        auto* t = static_cast<Tally*>(x.user);
        (s.is_success() ? t->ok : t->failed).fetch_add(1);
      };
      REQUIRE((*v)->submit(io) == 0);
    }
    v->reset();  // at once: most of the writes are still queued or in flight
    INFO("round " << round);
    CHECK(tally.failed.load() == 0);
    REQUIRE(tally.ok.load() == kWrites);
    // What was written is what the namespace holds.
    auto again = Volume::open(host, steady_options(rig, 2));
    REQUIRE(again);
    std::vector<uint8_t> back(static_cast<size_t>(kWrites) * bs);
    REQUIRE(run_io(**again, IoOp::read, back.data(), 0, kWrites).is_success());
    CHECK(back == data);
  }
  REQUIRE(w.finish(15s));
  check_clean(w, "volume kept open");
}

TEST_CASE("a namespace that does not exist fails its open and disturbs nothing", "[engine]") {
  Rig rig = engine_rig();
  auto host = make_host(1);
  auto keep = Volume::open(host, steady_options(rig, 1));
  REQUIRE(keep);
  test::VerifiedWorkload w(**keep, 4);
  w.start();
  auto bad = Volume::open(host, steady_options(rig, 99));  // on the connected controllers
  REQUIRE_FALSE(bad);
  auto bad_apart = Volume::open(host, options(rig, 99));  // on controllers of its own
  REQUIRE_FALSE(bad_apart);
  CHECK(host->stats().subsystems == 1);
  CHECK(host->stats().volumes == 1);
  REQUIRE(test::wait_until([&] { return w.completed() >= 100; }));
  REQUIRE(w.finish(15s));
  check_clean(w, "volume beside the failed open");
  INFO(to_text((*keep)->stats()));
  CHECK((*keep)->stats().timeline.empty());
}

TEST_CASE("a namespace bound on connected controllers takes their current ANA state", "[engine][ana]") {
  // The second volume's ANA state comes from the controller's newest ANA log (read at its connect
  // or its last refresh), not from a read of its own: it must be the state after a change.
  Rig rig = engine_rig();
  auto host = make_host(1);
  auto first = Volume::open(host, steady_options(rig, 1));
  REQUIRE(first);
  CHECK((*first)->stats().paths[1].ana_state == AnaState::optimized);
  rig.target->set_ana_state(1, AnaState::inaccessible);
  REQUIRE(test::wait_until([&] { return (*first)->stats().paths[1].ana_state == AnaState::inaccessible; }));
  auto second = Volume::open(host, steady_options(rig, 2));
  REQUIRE(second);
  CHECK(host->stats().subsystems == 1);
  CHECK((*second)->stats().paths[1].ana_state == AnaState::inaccessible);
  CHECK((*second)->stats().paths[0].ana_state == AnaState::optimized);
  // And back: both volumes follow, and one opened now sees it too.
  rig.target->set_ana_state(1, AnaState::optimized);
  REQUIRE(test::wait_until([&] { return (*second)->stats().paths[1].ana_state == AnaState::optimized; }));
  auto third = Volume::open(host, steady_options(rig, 3));
  REQUIRE(third);
  CHECK((*third)->stats().paths[1].ana_state == AnaState::optimized);
  CHECK((*first)->stats().paths[1].ana_state == AnaState::optimized);
  // Every volume's I/O goes by those states: verified data on all three.
  test::VerifiedWorkload w1(**first, 4), w3(**third, 4);
  w1.start();
  w3.start();
  REQUIRE(test::wait_until([&] { return w1.completed() >= 100 && w3.completed() >= 100; }));
  REQUIRE(w1.finish(15s));
  REQUIRE(w3.finish(15s));
  check_clean(w1, "first volume");
  check_clean(w3, "third volume");
}

TEST_CASE("a passthrough path needs an engine with big ring entries", "[engine]") {
  auto host = make_host(1);
  VolumeOptions vo;
  TransportAddress a;
  a.transport = Transport::passthrough;
  a.traddr = "/dev/ng0n1";
  vo.paths.push_back(a);
  vo.connect.subnqn = "nqn.2024-01.io.nvmeof:target";
  auto v = Volume::open(host, vo);
  REQUIRE_FALSE(v);
  CHECK(v.error() == make_error_code(Errc::invalid_argument));
  HostOptions none;
  none.reactors = 0;
  CHECK_FALSE(Host::create(none));
}

// Traffic-based keep-alive: the embedded target reports TBKAS, so while commands complete on a
// controller the host sends no Keep Alive (each completed command restarts the controller's
// timer); idle, it sends them again, so a silent controller is still found. Counted on the
// target, the same wall time idle and busy side by side (a loaded machine delays both alike).
TEST_CASE("keep-alive is traffic based: none while I/O completes, again when idle", "[engine][keepalive]") {
  Rig rig = engine_rig(1);
  auto v = Volume::open(options(rig, 1));
  REQUIRE(v);
  auto kas = [&] { return rig.target->stats(0).keep_alive_commands; };
  // A short wait first: the first turns of the connection are not what is measured.
  REQUIRE(test::wait_until([&] { return kas() >= 1; }));

  const uint64_t idle0 = kas();
  std::this_thread::sleep_for(1s);
  const uint64_t idle = kas() - idle0;
  // The stats say the rate per controller: idle, about one every KATO / 4 (never more).
  double idle_rate = 0;
  REQUIRE(test::wait_until([&] { return (idle_rate = (*v)->stats().paths.at(0).keep_alives_per_s) > 0; }));
  CHECK(idle_rate <= 60);  // 40 a second at the 100 ms KATO; a window never counts more than were sent
  {
    const HostStats hs = (*v)->host()->stats();
    REQUIRE(hs.controllers.size() == 1);
    CHECK(hs.controllers[0].keep_alives_per_s > 0);
  }

  test::VerifiedWorkload w(**v, 4);
  w.start();
  REQUIRE(test::wait_until([&] { return w.completed() >= 100; }));
  const uint64_t busy0 = kas();
  const uint64_t done0 = w.completed();
  std::this_thread::sleep_for(1s);
  const uint64_t busy = kas() - busy0;
  const uint64_t done = w.completed() - done0;
  // While commands complete, a whole window passes with (almost) none sent.
  double busy_rate = idle_rate;
  CHECK(test::wait_until([&] { return (busy_rate = (*v)->stats().paths.at(0).keep_alives_per_s) * 4 <= idle_rate; }));
  REQUIRE(w.finish(15s));
  check_clean(w, "workload");
  const auto st = (*v)->stats();
  INFO("keep-alives over 1 s: idle " << idle << ", busy " << busy << " (" << done << " I/Os); host counted "
                                     << st.paths.at(0).keep_alives << "; the stats' rate idle " << idle_rate
                                     << "/s, busy " << busy_rate << "/s");
  CHECK(idle >= 4);            // KATO 100 ms: one every 25 ms when nothing else shows life
  CHECK(done > 100);           // commands did flow all along
  CHECK(busy * 4 <= idle);     // without the traffic rule, busy sends as many as idle
  CHECK(st.paths.at(0).keep_alives >= idle);
}

namespace {

// The library's log lines, kept while in scope (the sink is process-wide).
struct LogLines {
  std::mutex mu;
  std::vector<std::string> lines;
  LogLines() {
    detail::set_log_sink([](int, const char* msg, void* ctx) {
      auto* self = static_cast<LogLines*>(ctx);
      std::lock_guard lock(self->mu);
      self->lines.emplace_back(msg);
    }, this);
  }
  ~LogLines() { detail::set_log_sink(nullptr, nullptr); }
  size_t count(const std::string& needle) {
    std::lock_guard lock(mu);
    return static_cast<size_t>(std::count_if(lines.begin(), lines.end(), [&](const std::string& l) {
      return l.find(needle) != std::string::npos;
    }));
  }
};

}  // namespace

TEST_CASE("each controller's write-fence bound is known at connect and said when over budget", "[engine][fence]") {
  struct Case {
    const char* name;
    CcrSupport ccr;
    bool report_cqt;
    const char* rule;
    const char* why;  // in the log line; nullptr: no line (within the budget)
  };
  const Case cases[] = {
      {"CCR", CcrSupport::enabled, true, "ccr", nullptr},
      {"no CCR, CQT reported", CcrSupport::disabled, true, "kato+cqt", "has no cross-controller reset (CCR), so"},
      {"no CCR, no CQT", CcrSupport::disabled, false, "kato+bound", "reports no command quiesce time (CQT)"},
  };
  for (const Case& c : cases) {
    SECTION(c.name) {
      TargetOptions to;
      to.ports.assign(2, TargetPort{});
      for (auto& p : to.ports) p.trsvcid = "0";
      to.ccr = c.ccr;
      to.report_cqt = c.report_cqt;
      auto target = Target::start(to);
      REQUIRE(target);
      VolumeOptions vo;
      for (size_t p = 0; p < 2; ++p) vo.paths.push_back(*TransportAddress::parse((*target)->port_address(p)));
      vo.connect.subnqn = to.subsystems[0].nqn;
      vo.placement = PlacementMode::unpinned;
      LogLines log;
      auto host = make_host(1);
      auto vol = Volume::open(host, vo);
      REQUIRE(vol);
      const VolumeStats st = (*vol)->stats();
      INFO(to_text(st));
      for (const PathStats& p : st.paths) {
        CHECK(p.write_fence_rule == c.rule);
        if (c.why) {
          CHECK(p.write_fence_ms > 2 * 100 + 10);  // 2 or 3 x KATO (100 ms) + CQT or its stand-in
        } else {
          CHECK(p.write_fence_ms == to.cqt_ms);  // a CCR waits for the target's quiesce only
        }
      }
      for (const HostControllerStats& h : host->stats().controllers) {
        CHECK(h.write_fence_rule == c.rule);
        CHECK(h.write_fence_ms == st.paths.at(0).write_fence_ms);
      }
      // Said once per path at connect when over the 50 ms budget, with the reason.
      CHECK(log.count("may wait up to") == (c.why ? 2u : 0u));
      if (c.why) CHECK(log.count(c.why) == 2u);
    }
  }
}

TEST_CASE("a caller drives its volume's reactor: I/O and a failover complete in its turns, then the thread takes it back",
          "[engine][drive]") {
  const bool allowed = GENERATE(true, false);
  INFO("caller_drive: " << allowed);
  Rig rig = engine_rig();
  HostOptions ho;
  ho.reactors = 1;
  ho.placement = PlacementMode::unpinned;
  ho.caller_drive = allowed;
  auto made = Host::create(ho);
  REQUIRE(made);
  auto host = *made;
  auto v = Volume::open(host, options(rig, 1));
  REQUIRE(v);
  Volume& vol = **v;
  test::VerifiedWorkload w(vol, 8);
  w.start();
  auto driven = [&] { return host->stats().reactor_driven_turns.at(0); };
  auto parks = [&] { return host->stats().reactor_parks.at(0); };
  if (!allowed) {
    // The negative control: no turn is run by the caller; the reactor's thread does the work.
    CHECK_FALSE(vol.drive([] { return true; }, 100ms));
    REQUIRE(test::wait_until([&] { return w.completed() >= 500; }));
    CHECK(driven() == 0);
    CHECK(parks() == 0);
    REQUIRE(w.finish(15s));
    check_clean(w, "not driven");
    return;
  }
  // Completions come in the turns this thread runs (the predicate sees them grow meanwhile).
  const uint64_t c0 = w.completed();
  REQUIRE(vol.drive([&] { return w.completed() >= c0 + 500; }, 20s));
  CHECK(w.completed() >= c0 + 500);
  CHECK(driven() > 0);
  CHECK(parks() >= 1);
  // No deadline (microseconds::max(), saturated rather than wrapped into the past): the drive
  // ends only when its predicate holds, here after 1,000 calls of it.
  int calls = 0;
  REQUIRE(vol.drive([&] { return ++calls >= 1000; }, std::chrono::microseconds::max()));
  CHECK(calls == 1000);
  // While this thread drives, another thread cannot: its drive() returns false at once.
  std::optional<bool> other;
  REQUIRE(vol.drive(
      [&] {
        if (!other) other = std::async(std::launch::async, [&] { return vol.drive([] { return true; }, 1s); }).get();
        return true;
      },
      20s));
  REQUIRE(other.has_value());
  CHECK_FALSE(*other);
  // A path reset while a caller drives: the failover runs in the caller's turns too.
  rig.target->inject(0, FaultKind::reset);
  const uint64_t c1 = w.completed();
  REQUIRE(vol.drive([&] { return !vol.stats().timeline.empty() && w.completed() >= c1 + 500; }, 20s));
  CHECK(!vol.stats().timeline.empty());
  // Nobody drives now: the reactor's thread takes the reactor back after the lease and the
  // workload goes on without this thread.
  const uint64_t turns = driven();
  const uint64_t c2 = w.completed();
  REQUIRE(test::wait_until([&] { return w.completed() >= c2 + 500; }));
  CHECK(driven() == turns);
  REQUIRE(w.finish(15s));
  INFO(to_text(vol.stats()));
  check_clean(w, "driven");
  CHECK(vol.stats().failed == 0);
}
