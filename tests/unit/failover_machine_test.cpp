// The failover state machine against a fake environment: which fence rule applies when, CCR
// through another controller (and what happens when it fails or none is possible), CCRL, the
// TP4129 hold, the controller closing on us, reconnect with backoff, stale events, paths added
// and removed at run time.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "multipath/failover_machine.hpp"

using namespace nvmeof;
using namespace nvmeof::detail;
using namespace std::chrono_literals;

namespace {

constexpr uint64_t kMs = 1'000'000;

struct FakeEnv final : FailoverEnv {
  uint64_t now = 1000 * kMs;
  struct TimerReq {
    int path;
    uint64_t at;
    uint64_t token;
  };
  std::vector<TimerReq> timers;
  std::vector<std::string> log;
  struct Ccr {
    int failed, via;
    uint32_t generation;
  };
  std::vector<Ccr> ccrs;
  std::vector<int> connects;
  std::vector<uint32_t> connect_generations;  // what each connect tags its queue pairs with

  uint64_t now_ns() override { return now; }
  void arm_timer(int path, uint64_t at, uint64_t token) override { timers.push_back({path, at, token}); }
  void close_lanes(int path) override { log.push_back("close " + std::to_string(path)); }
  void fence_endpoint(int path) override { log.push_back("teardown " + std::to_string(path)); }
  void start_ccr(int failed, int via, uint32_t generation) override { ccrs.push_back({failed, via, generation}); }
  void publish_fenced(int path, uint32_t generation, FenceRule rule) override {
    log.push_back("fenced " + std::to_string(path) + " gen " + std::to_string(generation) + " " + to_string(rule));
  }
  void start_connect(int path, uint32_t generation) override {
    connects.push_back(path);
    connect_generations.push_back(generation);
  }
  void publish_live(int path, uint32_t generation) override {
    log.push_back("live " + std::to_string(path) + " gen " + std::to_string(generation));
  }
  void drain(int path) override { log.push_back("drain " + std::to_string(path)); }
  void removed(int path) override { log.push_back("removed " + std::to_string(path)); }

  // Fires every timer due by `t` (in order of arming), as the control loop would.
  void advance_to(uint64_t t, FailoverMachine& m) {
    now = t;
    for (bool fired = true; fired;) {
      fired = false;
      for (size_t i = 0; i < timers.size(); ++i) {
        if (timers[i].at > now) continue;
        const TimerReq r = timers[i];
        timers.erase(timers.begin() + static_cast<long>(i));
        m.on_timer(r.path, r.token);
        fired = true;
        break;
      }
    }
  }
  bool has(const std::string& s) const {
    for (const auto& l : log)
      if (l == s) return true;
    return false;
  }
};

PathFacts fabric_facts(uint32_t kato_ms = 100, uint16_t cqt_ms = 10, uint8_t ccrl = 4) {
  PathFacts f;
  f.times = hold_times(kato_ms, true, cqt_ms, 0);
  f.can_reset_others = ccrl > 0;
  f.can_be_reset = true;
  f.ccrl = ccrl;
  return f;
}

FailoverMachine make(FakeEnv& env, size_t n, FenceMode mode = FenceMode::safe,
                     PathFacts facts = fabric_facts()) {
  FailoverMachine m(env, n, {10ms, 1000ms}, mode);
  for (size_t i = 0; i < n; ++i) m.opened(static_cast<int>(i), facts);
  return m;
}

}  // namespace

TEST_CASE("hold times follow TP4129: 2 or 3 x KATO plus CQT, the bound standing in for CQT", "[failover]") {
  CHECK(hold_times(100, false, 10, 0).hold_ns == 210 * kMs);
  CHECK(hold_times(100, true, 10, 0).hold_ns == 310 * kMs);
  CHECK(hold_times(100, true, 10, 0).quiesce_ns == 10 * kMs);
  CHECK(hold_times(1000, false, 0, 100).quiesce_ns == 100 * kMs);   // no CQT: the bound
  CHECK(hold_times(1000, false, 0, 100).hold_ns == 2100 * kMs);
  CHECK(hold_times(1000, false, 0, 0).quiesce_ns == 1000 * kMs);    // neither: the KATO
}

