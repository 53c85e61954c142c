#include "reactor/reactor.hpp"

#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>
#include <utility>
#include <vector>

#include "core/log.hpp"
#include "core/mpsc_ring.hpp"

namespace nvmeof {

namespace {

unsigned round_up_pow2(unsigned v) {
  unsigned p = 1;
  while (p < v) p <<= 1;
  return p;
}

}  // namespace

// Threading: `ring`, the timer heap and pollers belong to the owning thread. The post ring is
// core's MpscRing (any thread posts, the owning thread drains). `wake_pending_` makes
// wake() write the eventfd at most once until the reactor consumed the previous write; the
// reactor clears it with an exchange so it synchronizes with every producer that saw it set,
// and only then drains the post ring, so a post racing with the clear is never missed.
struct Reactor::Impl {
  io_uring ring{};
  bool ring_ok = false;
  uint32_t features = 0;
  unsigned setup_flags = 0;
  // Sparse file and buffer tables (register_file, register_buffer), made on first use.
  static constexpr unsigned kTableSlots = 256;
  std::vector<bool> files_used;
  std::vector<bool> bufs_used;

  std::unique_ptr<detail::MpscRing<std::function<void()>>> posts;

  // Wake-up: a read kept pending on `wake_fd` completes when another thread writes it.
  alignas(64) std::atomic<bool> wake_pending_{false};
  int wake_fd = -1;
  int notify_fd = -1;
  struct WakeHandler : IoHandler {
    Impl* impl = nullptr;
  } wake_handler;
  uint64_t wake_buf = 0;
  bool wake_armed = false;

  std::vector<Timer*> heap;

  struct PollerEntry {
    Poller fn;
    void* ctx;
  };
  std::vector<PollerEntry> pollers;
  bool pollers_dirty = false;
  int depth = 0;  // poll() nesting

  ~Impl() {
    if (ring_ok) io_uring_queue_exit(&ring);
    if (wake_fd >= 0) ::close(wake_fd);
    if (notify_fd >= 0) ::close(notify_fd);
  }

  // --- timers: binary min-heap on deadline_ns ---
  bool less(size_t a, size_t b) const { return heap[a]->deadline_ns < heap[b]->deadline_ns; }
  void swap_nodes(size_t a, size_t b) {
    std::swap(heap[a], heap[b]);
    heap[a]->heap_index = a;
    heap[b]->heap_index = b;
  }
  void sift_up(size_t i) {
    while (i > 0) {
      const size_t parent = (i - 1) / 2;
      if (!less(i, parent)) break;
      swap_nodes(i, parent);
      i = parent;
    }
  }
  void sift_down(size_t i) {
    const size_t n = heap.size();
    for (;;) {
      size_t smallest = i;
      const size_t l = 2 * i + 1, r = l + 1;
      if (l < n && less(l, smallest)) smallest = l;
      if (r < n && less(r, smallest)) smallest = r;
      if (smallest == i) break;
      swap_nodes(i, smallest);
      i = smallest;
    }
  }
  void remove_at(size_t i) {
    const size_t last = heap.size() - 1;
    if (i != last) swap_nodes(i, last);
    heap.back()->armed = false;
    heap.pop_back();
    if (i < heap.size()) {
      sift_down(i);
      sift_up(i);
    }
  }

  void arm_wake_read() {
    if (wake_armed) return;
    io_uring_sqe* sqe = io_uring_get_sqe(&ring);
    if (!sqe) return;  // retried on the next turn
    io_uring_prep_read(sqe, wake_fd, &wake_buf, sizeof wake_buf, 0);
    io_uring_sqe_set_data(sqe, &wake_handler);
    wake_armed = true;
  }

