#include "transport/uring/queue_pair.hpp"
#include "transport/uring/passthru_cmd.hpp"
#include "core/fabrics_command.hpp"
#include "core/log.hpp"

#include <fcntl.h>
#include <signal.h>
#include <linux/nvme_ioctl.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>

namespace nvmeof::uring {
namespace {

constexpr auto kDrainBound = std::chrono::seconds(2);
// The command area of a 128-byte SQE: bytes 48..127.
constexpr size_t kCmdArea = 80;
static_assert(offsetof(io_uring_sqe, cmd) + kCmdArea == 128);
static_assert(sizeof(nvme_uring_cmd) <= kCmdArea);

uint64_t bound_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(kDrainBound).count());
}

uint64_t read_sysfs_u64(const std::string& path) {
  std::ifstream in(path);
  uint64_t v = 0;
  if (!(in >> v)) return 0;
  return v;
}

// 1 when the block twin nvmeXnY of /dev/ngXnY has poll queues.
bool has_poll_queues(const std::string& device, const std::string& sysfs_root) {
  std::string base = device.substr(device.find_last_of('/') + 1);
  if (base.rfind("ng", 0) != 0) return false;
  return read_sysfs_u64(sysfs_root + "/block/nvme" + base.substr(2) + "/queue/io_poll") == 1;
}

bool is_host_path_status(NvmeStatus s) {
  // 70h host pathing error, 71h aborted by host: the kernel's answers while its controller is
  // not live.
  return s.sct() == Sct::path && (s.sc() == 0x70 || s.sc() == 0x71);
}

// nvme-tcp sends on its socket from the thread that submits when it can, without MSG_NOSIGNAL,
// so a broken connection raises SIGPIPE in our reactor thread. Only a default disposition is
// changed; a handler the program installed stays.
void ignore_sigpipe() {
  struct sigaction old {};
  if (::sigaction(SIGPIPE, nullptr, &old) != 0 || old.sa_handler != SIG_DFL) return;
  struct sigaction ign {};
  ign.sa_handler = SIG_IGN;
  sigemptyset(&ign.sa_mask);
  ::sigaction(SIGPIPE, &ign, nullptr);
}

}  // namespace

uint32_t transfer_limit(const std::string& device, const std::string& sysfs_root) {
  std::string base = device.substr(device.find_last_of('/') + 1);
  if (base.rfind("ng", 0) != 0) return kDefaultMaxTransfer;
  base = "nvme" + base.substr(2);
  const std::string q = sysfs_root + "/block/" + base + "/queue/";
  const uint64_t kb = read_sysfs_u64(q + "max_hw_sectors_kb");
  const uint64_t segs = read_sysfs_u64(q + "max_segments");
  if (kb == 0) return kDefaultMaxTransfer;
  uint64_t limit = kb * 1024;
  // A user buffer maps page by page; a non-contiguous one needs a segment per page.
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  if (segs) limit = std::min(limit, segs * page);
  return static_cast<uint32_t>(std::min<uint64_t>(limit, kMaxTransferCap));
}


// Everything the kernel may touch while commands are in flight: the ring (and through its SQEs
// the requests' buffers), the device and the eventfd whose read waits on the reactor's ring.
// Threading: reactor thread only. It normally dies with the pair; a pair destroyed with
// commands still in the kernel leaves it orphaned (qp == nullptr), and it frees itself once
// the last completion and the pending eventfd read are back.
struct QueuePair::Core {
  struct WakeHandler : IoHandler {
    Core* core = nullptr;
  };
  WakeHandler wake_h;
  Reactor* reactor = nullptr;
  QueuePair* qp = nullptr;
  io_uring ring{};
  bool ring_ok = false;
  int fd = -1;
  int efd = -1;
  uint64_t efd_buf = 0;
  bool wake_armed = false;  // an eventfd read is pending on the reactor's ring
  bool polled = false;      // IORING_SETUP_IOPOLL: completions come only from polling
  uint32_t inflight = 0;    // requests handed to the ring (queued or in the kernel)
  std::vector<iovec> bufs;  // registered buffers; buf_ids[i] is bufs[i]'s table index
  std::vector<unsigned> buf_ids;