TEST_CASE("loss causes: the peer closing is proof, silence and our own close are not", "[failover]") {
  CHECK(classify_loss(make_error_code(Errc::connection_closed)) == LossCause::peer_closed);
  CHECK(classify_loss(make_error_code(Errc::connection_reset)) == LossCause::peer_closed);
  CHECK(classify_loss(make_error_code(Errc::peer_terminated)) == LossCause::peer_closed);
  CHECK(classify_loss(std::error_code(ECONNRESET, std::system_category())) == LossCause::peer_closed);
  CHECK(classify_loss(make_error_code(Errc::keep_alive_timeout)) == LossCause::local);
  CHECK(classify_loss(make_error_code(Errc::timeout)) == LossCause::local);
  CHECK(classify_loss(std::error_code(ECANCELED, std::system_category())) == LossCause::local);
  CHECK(classify_loss(make_error_code(Errc::malformed_pdu)) == LossCause::local);
}

TEST_CASE("a silent failure is fenced by a CCR through another live controller", "[failover][ccr]") {
  FakeEnv env;
  auto m = make(env, 2);
  REQUIRE(m.on_failure(0, 0, LossCause::local, env.now));
  CHECK(m.state(0) == PathState::failed);
  CHECK(env.has("close 0"));
  // Our side stays up until the CCR is done: the controller must exist for the CCR to name it.
  CHECK_FALSE(env.has("teardown 0"));
  REQUIRE(env.ccrs.size() == 1);
  CHECK(env.ccrs[0].failed == 0);
  CHECK(env.ccrs[0].via == 1);
  CHECK(m.ccr_in_progress(1) == 1);
  CHECK_FALSE(env.has("fenced 0 gen 0 ccr"));  // nothing moves before the reset is confirmed
  env.advance_to(env.now + 5 * kMs, m);
  m.on_ccr_done(0, 1, 0, true);
  CHECK(env.has("fenced 0 gen 0 ccr"));
  CHECK(env.has("teardown 0"));
  CHECK(m.state(0) == PathState::fenced);
  CHECK(m.fence_rule(0) == FenceRule::ccr);
  CHECK(m.ccr_in_progress(1) == 0);
  REQUIRE(env.connects == std::vector<int>{0});
  // The hold timer armed behind the CCR fires later and changes nothing.
  env.advance_to(env.now + 400 * kMs, m);
  CHECK(m.fence_rule(0) == FenceRule::ccr);
}

TEST_CASE("without CCR the TP4129 hold fences, never earlier", "[failover][time]") {
  FakeEnv env;
  auto m = make(env, 2, FenceMode::safe, fabric_facts(100, 10, 0));  // CCRL 0: no CCR anywhere
  const uint64_t t0 = env.now;
  REQUIRE(m.on_failure(0, 0, LossCause::local, t0));
  CHECK(env.ccrs.empty());
  CHECK(env.has("teardown 0"));
  env.advance_to(t0 + 309 * kMs, m);
  CHECK(m.state(0) == PathState::failed);
  env.advance_to(t0 + 310 * kMs, m);  // 3 x 100 ms (TBKAS) + 10 ms CQT
  CHECK(m.state(0) == PathState::fenced);
  CHECK(m.fence_rule(0) == FenceRule::time);
}

TEST_CASE("a failed or refused CCR tries the next controller, then leaves the hold", "[failover][ccr]") {
  FakeEnv env;
  auto m = make(env, 3);
  const uint64_t t0 = env.now;
  REQUIRE(m.on_failure(0, 0, LossCause::local, t0));
  REQUIRE(env.ccrs.size() == 1);
  CHECK(env.ccrs[0].via == 1);
  m.on_ccr_done(0, 1, 0, false);
  REQUIRE(env.ccrs.size() == 2);
  CHECK(env.ccrs[1].via == 2);
  CHECK_FALSE(env.has("teardown 0"));
  m.on_ccr_done(0, 2, 0, false);
  CHECK(env.ccrs.size() == 2);  // no controller left to try
  CHECK(env.has("teardown 0"));  // nothing left to reset: our side goes now
  CHECK(m.state(0) == PathState::failed);
  env.advance_to(t0 + 310 * kMs, m);
  CHECK(m.fence_rule(0) == FenceRule::time);
}

