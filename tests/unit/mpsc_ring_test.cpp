#include <catch2/catch.hpp>

#include <atomic>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "core/mpsc_ring.hpp"

using nvmeof::detail::MpscRing;

TEST_CASE("mpsc ring: full refuses without taking the item, empty pops nothing", "[mpsc_ring]") {
  MpscRing<std::function<void()>> r(4);
  CHECK(r.capacity() == 4);
  CHECK_FALSE(r.ready());
  int ran = 0;
  for (int i = 0; i < 4; ++i) CHECK(r.push([&ran] { ++ran; }));
  auto owned = std::make_shared<int>(7);
  std::function<void()> extra = [owned] {};
  CHECK_FALSE(r.push(std::move(extra)));
  CHECK(extra);  // refused: still the caller's
  CHECK(owned.use_count() == 2);
  std::function<void()> fn;
  int popped = 0;
  while (r.pop(fn)) {
    fn();
    ++popped;
  }
  CHECK(popped == 4);
  CHECK(ran == 4);
  CHECK_FALSE(r.ready());
  // After a pop the slot holds nothing of the item: what it captured is released with it.
  CHECK(r.push(std::move(extra)));
  CHECK(owned.use_count() == 2);
  REQUIRE(r.pop(fn));
  fn = nullptr;
  CHECK(owned.use_count() == 1);
}

TEST_CASE("mpsc ring: every producer's items arrive once, in its order", "[mpsc_ring]") {
  constexpr int kProducers = 4, kEach = 20000;
  MpscRing<const int*> r(64);
  std::vector<int> values(kProducers * kEach);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<int>(i);
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p)
    producers.emplace_back([&, p] {
      for (int i = 0; i < kEach; ++i)
        while (!r.push(&values[static_cast<size_t>(p * kEach + i)])) std::this_thread::yield();
    });
  std::vector<int> next(kProducers, 0);
  int got = 0;
  bool in_order = true;
  while (got < kProducers * kEach) {
    const int* v = r.pop();
    if (!v) {
      std::this_thread::yield();
      continue;
    }
    const int p = *v / kEach;
    in_order &= *v % kEach == next[static_cast<size_t>(p)];
    ++next[static_cast<size_t>(p)];
    ++got;
  }
  for (auto& t : producers) t.join();
  CHECK(in_order);
  CHECK(r.pop() == nullptr);
  for (int p = 0; p < kProducers; ++p) CHECK(next[static_cast<size_t>(p)] == kEach);
}
