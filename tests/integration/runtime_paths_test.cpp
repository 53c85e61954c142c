// Paths added to and removed from an open volume at run time (ARCHITECTURE.md, "Paths at run
// time"), against the embedded target, each under a verified read/write workload: the new path
// carries I/O once live, a removed one drains and closes, and the application sees no error and
// no wrong data either way.
#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <set>

#include "../common/rig.hpp"
#include "../common/verified_workload.hpp"
#include "nvmeof/target.hpp"
#include "nvmeof/volume.hpp"

using namespace nvmeof;
using namespace std::chrono_literals;

namespace {

using test::Rig;
using test::VerifiedWorkload;

const PathStats* find_path(const VolumeStats& s, int index) {
  for (const auto& p : s.paths)
    if (p.index == index) return &p;
  return nullptr;
}

// Waits (bounded) until path `index` is listed and `pred` holds for it; what it showed last, or
// nullopt when it was never listed.
template <class Pred>
std::optional<PathStats> path_when(const Volume& v, int index, Pred&& pred) {
  std::optional<PathStats> seen;
  test::wait_until([&] {
    const VolumeStats st = v.stats();
    const PathStats* p = find_path(st, index);
    seen = p ? std::optional<PathStats>(*p) : std::nullopt;
    return seen && pred(*seen);
  }, 20s);
  return seen;
}

// Runs until `more` further I/Os have completed (bounded).
bool completes_more(const VerifiedWorkload& w, uint64_t more) {
  const uint64_t from = w.completed();
  return test::wait_until([&] { return w.completed() >= from + more; }, 20s);
}

void start_moving(VerifiedWorkload& w) {
  w.start();
  REQUIRE(completes_more(w, 200));
}

void finish_clean(VerifiedWorkload& w) {
  REQUIRE(w.finish(20s));
  INFO(w.first_error());
  CHECK(w.errors() == 0);
  CHECK(w.mismatches() == 0);
}

uint64_t port_io(const Rig& rig, size_t port) { return rig.stats(port).reads + rig.stats(port).writes; }

}  // namespace

TEST_CASE("a path added to an open volume connects in the background and carries its share", "[paths]") {
  Rig rig(test::rig_target_options(3));
  auto vo = rig.volume_options();
  vo.paths.resize(2);  // port 2 is there to be added
  rig.open(vo);
  VerifiedWorkload w(*rig.vol);
  start_moving(w);
  CHECK(rig.vol->stats().paths.size() == 2);

  auto added = rig.vol->add_path(rig.addr(2));
  REQUIRE(added);
  CHECK(*added == 2);
  const auto p2 = path_when(*rig.vol, 2, [](const PathStats& p) { return p.state == PathState::live && p.ios > 100; });
  REQUIRE(p2);
  CHECK(p2->state == PathState::live);
  CHECK(p2->ios > 100);
  CHECK(port_io(rig, 2) > 100);  // the target saw them on that port
  CHECK(rig.vol->stats().paths.size() == 3);

  // The same address again is refused, nothing changes.
  auto again = rig.vol->add_path(rig.addr(2));
  REQUIRE_FALSE(again);
  CHECK(again.error() == std::errc::file_exists);
  CHECK(rig.vol->stats().paths.size() == 3);
  finish_clean(w);
}

TEST_CASE("a path removed under load drains, closes its controller and loses no I/O; added back it returns",
          "[paths]") {
  Rig rig(3);
  VerifiedWorkload w(*rig.vol, 32);
  start_moving(w);
  const auto p0 = path_when(*rig.vol, 0, [](const PathStats& p) { return p.ios > 50; });
  REQUIRE(p0);
  REQUIRE(p0->ios > 50);  // it was carrying I/O when it went
  const uint64_t errors_before = w.errors();

  REQUIRE(rig.vol->remove_path(rig.addr(0)));
  // Gone at once from the stats, and its controller closed on the target.
  const auto after = rig.vol->stats();
  CHECK(find_path(after, 0) == nullptr);
  CHECK(after.paths.size() == 2);
  CHECK(test::wait_until([&] { return rig.stats(0).live_connections == 0; }, 20s));
  const uint64_t port0_commands = rig.stats(0).commands;
  REQUIRE(completes_more(w, 500));  // the other two carry on
  CHECK(rig.stats(0).commands == port0_commands);
  CHECK(w.errors() == errors_before);
  for (const auto& p : rig.vol->stats().paths) CHECK(p.failovers == 0);  // nothing counted it a failure

  // Removing it again: ENOENT.
  auto twice = rig.vol->remove_path(rig.addr(0));
  REQUIRE_FALSE(twice);
  CHECK(twice.error() == std::errc::no_such_file_or_directory);

  // Added back, it takes its old index and carries I/O again.
  auto back = rig.vol->add_path(rig.addr(0));
  REQUIRE(back);
  CHECK(*back == 0);
  const auto again = path_when(*rig.vol, 0, [](const PathStats& p) { return p.state == PathState::live; });
  REQUIRE(again);
  CHECK(again->state == PathState::live);
  const uint64_t port0_then = port_io(rig, 0);
  CHECK(test::wait_until([&] { return port_io(rig, 0) > port0_then + 50; }, 20s));
  finish_clean(w);
}