TEST_CASE("CCRL bounds the resets in progress through one controller", "[failover][ccr]") {
  FakeEnv env;
  auto m = make(env, 3, FenceMode::safe, fabric_facts(100, 10, 1));
  REQUIRE(m.on_failure(0, 0, LossCause::local, env.now));
  REQUIRE(env.ccrs.size() == 1);
  CHECK(env.ccrs[0].via == 1);
  REQUIRE(m.on_failure(2, 0, LossCause::local, env.now));
  // Path 1 already has its one CCR in progress; path 0 is failed: nobody is left.
  CHECK(env.ccrs.size() == 1);
  CHECK(m.ccr_in_progress(1) == 1);
}

TEST_CASE("the controller closing the admin queue fences after its quiesce time", "[failover][peer]") {
  FakeEnv env;
  auto m = make(env, 2);
  const uint64_t t0 = env.now;
  REQUIRE(m.on_failure(0, 0, LossCause::peer_closed, t0));
  CHECK(env.ccrs.empty());  // no need to reset what already ended
  env.advance_to(t0 + 9 * kMs, m);
  CHECK(m.state(0) == PathState::failed);
  env.advance_to(t0 + 10 * kMs, m);
  CHECK(m.fence_rule(0) == FenceRule::peer_closed);
}

TEST_CASE("a peer close reported after a silent failure brings the fence forward", "[failover][peer]") {
  FakeEnv env;
  auto m = make(env, 1);  // one path: no CCR possible
  const uint64_t t0 = env.now;
  REQUIRE(m.on_failure(0, 0, LossCause::local, t0));
  CHECK_FALSE(m.on_failure(0, 0, LossCause::peer_closed, t0 + 50 * kMs));
  env.advance_to(t0 + 60 * kMs, m);
  CHECK(m.fence_rule(0) == FenceRule::peer_closed);
}

TEST_CASE("a single path waits the hold: nobody can reset it", "[failover][time]") {
  FakeEnv env;
  auto m = make(env, 1);
  REQUIRE(m.on_failure(0, 0, LossCause::local, env.now));
  CHECK(env.ccrs.empty());
  env.advance_to(env.now + 310 * kMs, m);
  CHECK(m.fence_rule(0) == FenceRule::time);
}

TEST_CASE("skip_unsafe fences at once (the negative control of the ghost-write tests)", "[failover]") {
  FakeEnv env;
  auto m = make(env, 2, FenceMode::skip_unsafe);
  REQUIRE(m.on_failure(0, 0, LossCause::local, env.now));
  CHECK(m.fence_rule(0) == FenceRule::skipped);
  CHECK(env.ccrs.empty());
}

TEST_CASE("reconnect backs off from reconnect_min doubling to reconnect_max; success bumps the generation",
          "[failover][reconnect]") {
  FakeEnv env;
  auto m = make(env, 2);
  REQUIRE(m.on_failure(0, 0, LossCause::peer_closed, env.now));
  env.advance_to(env.now + 10 * kMs, m);
  REQUIRE(env.connects.size() == 1);
  std::vector<uint64_t> waits;
  for (int i = 0; i < 8; ++i) {
    m.on_connect_done(0, false, fabric_facts());
    REQUIRE(env.timers.size() == 1);
    waits.push_back((env.timers[0].at - env.now) / kMs);
    env.advance_to(env.timers[0].at, m);
  }
  CHECK(waits == std::vector<uint64_t>{20, 40, 80, 160, 320, 640, 1000, 1000});
  CHECK(env.connects.size() == 9);
  m.on_connect_done(0, true, fabric_facts());
  CHECK(m.state(0) == PathState::live);
  CHECK(env.has("live 0 gen 1"));
  // The machine owns the count: the reconnect was told the generation it then published.
  REQUIRE_FALSE(env.connect_generations.empty());
  CHECK(env.connect_generations.back() == 1);
  CHECK(m.backoff(0) == 10ms);
}

TEST_CASE("stale events (an older generation, a path not live) change nothing", "[failover]") {
  FakeEnv env;
  auto m = make(env, 2);
  REQUIRE(m.on_failure(0, 0, LossCause::peer_closed, env.now));
  env.advance_to(env.now + 10 * kMs, m);
  m.on_connect_done(0, true, fabric_facts());
  REQUIRE(m.generation(0) == 1);
  CHECK_FALSE(m.on_failure(0, 0, LossCause::local, env.now));  // a late report of generation 0
  CHECK(m.state(0) == PathState::live);
  m.on_ccr_done(0, 1, 0, true);  // a late CCR result of the old failure
  CHECK(m.state(0) == PathState::live);
  CHECK(m.on_failure(0, 1, LossCause::local, env.now));
  CHECK(m.state(0) == PathState::failed);
}