  // Shared mode: commands go on the reactor's own ring (big entries). Each command in flight
  // holds a slot, the IoHandler its completion is dispatched to.
  struct Slot : IoHandler {
    Core* core = nullptr;
    IoRequest* req = nullptr;
    bool fixed = false;
    Slot* next_free = nullptr;
  };
  bool shared = false;
  unsigned file_id = 0;  // the device in the ring's file table
  std::unique_ptr<Slot[]> slots;
  uint32_t nslots = 0;
  Slot* free_slots = nullptr;

  ~Core() {
    if (shared) {
      reactor->unregister_file(file_id);
      for (unsigned b : buf_ids) reactor->unregister_buffer(b);
    }
    if (ring_ok) io_uring_queue_exit(&ring);
    if (efd >= 0) ::close(efd);
    if (fd >= 0) ::close(fd);
  }

  void arm_wake() noexcept {
    if (wake_armed || polled) return;
    io_uring_sqe* sqe = reactor->get_sqe();
    if (!sqe) return;  // the next turn retries
    io_uring_prep_read(sqe, efd, &efd_buf, sizeof efd_buf, 0);
    io_uring_sqe_set_data(sqe, &wake_h);
    wake_armed = true;
  }

  // Orphaned: completions only count down; their requests belong to nobody any more.
  void orphan_step() noexcept {
    io_uring_cqe* cqe = nullptr;
    while (io_uring_peek_cqe(&ring, &cqe) == 0 && cqe) {
      io_uring_cqe_seen(&ring, cqe);
      --inflight;
    }
    if (io_uring_sq_ready(&ring)) io_uring_submit(&ring);
    if (inflight > 0) {
      // Without a free reactor SQE the core stays allocated: freeing the ring now would
      // release buffers the kernel may still write.
      arm_wake();
      return;
    }
    if (!wake_armed) delete this;
  }
};

