// A closed-loop verified workload on a Volume, shared by the tests that fail paths under it.
//
// `qd` slots, each alternating stamped writes (block_stamp.hpp) and verifying reads on LBAs of
// its own (slots never overlap), resubmitting from the completion on the reactor thread.
// Besides errors and mismatches it records the longest wait of any I/O and the longest time
// in which no I/O completed at all (the stall an application would have seen).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "block_stamp.hpp"
#include "reactor/reactor.hpp"
#include "nvmeof/volume.hpp"

namespace nvmeof::test {

class VerifiedWorkload {
 public:
  struct Slot {
    VerifiedWorkload* w = nullptr;
    uint32_t index = 0;
    VolumeIo io;
    std::vector<uint8_t> buf;
    std::vector<uint64_t> acked;
    uint64_t pending_seq = 0;
    uint32_t nblocks = 1;
    uint64_t rng = 0;
    uint64_t issued_ns = 0;
  };

  /// `base_lba`: the first LBA used; each slot owns `lbas_per_slot` LBAs from there. Each I/O
  /// moves 1 to `max_blocks` blocks (at most lbas_per_slot).
  VerifiedWorkload(Volume& v, uint32_t qd = 16, uint32_t lbas_per_slot = 32, uint64_t base_lba = 0,
                   uint32_t max_blocks = 2)
      : vol_(v), block_(v.block_size()), per_slot_(lbas_per_slot), base_(base_lba),
        max_blocks_(std::clamp<uint32_t>(max_blocks, 1, lbas_per_slot)), slots_(qd) {
    for (uint32_t i = 0; i < qd; ++i) {
      auto& s = slots_[i];
      s.w = this;
      s.index = i;
      s.rng = 0x9e3779b97f4a7c15ull * (i + 1);
      s.buf.resize(static_cast<size_t>(block_) * max_blocks_);
      s.acked.assign(per_slot_, 0);
    }
  }

  // A test whose check fails mid-run unwinds with I/O in flight: the completions must not reach
  // a freed workload. They are waited for (the volume's deadlines or its failover end them); if
  // they never come, that is said and the test aborts rather than writing into freed memory.
  ~VerifiedWorkload() {
    if (!started_ || finish(std::chrono::seconds(60))) return;
    std::fprintf(stderr, "VerifiedWorkload: %zu of %zu slots still have an I/O in flight after 60 s\n",
                 slots_.size() - idle_.load(), slots_.size());
    std::abort();
  }
  VerifiedWorkload(const VerifiedWorkload&) = delete;
  VerifiedWorkload& operator=(const VerifiedWorkload&) = delete;

  void start() {
    started_ = true;
    last_completion_ns_.store(Reactor::clock_ns());
    for (auto& s : slots_) issue(s);
  }