TEST_CASE("a path unreachable at open reconnects in the background", "[failover][reconnect]") {
  FakeEnv env;
  FailoverMachine m(env, 2, {10ms, 1000ms}, FenceMode::safe);
  m.opened(0, fabric_facts());
  m.unreachable_at_open(1);
  CHECK(env.connects.empty());
  env.advance_to(env.now + 10 * kMs, m);
  CHECK(env.connects == std::vector<int>{1});
  m.on_connect_done(1, true, fabric_facts());
  CHECK(m.state(1) == PathState::live);
  CHECK(m.generation(1) == 1);
}

TEST_CASE("a CCR is never sent through a failed path", "[failover][ccr]") {
  FakeEnv env;
  auto m = make(env, 2);
  REQUIRE(m.on_failure(1, 0, LossCause::local, env.now));
  REQUIRE(env.ccrs.size() == 1);  // through path 0
  REQUIRE(m.on_failure(0, 0, LossCause::local, env.now));
  CHECK(env.ccrs.size() == 1);  // path 1 is failed: nothing to send path 0's CCR through
}

TEST_CASE("a live path being removed drains, then is removed without a fence or a reconnect", "[failover][paths]") {
  FakeEnv env;
  auto m = make(env, 2);
  m.remove_path(1);
  CHECK(env.has("drain 1"));
  CHECK_FALSE(env.has("removed 1"));
  CHECK(m.state(1) == PathState::live);  // its commands still complete
  m.remove_path(1);                      // asked twice: drained once
  CHECK(std::count(env.log.begin(), env.log.end(), "drain 1") == 1);
  m.drained(1);
  CHECK(env.has("removed 1"));
  CHECK(m.state(1) == PathState::removed);
  CHECK_FALSE(env.has("teardown 1"));  // every command completed: nothing to fence
  CHECK(env.connects.empty());
  // A late report of its old connection fails nothing.
  CHECK_FALSE(m.on_failure(1, 0, LossCause::local, env.now));
  CHECK_FALSE(env.has("close 1"));
  // Path 0 is untouched.
  CHECK(m.state(0) == PathState::live);
}

TEST_CASE("a path that fails while it drains keeps the fence rules, then is removed instead of reconnecting",
          "[failover][paths]") {
  FakeEnv env;
  auto m = make(env, 2);
  m.remove_path(1);
  REQUIRE(m.on_failure(1, 0, LossCause::local, env.now));
  CHECK(env.has("close 1"));
  m.drained(1);  // the lanes' pairs closed under the failure: not proof of anything
  CHECK_FALSE(env.has("removed 1"));
  REQUIRE(env.ccrs.size() == 1);
  m.on_ccr_done(1, 0, env.ccrs[0].generation, true);
  CHECK(env.has("fenced 1 gen 0 ccr"));
  CHECK(env.has("removed 1"));
  CHECK(env.connects.empty());
  // The hold timer that was armed finds nothing to do.
  env.advance_to(env.now + 1000 * kMs, m);
  CHECK(env.connects.empty());
  CHECK(std::count(env.log.begin(), env.log.end(), "removed 1") == 1);
}

TEST_CASE("a failed path removed before its fence is removed by the fence, writes still waiting for it",
          "[failover][paths]") {
  FakeEnv env;
  auto m = make(env, 2, FenceMode::safe, fabric_facts(100, 10, 0));  // no CCR: the hold
  REQUIRE(m.on_failure(1, 0, LossCause::local, env.now));
  REQUIRE(env.connects.size() == 1);  // the reconnect that does not wait for the fence
  m.remove_path(1);
  CHECK_FALSE(env.has("removed 1"));
  m.on_connect_done(1, true, fabric_facts());  // it ends after the removal: never live
  CHECK_FALSE(env.has("live 1 gen 1"));
  env.advance_to(env.now + 309 * kMs, m);
  CHECK_FALSE(env.has("removed 1"));
  env.advance_to(env.now + 2 * kMs, m);
  CHECK(env.has("fenced 1 gen 0 time"));
  CHECK(env.has("removed 1"));
  CHECK(env.connects.size() == 1);
}

