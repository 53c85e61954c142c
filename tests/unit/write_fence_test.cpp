#include <catch2/catch.hpp>

#include <string>

#include "multipath/failover_machine.hpp"

using namespace nvmeof::detail;

TEST_CASE("write-fence bound: CCR waits for the quiesce, otherwise the TP4129 hold", "[write_fence]") {
  // KATO 100 ms, CQT 10 ms reported, no traffic-based keep-alive: hold 2 x 100 + 10.
  const HoldTimes cqt = hold_times(100, false, 10, 0);
  CHECK(write_fence_bound(cqt, true, true).rule == WriteFenceRule::ccr);
  CHECK(write_fence_bound(cqt, true, true).ms == 10);
  CHECK(write_fence_bound(cqt, false, true).rule == WriteFenceRule::cqt);
  CHECK(write_fence_bound(cqt, false, true).ms == 210);
  // Traffic-based keep-alive: 3 x KATO.
  CHECK(write_fence_bound(hold_times(100, true, 10, 0), false, true).ms == 310);
  // No CQT: the configured bound stands in for it, else the KATO.
  CHECK(write_fence_bound(hold_times(100, false, 0, 40), false, false).ms == 240);
  const WriteFenceBound kato = write_fence_bound(hold_times(100, false, 0, 0), false, false);
  CHECK(kato.rule == WriteFenceRule::kato);
  CHECK(kato.ms == 300);
  CHECK(std::string(to_string(kato.rule)) == "kato+bound");
  const std::string why = explain(kato, 100, false, 0);
  CHECK(why.find("no cross-controller reset") != std::string::npos);
  CHECK(why.find("2 x KATO (100 ms) + 100 ms standing in for CQT") != std::string::npos);
  CHECK(explain(write_fence_bound(cqt, false, true), 100, false, 10).find("+ CQT (10 ms)") != std::string::npos);
}