  /// Stops issuing and waits until every slot's last I/O has completed (nothing lost).
  bool finish(std::chrono::milliseconds timeout) {
    stop_.store(true);
    const auto until = std::chrono::steady_clock::now() + timeout;
    while (idle_.load() < slots_.size() && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return idle_.load() == slots_.size();
  }

  uint64_t completed() const { return completed_.load(); }
  uint64_t errors() const { return errors_.load(); }
  uint64_t mismatches() const { return mismatches_.load(); }
  uint64_t issued() const { return writes_.load() + reads_.load(); }
  uint64_t writes() const { return writes_.load(); }
  /// Writes completed (or failed): equal to writes() once none is in flight.
  uint64_t writes_done() const { return writes_done_.load(); }
  /// From now on every slot reads (and verifies) its blocks and writes nothing.
  void reads_only(bool on) { reads_only_.store(on); }
  uint64_t reads() const { return reads_.load(); }
  /// The longest any single I/O took, and the longest time nothing completed (microseconds).
  uint64_t longest_io_us() const { return longest_io_ns_.load() / 1000; }
  uint64_t longest_gap_us() const { return longest_gap_ns_.load() / 1000; }
  std::string first_error() const {
    std::lock_guard lock(mu_);
    return first_error_;
  }
  /// The LBAs the workload covers: [first_lba(), first_lba() + lba_count()).
  uint64_t first_lba() const { return base_; }
  uint64_t lba_count() const { return uint64_t{per_slot_} * slots_.size(); }
  /// After finish(): the seq of the last acknowledged write of `lba` (0: none), so a test can
  /// check what the target itself holds, not only what the volume reads back.
  uint64_t acked_seq(uint64_t lba) const {
    const uint64_t off = lba - base_;
    return slots_.at(off / per_slot_).acked.at(off % per_slot_);
  }

 private:
  static void on_done(VolumeIo& io, NvmeStatus st) noexcept {
    auto& s = *static_cast<Slot*>(io.user);
    s.w->complete(s, st);
  }

  static void raise(std::atomic<uint64_t>& a, uint64_t v) {
    uint64_t cur = a.load();
    while (v > cur && !a.compare_exchange_weak(cur, v)) {
    }
  }

  void complete(Slot& s, NvmeStatus st) {
    const uint64_t now = Reactor::clock_ns();
    raise(longest_io_ns_, now - s.issued_ns);
    const uint64_t last = last_completion_ns_.exchange(now);
    if (now > last) raise(longest_gap_ns_, now - last);
    completed_.fetch_add(1);
    if (s.io.op == IoOp::write) writes_done_.fetch_add(1);
    const uint64_t own = base_ + uint64_t{s.index} * per_slot_;
    const uint32_t first = static_cast<uint32_t>(s.io.slba - own);
    if (!st.is_success()) {
      errors_.fetch_add(1);
      std::lock_guard lock(mu_);
      if (first_error_.empty()) first_error_ = to_string(st);
    } else if (s.io.op == IoOp::write) {
      for (uint32_t b = 0; b < s.nblocks; ++b) s.acked[first + b] = s.pending_seq;
    } else {
      for (uint32_t b = 0; b < s.nblocks; ++b)
        if (!block_matches(s.buf.data() + static_cast<size_t>(b) * block_, block_, s.io.slba + b,
                           s.acked[first + b]))
          mismatches_.fetch_add(1);
    }
    issue(s);
  }

  static uint64_t next_rand(uint64_t& x) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  }

  void issue(Slot& s) {
    if (stop_.load()) {
      idle_.fetch_add(1);
      return;
    }
    const uint64_t r = next_rand(s.rng);
    s.nblocks = 1 + static_cast<uint32_t>((r >> 40) % max_blocks_);
    const uint32_t first = static_cast<uint32_t>((r >> 8) % (per_slot_ - s.nblocks + 1));
    s.io = VolumeIo{};
    s.io.slba = base_ + uint64_t{s.index} * per_slot_ + first;
    s.io.nlb = s.nblocks;
    s.io.buf = s.buf.data();
    s.io.done = &on_done;
    s.io.user = &s;
    if ((r & 1) && !reads_only_.load()) {
      s.io.op = IoOp::write;
      s.pending_seq = (r >> 20) | 1;
      for (uint32_t b = 0; b < s.nblocks; ++b)
        fill_block(s.buf.data() + static_cast<size_t>(b) * block_, block_, s.io.slba + b, s.pending_seq);
      writes_.fetch_add(1);
    } else {
      s.io.op = IoOp::read;
      reads_.fetch_add(1);
    }
    s.issued_ns = Reactor::clock_ns();
    if (vol_.submit(s.io) != 0) {
      errors_.fetch_add(1);
      idle_.fetch_add(1);
    }
  }

  Volume& vol_;
  uint32_t block_;
  uint32_t per_slot_;
  uint64_t base_;
  uint32_t max_blocks_;
  std::vector<Slot> slots_;
  bool started_ = false;
  std::atomic<bool> stop_{false}, reads_only_{false};
  std::atomic<size_t> idle_{0};
  std::atomic<uint64_t> completed_{0}, errors_{0}, mismatches_{0}, writes_{0}, reads_{0}, writes_done_{0};
  std::atomic<uint64_t> longest_io_ns_{0}, longest_gap_ns_{0}, last_completion_ns_{0};
  mutable std::mutex mu_;
  std::string first_error_;
};

}  // namespace nvmeof::test