TEST_CASE("a path removed while it reconnects is removed when the connect ends, never going live",
          "[failover][paths]") {
  FakeEnv env;
  auto m = make(env, 2, FenceMode::skip_unsafe);
  REQUIRE(m.on_failure(1, 0, LossCause::local, env.now));
  REQUIRE(env.connects.size() == 1);  // skip_unsafe fences at once and reconnects
  m.remove_path(1);
  CHECK_FALSE(env.has("removed 1"));
  m.on_connect_done(1, true, fabric_facts());
  CHECK(env.has("removed 1"));
  CHECK_FALSE(env.has("live 1 gen 1"));
}

TEST_CASE("a path added at run time connects; a removed one added back takes a newer generation",
          "[failover][paths]") {
  FakeEnv env;
  auto m = make(env, 1);
  m.add_path(1);
  REQUIRE(env.connects == std::vector<int>{1});
  CHECK(env.connect_generations.back() == 1);
  m.on_connect_done(1, false, {});  // not there yet: retried with backoff
  REQUIRE(env.timers.size() == 1);
  env.advance_to(env.timers[0].at, m);
  REQUIRE(env.connects.size() == 2);
  m.on_connect_done(1, true, fabric_facts());
  CHECK(env.has("live 1 gen 1"));
  CHECK(m.state(1) == PathState::live);
  // A CCR of path 0 may go through the new path.
  REQUIRE(m.on_failure(0, 0, LossCause::local, env.now));
  REQUIRE(env.ccrs.size() == 1);
  CHECK(env.ccrs[0].via == 1);
  // Removed and added back: its old generation is never reused.
  m.remove_path(1);
  m.drained(1);
  REQUIRE(env.has("removed 1"));
  m.add_path(1);
  CHECK(env.connect_generations.back() > 1);
  m.on_connect_done(1, true, fabric_facts());
  CHECK(m.state(1) == PathState::live);
  CHECK_FALSE(m.retired(1));
}

TEST_CASE("a path not connected when removed is removed at once", "[failover][paths]") {
  FakeEnv env;
  FailoverMachine m(env, 2, {10ms, 1000ms}, FenceMode::safe);
  m.opened(0, fabric_facts());
  m.unreachable_at_open(1);
  m.remove_path(1);
  CHECK(env.has("removed 1"));
  env.advance_to(env.now + 2000 * kMs, m);  // its reconnect timer fires into nothing
  CHECK(env.connects.empty());
}

TEST_CASE("a failed path reconnects before its fence; only the old generation waits for it", "[failover][early]") {
  FakeEnv env;
  auto m = make(env, 2, FenceMode::safe, fabric_facts(100, 10, 0));  // no CCR: the hold
  const uint64_t t0 = env.now;
  REQUIRE(m.on_failure(0, 0, LossCause::local, t0));
  CHECK(env.has("teardown 0"));
  REQUIRE(env.connects == std::vector<int>{0});  // at once, not after the hold
  CHECK(env.connect_generations.back() == 1);
  env.advance_to(t0 + 5 * kMs, m);
  m.on_connect_done(0, true, fabric_facts(100, 10, 0));
  CHECK(m.state(0) == PathState::live);
  CHECK(m.generation(0) == 1);
  CHECK(env.has("live 0 gen 1"));
  CHECK(m.awaiting_old_fence(0));
  CHECK_FALSE(env.has("fenced 0 gen 0 time"));  // the old generation's writes still wait
  env.advance_to(t0 + 309 * kMs, m);
  CHECK_FALSE(env.has("fenced 0 gen 0 time"));
  env.advance_to(t0 + 310 * kMs, m);
  CHECK(env.has("fenced 0 gen 0 time"));
  CHECK(m.state(0) == PathState::live);  // the new generation is untouched
  CHECK_FALSE(m.awaiting_old_fence(0));
  CHECK(env.connects.size() == 1);
}