Result<std::unique_ptr<QueuePair>> QueuePair::open(Reactor& reactor, const QpConfig& cfg) {
  const std::string label = "uring " + cfg.device;
  if (cfg.device.empty() || cfg.depth == 0 || cfg.depth > kMaxQueueDepth) {
    nvmeof::detail::log_warning("nvmeof: %s: invalid device or queue depth %u\n", label.c_str(),
                 cfg.depth);
    return Errc::invalid_argument;
  }
  ignore_sigpipe();
  auto core = std::make_unique<Core>();
  core->reactor = &reactor;
  core->fd = ::open(cfg.device.c_str(), O_RDWR | O_CLOEXEC);
  if (core->fd < 0) {
    const int e = errno;
    nvmeof::detail::log_warning("nvmeof: %s: open: %s\n", label.c_str(), std::strerror(e));
    return errno_code(e);
  }
  const int id = ::ioctl(core->fd, NVME_IOCTL_ID);
  if (id < 0) {
    const int e = errno;
    nvmeof::detail::log_warning("nvmeof: %s: NVME_IOCTL_ID: %s\n", label.c_str(), std::strerror(e));
    return errno_code(e);
  }

  core->polled = cfg.iopoll && has_poll_queues(cfg.device, cfg.sysfs_root);
  const uint32_t max = cfg.max_transfer ? cfg.max_transfer : transfer_limit(cfg.device, cfg.sysfs_root);
  if (reactor.big_entries() && !core->polled) {
    // One ring per reactor: the device joins the reactor's file table.
    auto f = reactor.register_file(core->fd);
    if (!f) {
      nvmeof::detail::log_warning("nvmeof: %s: register file: %s\n", label.c_str(), f.error().message().c_str());
      return f.error();
    }
    core->shared = true;
    core->file_id = *f;
    for (const iovec& b : cfg.buffers) {
      auto id = reactor.register_buffer(b);
      if (!id) {
        nvmeof::detail::log_warning("nvmeof: %s: register buffer: %s (continuing without)\n", label.c_str(),
                     id.error().message().c_str());
        break;
      }
      core->bufs.push_back(b);
      core->buf_ids.push_back(*id);
    }
    core->nslots = cfg.depth;
    core->slots = std::make_unique<Core::Slot[]>(cfg.depth);
    for (uint32_t i = 0; i < cfg.depth; ++i) {
      Core::Slot& sl = core->slots[i];
      sl.core = core.get();
      sl.fn = &QueuePair::on_shared_cqe;
      sl.next_free = core->free_slots;
      core->free_slots = &sl;
    }
    return std::unique_ptr<QueuePair>(
        new QueuePair(reactor, cfg, core.release(), static_cast<uint32_t>(id), max));
  }

  io_uring_params p{};
  // No COOP_TASKRUN here: passthrough completions arrive as task work, and only the default
  // notification interrupts a thread that sleeps on the reactor's ring.
  p.flags = IORING_SETUP_SQE128 | IORING_SETUP_CQE32 | IORING_SETUP_CQSIZE;
  p.cq_entries = cfg.depth * 2;
  if (core->polled) p.flags |= IORING_SETUP_IOPOLL;
  int r = io_uring_queue_init_params(cfg.depth, &core->ring, &p);
  if (r < 0) {
    nvmeof::detail::log_warning("nvmeof: %s: io_uring set-up (SQE128|CQE32): %s\n", label.c_str(),
                 std::strerror(-r));
    return errno_code(-r);
  }
  core->ring_ok = true;
  r = io_uring_register_files(&core->ring, &core->fd, 1);
  if (r < 0) {
    nvmeof::detail::log_warning("nvmeof: %s: register file: %s\n", label.c_str(), std::strerror(-r));
    return errno_code(-r);
  }
  if (!cfg.buffers.empty()) {
    // Best effort: without them every command still works, pinning its pages per I/O.
    r = io_uring_register_buffers(&core->ring, cfg.buffers.data(), static_cast<unsigned>(cfg.buffers.size()));
    if (r < 0)
      nvmeof::detail::log_warning("nvmeof: %s: register %zu buffers: %s (continuing without)\n", label.c_str(),
                   cfg.buffers.size(), std::strerror(-r));
    else
      core->bufs = cfg.buffers;
    for (unsigned i = 0; i < core->bufs.size(); ++i) core->buf_ids.push_back(i);
  }
  // Blocking on purpose: io_uring fails a read of an O_NONBLOCK eventfd with EAGAIN.
  core->efd = ::eventfd(0, EFD_CLOEXEC);
  if (core->efd < 0) return errno_code(errno);
  r = io_uring_register_eventfd(&core->ring, core->efd);
  if (r < 0) {
    nvmeof::detail::log_warning("nvmeof: %s: register eventfd: %s\n", label.c_str(), std::strerror(-r));
    return errno_code(-r);
  }
  core->wake_h.core = core.get();
  core->wake_h.fn = [](IoHandler* h, const io_uring_cqe&) noexcept {
    Core* c = static_cast<Core::WakeHandler*>(h)->core;
    c->wake_armed = false;
    // Attached: the pair's poller reaps in this same reactor turn.
    if (!c->qp) c->orphan_step();
  };

  return std::unique_ptr<QueuePair>(
      new QueuePair(reactor, cfg, core.release(), static_cast<uint32_t>(id), max));
}

QueuePair::QueuePair(Reactor& reactor, const QpConfig& cfg, Core* core, uint32_t nsid,
                     uint32_t max_transfer)
    : QueuePairLifecycle("uring " + cfg.device),
      reactor_(reactor),
      cfg_(cfg),
      nsid_(nsid),
      max_transfer_(max_transfer),
      polled_(core->polled),
      core_(core) {
  core_->qp = this;
}

