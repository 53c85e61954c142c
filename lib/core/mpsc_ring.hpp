// A bounded multi-producer, single-consumer queue (a sequence number per slot: producers claim
// a slot with one CAS, the consumer needs no atomic read-modify-write). The one queue that hands
// work to a reactor without a lock or an allocation: I/O from application threads (pointers),
// functions posted to a reactor (Reactor::post), completions to the C API's reaper.
//
// Threading: push() from any thread; pop() and ready() from the one consumer.
// A slot's sequence number says whose turn it is: a producer writes only when seq == pos, the
// consumer reads only when seq == pos + 1, so a stale read of `head_`/`tail_` just retries.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <utility>

namespace nvmeof::detail {

template <class T>
class MpscRing {
 public:
  explicit MpscRing(size_t capacity_pow2) : mask_(capacity_pow2 - 1), slots_(new Slot[capacity_pow2]) {
    for (size_t i = 0; i < capacity_pow2; ++i) slots_[i].seq.store(i, std::memory_order_relaxed);
  }

  size_t capacity() const noexcept { return mask_ + 1; }

  /// False when full; `item` is then left as it was (moved from only on success).
  bool push(T&& item) noexcept(std::is_nothrow_move_assignable_v<T>) { return put(std::move(item)); }
  bool push(const T& item) noexcept(std::is_nothrow_copy_assignable_v<T>) { return put(item); }

  /// Moves the oldest item into `out`; false when empty. The slot is left holding a
  /// value-initialized T, so nothing the item owned outlives its pop.
  bool pop(T& out) noexcept(std::is_nothrow_move_assignable_v<T>) {
    Slot& s = slots_[head_ & mask_];
    if (s.seq.load(std::memory_order_acquire) != head_ + 1) return false;
    out = std::move(s.item);
    s.item = T{};
    s.seq.store(head_ + mask_ + 1, std::memory_order_release);
    ++head_;
    return true;
  }

  /// For a ring of pointers: the oldest, or nullptr when empty.
  T pop() noexcept
    requires std::is_pointer_v<T>
  {
    T p = nullptr;
    return pop(p) ? p : nullptr;
  }

  /// Whether pop() would find an item now.
  bool ready() const noexcept {
    return slots_[head_ & mask_].seq.load(std::memory_order_acquire) == head_ + 1;
  }

 private:
  struct Slot {
    std::atomic<size_t> seq{0};
    T item{};
  };
  template <class U>
  bool put(U&& item) {
    size_t pos = tail_.load(std::memory_order_relaxed);
    for (;;) {
      Slot& s = slots_[pos & mask_];
      const size_t seq = s.seq.load(std::memory_order_acquire);
      const intptr_t diff = static_cast<intptr_t>(seq) - static_cast<intptr_t>(pos);
      if (diff == 0) {
        if (tail_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
          s.item = std::forward<U>(item);
          s.seq.store(pos + 1, std::memory_order_release);
          return true;
        }
      } else if (diff < 0) {
        return false;  // full: the slot still holds an item from one lap ago
      } else {
        pos = tail_.load(std::memory_order_relaxed);
      }
    }
  }

  const size_t mask_;
  std::unique_ptr<Slot[]> slots_;
  alignas(64) std::atomic<size_t> tail_{0};
  alignas(64) size_t head_ = 0;  // consumer only
};

}  // namespace nvmeof::detail
