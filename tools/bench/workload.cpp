#include "bench/workload.hpp"

#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>

namespace nvmeof::bench {

namespace {

constexpr size_t kMismatchExamplesPerSlot = 4;
constexpr size_t kErrorKindsPerSlot = 8;
constexpr size_t kStallExamplesPerSlot = 8;

struct SlotStats {
  OpTotals read, write;
  uint64_t errors = 0;
  uint64_t mismatches = 0;
  uint64_t verified_blocks = 0;
  uint64_t last_ns = 0;
  uint64_t max_latency_after_fault_ns = 0;
  uint64_t max_gap_after_fault_ns = 0;
  LatencyHistogram read_window[2], write_window[2];
  uint64_t stalls_outside = 0;
  Stall stalls[kStallExamplesPerSlot];
  size_t n_stalls = 0;
  std::vector<uint64_t> stall_bins;
  ErrorCount error_kinds[kErrorKindsPerSlot];
  size_t n_error_kinds = 0;
  Mismatch examples[kMismatchExamplesPerSlot];
  size_t n_examples = 0;
  std::vector<WindowTotals> windows;
};


}  // namespace

uint64_t monotonic_ns() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

const char* to_string(Phase p) noexcept {
  switch (p) {
    case Phase::prefill: return "prefill";
    case Phase::timed: return "timed";
    case Phase::final_check: return "final_check";
  }
  return "?";
}

struct Workload::Slot {
  VolumeIo io;
  Workload* owner = nullptr;
  unsigned index = 0;
  detail::NodeBuffer buf;
  uint8_t* data() const noexcept { return static_cast<uint8_t*>(buf.data()); }
  int reactor = -1;         ///< the reactor it is submitted to; -1: the volume chooses
  uint64_t first_unit = 0;  ///< of the I/O in flight
  uint32_t n_units = 0;
  uint32_t seq = 0;         ///< of the write in flight
  IoOp op = IoOp::read;
  uint64_t submit_ns = 0;
  uint32_t submit_epoch = 0;  ///< Workload::window_epoch_ when submitted
  // For in_flight() on the main thread: 0 when nothing is in flight, else the submit time.
  std::atomic<uint64_t> inflight_since{0};
  std::atomic<uint64_t> inflight_lba{0};
  std::atomic<uint32_t> inflight_nlb{0};
  std::atomic<uint8_t> inflight_op{0};
  uint64_t rng = 0;
  uint64_t cursor = 0;      ///< sequential patterns: the next of this slot's units
  uint64_t owned_units = 0;
  std::atomic<bool> parked{false};
  SlotStats stats;