  int reap() {
    // COOP_TASKRUN and DEFER_TASKRUN leave completion work until we enter the kernel (with
    // DEFER_TASKRUN only this thread's GETEVENTS runs it); an overflowed CQ also needs a kernel
    // entry to be flushed back. The flags word is read directly (as liburing's inline helpers
    // do): liburing 2.3 has io_uring_cq_has_overflow() but no call that reports IORING_SQ_TASKRUN.
    const unsigned kflags = IO_URING_READ_ONCE(*ring.sq.kflags);
    if ((kflags & (IORING_SQ_CQ_OVERFLOW | IORING_SQ_TASKRUN)) && io_uring_cq_ready(&ring) == 0)
      io_uring_get_events(&ring);
    int n = 0;
    io_uring_cqe* cqe = nullptr;
    // One CQE at a time, advancing before dispatch, so a handler that re-enters poll() never
    // sees the same completion twice.
    const size_t cqe_bytes = (setup_flags & IORING_SETUP_CQE32) ? 32 : sizeof(io_uring_cqe);
    while (io_uring_peek_cqe(&ring, &cqe) == 0 && cqe) {
      // Room for a 32-byte entry: passthrough completions carry DW0/DW1 in big_cqe[0]. memcpy
      // into the buffer creates the (trivially copyable) entry there.
      alignas(io_uring_cqe) unsigned char raw[32];
      std::memcpy(raw, cqe, cqe_bytes);
      io_uring_cqe_seen(&ring, cqe);
      const io_uring_cqe& copy = *std::launder(reinterpret_cast<const io_uring_cqe*>(raw));
      if (copy.user_data == 0 || copy.user_data == LIBURING_UDATA_TIMEOUT) continue;
      auto* h = reinterpret_cast<IoHandler*>(static_cast<uintptr_t>(copy.user_data));
      h->fn(h, copy);
      ++n;
    }
    return n;
  }

  int run_timers(uint64_t now) {
    int n = 0;
    while (!heap.empty() && heap.front()->deadline_ns <= now) {
      Timer* t = heap.front();
      remove_at(0);
      t->fn(t);
      ++n;
    }
    return n;
  }

  int drain_posts() {
    int n = 0;
    // Bounded so that functions which post again cannot starve the ring.
    std::function<void()> fn;
    for (size_t limit = posts->capacity(); limit > 0 && posts->pop(fn); --limit) {
      if (fn) fn();
      fn = nullptr;
      ++n;
    }
    return n;
  }

  bool has_posts() const { return posts->ready(); }

  int run_pollers() {
    int n = 0;
    const size_t count = pollers.size();
    for (size_t i = 0; i < count && i < pollers.size(); ++i) {
      const PollerEntry e = pollers[i];
      if (e.fn) n += e.fn(e.ctx);
    }
    if (pollers_dirty && depth == 1) {
      std::erase_if(pollers, [](const PollerEntry& e) { return e.fn == nullptr; });
      pollers_dirty = false;
    }
    return n;
  }

