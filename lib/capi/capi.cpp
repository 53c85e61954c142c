// The C API (include/nvmeof/nvmeof.h) over nvmeof::Volume and nvmeof::Host.
//
// Each volume owns `queue_depth` I/O slots allocated at open (a VolumeIo plus the caller's
// cookie). A submit takes a slot from a spinlock-guarded free stack (a handful of instructions
// under the lock, never a syscall), the completion fills it in on the reactor thread and either
// calls the user's callback or pushes the slot onto a bounded lock-free MPSC ring (the library's
// MpscRing, one producer per reactor, the reaper the one consumer) sized to the slot count, so
// it can never be full. The eventfd is written only when the reaper has armed it (it found the
// ring empty), so a busy consumer costs no syscalls per I/O.
#include "nvmeof/nvmeof.h"

#include <nlohmann/json.hpp>

#include <poll.h>
#include <time.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <chrono>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "core/log.hpp"
#include "core/mpsc_ring.hpp"
#include "core/node_memory.hpp"
#include "nvmeof/volume.hpp"

using namespace nvmeof;

namespace {

// Bumped in every child after fork; a volume opened under another generation is not ours.
std::atomic<uint32_t> g_fork_generation{0};
std::once_flag g_atfork_once;

void on_fork_child() { g_fork_generation.fetch_add(1, std::memory_order_relaxed); }

// Called before a handle is made: a handle made before the first fork must see it.
void watch_fork() {
  std::call_once(g_atfork_once, [] { pthread_atfork(nullptr, nullptr, &on_fork_child); });
}

class SpinLock {
 public:
  void lock() noexcept {
    while (flag_.exchange(true, std::memory_order_acquire)) {
      while (flag_.load(std::memory_order_relaxed)) __builtin_ia32_pause();
    }
  }
  void unlock() noexcept { flag_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> flag_{false};
};

struct Slot {
  VolumeIo io;
  nvmeof_volume* vol = nullptr;
  uint64_t cookie = 0;
  nvmeof_status status = 0;
  uint8_t op = 0;
  bool sync = false;
  std::atomic<uint32_t> sync_done{0};
};

}  // namespace

// One reference to an engine. The handle is the caller's; volumes opened on it hold their own.
struct nvmeof_host {
  std::shared_ptr<Host> host;
  uint32_t generation = 0;

  bool forked() const noexcept {
    return generation != g_fork_generation.load(std::memory_order_relaxed);
  }
};

struct nvmeof_volume {
  std::unique_ptr<Volume> volume;
  uint32_t generation = 0;
  uint32_t block_size = 0;
  uint64_t size_bytes = 0;
  nvmeof_completion_cb cb = nullptr;
  void* cb_ctx = nullptr;
  int efd = -1;
  std::unique_ptr<Slot[]> slots;
  uint32_t nslots = 0;

  SpinLock free_mu;
  std::vector<Slot*> free_slots;  // capacity nslots, never reallocated

  std::unique_ptr<detail::MpscRing<Slot*>> done_ring;  // completion-queue mode
  std::atomic<bool> efd_armed{true};
  // Submitted and not yet completed. close waits for 0: Volume's destructor fails I/O still in a
  // reactor's submission ring instead of running it.
  std::atomic<uint32_t> inflight{0};
  uint32_t no_path_timeout_ms = 0;

  bool forked() const noexcept {
    return generation != g_fork_generation.load(std::memory_order_relaxed);
  }

  Slot* take() noexcept {
    std::lock_guard lk(free_mu);
    if (free_slots.empty()) return nullptr;
    Slot* s = free_slots.back();
    free_slots.pop_back();
    return s;
  }
  void give(Slot* s) noexcept {
    std::lock_guard lk(free_mu);
    free_slots.push_back(s);  // within capacity: every slot was taken from here
  }