TEST_CASE("a path removed while it fails is gone only once its old controller is fenced", "[paths]") {
  Rig rig(2);
  VerifiedWorkload w(*rig.vol, 16);
  start_moving(w);
  rig.target->inject(1, FaultKind::partition);
  // Its silence fails it (the failover machine's rules, unchanged by the removal, the unit tests
  // cover a failure that starts while it drains); removed then, it waits for its fence.
  const auto failed = path_when(*rig.vol, 1, [](const PathStats& p) { return p.failovers > 0; });
  REQUIRE(failed);
  REQUIRE(failed->failovers > 0);
  REQUIRE(rig.vol->remove_path(rig.addr(1)));
  // remove_path returned only once the path's old controller could execute nothing more: the
  // failover it went through was fenced (by a CCR through path 0, or the hold).
  const auto s = rig.vol->stats();
  CHECK(find_path(s, 1) == nullptr);
  bool fenced = false;
  for (const auto& e : s.timeline)
    if (e.path == 1) fenced |= e.fenced_us >= 0 && !e.fence_rule.empty() && e.fence_rule != "skipped (unsafe)";
  CHECK(fenced);
  REQUIRE(completes_more(w, 300));
  rig.target->clear_faults(1);
  finish_clean(w);
}

TEST_CASE("an unreachable path added is retried without disturbing I/O, and can be removed", "[paths]") {
  Rig rig(2);
  VerifiedWorkload w(*rig.vol, 16);
  start_moving(w);
  TransportAddress nowhere;
  nowhere.traddr = "127.0.0.1";
  nowhere.trsvcid = "1";  // nothing listens there: refused
  auto added = rig.vol->add_path(nowhere);
  REQUIRE(added);
  const auto p = path_when(*rig.vol, *added, [](const PathStats& q) { return q.connect_failures >= 2; });
  REQUIRE(p);
  CHECK(p->state != PathState::live);
  CHECK(p->connect_failures >= 2);
  CHECK_FALSE(p->last_connect_error.empty());
  REQUIRE(completes_more(w, 200));
  REQUIRE(rig.vol->remove_path(nowhere));
  CHECK(find_path(rig.vol->stats(), *added) == nullptr);
  CHECK(rig.vol->usable_paths() == 2);
  finish_clean(w);
}

TEST_CASE("every path of a volume removed: I/O waits, and a path added back carries it, nothing failed",
          "[paths]") {
  Rig rig(2);
  VerifiedWorkload w(*rig.vol, 8);
  start_moving(w);
  REQUIRE(rig.vol->remove_path(rig.addr(0)));
  REQUIRE(rig.vol->remove_path(rig.addr(1)));
  CHECK(rig.vol->usable_paths() == 0);
  CHECK(rig.vol->stats().paths.empty());
  REQUIRE(rig.vol->add_path(rig.addr(1)));
  REQUIRE(completes_more(w, 200));  // the I/O that waited (within no_path_timeout) went on
  finish_clean(w);
}

TEST_CASE("paths come and go past kMaxPaths addresses: a new one takes a removed one's index", "[paths]") {
  Rig rig(2);
  VerifiedWorkload w(*rig.vol, 8);
  start_moving(w);
  std::set<int> indexes;
  for (unsigned i = 0; i < Volume::kMaxPaths + 4; ++i) {
    TransportAddress a;
    a.traddr = "127.0.0.1";
    a.trsvcid = std::to_string(2 + i);  // nothing listens: refused, retried in the background
    auto added = rig.vol->add_path(a);
    INFO("round " << i << ": " << added.message());
    REQUIRE(added);
    indexes.insert(*added);
    REQUIRE(rig.vol->remove_path(a));
  }
  CHECK(indexes.size() <= Volume::kMaxPaths);
  // At once, no more than kMaxPaths: the 17th live path is refused.
  std::vector<TransportAddress> held;
  for (unsigned i = 0; i < Volume::kMaxPaths - 2; ++i) {
    TransportAddress a;
    a.traddr = "127.0.0.1";
    a.trsvcid = std::to_string(100 + i);
    REQUIRE(rig.vol->add_path(a));
    held.push_back(a);
  }
  TransportAddress one_more;
  one_more.trsvcid = "99";
  auto refused = rig.vol->add_path(one_more);
  REQUIRE_FALSE(refused);
  CHECK(refused.error() == std::errc::no_space_on_device);
  for (const auto& a : held) REQUIRE(rig.vol->remove_path(a));
  REQUIRE(completes_more(w, 200));
  finish_clean(w);
  const auto s = rig.vol->stats();
  CHECK(s.paths.size() == 2);  // the two it opened with, carrying on
}