  void submit() {
    if (io_uring_sq_ready(&ring) == 0) return;
    const int r = io_uring_submit(&ring);
    // EBUSY/EAGAIN: the CQ is backed up; the SQEs stay queued and go out after the next reap.
    if (r < 0 && r != -EBUSY && r != -EAGAIN && r != -EINTR)
      nvmeof::detail::log_warning("nvmeof: reactor: io_uring_submit failed: %d\n", r);
  }
};

Result<std::unique_ptr<Reactor>> Reactor::create(const ReactorOptions& opts) {
  if (opts.ring_entries == 0 || opts.post_capacity == 0) return Errc::invalid_argument;
  std::unique_ptr<Reactor> r(new Reactor());
  r->impl_ = std::make_unique<Impl>();
  Impl& im = *r->impl_;

  // Preferred flags first; drop the optional ones one by one on older kernels (EINVAL).
  const unsigned base = IORING_SETUP_CQSIZE;
  unsigned candidates[5];
  unsigned ncand = 0;
  if (opts.big_entries) candidates[ncand++] = base | IORING_SETUP_SQE128 | IORING_SETUP_CQE32;
  // TASKRUN_FLAG with DEFER_TASKRUN: the kernel raises IORING_SQ_TASKRUN when completion work
  // is queued, so a polling reap() enters the ring only then.
  if (opts.single_issuer && opts.notify == CompletionNotify::none && !opts.big_entries)
    candidates[ncand++] = base | IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN |
                          IORING_SETUP_TASKRUN_FLAG;
  if (opts.notify == CompletionNotify::none && !opts.big_entries)
    candidates[ncand++] = base | IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG;
  candidates[ncand++] = base;
  candidates[ncand++] = 0;
  int err = -EINVAL;
  for (unsigned i = 0; i < ncand; ++i) {
    io_uring_params p{};
    p.flags = candidates[i];
    p.cq_entries = opts.ring_entries * 2;
    err = io_uring_queue_init_params(opts.ring_entries, &im.ring, &p);
    if (err == 0) {
      im.features = p.features;
      im.setup_flags = p.flags;
      break;
    }
    if (err != -EINVAL) break;
  }
  if (err < 0) return errno_code(-err);
  im.ring_ok = true;
  if (!(im.features & IORING_FEAT_NODROP))
    nvmeof::detail::log_warning("nvmeof: reactor: kernel lacks IORING_FEAT_NODROP; completions can be "
                         "lost under CQ overflow\n");

  const unsigned cap = round_up_pow2(opts.post_capacity);
  im.posts = std::make_unique<detail::MpscRing<std::function<void()>>>(cap);

  // Blocking on purpose: io_uring would fail a read of an O_NONBLOCK eventfd with EAGAIN instead
  // of waiting, and a write only blocks when the counter nears 2^64.
  im.wake_fd = ::eventfd(0, EFD_CLOEXEC);
  if (im.wake_fd < 0) return errno_code(errno);
  im.wake_handler.impl = &im;
  im.wake_handler.fn = [](IoHandler* h, const io_uring_cqe&) noexcept {
    Impl* self = static_cast<Impl::WakeHandler*>(h)->impl;
    self->wake_armed = false;
    self->wake_pending_.exchange(false, std::memory_order_acq_rel);
    self->arm_wake_read();
  };
  if (opts.notify == CompletionNotify::eventfd) {
    im.notify_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (im.notify_fd < 0) return errno_code(errno);
    const int rr = io_uring_register_eventfd(&im.ring, im.notify_fd);
    if (rr < 0) return errno_code(-rr);
  }
  im.arm_wake_read();
  im.submit();
  r->now_ns_ = clock_ns();
  return r;
}

Reactor::~Reactor() = default;

io_uring_sqe* Reactor::get_sqe() noexcept {
  io_uring_sqe* sqe = io_uring_get_sqe(&impl_->ring);
  if (sqe) return sqe;
  impl_->submit();
  return io_uring_get_sqe(&impl_->ring);
}

io_uring* Reactor::ring() noexcept { return &impl_->ring; }
bool Reactor::single_issuer() const noexcept {
  return (impl_->setup_flags & IORING_SETUP_DEFER_TASKRUN) != 0;
}
bool Reactor::big_entries() const noexcept {
  return (impl_->setup_flags & (IORING_SETUP_SQE128 | IORING_SETUP_CQE32)) ==
         (IORING_SETUP_SQE128 | IORING_SETUP_CQE32);
}

Result<unsigned> Reactor::register_file(int fd) noexcept {
  Impl& im = *impl_;
  if (im.files_used.empty()) {
    const int r = io_uring_register_files_sparse(&im.ring, Impl::kTableSlots);
    if (r < 0) return errno_code(-r);
    im.files_used.assign(Impl::kTableSlots, false);
  }
  for (unsigned i = 0; i < im.files_used.size(); ++i) {
    if (im.files_used[i]) continue;
    const int r = io_uring_register_files_update(&im.ring, i, &fd, 1);
    if (r < 0) return errno_code(-r);
    im.files_used[i] = true;
    return i;
  }
  return errno_code(ENFILE);
}

void Reactor::unregister_file(unsigned index) noexcept {
  Impl& im = *impl_;
  if (index >= im.files_used.size() || !im.files_used[index]) return;
  int none = -1;
  (void)io_uring_register_files_update(&im.ring, index, &none, 1);
  im.files_used[index] = false;
}

Result<unsigned> Reactor::register_buffer(const iovec& buf) noexcept {
  Impl& im = *impl_;
  if (im.bufs_used.empty()) {
    const int r = io_uring_register_buffers_sparse(&im.ring, Impl::kTableSlots);
    if (r < 0) return errno_code(-r);
    im.bufs_used.assign(Impl::kTableSlots, false);
  }
  for (unsigned i = 0; i < im.bufs_used.size(); ++i) {
    if (im.bufs_used[i]) continue;
    const __u64 tag = 0;
    const int r = io_uring_register_buffers_update_tag(&im.ring, i, &buf, &tag, 1);
    if (r < 0) return errno_code(-r);
    im.bufs_used[i] = true;
    return i;
  }
  return errno_code(ENOBUFS);
}

void Reactor::unregister_buffer(unsigned index) noexcept {
  Impl& im = *impl_;
  if (index >= im.bufs_used.size() || !im.bufs_used[index]) return;
  const iovec none{nullptr, 0};
  const __u64 tag = 0;
  (void)io_uring_register_buffers_update_tag(&im.ring, index, &none, &tag, 1);
  im.bufs_used[index] = false;
}
uint32_t Reactor::features() const noexcept { return impl_->features; }
int Reactor::notify_fd() const noexcept { return impl_->notify_fd; }

uint64_t Reactor::clock_ns() noexcept {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

int Reactor::poll(std::chrono::microseconds max_wait) noexcept {
  Impl& im = *impl_;
  ++im.depth;
  auto turn = [&] {
    turns_.store(turns_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    now_ns_ = clock_ns();
    int n = im.reap();
    n += im.run_timers(now_ns_);
    n += im.drain_posts();
    n += im.run_pollers();
    im.arm_wake_read();
    return n;
  };
  int n = turn();
  // A spinning reactor never sleeps in the ring: its transports poll sockets that have nothing
  // armed there (set_spinning), so only another turn would see their data.
  if (n == 0 && max_wait.count() > 0 && !spinning_ && !im.has_posts()) {
    uint64_t wait_ns = static_cast<uint64_t>(max_wait.count()) * 1000;
    if (!im.heap.empty()) {
      const uint64_t d = im.heap.front()->deadline_ns;
      wait_ns = d <= now_ns_ ? 0 : std::min(wait_ns, d - now_ns_);
    }
    if (wait_ns > 0) {
      __kernel_timespec ts{};
      ts.tv_sec = static_cast<long long>(wait_ns / 1'000'000'000ull);
      ts.tv_nsec = static_cast<long long>(wait_ns % 1'000'000'000ull);
      io_uring_cqe* cqe = nullptr;
      // Submits what the turn queued and sleeps until a completion (wake() completes the
      // eventfd read) or the timeout. Without IORING_FEAT_EXT_ARG liburing adds a timeout SQE
      // whose completion (LIBURING_UDATA_TIMEOUT) reap() skips.
      const int w = io_uring_submit_and_wait_timeout(&im.ring, &cqe, 1, &ts, nullptr);
      waits_.store(waits_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      if (w == -ETIME)
        wait_timeouts_.store(wait_timeouts_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    }
    n += turn();
  }
  im.submit();
  --im.depth;
  return n;
}

bool Reactor::run_until(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
  const uint64_t deadline = clock_ns() + static_cast<uint64_t>(timeout.count()) * 1'000'000ull;
  while (!done()) {
    const uint64_t now = clock_ns();
    if (now >= deadline) return done();
    const uint64_t left_us = (deadline - now) / 1000;
    poll(std::chrono::microseconds{std::min<uint64_t>(left_us + 1, 10'000)});
  }
  return true;
}

void Reactor::arm(Timer& t, uint64_t deadline_ns) noexcept {
  Impl& im = *impl_;
  t.deadline_ns = deadline_ns;
  if (t.armed) {
    im.sift_down(t.heap_index);
    im.sift_up(t.heap_index);
    return;
  }
  t.armed = true;
  t.heap_index = im.heap.size();
  im.heap.push_back(&t);
  im.sift_up(t.heap_index);
}

void Reactor::cancel(Timer& t) noexcept {
  if (!t.armed) return;
  impl_->remove_at(t.heap_index);
}

void Reactor::add_poller(Poller fn, void* ctx) { impl_->pollers.push_back({fn, ctx}); }

void Reactor::remove_poller(Poller fn, void* ctx) noexcept {
  Impl& im = *impl_;
  for (auto& e : im.pollers) {
    if (e.fn == fn && e.ctx == ctx) {
      e.fn = nullptr;
      im.pollers_dirty = true;
      break;
    }
  }
  if (im.depth == 0) {
    std::erase_if(im.pollers, [](const Impl::PollerEntry& e) { return e.fn == nullptr; });
    im.pollers_dirty = false;
  }
}

bool Reactor::post(std::function<void()> fn) {
  if (!impl_->posts->push(std::move(fn))) return false;  // full
  wake();
  return true;
}

void Reactor::wake() noexcept {
  Impl& im = *impl_;
  if (im.wake_pending_.exchange(true, std::memory_order_acq_rel)) return;
  const uint64_t one = 1;
  // EAGAIN only when the counter is saturated, which already means "wake up".
  [[maybe_unused]] const ssize_t w = ::write(im.wake_fd, &one, sizeof one);
}

}  // namespace nvmeof