TEST_CASE("an early reconnect that fails backs off and tries again before the fence", "[failover][early]") {
  FakeEnv env;
  auto m = make(env, 1);  // one path: nobody to send a CCR through
  const uint64_t t0 = env.now;
  REQUIRE(m.on_failure(0, 0, LossCause::local, t0));
  REQUIRE(env.connects.size() == 1);
  m.on_connect_done(0, false, {});
  REQUIRE(env.timers.size() == 2);  // the hold and the backoff
  env.advance_to(t0 + 20 * kMs, m);
  CHECK(env.connects.size() == 2);
  CHECK(m.state(0) == PathState::failed);
  m.on_connect_done(0, true, fabric_facts());
  CHECK(m.state(0) == PathState::live);
  env.advance_to(t0 + 310 * kMs, m);
  CHECK(env.has("fenced 0 gen 0 time"));
}

TEST_CASE("a CCR in progress is waited for: the controller must exist for it to name", "[failover][early]") {
  FakeEnv env;
  auto m = make(env, 2);
  REQUIRE(m.on_failure(0, 0, LossCause::local, env.now));
  REQUIRE(env.ccrs.size() == 1);
  CHECK(env.connects.empty());
  m.on_ccr_done(0, 1, 0, false);  // refused: only the hold is left
  CHECK(env.has("teardown 0"));
  CHECK(env.connects == std::vector<int>{0});
}

TEST_CASE("a newer generation's fence is published only after the older one's", "[failover][early]") {
  FakeEnv env;
  auto m = make(env, 2);
  const uint64_t t0 = env.now;
  REQUIRE(m.on_failure(0, 0, LossCause::local, t0));
  m.on_ccr_done(0, 1, 0, false);  // generation 0 waits for its hold (t0 + 310 ms)
  m.on_connect_done(0, true, fabric_facts());
  REQUIRE(m.generation(0) == 1);
  // Generation 1 fails too and is fenced by a CCR of its own controller: that proves nothing
  // of generation 0's controller.
  REQUIRE(m.on_failure(0, 1, LossCause::local, t0 + 50 * kMs));
  REQUIRE(env.ccrs.size() == 2);
  CHECK(env.connects.size() == 1);  // no second early reconnect while generation 0 waits
  m.on_ccr_done(0, 1, 1, true);
  CHECK(m.state(0) == PathState::fenced);
  CHECK_FALSE(env.has("fenced 0 gen 1 ccr"));
  CHECK(env.connects.size() == 2);  // fenced: it reconnects as always
  env.advance_to(t0 + 310 * kMs, m);
  const auto old_at = std::find(env.log.begin(), env.log.end(), "fenced 0 gen 0 time");
  const auto new_at = std::find(env.log.begin(), env.log.end(), "fenced 0 gen 1 ccr");
  REQUIRE(old_at != env.log.end());
  REQUIRE(new_at != env.log.end());
  CHECK(old_at < new_at);
}

TEST_CASE("a reconnected path removed before its old fence is removed by that fence", "[failover][early]") {
  FakeEnv env;
  auto m = make(env, 2, FenceMode::safe, fabric_facts(100, 10, 0));
  const uint64_t t0 = env.now;
  REQUIRE(m.on_failure(1, 0, LossCause::local, t0));
  m.on_connect_done(1, true, fabric_facts(100, 10, 0));
  REQUIRE(m.state(1) == PathState::live);
  m.remove_path(1);
  CHECK(env.has("drain 1"));
  m.drained(1);
  CHECK_FALSE(env.has("removed 1"));  // generation 0's writes still wait
  env.advance_to(t0 + 310 * kMs, m);
  CHECK(env.has("fenced 1 gen 0 time"));
  CHECK(env.has("removed 1"));
}

TEST_CASE("negative control: reconnect_before_fence off reconnects only once fenced", "[failover][early]") {
  FakeEnv env;
  FailoverMachine m(env, 2, {10ms, 1000ms, false}, FenceMode::safe);
  m.opened(0, fabric_facts(100, 10, 0));
  m.opened(1, fabric_facts(100, 10, 0));
  const uint64_t t0 = env.now;
  REQUIRE(m.on_failure(0, 0, LossCause::local, t0));
  env.advance_to(t0 + 309 * kMs, m);
  CHECK(env.connects.empty());
  env.advance_to(t0 + 310 * kMs, m);
  CHECK(env.connects == std::vector<int>{0});
}