QueuePair::~QueuePair() {
  close();
  uint64_t deadline = Reactor::clock_ns() + bound_ns();
  while (core_->inflight > 0 && Reactor::clock_ns() < deadline)
    reactor_.poll(std::chrono::milliseconds(1));
  if (core_->polled && core_->inflight > 0) {
    // Polled completions arrive only while someone polls, so this pair cannot be orphaned:
    // keep polling; the kernel's I/O timeout bounds the wait.
    nvmeof::detail::log_warning("nvmeof: %s: waiting for %u polled commands\n", label_.c_str(), core_->inflight);
    while (core_->inflight > 0) {
      io_uring_get_events(&core_->ring);
      reap();
    }
  }
  if (poller_added_) reactor_.remove_poller(&QueuePair::poll_fn, this);
  Core* c = core_;
  core_ = nullptr;
  c->qp = nullptr;
  if (c->shared) {
    if (c->inflight > 0) {
      // The slots stay until the last completion; its handler frees the core.
      nvmeof::detail::log_warning("nvmeof: %s: %u passthrough commands still in the kernel at destruction\n",
                   label_.c_str(), c->inflight);
      return;
    }
    delete c;
    return;
  }
  if (c->inflight > 0) {
    nvmeof::detail::log_warning("nvmeof: %s: %u passthrough commands still in the kernel at destruction\n",
                 label_.c_str(), c->inflight);
    c->orphan_step();  // frees itself once they are back
    return;
  }
  if (c->wake_armed) {
    // Completes the pending read so the reactor's ring lets go of the handler.
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t w = ::write(c->efd, &one, sizeof one);
    deadline = Reactor::clock_ns() + bound_ns();
    while (c->wake_armed && Reactor::clock_ns() < deadline)
      reactor_.poll(std::chrono::milliseconds(1));
    if (c->wake_armed) return;  // the handler frees the core when the read completes
  }
  delete c;
}

void QueuePair::start() noexcept {
  if (!go_live()) return;
  if (core_->shared) return;  // the reactor's own turn submits and reaps
  reactor_.add_poller(&QueuePair::poll_fn, this);
  poller_added_ = true;
}

bool QueuePair::shared_ring() const noexcept { return core_ && core_->shared; }

uint32_t QueuePair::outstanding() const noexcept { return core_ ? core_->inflight : 0; }

int QueuePair::submit(IoRequest& req) noexcept {
  if (state_ != QpState::live) [[unlikely]] return -ENOTCONN;
  const uint32_t len = req.data_len;
  if (len > max_transfer_) [[unlikely]] return -EINVAL;
  if (len) {
    if (!req.data) return -EINVAL;
    if (!is_host_to_controller(req.cmd) && !is_controller_to_host(req.cmd)) return -EINVAL;
  }
  Core& c = *core_;
  if (c.inflight >= cfg_.depth) [[unlikely]] return -EAGAIN;
  if (c.shared) {
    Core::Slot* sl = c.free_slots;
    if (!sl) [[unlikely]] return -EAGAIN;
    io_uring_sqe* sqe = reactor_.get_sqe();
    if (!sqe) [[unlikely]] return -EAGAIN;
    c.free_slots = sl->next_free;
    req.cmd.cid = next_cid_++;
    req.submit_ns = reactor_.now_ns();
    sl->req = &req;
    sl->fixed = prep_sqe(sqe, req, use_fixed_);
    sqe->user_data = reinterpret_cast<uintptr_t>(static_cast<IoHandler*>(sl));
    ++c.inflight;
    return 0;
  }
  io_uring_sqe* sqe = io_uring_get_sqe(&c.ring);
  if (!sqe) [[unlikely]] return -EAGAIN;

  req.cmd.cid = next_cid_++;
  req.submit_ns = reactor_.now_ns();
  const bool fixed = prep_sqe(sqe, req, use_fixed_);
  sqe->user_data = reinterpret_cast<uintptr_t>(&req) | (fixed ? 1 : 0);
  ++c.inflight;
  return 0;
}

