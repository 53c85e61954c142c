// Reactor: timers, pollers, cross-thread post() and wake() on a real io_uring, with the default
// set-up and with SINGLE_ISSUER | DEFER_TASKRUN (ReactorOptions::single_issuer).
#include <catch2/catch.hpp>

#include <sys/eventfd.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "reactor/reactor.hpp"

using namespace nvmeof;
using namespace std::chrono_literals;

namespace {

struct Fired : Timer {
  std::vector<int>* log = nullptr;
  int id = 0;
};

void record(Timer* t) noexcept {
  auto* f = static_cast<Fired*>(t);
  f->log->push_back(f->id);
}

std::unique_ptr<Reactor> make(const ReactorOptions& o = {}) {
  auto r = Reactor::create(o);
  REQUIRE(r);
  return std::move(*r);
}

}  // namespace

TEST_CASE("timers fire in deadline order and can be cancelled or re-armed") {
  auto r = make();
  std::vector<int> log;
  std::vector<Fired> t(5);
  const uint64_t now = Reactor::clock_ns();
  const uint64_t ms = 1'000'000;
  const uint64_t at[5] = {now + 30 * ms, now + 10 * ms, now + 20 * ms, now + 5 * ms, now + 15 * ms};
  for (int i = 0; i < 5; ++i) {
    t[i].fn = &record;
    t[i].log = &log;
    t[i].id = i;
    r->arm(t[i], at[i]);
  }
  r->cancel(t[4]);
  r->arm(t[0], now + 1 * ms);  // re-arm earlier
  REQUIRE(r->run_until([&] { return log.size() == 4; }, 2000ms));
  CHECK(log == std::vector<int>{0, 3, 1, 2});
  CHECK_FALSE(t[4].armed);
}

TEST_CASE("a blocking poll waits for the nearest timer, not the whole max_wait") {
  auto r = make();
  std::vector<int> log;
  Fired t;
  t.fn = &record;
  t.log = &log;
  // The poll may wait an hour: only the timer's deadline ends its wait. Should it wait the whole
  // hour, a rescuer wakes it after 30 s and says so (a bound a 20 ms timer never comes near,
  // whatever the load).
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::atomic<bool> rescued{false};
  std::thread rescuer([&] {
    std::unique_lock lock(mu);
    if (!cv.wait_for(lock, 30s, [&] { return done; })) {
      rescued = true;
      r->wake();
    }
  });
  const uint64_t start = Reactor::clock_ns();
  r->arm(t, start + 20'000'000);
  while (log.empty() && !rescued) r->poll(std::chrono::hours(1));
  const uint64_t took = Reactor::clock_ns() - start;
  {
    std::lock_guard lock(mu);
    done = true;
  }
  cv.notify_one();
  rescuer.join();
  CHECK_FALSE(rescued);  // the timer's deadline ended the wait
  CHECK(log.size() == 1);
  CHECK(took >= 20'000'000);  // and not before it: a timer never fires early
}

TEST_CASE("post from many threads runs every function once, in per-thread order") {
  ReactorOptions o;
  o.post_capacity = 64;  // small, so producers see a full ring and retry
  auto r = make(o);
  constexpr int kThreads = 4, kEach = 2000;
  std::vector<std::vector<int>> seen(kThreads);
  std::atomic<int> started{0};
  std::vector<std::thread> th;
  for (int t = 0; t < kThreads; ++t) {
    th.emplace_back([&, t] {
      ++started;
      for (int i = 0; i < kEach; ++i)
        while (!r->post([&seen, t, i] { seen[t].push_back(i); })) std::this_thread::yield();
    });
  }
  size_t total = 0;
  REQUIRE(r->run_until(
      [&] {
        total = 0;
        for (auto& s : seen) total += s.size();
        return total == size_t{kThreads} * kEach;
      },
      10000ms));
  for (auto& x : th) x.join();
  for (auto& s : seen) {
    REQUIRE(s.size() == size_t{kEach});
    for (int i = 0; i < kEach; ++i) CHECK(s[static_cast<size_t>(i)] == i);
  }
}

TEST_CASE("wake() and post() interrupt a poll blocked for seconds") {
  auto r = make();
  std::atomic<bool> ran{false};
  std::thread other([&] {
    std::this_thread::sleep_for(50ms);
    r->post([&] { ran = true; });
  });
  // Each wait may last 10 s; what ends it is counted, not timed: the post's wake-up, never the
  // wait's own timeout (Reactor::wait_timeouts). A post or wake-up that comes before the poll
  // blocks (the other thread ran first) is seen without a wait at all.
  const uint64_t timeouts = r->wait_timeouts();
  while (!ran) r->poll(std::chrono::seconds(10));
  CHECK(r->wait_timeouts() == timeouts);
  other.join();

  std::thread waker([&] {
    std::this_thread::sleep_for(50ms);
    r->wake();
  });
  r->poll(std::chrono::seconds(10));
  CHECK(r->wait_timeouts() == timeouts);
  waker.join();
}

