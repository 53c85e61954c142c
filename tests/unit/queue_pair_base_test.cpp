// The queue-pair lifecycle every fabric transport shares (transport/queue_pair_base.hpp), over a
// fake transport whose in-flight operations the test holds and gives back.
#include <catch2/catch.hpp>

#include <cerrno>
#include <functional>
#include <vector>

#include "nvmeof/status.hpp"
#include "transport/queue_pair_base.hpp"

using namespace nvmeof;

namespace {

struct FakeSlot : QueueSlot {
  int retired = 0;
};

// The fake's "kernel" holds `inflight` operations that may still touch buffers; the pair is
// quiet when they are all back.
class FakePair final : public QueuePairBase<FakeSlot> {
 public:
  explicit FakePair(uint32_t depth) : QueuePairBase("fake qid 3", depth) {}

  int submit(IoRequest& req) noexcept override {
    if (state_ != QpState::live) return -ENOTCONN;
    return queue(req);
  }
  uint16_t qid() const noexcept override { return 3; }
  uint32_t max_transfer() const noexcept override { return 4096; }

  // What a transport does.
  void start() { started = go_live(); }
  // A command queued while connecting (Fabrics Connect, authentication).
  int queue(IoRequest& req) noexcept {
    if (!has_free_slot()) return -EAGAIN;
    take_slot(req);
    return 0;
  }
  void answer(uint16_t cid, NvmeStatus st = {}) {
    Cqe c{};
    c.cid = cid;
    c.status_field = st.cqe_field();
    retire_slot(cid);
    complete_slot(cid, c);
  }
  void transport_error(std::error_code why) { fail(why, "the test broke it"); }
  void operation_back() {
    --inflight;
    settle();
  }
  void shrink(uint32_t d) { limit_depth(d); }
  int slot_retired(uint16_t cid) const { return slots_[cid].retired; }

  int inflight = 0;
  bool started = false;
  int stops = 0;
  int quiets = 0;
  int retires = 0;

 private:
  void stop_transport() noexcept override { ++stops; }
  bool transport_quiet() const noexcept override { return inflight == 0; }
  void on_quiet() noexcept override { ++quiets; }
  void retire_slot(uint16_t cid) noexcept override {
    ++retires;
    ++slots_[cid].retired;
  }
};

struct Listener final : QueuePairListener {
  int calls = 0;
  std::error_code why;
  QpState state_seen = QpState::connecting;
  uint32_t outstanding_seen = 0;
  void on_queue_failed(QueuePair& qp, std::error_code w) noexcept override {
    ++calls;
    why = w;
    state_seen = qp.state();
    outstanding_seen = qp.outstanding();
  }
};

// A request that counts its completions and remembers the last one.
struct Req {
  IoRequest io{};
  int completions = 0;
  Cqe last{};
  std::function<void(Req&)> then;
  Req(const Req&) = delete;
  Req& operator=(const Req&) = delete;
  Req() {
    io.user = this;
    io.on_complete = [](IoRequest& r, const Cqe& c) noexcept {
      auto* self = static_cast<Req*>(r.user);
      ++self->completions;
      self->last = c;
      if (self->then) self->then(*self);
    };
  }
};

}  // namespace

TEST_CASE("QueuePairBase: a failure while connecting notifies the listener once and completes nothing twice",
          "[queue_pair_base]") {
  FakePair qp(4);
  Listener l;
  qp.set_listener(&l);
  Req connect;
  REQUIRE(qp.queue(connect.io) == 0);  // the Connect command, before the pair goes live
  qp.inflight = 1;                     // its send still in the kernel
  CHECK(qp.state() == QpState::connecting);
  CHECK(qp.outstanding() == 1);

  qp.transport_error(make_error_code(Errc::connection_reset));
  CHECK(qp.state() == QpState::failed);
  CHECK(l.calls == 1);
  CHECK(l.why == make_error_code(Errc::connection_reset));
  CHECK(l.state_seen == QpState::failed);
  CHECK(l.outstanding_seen == 1);  // told before anything completes
  CHECK(qp.stops == 1);
  CHECK(connect.completions == 0);  // the kernel may still read its buffer

  // Further failures and a close change nothing: the first cause stays.
  qp.transport_error(make_error_code(Errc::timeout));
  qp.close();
  CHECK(l.calls == 1);
  CHECK(qp.stops == 1);
  CHECK(qp.error() == make_error_code(Errc::connection_reset));
  CHECK(connect.completions == 0);

  // start() after the failure does not revive it.
  qp.start();
  CHECK_FALSE(qp.started);
  CHECK(qp.state() == QpState::failed);

  qp.operation_back();
  CHECK(qp.state() == QpState::closed);
  CHECK(qp.quiets == 1);
  CHECK(connect.completions == 1);
  CHECK(connect.last.status() == status::kHostPathError);
  CHECK(connect.last.cid == connect.io.cmd.cid);
  CHECK(connect.last.sq_id == 3);
  CHECK(qp.slot_retired(connect.io.cmd.cid) == 1);
  CHECK(qp.outstanding() == 0);

  qp.close();
  qp.transport_error(make_error_code(Errc::connection_closed));
  CHECK(connect.completions == 1);
  CHECK(l.calls == 1);
  CHECK(qp.quiets == 1);
  CHECK(qp.state() == QpState::closed);
  CHECK(qp.error() == make_error_code(Errc::connection_reset));
}