// A completion on the reactor's ring (shared mode).
void QueuePair::on_shared_cqe(IoHandler* h, const io_uring_cqe& cqe) noexcept {
  auto* sl = static_cast<Core::Slot*>(h);
  Core* c = sl->core;
  --c->inflight;
  IoRequest* req = sl->req;
  QueuePair* qp = c->qp;
  if (qp && sl->fixed && cqe.res == -EINVAL && qp->state_ == QpState::live) {
    // The kernel refused the registered buffer (see reap()): send it again the ordinary way.
    if (io_uring_sqe* sqe = qp->reactor_.get_sqe()) {
      if (qp->use_fixed_)
        nvmeof::detail::log_warning("nvmeof: %s: the kernel refuses registered buffers here; not using them\n",
                     qp->label_.c_str());
      qp->use_fixed_ = false;
      sl->fixed = qp->prep_sqe(sqe, *req, false);
      sqe->user_data = reinterpret_cast<uintptr_t>(h);
      ++c->inflight;
      return;
    }
  }
  sl->req = nullptr;
  sl->next_free = c->free_slots;
  c->free_slots = sl;
  if (!qp) {  // orphaned: nobody waits for this command any more
    if (c->inflight == 0) delete c;
    return;
  }
  qp->on_completion(*req, cqe.res, cqe.big_cqe[0]);
}

// The user_data of a command that went with a registered buffer has its low bit set
// (IoRequest is 8-byte aligned), so that its completion knows.
bool QueuePair::prep_sqe(io_uring_sqe* sqe, IoRequest& req, bool allow_fixed) noexcept {
  Core& c = *core_;
  const uint32_t len = req.data_len;
  bool fixed = false;
  // prep_rw fills the first 64 bytes (off = 0 clears cmd_op's word); the command area past
  // them is left as the ring slot was, so it is cleared as a whole before the command goes in.
  io_uring_prep_rw(IORING_OP_URING_CMD, sqe, static_cast<int>(c.file_id), nullptr, 0, 0);
  io_uring_sqe_set_flags(sqe, IOSQE_FIXED_FILE);
  sqe->cmd_op = NVME_URING_CMD_IO;
  if (len && allow_fixed && !c.bufs.empty()) {
    const auto p = reinterpret_cast<uintptr_t>(req.data);
    for (size_t i = 0; i < c.bufs.size(); ++i) {
      const auto b = reinterpret_cast<uintptr_t>(c.bufs[i].iov_base);
      if (p >= b && p + len <= b + c.bufs[i].iov_len) {
        sqe->uring_cmd_flags = IORING_URING_CMD_FIXED;
        sqe->buf_index = static_cast<uint16_t>(c.buf_ids[i]);
        ++fixed_submissions_;
        fixed = true;
        break;
      }
    }
  }
  nvme_uring_cmd cmd{};
  fill_passthru(cmd, req.cmd, req.data, len, 0);
  // The area spans the SQE's second half; addressed from the entry's start because the
  // zero-length cmd[] member shares a union with 8-byte fields.
  uint8_t* area = reinterpret_cast<uint8_t*>(sqe) + offsetof(io_uring_sqe, cmd);
  std::memset(area, 0, kCmdArea);
  std::memcpy(area, &cmd, sizeof cmd);
  return fixed;
}

// Commands queued this turn must not reach the device any more (a write after the path was
// fenced would be exactly the stale write failover must prevent): they become NOPs, which
// complete with kHostPathError like every other outstanding command. In shared mode the
// reactor's queue also holds others' entries: only ours (user_data in our slot array) change.
//
// The queued entries are found through liburing's own fields (sq.sqe_head, sq.sqe_tail,
// sq.sqes, sq.ring_mask), read only: liburing 2.3 (Debian 12) has no call that names the SQEs
// io_uring_get_sqe() handed out since the last submit (io_uring_sq_ready() only counts the
// entries not yet consumed by the kernel, not where they are). The entries themselves are the
// application's to write until io_uring_submit() publishes them.
void QueuePair::stop_transport() noexcept {
  Core& c = *core_;
  io_uring& ring = c.shared ? *reactor_.ring() : c.ring;
  const auto lo = reinterpret_cast<uintptr_t>(c.slots.get());
  const auto hi = lo + sizeof(Core::Slot) * c.nslots;
  const unsigned shift = (ring.flags & IORING_SETUP_SQE128) ? 1 : 0;
  for (unsigned i = ring.sq.sqe_head; i != ring.sq.sqe_tail; ++i) {
    io_uring_sqe* sqe = &ring.sq.sqes[(i & ring.sq.ring_mask) << shift];
    const uint64_t ud = sqe->user_data;
    if (c.shared && (ud < lo || ud >= hi)) continue;
    io_uring_prep_nop(sqe);
    sqe->user_data = ud;
  }
}

