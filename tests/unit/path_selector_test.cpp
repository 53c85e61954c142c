#include <catch2/catch.hpp>

#include <map>
#include <vector>

#include "multipath/path_selector.hpp"

using namespace nvmeof;
using namespace nvmeof::detail;

namespace {
std::map<int, int> spread(SelectorKind k, std::vector<PathView> paths, int n, uint32_t rr = 1) {
  SelectorState st;
  std::map<int, int> count;
  for (int i = 0; i < n; ++i) ++count[select_path(k, paths, st, rr, 4096)];
  return count;
}
PathView path(AnaState a = AnaState::optimized, uint32_t outstanding = 0) {
  PathView p;
  p.ana = a;
  p.outstanding = outstanding;
  p.outstanding_bytes = outstanding * 4096ull;
  return p;
}
}  // namespace

TEST_CASE("optimized paths first, then non-optimized, never the others", "[selector]") {
  for (auto k : {SelectorKind::round_robin, SelectorKind::queue_depth, SelectorKind::numa, SelectorKind::service_time}) {
    auto c = spread(k, {path(AnaState::non_optimized), path(AnaState::optimized), path(AnaState::inaccessible)}, 10);
    CHECK(c[1] == 10);
    c = spread(k, {path(AnaState::non_optimized), path(AnaState::change), path(AnaState::persistent_loss)}, 10);
    CHECK(c[0] == 10);
    c = spread(k, {path(AnaState::inaccessible), path(AnaState::change)}, 3);
    CHECK(c[-1] == 3);
    std::vector<PathView> p = {path(), path()};
    p[0].use = PathUse::unusable;
    c = spread(k, p, 4);
    CHECK(c[1] == 4);
  }
}

TEST_CASE("round-robin alternates, honouring I/Os per turn", "[selector]") {
  auto c = spread(SelectorKind::round_robin, {path(), path(), path()}, 30);
  CHECK(c[0] == 10);
  CHECK(c[1] == 10);
  CHECK(c[2] == 10);
  SelectorState st;
  std::vector<PathView> p = {path(), path()};
  std::vector<int> seq;
  for (int i = 0; i < 8; ++i) seq.push_back(select_path(SelectorKind::round_robin, p, st, 4, 4096));
  CHECK(seq == std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1});
  // A busy path still gets its share: round-robin ignores load.
  c = spread(SelectorKind::round_robin, {path(AnaState::optimized, 100), path()}, 20);
  CHECK(c[0] == 10);
}

TEST_CASE("queue-depth picks the fewest outstanding", "[selector]") {
  auto c = spread(SelectorKind::queue_depth, {path(AnaState::optimized, 5), path(AnaState::optimized, 1), path(AnaState::optimized, 3)}, 5);
  CHECK(c[1] == 5);
}

TEST_CASE("service-time prefers the faster path at equal load", "[selector]") {
  PathView slow = path(AnaState::optimized, 4), fast = path(AnaState::optimized, 4);
  slow.bytes_per_ns = 0.1;
  slow.latency_ns = 5e6;
  fast.bytes_per_ns = 2.0;
  fast.latency_ns = 50e3;
  auto c = spread(SelectorKind::service_time, {slow, fast}, 10);
  CHECK(c[1] == 10);
  // Distance breaks an exact tie.
  PathView a = path(), b = path();
  a.distance = 20;
  b.distance = 10;
  SelectorState st;
  std::vector<PathView> v = {a, b};
  CHECK(select_path(SelectorKind::service_time, v, st, 1, 4096) == 1);
}

TEST_CASE("numa picks the nearest node first", "[selector]") {
  PathView near = path(AnaState::optimized, 9), far = path();
  near.distance = 10;
  far.distance = 21;
  auto c = spread(SelectorKind::numa, {far, near}, 6);
  CHECK(c[1] == 6);
  // A non-optimized local path loses to an optimized remote one.
  near.ana = AnaState::non_optimized;
  c = spread(SelectorKind::numa, {far, near}, 6);
  CHECK(c[0] == 6);
}

TEST_CASE("exclude skips the failed path unless it is the only one", "[selector]") {
  SelectorState st;
  std::vector<PathView> p = {path(), path()};
  for (auto k : {SelectorKind::round_robin, SelectorKind::queue_depth, SelectorKind::service_time}) {
    for (int i = 0; i < 4; ++i) CHECK(select_path(k, p, st, 1, 4096, 0) == 1);
  }
  std::vector<PathView> one = {path()};
  CHECK(select_path(SelectorKind::queue_depth, one, st, 1, 4096, 0) == 0);
  // A non-optimized alternative beats retrying the excluded optimized path.
  std::vector<PathView> mixed = {path(), path(AnaState::non_optimized)};
  CHECK(select_path(SelectorKind::service_time, mixed, st, 1, 4096, 0) == 1);
}
