// A bounded multi-producer queue of pointers (a sequence number per slot: producers claim a
// slot with one CAS, the consumer needs no atomic read-modify-write). Used to hand I/O from
// application threads to a reactor without a lock or an allocation.
//
// Threading: push() from any thread; pop() from the one consumer (the reactor thread).
// A slot's sequence number says whose turn it is: a producer writes only when seq == pos, the
// consumer reads only when seq == pos + 1, so a stale read of `head_`/`tail_` just retries.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace nvmeof::detail {

template <class T>
class MpscRing {
 public:
  explicit MpscRing(size_t capacity_pow2) : mask_(capacity_pow2 - 1), slots_(new Slot[capacity_pow2]) {
    for (size_t i = 0; i < capacity_pow2; ++i) slots_[i].seq.store(i, std::memory_order_relaxed);
  }

  /// False when full.
  bool push(T* item) noexcept {
    size_t pos = tail_.load(std::memory_order_relaxed);
    for (;;) {
      Slot& s = slots_[pos & mask_];
      const size_t seq = s.seq.load(std::memory_order_acquire);
      const intptr_t diff = static_cast<intptr_t>(seq) - static_cast<intptr_t>(pos);
      if (diff == 0) {
        if (tail_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
          s.item = item;
          s.seq.store(pos + 1, std::memory_order_release);
          return true;
        }
      } else if (diff < 0) {
        return false;
      } else {
        pos = tail_.load(std::memory_order_relaxed);
      }
    }
  }

  /// nullptr when empty.
  T* pop() noexcept {
    Slot& s = slots_[head_ & mask_];
    if (s.seq.load(std::memory_order_acquire) != head_ + 1) return nullptr;
    T* item = s.item;
    s.seq.store(head_ + mask_ + 1, std::memory_order_release);
    ++head_;
    return item;
  }

 private:
  struct Slot {
    std::atomic<size_t> seq{0};
    T* item = nullptr;
  };
  const size_t mask_;
  std::unique_ptr<Slot[]> slots_;
  alignas(64) std::atomic<size_t> tail_{0};
  alignas(64) size_t head_ = 0;  // consumer only
};

}  // namespace nvmeof::detail