void QueuePair::settle() noexcept {
  if (state_ == QpState::failed && core_->inflight == 0) state_ = QpState::closed;
}

int QueuePair::poll_fn(void* self) noexcept { return static_cast<QueuePair*>(self)->turn(); }

int QueuePair::turn() noexcept {
  Core& c = *core_;
  int n = reap();
  if (io_uring_sq_ready(&c.ring)) {
    const int r = io_uring_submit(&c.ring);
    if (r < 0 && r != -EAGAIN && r != -EBUSY && r != -EINTR) {
      fail(errno_code(-r), "io_uring_submit");
    }
    ++n;
  }
  if (c.inflight > 0) {
    if (c.polled) {
      // Polling is how polled commands complete; staying busy keeps the reactor from sleeping.
      io_uring_get_events(&c.ring);
      n += reap() + 1;
    } else {
      c.arm_wake();
    }
  }
  return n;
}

int QueuePair::reap() noexcept {
  Core& c = *core_;
  int n = 0;
  io_uring_cqe* cqe = nullptr;
  // One at a time, advancing before the callback, which may submit or close.
  while (io_uring_peek_cqe(&c.ring, &cqe) == 0 && cqe) {
    const uint64_t ud = cqe->user_data;
    auto* req = reinterpret_cast<IoRequest*>(static_cast<uintptr_t>(ud & ~uint64_t{1}));
    const int res = cqe->res;
    const uint64_t result = cqe->big_cqe[0];
    io_uring_cqe_seen(&c.ring, cqe);
    --c.inflight;
    // Some transports' kernel drivers cannot map a registered buffer (nvme-rdma in Linux 6.1
    // refuses it with EINVAL before anything reaches the device): the command is sent again
    // the ordinary way, and the pair stops using registered buffers.
    if ((ud & 1) && res == -EINVAL && state_ == QpState::live) {
      if (io_uring_sqe* sqe = io_uring_get_sqe(&c.ring)) {
        if (use_fixed_)
          nvmeof::detail::log_warning("nvmeof: %s: the kernel refuses registered buffers here; not using them\n",
                       label_.c_str());
        use_fixed_ = false;
        prep_sqe(sqe, *req, false);
        sqe->user_data = reinterpret_cast<uintptr_t>(req);
        ++c.inflight;
        ++n;
        continue;
      }
    }
    on_completion(*req, res, result);
    ++n;
  }
  return n;
}

void QueuePair::on_completion(IoRequest& req, int res, uint64_t result) noexcept {
  Cqe cqe{};
  cqe.cid = req.cmd.cid;
  cqe.sq_id = cfg_.qid;
  NvmeStatus st = status::kHostPathError;
  if (res < 0) {
    fail(errno_code(-res), "passthrough command");
  } else if (state_ == QpState::live) {
    st = NvmeStatus{static_cast<uint16_t>(res & 0x7fff)};
    cqe.dw0 = static_cast<uint32_t>(result);
    cqe.dw1 = static_cast<uint32_t>(result >> 32);
    if (is_host_path_status(st)) fail(make_error_code(Errc::not_connected), "controller not live");
  }
  cqe.status_field = st.cqe_field();
  settle();
  if (req.on_complete) req.on_complete(req, cqe);
}

}  // namespace nvmeof::uring