TEST_CASE("QueuePairBase: close while connecting with nothing in flight closes at once, from the same path as live",
          "[queue_pair_base]") {
  FakePair qp(2);
  Listener l;
  qp.set_listener(&l);
  qp.close();
  CHECK(qp.state() == QpState::closed);
  CHECK(qp.error() == errno_code(ECANCELED));
  CHECK(l.calls == 1);
  CHECK(qp.stops == 1);
  CHECK(qp.quiets == 1);
  Req r;
  CHECK(qp.submit(r.io) == -ENOTCONN);
}

TEST_CASE("QueuePairBase: close after a failure", "[queue_pair_base]") {
  FakePair qp(4);
  Listener l;
  qp.set_listener(&l);
  qp.start();
  REQUIRE(qp.state() == QpState::live);
  Req a, b;
  REQUIRE(qp.submit(a.io) == 0);
  REQUIRE(qp.submit(b.io) == 0);
  qp.transport_error(make_error_code(Errc::connection_closed));  // nothing in flight: drains now
  CHECK(qp.state() == QpState::closed);
  CHECK(a.completions == 1);
  CHECK(b.completions == 1);
  CHECK(a.last.status() == status::kHostPathError);
  qp.close();
  CHECK(qp.state() == QpState::closed);
  CHECK(qp.error() == make_error_code(Errc::connection_closed));
  CHECK(l.calls == 1);
  CHECK(qp.stops == 1);
  CHECK(a.completions == 1);
  CHECK(b.completions == 1);
}

TEST_CASE("QueuePairBase: every outstanding request completes exactly once with kHostPathError",
          "[queue_pair_base]") {
  constexpr uint32_t kDepth = 8;
  FakePair qp(kDepth);
  Listener l;
  qp.set_listener(&l);
  qp.start();
  std::vector<Req> reqs(kDepth + 2);
  for (uint32_t i = 0; i < kDepth; ++i) REQUIRE(qp.submit(reqs[i].io) == 0);
  CHECK(qp.submit(reqs[kDepth].io) == -EAGAIN);
  CHECK(qp.outstanding() == kDepth);
  // CIDs are distinct.
  std::vector<int> seen(kDepth, 0);
  for (uint32_t i = 0; i < kDepth; ++i) ++seen.at(reqs[i].io.cmd.cid);
  for (int n : seen) CHECK(n == 1);

  // Three answered normally; their slots serve two more requests.
  for (uint32_t i = 0; i < 3; ++i) qp.answer(reqs[i].io.cmd.cid);
  REQUIRE(qp.submit(reqs[kDepth].io) == 0);
  REQUIRE(qp.submit(reqs[kDepth + 1].io) == 0);
  CHECK(qp.outstanding() == kDepth - 1);

  qp.inflight = 2;
  qp.close();
  CHECK(qp.state() == QpState::failed);
  CHECK(l.calls == 1);
  CHECK(l.why == errno_code(ECANCELED));
  qp.operation_back();
  CHECK(qp.state() == QpState::failed);  // one operation still out
  for (auto& r : reqs) CHECK(r.completions == (&r < &reqs[3] ? 1 : 0));
  qp.operation_back();
  CHECK(qp.state() == QpState::closed);
  CHECK(qp.outstanding() == 0);
  for (size_t i = 0; i < reqs.size(); ++i) {
    INFO("request " << i);
    CHECK(reqs[i].completions == 1);
    if (i < 3) CHECK(reqs[i].last.status().is_success());
    else CHECK(reqs[i].last.status() == status::kHostPathError);
  }
  CHECK(qp.retires == static_cast<int>(reqs.size()));
  CHECK(qp.quiets == 1);
  Req late;
  CHECK(qp.submit(late.io) == -ENOTCONN);
  CHECK(late.completions == 0);
}

TEST_CASE("QueuePairBase: callbacks of the drain may close and submit; nothing completes twice",
          "[queue_pair_base]") {
  FakePair qp(4);
  qp.start();
  Req a, b, extra;
  int submit_rc = 0;
  QpState seen = QpState::live;
  a.then = [&](Req&) {
    qp.close();
    submit_rc = qp.submit(extra.io);
    seen = qp.state();
  };
  REQUIRE(qp.submit(a.io) == 0);
  REQUIRE(qp.submit(b.io) == 0);
  qp.transport_error(make_error_code(Errc::connection_reset));
  CHECK(submit_rc == -ENOTCONN);
  CHECK(seen == QpState::failed);  // closed only once every request has completed
  CHECK(a.completions == 1);
  CHECK(b.completions == 1);
  CHECK(extra.completions == 0);
  CHECK(qp.state() == QpState::closed);
}

TEST_CASE("QueuePairBase: a completion frees its slot before the callback runs", "[queue_pair_base]") {
  FakePair qp(1);
  qp.start();
  Req a, b;
  int rc = -1;
  a.then = [&](Req&) { rc = qp.submit(b.io); };
  REQUIRE(qp.submit(a.io) == 0);
  CHECK(qp.submit(b.io) == -EAGAIN);
  qp.answer(a.io.cmd.cid);
  CHECK(rc == 0);
  CHECK(qp.outstanding() == 1);
  CHECK(b.io.cmd.cid == 0);
}

TEST_CASE("QueuePairBase: limit_depth uses only the first slots", "[queue_pair_base]") {
  FakePair qp(8);
  qp.shrink(3);
  CHECK(qp.depth() == 3);
  qp.start();
  std::vector<Req> reqs(4);
  for (int i = 0; i < 3; ++i) {
    REQUIRE(qp.submit(reqs[static_cast<size_t>(i)].io) == 0);
    CHECK(reqs[static_cast<size_t>(i)].io.cmd.cid < 3);
  }
  CHECK(qp.submit(reqs[3].io) == -EAGAIN);
}