  uint64_t next_random() noexcept {
    // xorshift64*: fast, and per slot so no state is shared.
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 0x2545f4914f6cdd1dull;
  }
};

Workload::Workload(Volume& volume, const WorkloadConfig& config)
    : volume_(volume), cfg_(config), units_(config.units), window_start_(config.fault_windows, 0) {
  cfg_.iodepth = static_cast<unsigned>(std::min<uint64_t>(cfg_.iodepth, cfg_.units));
  const size_t unit_bytes = size_t{cfg_.unit_blocks} * cfg_.block_size;
  const size_t buf_bytes = (std::max<size_t>(unit_bytes, cfg_.sweep_bytes) + 4095) & ~size_t{4095};
  for (unsigned i = 0; i < cfg_.iodepth; ++i) {
    auto s = std::make_unique<Slot>();
    s->owner = this;
    s->index = i;
    if (!cfg_.reactor_nodes.empty()) s->reactor = static_cast<int>(i % cfg_.reactor_nodes.size());
    s->buf = detail::NodeBuffer(buf_bytes, s->reactor >= 0 ? cfg_.reactor_nodes[static_cast<size_t>(s->reactor)] : -1);
    // Without verification the content does not matter; fill it once so writes are not zeros.
    for (size_t off = 0; off + cfg_.block_size <= buf_bytes; off += cfg_.block_size)
      fill_block(s->data() + off, cfg_.block_size, off / cfg_.block_size, 0, cfg_.run_id);
    s->rng = mix64(cfg_.seed * 0x100000001b3ull + i) | 1;
    s->owned_units = (cfg_.units - i + cfg_.iodepth - 1) / cfg_.iodepth;
    slots_.push_back(std::move(s));
  }
}

Workload::~Workload() = default;

void Workload::start(Phase phase) {
  phase_ = phase;
  stop_.store(false, std::memory_order_relaxed);
  sweep_cursor_.store(0, std::memory_order_relaxed);
  phase_start_ns_ = monotonic_ns();
  window_count_.store(0, std::memory_order_relaxed);
  for (auto& s : slots_) {
    s->stats = SlotStats{};
    s->stats.windows.resize(phase == Phase::timed ? cfg_.fault_windows : 0);
    s->stats.stall_bins.assign(stall_bins_, 0);
    s->cursor = 0;
  }
  for (auto& s : slots_) {
    if (!prepare(*s)) continue;
    // Counted before submit(): the completion may run on a reactor before submit() returns.
    active_.fetch_add(1, std::memory_order_acq_rel);
    issue(*s);
  }
}

void Workload::mark_fault(uint64_t ns) noexcept {
  uint64_t expected = 0;
  fault_ns_.compare_exchange_strong(expected, ns, std::memory_order_relaxed);
  const size_t k = window_count_.load(std::memory_order_relaxed);
  if (k >= window_start_.size()) return;
  window_start_[k] = ns;
  window_count_.store(k + 1, std::memory_order_release);
}

void Workload::request_stop() noexcept { stop_.store(true, std::memory_order_relaxed); }

void Workload::service() noexcept {
  for (auto& s : slots_) {
    if (!s->parked.exchange(false, std::memory_order_acq_rel)) continue;
    if (stop_.load(std::memory_order_relaxed)) {
      retire();
    } else {
      issue(*s);
    }
  }
}

void Workload::wait_for_park(std::chrono::nanoseconds max) {
  if (!parks_.try_acquire_for(max)) return;
  while (parks_.try_acquire()) {  // one service() answers every park so far
  }
}

bool Workload::wait_idle(std::chrono::milliseconds timeout) {
  const uint64_t deadline = monotonic_ns() + static_cast<uint64_t>(timeout.count()) * 1'000'000ull;
  while (active() != 0) {
    if (monotonic_ns() > deadline) return false;
    service();
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  collect(phase_);
  return true;
}

// Picks the next I/O of the slot. False when the slot has nothing more to do in this phase.
bool Workload::prepare(Slot& s) noexcept {
  if (phase_ == Phase::timed) {
    const uint64_t k =
        (cfg_.rw == RwMode::randread || cfg_.rw == RwMode::randwrite ||
         cfg_.rw == RwMode::randrw)
            ? s.next_random() % s.owned_units
            : s.cursor++ % s.owned_units;
    s.first_unit = s.index + k * cfg_.iodepth;
    s.n_units = 1;
    switch (cfg_.rw) {
      case RwMode::read: case RwMode::randread: s.op = IoOp::read; break;
      case RwMode::write: case RwMode::randwrite: s.op = IoOp::write; break;
      case RwMode::rw: case RwMode::randrw:
        s.op = s.next_random() % 100 < cfg_.rwmixread ? IoOp::read : IoOp::write;
        break;
    }
  } else {
    const uint64_t unit_bytes = uint64_t{cfg_.unit_blocks} * cfg_.block_size;
    const uint64_t chunk = std::max<uint64_t>(1, cfg_.sweep_bytes / unit_bytes);
    const uint64_t first = sweep_cursor_.fetch_add(chunk, std::memory_order_relaxed);
    if (first >= cfg_.units) return false;
    s.first_unit = first;
    s.n_units = static_cast<uint32_t>(std::min(chunk, cfg_.units - first));
    s.op = phase_ == Phase::prefill ? IoOp::write : IoOp::read;
  }
  if (s.op == IoOp::write) {
    const UnitState& u = units_[s.first_unit];
    s.seq = phase_ == Phase::prefill ? 1 : std::max(u.acked, u.failed) + 1;
    if (cfg_.verify) fill(s);
  }
  return true;
}

void Workload::fill(Slot& s) noexcept {
  for (uint32_t u = 0; u < s.n_units; ++u) {
    for (uint32_t b = 0; b < cfg_.unit_blocks; ++b) {
      const uint64_t lba = (s.first_unit + u) * cfg_.unit_blocks + b;
      const size_t off = (size_t{u} * cfg_.unit_blocks + b) * cfg_.block_size;
      fill_block(s.data() + off, cfg_.block_size, lba, s.seq, cfg_.run_id);
    }
  }
}

void Workload::issue(Slot& s) noexcept {
  s.io = VolumeIo{};
  s.io.op = s.op;
  s.io.slba = s.first_unit * cfg_.unit_blocks;
  s.io.nlb = s.n_units * cfg_.unit_blocks;
  s.io.buf = s.data();
  s.io.done = &Workload::on_complete;
  s.io.user = &s;
  s.submit_ns = monotonic_ns();
  s.submit_epoch = window_epoch_.load(std::memory_order_relaxed);
  s.inflight_lba.store(s.io.slba, std::memory_order_relaxed);
  s.inflight_nlb.store(s.io.nlb, std::memory_order_relaxed);
  s.inflight_op.store(static_cast<uint8_t>(s.op), std::memory_order_relaxed);
  s.inflight_since.store(s.submit_ns, std::memory_order_release);
  const int rc = s.reactor >= 0 ? volume_.submit(s.io, static_cast<unsigned>(s.reactor)) : volume_.submit(s.io);
  if (rc == 0) return;
  if (rc == -EAGAIN) {
    s.parked.store(true, std::memory_order_release);
    parks_.release();
    return;
  }
  s.inflight_since.store(0, std::memory_order_relaxed);
  account_error(s, 0, rc);
  retire();
}

void Workload::retire() noexcept { active_.fetch_sub(1, std::memory_order_acq_rel); }

void Workload::on_complete(VolumeIo& io, NvmeStatus status) noexcept {
  auto& s = *static_cast<Slot*>(io.user);
  s.owner->complete(s, status);
}

void Workload::complete(Slot& s, NvmeStatus status) noexcept {
  const uint64_t now = monotonic_ns();
  s.inflight_since.store(0, std::memory_order_relaxed);
  const uint64_t latency = now > s.submit_ns ? now - s.submit_ns : 0;
  SlotStats& st = s.stats;
  st.last_ns = now;
  OpTotals& op = s.op == IoOp::read ? st.read : st.write;
  ++op.ios;
  op.bytes += uint64_t{s.n_units} * cfg_.unit_blocks * cfg_.block_size;
  op.latency.record(latency);
  // Inside a window: submitted while one was open, or one opened (or closed) since.
  const uint32_t epoch = window_epoch_.load(std::memory_order_relaxed);
  const bool inside = (s.submit_epoch & 1u) != 0 || epoch != s.submit_epoch;
  (s.op == IoOp::read ? st.read_window : st.write_window)[inside ? 1 : 0].record(latency);
  if (!inside && latency > stall_ns_) {
    ++st.stalls_outside;
    if (st.n_stalls < kStallExamplesPerSlot)
      st.stalls[st.n_stalls++] = Stall{now, latency, s.first_unit * cfg_.unit_blocks, s.op};
    if (!st.stall_bins.empty() && stall_bin_ns_ > 0 && now >= stall_origin_ns_)
      ++st.stall_bins[std::min<uint64_t>((now - stall_origin_ns_) / stall_bin_ns_, st.stall_bins.size() - 1)];
  }

  if (phase_ == Phase::timed && cfg_.recorder != nullptr)
    cfg_.recorder->record(now, s.op == IoOp::write, uint64_t{s.n_units} * cfg_.unit_blocks * cfg_.block_size,
                          latency);
  if (const uint64_t fault = fault_ns_.load(std::memory_order_relaxed); fault != 0 && now >= fault) {
    st.max_latency_after_fault_ns = std::max(st.max_latency_after_fault_ns, latency);
    const uint64_t prev = last_completion_ns_.exchange(now, std::memory_order_relaxed);
    const uint64_t from = std::max(prev, fault);
    if (now > from) st.max_gap_after_fault_ns = std::max(st.max_gap_after_fault_ns, now - from);
    if (const size_t k = window_count_.load(std::memory_order_acquire); k > 0 && k <= st.windows.size()) {
      WindowTotals& w = st.windows[k - 1];
      ++w.ios;
      if (!status.is_success()) ++w.errors;
      w.max_latency_ns = std::max(w.max_latency_ns, latency);
      const uint64_t w_from = std::max(prev, window_start_[k - 1]);
      if (now > w_from) w.max_gap_ns = std::max(w.max_gap_ns, now - w_from);
    }
  }

  if (!status.is_success()) {
    account_error(s, status.raw, 0);
    if (s.op == IoOp::write) {
      for (uint32_t u = 0; u < s.n_units; ++u)
        units_[s.first_unit + u].failed = std::max(units_[s.first_unit + u].failed, s.seq);
    }
  } else if (s.op == IoOp::write) {
    for (uint32_t u = 0; u < s.n_units; ++u) units_[s.first_unit + u] = UnitState{s.seq, 0};
  } else if (cfg_.verify) {
    verify(s);
  }

  if (stop_.load(std::memory_order_relaxed) || !prepare(s)) {
    retire();
    return;
  }
  issue(s);
}

// A unit never acknowledged (acked 0: not prefilled, or its prefill failed) may hold anything.
// Otherwise every block must carry this run's stamp for its own LBA with a sequence between the
// last acknowledged write and the last failed one after it.
void Workload::verify(Slot& s) noexcept {
  SlotStats& st = s.stats;
  for (uint32_t u = 0; u < s.n_units; ++u) {
    const UnitState& state = units_[s.first_unit + u];
    if (state.acked == 0) continue;
    const uint32_t high = std::max(state.acked, state.failed);
    for (uint32_t b = 0; b < cfg_.unit_blocks; ++b) {
      const uint64_t lba = (s.first_unit + u) * cfg_.unit_blocks + b;
      const size_t off = (size_t{u} * cfg_.unit_blocks + b) * cfg_.block_size;
      Stamp found;
      const BlockCheck c = check_block(s.data() + off, cfg_.block_size, found);
      ++st.verified_blocks;
      if (c == BlockCheck::ok && found.lba == lba && found.run_id == cfg_.run_id &&
          found.seq >= state.acked && found.seq <= high)
        continue;
      ++st.mismatches;
      if (st.n_examples < kMismatchExamplesPerSlot)
        st.examples[st.n_examples++] = Mismatch{phase_, lba, state.acked, high, c, found};
    }
  }
}

void Workload::account_error(Slot& s, uint16_t status, int submit_rc) noexcept {
  SlotStats& st = s.stats;
  ++st.errors;
  for (size_t i = 0; i < st.n_error_kinds; ++i) {
    if (st.error_kinds[i].status == status && st.error_kinds[i].submit_rc == submit_rc) {
      ++st.error_kinds[i].count;
      return;
    }
  }
  if (st.n_error_kinds < kErrorKindsPerSlot)
    st.error_kinds[st.n_error_kinds++] = ErrorCount{status, submit_rc, 1};
}

void Workload::collect(Phase phase) {
  PhaseTotals t;
  t.start_ns = phase_start_ns_;
  t.end_ns = phase_start_ns_;
  for (const auto& slot : slots_) {
    const SlotStats& st = slot->stats;
    for (auto [dst, src] : {std::pair{&t.read, &st.read}, std::pair{&t.write, &st.write}}) {
      dst->ios += src->ios;
      dst->bytes += src->bytes;
      dst->latency.merge(src->latency);
    }
    t.errors += st.errors;
    t.mismatches += st.mismatches;
    t.verified_blocks += st.verified_blocks;
    t.end_ns = std::max(t.end_ns, st.last_ns);
    t.max_latency_after_fault_ns = std::max(t.max_latency_after_fault_ns,
                                            st.max_latency_after_fault_ns);
    t.max_gap_after_fault_ns = std::max(t.max_gap_after_fault_ns, st.max_gap_after_fault_ns);
    for (int w = 0; w < 2; ++w) {
      t.read_window[w].merge(st.read_window[w]);
      t.write_window[w].merge(st.write_window[w]);
    }
    t.stalls_outside += st.stalls_outside;
    for (size_t i = 0; i < st.n_stalls; ++i) t.stall_examples.push_back(st.stalls[i]);
    if (t.stall_bins.size() < st.stall_bins.size()) t.stall_bins.resize(st.stall_bins.size(), 0);
    for (size_t i = 0; i < st.stall_bins.size(); ++i) t.stall_bins[i] += st.stall_bins[i];
    for (size_t i = 0; i < st.n_error_kinds; ++i) {
      const ErrorCount& e = st.error_kinds[i];
      auto it = std::find_if(t.error_counts.begin(), t.error_counts.end(), [&](const ErrorCount& x) {
        return x.status == e.status && x.submit_rc == e.submit_rc;
      });
      if (it == t.error_counts.end()) {
        t.error_counts.push_back(e);
      } else {
        it->count += e.count;
      }
    }
    if (t.windows.size() < st.windows.size()) t.windows.resize(st.windows.size());
    for (size_t k = 0; k < st.windows.size(); ++k) {
      t.windows[k].ios += st.windows[k].ios;
      t.windows[k].errors += st.windows[k].errors;
      t.windows[k].max_latency_ns = std::max(t.windows[k].max_latency_ns, st.windows[k].max_latency_ns);
      t.windows[k].max_gap_ns = std::max(t.windows[k].max_gap_ns, st.windows[k].max_gap_ns);
    }
    for (size_t i = 0; i < st.n_examples && t.mismatch_examples.size() < 16; ++i)
      t.mismatch_examples.push_back(st.examples[i]);
  }
  std::sort(t.stall_examples.begin(), t.stall_examples.end(),
            [](const Stall& a, const Stall& b) { return a.at_ns < b.at_ns; });
  totals_[static_cast<size_t>(phase)] = std::move(t);
}

PhaseTotals Workload::totals(Phase phase) const { return totals_[static_cast<size_t>(phase)]; }

void Workload::set_window(bool open) noexcept {
  const uint32_t e = window_epoch_.load(std::memory_order_relaxed);
  if (((e & 1u) != 0) == open) return;
  window_epoch_.store(e + 1, std::memory_order_relaxed);
}

std::vector<InFlight> Workload::in_flight() const {
  std::vector<InFlight> out;
  const uint64_t now = monotonic_ns();
  for (const auto& s : slots_) {
    const uint64_t since = s->inflight_since.load(std::memory_order_acquire);
    if (since == 0) continue;
    InFlight f;
    f.slot = s->index;
    f.op = static_cast<IoOp>(s->inflight_op.load(std::memory_order_relaxed));
    f.lba = s->inflight_lba.load(std::memory_order_relaxed);
    f.nlb = s->inflight_nlb.load(std::memory_order_relaxed);
    f.age_ns = now > since ? now - since : 0;
    f.parked = s->parked.load(std::memory_order_relaxed);
    out.push_back(f);
  }
  return out;
}

}  // namespace nvmeof::bench
