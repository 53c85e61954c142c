// A buddy allocator over a power-of-two number of pages: the data staging memory of an RDMA
// queue pair, registered once, handed out per command without allocation or system calls.
// Pure bookkeeping (page indexes only); the caller owns the memory it describes.
//
// Threading: none of its own; the owning queue pair uses it from its reactor's thread.
#pragma once

#include <bit>
#include <cstdint>
#include <vector>

namespace nvmeof::rdma {

class BuddyPool {
 public:
  static constexpr uint32_t kNone = 0xffffffffu;

  /// Manages 2^max_order pages (max_order <= 24), all free.
  explicit BuddyPool(uint32_t max_order = 0)
      : max_order_(max_order),
        free_order_(size_t{1} << max_order, 0),
        next_(size_t{1} << max_order, kNone),
        prev_(size_t{1} << max_order, kNone),
        head_(max_order + 1, kNone) {
    push(0, max_order);
  }

  uint32_t pages() const noexcept { return 1u << max_order_; }

  /// The smallest order whose block holds `n` (>= 1) pages.
  static uint32_t order_for(uint32_t n) noexcept {
    return n <= 1 ? 0 : static_cast<uint32_t>(std::bit_width(n - 1));
  }

  /// First page of a free block of at least `n` pages, or kNone when none is free.
  uint32_t alloc(uint32_t n) noexcept {
    const uint32_t want = order_for(n);
    if (want > max_order_) return kNone;
    uint32_t k = want;
    while (k <= max_order_ && head_[k] == kNone) ++k;
    if (k > max_order_) return kNone;
    const uint32_t page = head_[k];
    unlink(page, k);
    while (k > want) {  // split, keeping the lower half
      --k;
      push(page + (1u << k), k);
    }
    return page;
  }

  /// Returns the block that alloc(n) gave at `page`.
  void free(uint32_t page, uint32_t n) noexcept {
    uint32_t k = order_for(n);
    while (k < max_order_) {
      const uint32_t buddy = page ^ (1u << k);
      if (free_order_[buddy] != k + 1) break;
      unlink(buddy, k);
      page &= ~(1u << k);
      ++k;
    }
    push(page, k);
  }

  /// Free pages in total (diagnostics, tests).
  uint32_t free_pages() const noexcept {
    uint32_t total = 0;
    for (uint32_t k = 0; k <= max_order_; ++k)
      for (uint32_t p = head_[k]; p != kNone; p = next_[p]) total += 1u << k;
    return total;
  }

 private:
  void push(uint32_t page, uint32_t k) noexcept {
    free_order_[page] = static_cast<uint8_t>(k + 1);
    prev_[page] = kNone;
    next_[page] = head_[k];
    if (head_[k] != kNone) prev_[head_[k]] = page;
    head_[k] = page;
  }
  void unlink(uint32_t page, uint32_t k) noexcept {
    free_order_[page] = 0;
    if (prev_[page] != kNone) next_[prev_[page]] = next_[page];
    else head_[k] = next_[page];
    if (next_[page] != kNone) prev_[next_[page]] = prev_[page];
  }

  uint32_t max_order_;
  std::vector<uint8_t> free_order_;  // per page: order + 1 when a free block starts here, else 0
  std::vector<uint32_t> next_;
  std::vector<uint32_t> prev_;
  std::vector<uint32_t> head_;  // per order
};

}  // namespace nvmeof::rdma
