#include <catch2/catch.hpp>

#include <cstdint>

#include "core/spin_governor.hpp"

using nvmeof::detail::SpinGovernor;

namespace {

constexpr uint64_t kUs = 1000;
constexpr uint64_t kMs = 1000 * kUs;

// Spinning turns `step` apart from `t`, each taking `work`; returns the time after the last one.
uint64_t spin(SpinGovernor& g, uint64_t t, int turns, uint64_t step, uint64_t work = 0) {
  for (int i = 0; i < turns; ++i) {
    g.turn_start(t);
    g.turn_end(t + work);
    t += work + step;
  }
  return t;
}

}  // namespace

TEST_CASE("a spin that keeps its CPU goes on", "[spin_governor]") {
  SpinGovernor g;
  const uint64_t t = spin(g, 10 * kMs, 100'000, 1 * kUs);
  CHECK(g.may_spin(t));
  CHECK(g.preemptions() == 0);
}

TEST_CASE("a turn's own work is not a preemption", "[spin_governor]") {
  SpinGovernor g;
  // Completion callbacks that run 5 ms inside each turn: the gaps between turns stay short.
  const uint64_t t = spin(g, 10 * kMs, 10, 1 * kUs, 5 * kMs);
  CHECK(g.may_spin(t));
  CHECK(g.preemptions() == 0);
}

TEST_CASE("a spin that lost its CPU stops and none starts until the backoff passed", "[spin_governor]") {
  SpinGovernor g;
  uint64_t t = spin(g, 10 * kMs, 10, 1 * kUs);
  // Preempted between two turns for 2 ms.
  t += 2 * kMs;
  g.turn_start(t);
  CHECK(g.preemptions() == 1);
  CHECK_FALSE(g.may_spin(t));
  CHECK_FALSE(g.may_spin(t + SpinGovernor::kBackoffNs - 1));
  CHECK(g.may_spin(t + SpinGovernor::kBackoffNs));
}

TEST_CASE("a gap just under the threshold is not a preemption", "[spin_governor]") {
  SpinGovernor g;
  g.turn_start(10 * kMs);
  g.turn_end(10 * kMs);
  g.turn_start(10 * kMs + SpinGovernor::kPreemptedNs - 1);
  CHECK(g.may_spin(10 * kMs + SpinGovernor::kPreemptedNs));
  CHECK(g.preemptions() == 0);
}

TEST_CASE("a sleep between turns is not a preemption", "[spin_governor]") {
  SpinGovernor g;
  uint64_t t = spin(g, 10 * kMs, 10, 1 * kUs);
  g.stopped();  // the loop sleeps
  t += 500 * kMs;
  g.turn_start(t);
  CHECK(g.may_spin(t));
  CHECK(g.preemptions() == 0);
}

TEST_CASE("the first turn ever is not a preemption", "[spin_governor]") {
  SpinGovernor g;
  g.turn_start(5'000 * kMs);
  CHECK(g.may_spin(5'000 * kMs));
  CHECK(g.preemptions() == 0);
}