namespace {
struct Counting {
  Reactor* r;
  int calls = 0;
  bool remove_self = false;
};
int count_poller(void* ctx) noexcept {
  auto* c = static_cast<Counting*>(ctx);
  ++c->calls;
  if (c->remove_self) c->r->remove_poller(&count_poller, ctx);
  return 0;
}
}  // namespace

TEST_CASE("pollers run every turn and may remove themselves") {
  auto r = make();
  Counting a{r.get()}, b{r.get()};
  b.remove_self = true;
  r->add_poller(&count_poller, &a);
  r->add_poller(&count_poller, &b);
  for (int i = 0; i < 5; ++i) r->poll();
  CHECK(a.calls == 5);
  CHECK(b.calls == 1);
  r->remove_poller(&count_poller, &a);
  r->poll();
  CHECK(a.calls == 5);
}

TEST_CASE("completions reach their IoHandler; the notify eventfd signals them") {
  ReactorOptions o;
  o.notify = CompletionNotify::eventfd;
  auto r = make(o);
  REQUIRE(r->notify_fd() >= 0);
  struct Nop : IoHandler {
    int res = -1;
    int count = 0;
  } h;
  h.fn = [](IoHandler* self, const io_uring_cqe& cqe) noexcept {
    auto* n = static_cast<Nop*>(self);
    n->res = cqe.res;
    ++n->count;
  };
  io_uring_sqe* sqe = r->get_sqe();
  REQUIRE(sqe);
  io_uring_prep_nop(sqe);
  io_uring_sqe_set_data(sqe, &h);
  io_uring_submit(r->ring());
  uint64_t v = 0;
  for (int i = 0; i < 100 && ::read(r->notify_fd(), &v, sizeof v) != sizeof v; ++i)
    std::this_thread::sleep_for(1ms);
  CHECK(v >= 1);
  r->poll();
  CHECK(h.count == 1);
  CHECK(h.res == 0);
}

namespace {
bool kernel_at_least(int major, int minor) {
  utsname u{};
  if (uname(&u) != 0) return false;
  int ma = 0, mi = 0;
  if (std::sscanf(u.release, "%d.%d", &ma, &mi) != 2) return false;
  return ma > major || (ma == major && mi >= minor);
}
struct PipeRead : IoHandler {
  char buf[8]{};
  int res = -1;
  std::atomic<int> count{0};
};
}  // namespace

TEST_CASE("a single-issuer reactor polled without blocking sees completions and posts", "[single_issuer]") {
  ReactorOptions o;
  o.single_issuer = true;
  auto r = make(o);
  // Linux 6.1 has DEFER_TASKRUN; an older kernel falls back to the default set-up.
  if (kernel_at_least(6, 1)) CHECK(r->single_issuer());
  int p[2];
  REQUIRE(::pipe(p) == 0);
  PipeRead h;
  h.fn = [](IoHandler* self, const io_uring_cqe& cqe) noexcept {
    auto* x = static_cast<PipeRead*>(self);
    x->res = cqe.res;
    x->count.fetch_add(1);
  };
  io_uring_sqe* sqe = r->get_sqe();
  REQUIRE(sqe);
  io_uring_prep_read(sqe, p[0], h.buf, sizeof h.buf, 0);
  io_uring_sqe_set_data(sqe, &h);
  r->poll();  // submits
  std::atomic<bool> ran{false};
  // The read completes as task work queued while the owner spins: only the owner's entry into
  // the ring runs it, so a busy poll that never entered would never see it.
  std::thread other([&] {
    std::this_thread::sleep_for(20ms);
    [[maybe_unused]] const ssize_t w = ::write(p[1], "ping", 4);
    std::this_thread::sleep_for(20ms);
    r->post([&] { ran = true; });
  });
  const uint64_t give_up = Reactor::clock_ns() + 10'000'000'000ull;
  while ((h.count.load() == 0 || !ran) && Reactor::clock_ns() < give_up) r->poll();
  other.join();
  CHECK(h.count.load() == 1);
  CHECK(h.res == 4);
  CHECK(std::string(h.buf, 4) == "ping");
  CHECK(ran);

  // Blocked in the ring: a post from another thread still wakes the owner.
  std::atomic<bool> ran2{false};
  std::thread poster([&] {
    std::this_thread::sleep_for(50ms);
    r->post([&] { ran2 = true; });
  });
  // Each wait may last 10 s; the post ends it, not its timeout.
  const uint64_t timeouts = r->wait_timeouts();
  const uint64_t give_up2 = Reactor::clock_ns() + 30'000'000'000ull;
  while (!ran2 && Reactor::clock_ns() < give_up2) r->poll(std::chrono::seconds(10));
  CHECK(ran2);
  CHECK(r->wait_timeouts() == timeouts);
  poster.join();
  ::close(p[0]);
  ::close(p[1]);
}

TEST_CASE("single_issuer is taken only when asked, and not with a notify eventfd") {
  ReactorOptions o;
  o.single_issuer = true;
  o.notify = CompletionNotify::eventfd;
  CHECK_FALSE(make(o)->single_issuer());
  CHECK_FALSE(make()->single_issuer());
}
