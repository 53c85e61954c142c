// The RDMA staging pool's buddy allocator: sizes round up to powers of two, blocks never
// overlap, and freeing everything merges back into one block.
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <utility>
#include <vector>

#include "transport/rdma/buddy_pool.hpp"

using nvmeof::rdma::BuddyPool;

TEST_CASE("buddy pool: order_for rounds up to a power of two", "[buddy]") {
  CHECK(BuddyPool::order_for(1) == 0);
  CHECK(BuddyPool::order_for(2) == 1);
  CHECK(BuddyPool::order_for(3) == 2);
  CHECK(BuddyPool::order_for(4) == 2);
  CHECK(BuddyPool::order_for(5) == 3);
  CHECK(BuddyPool::order_for(256) == 8);
  CHECK(BuddyPool::order_for(257) == 9);
}

TEST_CASE("buddy pool: exhaustion, alignment and merging", "[buddy]") {
  BuddyPool p(4);  // 16 pages
  CHECK(p.free_pages() == 16);
  CHECK(p.alloc(17) == BuddyPool::kNone);
  const uint32_t a = p.alloc(16);
  CHECK(a == 0);
  CHECK(p.alloc(1) == BuddyPool::kNone);
  p.free(a, 16);
  CHECK(p.free_pages() == 16);
  const uint32_t b = p.alloc(3);  // takes 4 pages, aligned to 4
  CHECK(b % 4 == 0);
  CHECK(p.free_pages() == 12);
  const uint32_t c = p.alloc(8);
  CHECK(c % 8 == 0);
  CHECK(p.alloc(8) == BuddyPool::kNone);
  p.free(b, 3);
  p.free(c, 8);
  CHECK(p.free_pages() == 16);
  CHECK(p.alloc(16) == 0);
}

TEST_CASE("buddy pool: random churn never hands out overlapping blocks", "[buddy]") {
  BuddyPool p(10);
  std::mt19937 rng(7);
  std::vector<std::pair<uint32_t, uint32_t>> live;  // page, pages
  std::vector<int> owner(1024, -1);
  for (int step = 0; step < 20000; ++step) {
    if (!live.empty() && (rng() % 2 == 0 || live.size() > 64)) {
      const size_t i = rng() % live.size();
      const auto [page, n] = live[i];
      const uint32_t span = 1u << BuddyPool::order_for(n);
      for (uint32_t k = 0; k < span; ++k) owner[page + k] = -1;
      p.free(page, n);
      live[i] = live.back();
      live.pop_back();
      continue;
    }
    const uint32_t n = 1 + rng() % 64;
    const uint32_t page = p.alloc(n);
    if (page == BuddyPool::kNone) continue;
    const uint32_t span = 1u << BuddyPool::order_for(n);
    REQUIRE(page % span == 0);
    REQUIRE(page + span <= 1024);
    for (uint32_t k = 0; k < span; ++k) {
      REQUIRE(owner[page + k] == -1);
      owner[page + k] = step;
    }
    live.emplace_back(page, n);
  }
  for (const auto& [page, n] : live) p.free(page, n);
  CHECK(p.free_pages() == 1024);
  CHECK(p.alloc(1024) == 0);
}
