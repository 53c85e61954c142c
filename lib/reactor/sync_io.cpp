#include "reactor/sync_io.hpp"

#include <algorithm>
#include <cerrno>
#include <functional>
#include <memory>
#include <vector>

namespace nvmeof {
namespace {

constexpr auto kCloseDrain = std::chrono::seconds(5);
constexpr uint32_t kMaxNlb = 65536;

struct Run;

struct Job {
  IoRequest req;
  Cqe cqe{};
  Run* run = nullptr;
};

struct Run {
  std::vector<Job> jobs;
  std::vector<uint32_t> free;
  uint32_t pending = 0;
  NvmeStatus first_error{};
};

void on_done(IoRequest& r, const Cqe& c) noexcept {
  Job* j = static_cast<Job*>(r.user);
  Run* run = j->run;
  j->cqe = c;
  --run->pending;
  if (!c.status().is_success() && run->first_error.is_success()) run->first_error = c.status();
  run->free.push_back(static_cast<uint32_t>(j - run->jobs.data()));
}

// Submits `count` commands (prep(i, req) fills the i-th), at most `window` in flight, and polls
// until all completed, an error stops the submissions, or the deadline passes.
Result<void> drive(QueuePair& qp, Reactor& reactor, std::chrono::milliseconds timeout,
                   uint32_t count, uint32_t window,
                   const std::function<void(uint32_t, IoRequest&)>& prep, Cqe* last_cqe) {
  window = std::max<uint32_t>(1, std::min({window, qp.depth(), count}));
  // Heap-allocated: if the pair cannot be drained after a timeout, the requests must outlive
  // this call rather than leave the queue pair pointing into a dead frame.
  auto run = std::make_unique<Run>();
  run->jobs.resize(window);
  for (uint32_t i = 0; i < window; ++i) {
    run->jobs[i].run = run.get();
    run->free.push_back(window - 1 - i);
  }
  run->free.reserve(window);
  std::error_code submit_error;
  uint32_t next = 0;
  const uint64_t deadline =
      Reactor::clock_ns() + static_cast<uint64_t>(timeout.count()) * 1'000'000ull;
  for (;;) {
    while (!submit_error && run->first_error.is_success() && next < count && !run->free.empty()) {
      const uint32_t idx = run->free.back();
      Job& j = run->jobs[idx];
      j.req = IoRequest{};
      prep(next, j.req);
      j.req.on_complete = &on_done;
      j.req.user = &j;
      const int rc = qp.submit(j.req);
      if (rc == -EAGAIN) break;
      if (rc < 0) {
        submit_error = make_error_code(rc == -ENOTCONN ? Errc::not_connected : Errc::invalid_argument);
        break;
      }
      run->free.pop_back();
      ++run->pending;
      ++next;
    }
    const bool stopping = submit_error || !run->first_error.is_success() || next == count;
    if (stopping && run->pending == 0) break;
    if (Reactor::clock_ns() >= deadline) {
      // Closing completes what is outstanding once the socket can no longer touch it.
      qp.close();
      reactor.run_until([&] { return run->pending == 0; }, kCloseDrain);
      if (run->pending != 0) (void)run.release();  // still referenced by the pair: leak, never dangle
      return Errc::timeout;
    }
    reactor.poll(std::chrono::microseconds(1000));
  }
  if (last_cqe) *last_cqe = run->jobs[0].cqe;
  if (submit_error) return submit_error;
  if (!run->first_error.is_success()) return make_error_code(run->first_error);
  return {};
}

}  // namespace

Result<void> SyncIo::rw(uint8_t opcode, uint64_t slba, uint32_t nlb, void* buf) {
  if (nlb == 0 || block_size_ == 0 || (opcode != opcode::kWriteZeroes && !buf))
    return Errc::invalid_argument;
  const uint32_t per_cmd =
      std::max<uint32_t>(1, std::min<uint32_t>(qp_.max_transfer() / block_size_, kMaxNlb));
  const uint32_t count = (nlb + per_cmd - 1) / per_cmd;
  const bool moves_data = opcode != opcode::kWriteZeroes;
  auto prep = [&](uint32_t i, IoRequest& r) {
    const uint64_t first = static_cast<uint64_t>(i) * per_cmd;
    const uint32_t n = std::min<uint32_t>(per_cmd, static_cast<uint32_t>(nlb - first));
    prep_rw(r.cmd, opcode, nsid_, slba + first, n);
    if (moves_data) {
      r.data = static_cast<uint8_t*>(buf) + first * block_size_;
      r.data_len = n * block_size_;
    }
  };
  return drive(qp_, reactor_, timeout_, count, window_, prep, nullptr);
}

Result<void> SyncIo::read(uint64_t slba, uint32_t nlb, void* buf) {
  return rw(opcode::kRead, slba, nlb, buf);
}

Result<void> SyncIo::write(uint64_t slba, uint32_t nlb, const void* buf) {
  // The data is only read from: the write direction never stores into `buf`.
  return rw(opcode::kWrite, slba, nlb, const_cast<void*>(buf));
}

Result<void> SyncIo::write_zeroes(uint64_t slba, uint32_t nlb) {
  if (nlb == 0) return Errc::invalid_argument;
  const uint32_t count = (nlb + kMaxNlb - 1) / kMaxNlb;
  auto prep = [&](uint32_t i, IoRequest& r) {
    const uint64_t first = static_cast<uint64_t>(i) * kMaxNlb;
    prep_write_zeroes(r.cmd, nsid_, slba + first, std::min<uint32_t>(kMaxNlb, static_cast<uint32_t>(nlb - first)));
  };
  return drive(qp_, reactor_, timeout_, count, window_, prep, nullptr);
}

Result<void> SyncIo::flush() {
  auto prep = [&](uint32_t, IoRequest& r) { prep_flush(r.cmd, nsid_); };
  return drive(qp_, reactor_, timeout_, 1, 1, prep, nullptr);
}

Result<void> SyncIo::dsm(std::span<const DsmRange> ranges, uint32_t attributes) {
  if (ranges.empty() || ranges.size() > 256) return Errc::invalid_argument;
  std::vector<DsmRange> copy(ranges.begin(), ranges.end());
  auto prep = [&](uint32_t, IoRequest& r) {
    prep_dsm(r.cmd, nsid_, static_cast<uint32_t>(copy.size()), attributes);
    r.data = copy.data();
    r.data_len = static_cast<uint32_t>(copy.size() * sizeof(DsmRange));
  };
  return drive(qp_, reactor_, timeout_, 1, 1, prep, nullptr);
}

Result<Cqe> SyncIo::execute(const Sqe& cmd, void* data, uint32_t len) {
  auto prep = [&](uint32_t, IoRequest& r) {
    r.cmd = cmd;
    r.data = data;
    r.data_len = len;
  };
  Cqe cqe{};
  auto r = drive(qp_, reactor_, timeout_, 1, 1, prep, &cqe);
  if (!r && r.error().category() != nvme_category()) return r.error();
  return cqe;
}

}  // namespace nvmeof