  void signal() noexcept {
    if (efd_armed.exchange(false, std::memory_order_acq_rel)) {
      const uint64_t one = 1;
      [[maybe_unused]] ssize_t n = ::write(efd, &one, sizeof one);
    }
  }
};

namespace {

void on_done(VolumeIo& io, NvmeStatus st) noexcept {
  Slot* s = static_cast<Slot*>(io.user);
  nvmeof_volume* v = s->vol;
  s->status = st.raw;
  if (s->sync) {
    s->sync_done.store(1, std::memory_order_release);
    s->sync_done.notify_one();
  } else if (v->cb) {
    const nvmeof_event ev{s->cookie, s->status, s->op, {}};
    v->give(s);
    v->cb(&ev, v->cb_ctx);
  } else {
    v->done_ring->push(s);  // never full: the ring holds every slot
    v->signal();
  }
  // Last: close() waits for this to reach 0, so every completion has been delivered by then
  // (the volume's teardown joins the reactors, which keeps `v` alive until here anyway).
  v->inflight.fetch_sub(1, std::memory_order_release);
}

// nvmeof_last_error(): the precise reason behind the coarse errno of this thread's last failure.
thread_local std::string t_last_error;
thread_local uint16_t t_last_status = 0;

void note_error(const std::string& text, uint16_t status = 0) noexcept {
  try {
    t_last_error = text;
  } catch (...) {
    t_last_error.clear();  // out of memory: the errno still says it
  }
  t_last_status = status;
}

int to_errno(std::error_code ec) noexcept {
  if (!ec) return 0;
  try {
    note_error(ec.message(), ec.category() == nvme_category() ? static_cast<uint16_t>(ec.value()) : 0);
  } catch (...) {
    note_error({});
  }
  if (ec.category() == std::system_category() || ec.category() == std::generic_category())
    return -ec.value();
  if (ec.category() == nvmeof_category()) {
    switch (static_cast<Errc>(ec.value())) {
      case Errc::invalid_argument: return -EINVAL;
      case Errc::timeout:
      case Errc::keep_alive_timeout: return -ETIMEDOUT;
      case Errc::connection_refused: return -ECONNREFUSED;
      case Errc::connection_closed:
      case Errc::connection_reset:
      case Errc::peer_terminated: return -ECONNRESET;
      case Errc::queue_full: return -EAGAIN;
      case Errc::not_connected: return -ENOTCONN;
      case Errc::no_path: return -EHOSTUNREACH;
      case Errc::namespace_mismatch: return -EMEDIUMTYPE;
      case Errc::unsupported: return -EOPNOTSUPP;
      case Errc::authentication_required: return -EACCES;
      case Errc::authentication_failed: return -EACCES;
      case Errc::tls_handshake_failed: return -EACCES;
      case Errc::tls_required: return -EACCES;
      case Errc::tls_not_offered: return -EPROTONOSUPPORT;
      default: return -EPROTO;
    }
  }
  return -EIO;  // an NVMe status from the control path (connect refused by the controller)
}

// A control-path failure: its errno, with its detail text (when it has one) as the last error.
int errno_of(const ErrorInfo& e) noexcept {
  const int rc = to_errno(e.ec);
  if (e.detail) note_error(*e.detail, t_last_status);
  return rc;
}

int bad_address(const char* text, std::error_code ec) {
  note_error(std::string("path address '") + text + "': " + ec.message());
  return -EINVAL;
}

bool fill_options(const nvmeof_volume_options* o, VolumeOptions& vo) {
  if (!o || o->struct_size < sizeof(nvmeof_volume_options) || !o->subnqn || !*o->subnqn)
    return false;
  if (o->queue_depth == 0 || o->queue_depth > 65536 || o->reactors == 0 || o->reactors > 256)
    return false;
  vo.connect.subnqn = o->subnqn;
  if (o->hostnqn) vo.connect.hostnqn = o->hostnqn;
  if (o->dhchap_secret) vo.connect.dhchap_secret = o->dhchap_secret;
  if (o->dhchap_ctrl_secret) vo.connect.dhchap_ctrl_secret = o->dhchap_ctrl_secret;
  if (o->tls_psk) vo.connect.tls_psk = o->tls_psk;
  switch (o->tls) {
    case NVMEOF_TLS_WHEN_KEYED: vo.connect.tls = TlsUse::when_keyed; break;
    case NVMEOF_TLS_OFF: vo.connect.tls = TlsUse::off; break;
    case NVMEOF_TLS_ON: vo.connect.tls = TlsUse::on; break;
    default: return false;
  }
  vo.nsid = o->nsid;
  vo.reactors = o->reactors;
  switch (o->selector) {
    case NVMEOF_SELECTOR_SERVICE_TIME: vo.selector = SelectorKind::service_time; break;
    case NVMEOF_SELECTOR_ROUND_ROBIN: vo.selector = SelectorKind::round_robin; break;
    case NVMEOF_SELECTOR_QUEUE_DEPTH: vo.selector = SelectorKind::queue_depth; break;
    case NVMEOF_SELECTOR_NUMA: vo.selector = SelectorKind::numa; break;
    default: return false;
  }
  vo.no_path_timeout = std::chrono::milliseconds(o->no_path_timeout_ms);
  static_assert(NVMEOF_KATO_SHORTEST == kKatoShortest);
  vo.connect.kato_ms = o->kato_ms;
  vo.io_deadline = std::chrono::milliseconds(o->io_deadline_ms);
  vo.connect.io_queue_depth = std::min<uint32_t>(std::max<uint32_t>(o->queue_depth, 32), 1024);
  return true;
}

int finish_open(Result<std::unique_ptr<Volume>> r, const nvmeof_volume_options* o,
                nvmeof_volume** out) {
  if (!r) {
    detail::log_warning("nvmeof: open: %s", r.message().c_str());
    return to_errno(r.error());
  }
  std::unique_ptr<nvmeof_volume> v;
  try {
    v = std::make_unique<nvmeof_volume>();
    v->nslots = o->queue_depth;
    v->slots = std::make_unique<Slot[]>(v->nslots);
    v->free_slots.reserve(v->nslots);
    for (uint32_t i = v->nslots; i-- > 0;) {
      v->slots[i].vol = v.get();
      v->slots[i].io.user = &v->slots[i];
      v->slots[i].io.done = &on_done;
      v->free_slots.push_back(&v->slots[i]);
    }
    if (!o->completion_cb) {
      size_t cap = 1;
      while (cap < v->nslots) cap <<= 1;
      v->done_ring = std::make_unique<detail::MpscRing<Slot*>>(cap);
      v->efd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
      if (v->efd < 0) return -errno;
    }
  } catch (const std::bad_alloc&) {
    return -ENOMEM;
  }
  v->volume = std::move(r.value());
  v->generation = g_fork_generation.load(std::memory_order_relaxed);
  v->block_size = v->volume->block_size();
  v->size_bytes = v->volume->size_blocks() * v->block_size;
  v->no_path_timeout_ms = o->no_path_timeout_ms;
  v->cb = o->completion_cb;
  v->cb_ctx = o->completion_ctx;
  *out = v.release();
  return 0;
}

// `host` null: the process's shared engine for the engine fields of `o`.
int open_paths(std::shared_ptr<Host> host, const char* const* paths, size_t npaths,
               const nvmeof_volume_options* o, nvmeof_volume** out) {
  if (!out) return -EINVAL;
  *out = nullptr;
  if (!paths || npaths == 0) return -EINVAL;
  try {
    VolumeOptions vo;
    if (!fill_options(o, vo)) {
      note_error("invalid nvmeof_volume_options (struct_size, subnqn, queue_depth, reactors, tls or selector)");
      return -EINVAL;
    }
    for (size_t i = 0; i < npaths; ++i) {
      if (!paths[i]) return -EINVAL;
      auto a = TransportAddress::parse(paths[i]);
      if (!a) return bad_address(paths[i], a.error());
      vo.paths.push_back(*a);
    }
    return finish_open(host ? Volume::open(std::move(host), vo) : Volume::open(vo), o, out);
  } catch (const std::bad_alloc&) {
    return -ENOMEM;
  }
}

int open_discovered(std::shared_ptr<Host> host, const char* discovery, const nvmeof_volume_options* o,
                    nvmeof_volume** out) {
  if (!out) return -EINVAL;
  *out = nullptr;
  if (!discovery) return -EINVAL;
  try {
    VolumeOptions vo;
    if (!fill_options(o, vo)) {
      note_error("invalid nvmeof_volume_options (struct_size, subnqn, queue_depth, reactors, tls or selector)");
      return -EINVAL;
    }
    auto a = TransportAddress::parse(discovery);
    if (!a) return bad_address(discovery, a.error());
    return finish_open(host ? Volume::open_discovered(std::move(host), *a, vo) : Volume::open_discovered(*a, vo),
                       o, out);
  } catch (const std::bad_alloc&) {
    return -ENOMEM;
  }
}

int check_host(const nvmeof_host* h) noexcept {
  if (!h) return -EINVAL;
  if (h->forked()) return -ECHILD;
  return 0;
}

// Checks a byte range and turns it into blocks.
int to_blocks(const nvmeof_volume* v, size_t len, uint64_t offset, uint64_t& slba, uint32_t& nlb) {
  const uint64_t bs = v->block_size;
  if (len == 0 || len % bs || offset % bs) return -EINVAL;
  if (offset > v->size_bytes || len > v->size_bytes - offset) return -EINVAL;
  if (len / bs > UINT32_MAX) return -EINVAL;
  slba = offset / bs;
  nlb = static_cast<uint32_t>(len / bs);
  return 0;
}

int check(const nvmeof_volume* v) noexcept {
  if (!v) return -EINVAL;
  if (v->forked()) return -ECHILD;
  return 0;
}

int start(nvmeof_volume* v, IoOp op, void* buf, uint64_t slba, uint32_t nlb, uint64_t cookie,
          Slot** sync_slot) noexcept {
  Slot* s = v->take();
  if (!s) return -EAGAIN;
  s->io.op = op;
  s->io.slba = slba;
  s->io.nlb = nlb;
  s->io.buf = buf;
  s->cookie = cookie;
  s->op = static_cast<uint8_t>(op);
  s->sync = sync_slot != nullptr;
  s->sync_done.store(0, std::memory_order_relaxed);
  v->inflight.fetch_add(1, std::memory_order_relaxed);
  const int rc = v->volume->submit(s->io);
  if (rc != 0) {
    v->inflight.fetch_sub(1, std::memory_order_relaxed);
    v->give(s);
    return rc;
  }
  if (sync_slot) *sync_slot = s;
  return 0;
}

int submit_rw(nvmeof_volume* v, IoOp op, void* buf, size_t len, uint64_t offset,
              uint64_t cookie, Slot** sync_slot) noexcept {
  if (int rc = check(v)) return rc;
  if (!buf && op != IoOp::write_zeroes) return -EINVAL;
  uint64_t slba;
  uint32_t nlb;
  if (int rc = to_blocks(v, len, offset, slba, nlb)) return rc;
  return start(v, op, buf, slba, nlb, cookie, sync_slot);
}

int wait_sync(nvmeof_volume* v, Slot* s, nvmeof_status* status) noexcept {
  while (s->sync_done.load(std::memory_order_acquire) == 0) s->sync_done.wait(0);
  const nvmeof_status st = s->status;
  v->give(s);
  if (status) *status = st;
  return (st & 0x7ff) == 0 || status ? 0 : -EIO;
}

std::mutex g_buffers_mu;
std::unordered_map<void*, detail::NodeBuffer>* g_buffers = nullptr;

}  // namespace

extern "C" {

void nvmeof_volume_options_init(nvmeof_volume_options* o) {
  if (!o) return;
  std::memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
  o->nsid = 1;
  o->queue_depth = 256;
  o->reactors = 1;
  o->selector = NVMEOF_SELECTOR_SERVICE_TIME;
  o->no_path_timeout_ms = 30000;
  o->kato_ms = NVMEOF_KATO_SHORTEST;
}

int nvmeof_volume_open(const char* const* paths, size_t npaths, const nvmeof_volume_options* o,
                       nvmeof_volume** out) {
  watch_fork();
  return open_paths(nullptr, paths, npaths, o, out);
}

int nvmeof_volume_open_discovered(const char* discovery, const nvmeof_volume_options* o,
                                  nvmeof_volume** out) {
  watch_fork();
  return open_discovered(nullptr, discovery, o, out);
}

int nvmeof_volume_open_on(nvmeof_host* h, const char* const* paths, size_t npaths,
                          const nvmeof_volume_options* o, nvmeof_volume** out) {
  if (out) *out = nullptr;
  if (int rc = check_host(h)) return rc;
  return open_paths(h->host, paths, npaths, o, out);
}

int nvmeof_volume_open_discovered_on(nvmeof_host* h, const char* discovery,
                                     const nvmeof_volume_options* o, nvmeof_volume** out) {
  if (out) *out = nullptr;
  if (int rc = check_host(h)) return rc;
  return open_discovered(h->host, discovery, o, out);
}

void nvmeof_host_options_init(nvmeof_host_options* o) {
  if (!o) return;
  std::memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
  o->reactors = 1;
  o->poll = NVMEOF_POLL_ADAPTIVE;
  o->placement = NVMEOF_PLACEMENT_NUMA;
  o->sqe_size = NVMEOF_SQE_64;
}

int nvmeof_host_create(const nvmeof_host_options* o, nvmeof_host** out) {
  if (!out) return -EINVAL;
  *out = nullptr;
  if (!o || o->struct_size < sizeof(nvmeof_host_options)) return -EINVAL;
  if (o->reactors == 0 || o->reactors > 256 || (!o->cpus && o->ncpus != 0)) return -EINVAL;
  watch_fork();
  try {
    HostOptions ho;
    ho.reactors = o->reactors;
    switch (o->poll) {
      case NVMEOF_POLL_ADAPTIVE: ho.poll = PollMode::adaptive; break;
      case NVMEOF_POLL_BUSY: ho.poll = PollMode::busy; break;
      case NVMEOF_POLL_SLEEP: ho.poll = PollMode::sleep; break;
      default: return -EINVAL;
    }
    switch (o->placement) {
      case NVMEOF_PLACEMENT_NUMA: ho.placement = PlacementMode::numa; break;
      case NVMEOF_PLACEMENT_UNPINNED: ho.placement = PlacementMode::unpinned; break;
      default: return -EINVAL;
    }
    switch (o->sqe_size) {
      case NVMEOF_SQE_64: ho.big_entries = false; break;
      case NVMEOF_SQE_128: ho.big_entries = true; break;
      default: return -EINVAL;
    }
    for (size_t i = 0; i < o->ncpus; ++i) {
      if (o->cpus[i] < 0) return -EINVAL;
      ho.cpus.push_back(o->cpus[i]);
    }
    if (o->metrics_listen) ho.metrics_listen = o->metrics_listen;
    ho.caller_drive = o->caller_drive != 0;
    auto made = Host::create(ho);
    if (!made) {
      detail::log_warning("nvmeof: host: %s", made.message().c_str());
      return to_errno(made.error());
    }
    auto h = std::make_unique<nvmeof_host>();
    h->host = std::move(*made);
    h->generation = g_fork_generation.load(std::memory_order_relaxed);
    *out = h.release();
    return 0;
  } catch (const std::bad_alloc&) {
    return -ENOMEM;
  }
}

int nvmeof_host_metrics_port(const nvmeof_host* h) {
  if (!h || !h->host) return -EINVAL;
  return h->host->metrics_port();
}

int nvmeof_host_close(nvmeof_host* h) {
  if (!h) return -EINVAL;
  if (h->forked()) {
    // The engine's threads do not exist in this process: letting go of the last reference would
    // join them forever. Forget it; the parent still owns the real one.
    (void)new std::shared_ptr<Host>(std::move(h->host));
  }
  delete h;
  return 0;
}

int nvmeof_host_stats_get(const nvmeof_host* h, nvmeof_host_stats* out) {
  if (int rc = check_host(h)) return rc;
  if (!out || out->struct_size < sizeof(nvmeof_host_stats)) return -EINVAL;
  try {
    const HostStats s = h->host->stats();
    out->reactors = s.reactors;
    out->threads = s.threads;
    out->volumes = s.volumes;
    out->reactor_cpu_ns = 0;
    for (uint64_t ns : s.reactor_cpu_ns) out->reactor_cpu_ns += ns;
    out->reactor_wakeups = 0;
    for (uint64_t n : s.reactor_wakeups) out->reactor_wakeups += n;
    out->subsystems = s.subsystems;
    out->controllers = static_cast<uint32_t>(s.controllers.size());
    out->driven_turns = 0;
    for (uint64_t n : s.reactor_driven_turns) out->driven_turns += n;
    out->parks = 0;
    for (uint64_t n : s.reactor_parks) out->parks += n;
    return 0;
  } catch (const std::bad_alloc&) {
    return -ENOMEM;
  }
}

int nvmeof_volume_close(nvmeof_volume* v) {
  if (!v) return -EINVAL;
  if (v->forked()) {
    // The reactor and control threads do not exist in this process: tearing the volume down
    // would wait for them forever. Forget it; the parent still owns the real one.
    (void)v->volume.release();
    (void)v->slots.release();
    (void)v->done_ring.release();
  }
  if (v->volume) {
    const auto give_up = std::chrono::steady_clock::now() +
                         std::chrono::milliseconds(v->no_path_timeout_ms) + std::chrono::seconds(1);
    while (v->inflight.load(std::memory_order_acquire) != 0 &&
           std::chrono::steady_clock::now() < give_up)
      std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  v->volume.reset();
  if (v->efd >= 0) ::close(v->efd);
  delete v;
  return 0;
}

uint32_t nvmeof_volume_block_size(const nvmeof_volume* v) { return v ? v->block_size : 0; }
uint64_t nvmeof_volume_size(const nvmeof_volume* v) { return v ? v->size_bytes : 0; }
uint32_t nvmeof_volume_queue_depth(const nvmeof_volume* v) { return v ? v->nslots : 0; }

int nvmeof_submit_read(nvmeof_volume* v, void* buf, size_t len, uint64_t offset,
                       uint64_t cookie) {
  return submit_rw(v, IoOp::read, buf, len, offset, cookie, nullptr);
}

int nvmeof_submit_write(nvmeof_volume* v, const void* buf, size_t len, uint64_t offset,
                        uint64_t cookie) {
  return submit_rw(v, IoOp::write, const_cast<void*>(buf), len, offset, cookie, nullptr);
}

int nvmeof_submit_write_zeroes(nvmeof_volume* v, size_t len, uint64_t offset, uint64_t cookie) {
  return submit_rw(v, IoOp::write_zeroes, nullptr, len, offset, cookie, nullptr);
}

int nvmeof_submit_flush(nvmeof_volume* v, uint64_t cookie) {
  if (int rc = check(v)) return rc;
  return start(v, IoOp::flush, nullptr, 0, 0, cookie, nullptr);
}

int nvmeof_submit_dsm(nvmeof_volume* v, const nvmeof_dsm_range* ranges, uint32_t n,
                      uint64_t cookie) {
  static_assert(sizeof(nvmeof_dsm_range) == sizeof(DsmRange));
  if (int rc = check(v)) return rc;
  if (!ranges || n == 0 || n > 256) return -EINVAL;
  const uint64_t blocks = v->size_bytes / v->block_size;
  for (uint32_t i = 0; i < n; ++i) {
    if (ranges[i].nlb == 0 || ranges[i].slba >= blocks || ranges[i].nlb > blocks - ranges[i].slba)
      return -EINVAL;
  }
  return start(v, IoOp::dsm, const_cast<nvmeof_dsm_range*>(ranges), 0, n, cookie, nullptr);
}

namespace {
// Moves finished I/Os from the completion ring into events[n..max); returns the new count.
// The ring's one consumer only.
int take_done(nvmeof_volume* v, nvmeof_event* events, int n, int max) noexcept {
  while (n < max) {
    Slot* s = v->done_ring->pop();
    if (!s) break;
    events[n++] = nvmeof_event{s->cookie, s->status, s->op, {}};
    v->give(s);
  }
  return n;
}
}  // namespace

int nvmeof_volume_reap(nvmeof_volume* v, nvmeof_event* events, int max) {
  if (int rc = check(v)) return rc;
  if (!v->done_ring || !events || max < 0) return -EINVAL;
  int n = 0;
  for (;;) {
    n = take_done(v, events, n, max);
    if (n == max) {
      // More may wait: leave the eventfd readable so an event loop comes back.
      v->efd_armed.store(false, std::memory_order_release);
      const uint64_t one = 1;
      [[maybe_unused]] ssize_t w = ::write(v->efd, &one, sizeof one);
      return n;
    }
    // Found the ring empty: clear the eventfd, arm it, then look once more so a completion
    // pushed between the last pop and the arming is not left without a wake-up.
    uint64_t cnt;
    [[maybe_unused]] ssize_t r = ::read(v->efd, &cnt, sizeof cnt);
    v->efd_armed.store(true, std::memory_order_seq_cst);
    Slot* s = v->done_ring->pop();
    if (!s) return n;
    events[n++] = nvmeof_event{s->cookie, s->status, s->op, {}};
    v->give(s);
  }
}

namespace {
uint64_t mono_ns() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}
}  // namespace

int nvmeof_volume_reap_wait(nvmeof_volume* v, nvmeof_event* events, int max, int min, int64_t timeout_us) {
  if (int rc = check(v)) return rc;
  if (!v->done_ring || !events || max <= 0 || min < 1 || min > max) return -EINVAL;
  if (v->volume->on_reactor_thread()) return -EDEADLK;
  const uint64_t deadline = timeout_us < 0 ? UINT64_MAX : mono_ns() + static_cast<uint64_t>(timeout_us) * 1000;
  int n = 0;
  for (;;) {
    // Taken without arming the eventfd: nothing sleeps on it while this thread looks.
    n = take_done(v, events, n, max);
    if (n >= min) return n;
    const uint64_t now = mono_ns();
    if (now >= deadline) break;
    const auto left = std::chrono::microseconds(
        static_cast<int64_t>(std::min<uint64_t>(deadline - now, 3'600'000'000'000ull) / 1000));
    // Drive until enough are ready: the completions land in done_ring during the turns this
    // thread runs, and it takes them as they come (it is the ring's one consumer).
    auto enough = [&] {
      n = take_done(v, events, n, max);
      return n >= min;
    };
    // Passed by reference: a std::function holding a reference_wrapper allocates nothing.
    if (v->volume->drive(std::ref(enough), left)) continue;
    // Not driven: sleep on the eventfd, armed first, looked at again after arming.
    const int got = nvmeof_volume_reap(v, events + n, max - n);
    if (got < 0) return n ? n : got;
    n += got;
    if (n >= min) return n;
    const uint64_t t = mono_ns();
    if (t >= deadline) break;
    pollfd p{v->efd, POLLIN, 0};
    ::poll(&p, 1, static_cast<int>(std::min<uint64_t>((deadline - t + 999'999) / 1'000'000, 1000)));
  }
  return n;
}

int nvmeof_volume_event_fd(const nvmeof_volume* v) {
  if (int rc = check(v)) return rc;
  return v->done_ring ? v->efd : -EINVAL;
}

int nvmeof_read(nvmeof_volume* v, void* buf, size_t len, uint64_t offset, nvmeof_status* st) {
  Slot* s = nullptr;
  if (int rc = submit_rw(v, IoOp::read, buf, len, offset, 0, &s)) return rc;
  return wait_sync(v, s, st);
}

int nvmeof_write(nvmeof_volume* v, const void* buf, size_t len, uint64_t offset,
                 nvmeof_status* st) {
  Slot* s = nullptr;
  if (int rc = submit_rw(v, IoOp::write, const_cast<void*>(buf), len, offset, 0, &s)) return rc;
  return wait_sync(v, s, st);
}

int nvmeof_flush(nvmeof_volume* v, nvmeof_status* st) {
  if (int rc = check(v)) return rc;
  Slot* s = nullptr;
  if (int rc = start(v, IoOp::flush, nullptr, 0, 0, 0, &s)) return rc;
  return wait_sync(v, s, st);
}

namespace {
// A string handed to C (nvmeof_string_free).
int give_string(const std::string& j, char** out) {
  char* p = static_cast<char*>(std::malloc(j.size() + 1));
  if (!p) return -ENOMEM;
  std::memcpy(p, j.c_str(), j.size() + 1);
  *out = p;
  return 0;
}
}  // namespace

int nvmeof_host_add_discovery(nvmeof_host* h, const char* addr, const nvmeof_volume_options* o) {
  if (int rc = check_host(h)) return rc;
  if (!addr) return -EINVAL;
  try {
    auto a = TransportAddress::parse(addr);
    if (!a) return bad_address(addr, a.error());
    ConnectOptions co;
    if (o) {
      if (o->struct_size < sizeof(nvmeof_volume_options)) return -EINVAL;
      if (o->hostnqn) co.hostnqn = o->hostnqn;
      if (o->dhchap_secret) co.dhchap_secret = o->dhchap_secret;
      if (o->dhchap_ctrl_secret) co.dhchap_ctrl_secret = o->dhchap_ctrl_secret;
      if (o->tls_psk) co.tls_psk = o->tls_psk;
      if (o->tls == NVMEOF_TLS_OFF) co.tls = TlsUse::off;
      else if (o->tls == NVMEOF_TLS_ON) co.tls = TlsUse::on;
      else if (o->tls != NVMEOF_TLS_WHEN_KEYED) return -EINVAL;
    }
    auto r = h->host->add_discovery(*a, co);
    return r ? 0 : errno_of(r.failure());
  } catch (const std::bad_alloc&) {
    return -ENOMEM;
  }
}

int nvmeof_host_remove_discovery(nvmeof_host* h, const char* addr) {
  if (int rc = check_host(h)) return rc;
  if (!addr) return -EINVAL;
  try {
    auto a = TransportAddress::parse(addr);
    if (!a) return bad_address(addr, a.error());
    auto r = h->host->remove_discovery(*a);
    return r ? 0 : errno_of(r.failure());
  } catch (const std::bad_alloc&) {
    return -ENOMEM;
  }
}

int nvmeof_host_namespace_events_json(nvmeof_host* h, char** out) {
  if (!out) return -EINVAL;
  *out = nullptr;
  if (int rc = check_host(h)) return rc;
  try {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& e : h->host->take_namespace_events())
      j.push_back({{"kind", to_string(e.kind)}, {"subnqn", e.subnqn}, {"nsid", e.nsid},
                   {"size_blocks", e.size_blocks}, {"block_size", e.block_size}});
    return give_string(j.dump(), out);
  } catch (const std::bad_alloc&) {
    return -ENOMEM;
  }
}

int nvmeof_host_discovery_json(const nvmeof_host* h, char** out) {
  if (!out) return -EINVAL;
  *out = nullptr;
  if (int rc = check_host(h)) return rc;
  try {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& d : h->host->stats().discovery)
      j.push_back({{"address", d.address}, {"connected", d.connected}, {"referral", d.referral},
                   {"log_reads", d.log_reads}, {"change_events", d.change_events}, {"reconnects", d.reconnects},
                   {"genctr", d.genctr}, {"entries", d.entries}, {"last_error", d.last_error}});
    return give_string(j.dump(), out);
  } catch (const std::bad_alloc&) {
    return -ENOMEM;
  }
}

int nvmeof_volume_add_path(nvmeof_volume* v, const char* addr) {
  if (int rc = check(v)) return rc;
  if (!addr) return -EINVAL;
  try {
    auto a = TransportAddress::parse(addr);
    if (!a) return bad_address(addr, a.error());
    auto r = v->volume->add_path(*a);
    if (!r) return errno_of(r.failure());
    return *r;
  } catch (const std::bad_alloc&) {
    return -ENOMEM;
  }
}

int nvmeof_volume_remove_path(nvmeof_volume* v, const char* addr) {
  if (int rc = check(v)) return rc;
  if (!addr) return -EINVAL;
  try {
    auto a = TransportAddress::parse(addr);
    if (!a) return bad_address(addr, a.error());
    auto r = v->volume->remove_path(*a);
    return r ? 0 : errno_of(r.failure());
  } catch (const std::bad_alloc&) {
    return -ENOMEM;
  }
}

int nvmeof_volume_stats_json(const nvmeof_volume* v, char** out) {
  if (!out) return -EINVAL;
  *out = nullptr;
  if (int rc = check(v)) return rc;
  try {
    const std::string j = to_json(v->volume->stats());
    char* p = static_cast<char*>(std::malloc(j.size() + 1));
    if (!p) return -ENOMEM;
    std::memcpy(p, j.c_str(), j.size() + 1);
    *out = p;
    return 0;
  } catch (const std::bad_alloc&) {
    return -ENOMEM;
  }
}

void nvmeof_string_free(char* s) { std::free(s); }

int nvmeof_buffer_alloc(size_t nbytes, int node, void** out) {
  if (!out || nbytes == 0 || node < -1) return -EINVAL;
  *out = nullptr;
  try {
    detail::NodeBuffer b(nbytes, node);
    void* p = b.data();
    std::lock_guard lk(g_buffers_mu);
    if (!g_buffers) g_buffers = new std::unordered_map<void*, detail::NodeBuffer>();
    g_buffers->emplace(p, std::move(b));
    *out = p;
    return 0;
  } catch (const std::bad_alloc&) {
    return -ENOMEM;
  }
}

void nvmeof_buffer_free(void* p) {
  if (!p) return;
  detail::NodeBuffer b;
  {
    std::lock_guard lk(g_buffers_mu);
    if (!g_buffers) return;
    auto it = g_buffers->find(p);
    if (it == g_buffers->end()) return;
    b = std::move(it->second);
    g_buffers->erase(it);
  }
}

void nvmeof_set_log_callback(nvmeof_log_cb cb, void* ctx) {
  static_assert(std::is_same_v<nvmeof_log_cb, detail::LogSink>);
  detail::set_log_sink(cb, ctx);
}

const char* nvmeof_last_error(void) { return t_last_error.c_str(); }

nvmeof_status nvmeof_last_error_status(void) { return t_last_status; }

const char* nvmeof_strerror(int err) {
  if (err == 0) return "Success";
  return std::strerror(err < 0 ? -err : err);
}

const char* nvmeof_status_str(nvmeof_status s, char* buf, size_t len) {
  if (!buf || len == 0) return buf;
  const std::string t = to_string(NvmeStatus{s});
  std::snprintf(buf, len, "%s", t.c_str());
  return buf;
}

}  // extern "C"
