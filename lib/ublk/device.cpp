#include "ublk/device.hpp"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <type_traits>

#include "core/log.hpp"
#include "core/node_memory.hpp"
#include "multipath/engine.hpp"
#include "nvmeof/command.hpp"
#include "reactor/reactor.hpp"
#include "ublk/control.hpp"
#include "ublk/request.hpp"
#include "ublk/uapi.hpp"

namespace nvmeof::ublk {

namespace {

Result<void> step(Result<void> r, const char* what) {
  if (r) return r;
  return {r.error(), std::string(what) + ": " + r.error().message()};
}

constexpr uint32_t kMaxIoDefault = 1u << 20;

}  // namespace

// One ublk queue, driven by one reactor (ARCHITECTURE.md, "ublk").
//
// Threading: everything but `held_` and `ios_` belongs to the reactor thread once start() has
// posted the fetches. `held_` (commands the driver holds) is written there and read by the
// control thread that waits in Device::stop() for it to reach 0 (acquire: after that the driver
// touches nothing of the queue); `ios_` is a relaxed counter for statistics.
class Queue {
 public:
  Queue(detail::EngineReactor& er, Volume& vol, unsigned q_id, unsigned depth, uint32_t max_io)
      : er_(er), vol_(vol), q_id_(q_id), depth_(depth), max_io_(max_io), tags_(depth) {}
  ~Queue() {
    if (descs_) munmap(const_cast<ublksrv_io_desc*>(descs_), descs_len_);
  }

  Result<void> map(int cdev_fd) {
    fd_ = cdev_fd;
    descs_len_ = (depth_ * sizeof(ublksrv_io_desc) + 4095) & ~size_t{4095};
    void* d = mmap(nullptr, descs_len_, PROT_READ, MAP_SHARED | MAP_POPULATE, fd_,
                   static_cast<off_t>(UBLKSRV_CMD_BUF_OFFSET + q_id_ * kDescStride));
    if (d == MAP_FAILED) return {errno_code(errno), "mmap of queue " + std::to_string(q_id_) + "'s descriptors"};
    descs_ = static_cast<const ublksrv_io_desc*>(d);
    // One buffer per tag, on the reactor's node (huge pages when there are): the driver copies
    // each request's data to and from it, and the reactor's queue pairs send and receive it.
    try {
      bufs_ = detail::NodeBuffer(size_t{depth_} * max_io_, er_.memory_node());
    } catch (const std::bad_alloc&) {
      return {errno_code(ENOMEM), "buffers of queue " + std::to_string(q_id_)};
    }
    for (unsigned t = 0; t < depth_; ++t) {
      Tag& tag = tags_[t];
      tag.h.fn = &Queue::on_cqe;
      tag.q = this;
      tag.tag = static_cast<uint16_t>(t);
      tag.buf = static_cast<unsigned char*>(bufs_.data()) + size_t{t} * max_io_;
    }
    return {};
  }

  // On the reactor thread: every tag's FETCH_REQ, submitted with the reactor's next turn.
  void start() {
    block_size_ = vol_.block_size();
    er_.reactor().add_poller(&Queue::poll_deferred, this);
    for (auto& t : tags_) {
      held_.fetch_add(1, std::memory_order_relaxed);
      queue_cmd(t, kFetchReq);
    }
  }
  void remove_poller() {
    er_.call([this] { er_.reactor().remove_poller(&Queue::poll_deferred, this); });
  }
  unsigned held() const noexcept { return held_.load(std::memory_order_acquire); }
  uint64_t ios() const noexcept { return ios_.load(std::memory_order_relaxed); }

 private:
  // IoHandler first: the CQE's user_data is the tag's address.
  struct Tag {
    IoHandler h;
    Queue* q = nullptr;
    uint16_t tag = 0;
    int32_t result = 0;     // what the next COMMIT_AND_FETCH_REQ reports
    int32_t ok_result = 0;  // what a successful I/O reports: its bytes (read, write) or 0
    uint32_t op = 0;        // the command waiting for an SQE (deferred)
    void* buf = nullptr;
    DsmRange range{};
    VolumeIo io;
  };
  static_assert(std::is_standard_layout_v<Tag>, "a CQE's IoHandler* is its Tag's address");

  static void on_cqe(IoHandler* self, const io_uring_cqe& cqe) noexcept {
    Tag& t = *reinterpret_cast<Tag*>(self);
    t.q->on_fetched(t, cqe.res);
  }

  void on_fetched(Tag& t, int res) noexcept {
    if (res == UBLK_IO_RES_OK) {
      start_io(t);
      return;
    }
    // UBLK_IO_RES_ABORT: the device stops (or the queue is torn down) and the driver gives the
    // command back; anything else is a command it refused. Either way it holds one fewer.
    if (res != UBLK_IO_RES_ABORT)
      detail::log_warning("nvmeof: ublk queue %u tag %u: the driver refused a command: %s\n", q_id_, t.tag,
                          std::strerror(-res));
    held_.fetch_sub(1, std::memory_order_release);
  }

  void start_io(Tag& t) noexcept {
    VolumeIo& io = t.io;
    io = VolumeIo{};
    io.done = &Queue::on_done;
    io.user = &t;
    int rc = map_request(descs_[t.tag], block_size_, max_io_, t.buf, t.range, io, t.ok_result);
    if (rc == 0) rc = vol_.submit(io, q_id_);
    if (rc < 0) commit(t, rc);
  }

  static void on_done(VolumeIo& io, NvmeStatus st) noexcept {
    Tag& t = *static_cast<Tag*>(io.user);
    t.q->commit(t, commit_result(io.op, st, t.ok_result));
  }

  void commit(Tag& t, int result) noexcept {
    ios_.fetch_add(1, std::memory_order_relaxed);
    t.result = result;
    queue_cmd(t, kCommitAndFetchReq);
  }

  void queue_cmd(Tag& t, uint32_t op) noexcept {
    io_uring_sqe* sqe = er_.reactor().get_sqe();
    if (!sqe) {
      // The ring is full even after a flush: the poller sends it on a later turn.
      t.op = op;
      deferred_.push_back(t.tag);
      return;
    }
    io_uring_prep_rw(IORING_OP_URING_CMD, sqe, fd_, nullptr, 0, 0);
    sqe->cmd_op = op;
    ublksrv_io_cmd cmd{};
    cmd.q_id = static_cast<uint16_t>(q_id_);
    cmd.tag = t.tag;
    cmd.result = t.result;
    cmd.addr = reinterpret_cast<uintptr_t>(t.buf);
    std::memcpy(sqe->cmd, &cmd, sizeof cmd);
    io_uring_sqe_set_data(sqe, &t.h);
  }

  static int poll_deferred(void* ctx) noexcept {
    auto* q = static_cast<Queue*>(ctx);
    if (q->deferred_.empty()) return 0;
    std::vector<uint16_t> now;
    now.swap(q->deferred_);
    for (uint16_t tag : now) q->queue_cmd(q->tags_[tag], q->tags_[tag].op);
    return static_cast<int>(now.size());
  }

  detail::EngineReactor& er_;
  Volume& vol_;
  const unsigned q_id_;
  const unsigned depth_;
  const uint32_t max_io_;
  uint32_t block_size_ = 512;
  int fd_ = -1;
  const ublksrv_io_desc* descs_ = nullptr;
  size_t descs_len_ = 0;
  detail::NodeBuffer bufs_;
  std::vector<Tag> tags_;
  std::vector<uint16_t> deferred_;
  std::atomic<unsigned> held_{0};
  std::atomic<uint64_t> ios_{0};
};

Result<std::unique_ptr<Device>> Device::create(std::shared_ptr<Host> host, Volume& vol,
                                               const DeviceOptions& opts) {
  auto ctl = Control::open();
  if (!ctl) return ctl.failure();
  Engine& eng = engine_of(*host);
  const unsigned reactors = static_cast<unsigned>(eng.reactors.size());

  ublksrv_ctrl_dev_info info{};
  if (opts.recover_id >= 0) {
    info.dev_id = static_cast<uint32_t>(opts.recover_id);
    if (auto r = step((*ctl)->dev_info(info.dev_id, info), "GET_DEV_INFO"); !r) return r.failure();
    if (!(info.flags & UBLK_F_USER_RECOVERY))
      return {Errc::invalid_argument, "device " + std::to_string(info.dev_id) + " was not added with user recovery"};
    if (info.nr_hw_queues > reactors)
      return {Errc::invalid_argument, "device " + std::to_string(info.dev_id) + " has " +
                                          std::to_string(info.nr_hw_queues) + " queues, more than the reactors"};
  } else {
    const unsigned nq = opts.queues ? opts.queues : reactors;
    if (nq > reactors) return {Errc::invalid_argument, "more queues than reactors"};
    if (opts.depth == 0 || opts.depth > UBLK_MAX_QUEUE_DEPTH)
      return {Errc::invalid_argument, "depth must be 1.." + std::to_string(UBLK_MAX_QUEUE_DEPTH)};
    uint32_t max_io = opts.max_io_bytes ? opts.max_io_bytes : std::min(vol.max_transfer(), kMaxIoDefault);
    max_io = std::max<uint32_t>(max_io & ~4095u, 4096);
    info.nr_hw_queues = static_cast<uint16_t>(nq);
    info.queue_depth = static_cast<uint16_t>(opts.depth);
    info.max_io_buf_bytes = max_io;
    info.dev_id = UINT32_MAX;
    info.ublksrv_pid = getpid();
    if (opts.recovery == Recovery::reissue) info.flags = UBLK_F_USER_RECOVERY | UBLK_F_USER_RECOVERY_REISSUE;
    if (auto r = step((*ctl)->add(info), "ADD_DEV"); !r) return r.failure();
  }
  std::unique_ptr<Device> dev(new Device);
  dev->host_ = host;
  dev->id_ = info.dev_id;
  auto fail = [&](Result<void> r) -> Result<std::unique_ptr<Device>> {
    // Nothing was started: the device is only deleted (the driver frees it once closed).
    dev->queues_.clear();
    if (dev->cdev_fd_ >= 0) ::close(dev->cdev_fd_);
    dev->cdev_fd_ = -1;
    if (opts.recover_id < 0) (void)(*ctl)->remove(dev->id_, Control::Wait::until_freed);
    dev->stopped_ = true;
    return r.failure();
  };

  const uint32_t bs = vol.block_size();
  unsigned shift = 9;
  while ((1u << shift) < bs) ++shift;
  if (opts.recover_id < 0) {
    ublk_params p{};
    p.types = UBLK_PARAM_TYPE_BASIC | UBLK_PARAM_TYPE_DISCARD;
    // A volatile write cache: the kernel then sends flushes, which the volume passes on.
    p.basic.attrs = UBLK_ATTR_VOLATILE_CACHE;
    p.basic.logical_bs_shift = static_cast<uint8_t>(shift);
    p.basic.physical_bs_shift = static_cast<uint8_t>(shift);
    p.basic.io_min_shift = static_cast<uint8_t>(shift);
    p.basic.io_opt_shift = static_cast<uint8_t>(shift);
    p.basic.max_sectors = info.max_io_buf_bytes >> 9;
    p.basic.dev_sectors = vol.size_blocks() * bs / 512;
    // One Dataset Management range per discard, 1 GiB at most, as for Write Zeroes (the volume
    // splits those).
    p.discard.discard_granularity = bs;
    p.discard.max_discard_sectors = (1u << 30) >> 9;
    p.discard.max_write_zeroes_sectors = (1u << 30) >> 9;
    p.discard.max_discard_segments = 1;
    if (auto r = step((*ctl)->set_params(dev->id_, p), "SET_PARAMS"); !r) return fail(r);
  } else {
    // The driver refuses (EBUSY) until the dead server's ring has let go of the char device and
    // the device is quiesced, which the kernel finishes after that process is gone.
    Result<void> r = Errc::timeout;
    for (int i = 0; i < 500; ++i) {
      r = (*ctl)->start_recovery(dev->id_);
      if (r || r.error() != errno_code(EBUSY)) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (!r) return step(r, "START_USER_RECOVERY").failure();
  }

  const std::string cdev = "/dev/ublkc" + std::to_string(dev->id_);
  // devtmpfs makes the node as the driver adds the device; a udev-managed /dev may lag behind.
  for (int i = 0; i < 100 && dev->cdev_fd_ < 0; ++i) {
    dev->cdev_fd_ = ::open(cdev.c_str(), O_RDWR | O_CLOEXEC);
    if (dev->cdev_fd_ < 0 && errno != ENOENT) break;
    if (dev->cdev_fd_ < 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (dev->cdev_fd_ < 0) return fail({errno_code(errno), cdev + ": " + std::strerror(errno)});

  for (unsigned q = 0; q < info.nr_hw_queues; ++q) {
    auto queue = std::make_unique<Queue>(*eng.reactors[q], vol, q, info.queue_depth, info.max_io_buf_bytes);
    if (auto r = queue->map(dev->cdev_fd_); !r) return fail(r);
    dev->queues_.push_back(std::move(queue));
  }
  for (unsigned q = 0; q < info.nr_hw_queues; ++q) {
    Queue* queue = dev->queues_[q].get();
    eng.reactors[q]->call([queue] { queue->start(); });
    eng.reactors[q]->wake();
  }
  // The driver answers START_DEV (END_USER_RECOVERY) once every tag of every queue was fetched.
  const auto r = opts.recover_id >= 0 ? step((*ctl)->end_recovery(dev->id_, getpid()), "END_USER_RECOVERY")
                                      : step((*ctl)->start(dev->id_, getpid()), "START_DEV");
  if (!r) {
    // The queues' fetches are with the driver: stop() waits for it to give them back before
    // their tags go.
    (void)dev->stop();
    return r.failure();
  }
  return dev;
}

Device::~Device() {
  if (!stopped_) (void)stop();
  if (cdev_fd_ >= 0) ::close(cdev_fd_);
}

std::string Device::block_path() const { return "/dev/ublkb" + std::to_string(id_); }

uint64_t Device::ios() const noexcept {
  uint64_t n = 0;
  for (auto& q : queues_) n += q->ios();
  return n;
}

Result<void> Device::stop() {
  if (stopped_) return {};
  stopped_ = true;
  auto ctl = Control::open();
  if (!ctl) return ctl.failure();
  if (auto r = step((*ctl)->stop(id_), "STOP_DEV"); !r) return r;
  // The driver gives every queued command back (UBLK_IO_RES_ABORT) as it stops. Until it has,
  // it may still write into the queues' descriptors and buffers.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  auto all_back = [&] {
    return std::all_of(queues_.begin(), queues_.end(), [](auto& q) { return q->held() == 0; });
  };
  while (!all_back() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  for (auto& q : queues_) q->remove_poller();
  if (!all_back()) {
    // A kernel that cancels a queue's commands only when its ring goes away: the queues stay
    // (their tags are those commands' user_data) and the device is deleted without waiting
    // for them.
    detail::log_warning("nvmeof: ublk device %u: the driver kept commands after STOP_DEV; deleted without waiting\n", id_);
    for (auto& q : queues_) (void)q.release();
    queues_.clear();
    return step((*ctl)->remove(id_, Control::Wait::no), "DEL_DEV");
  }
  queues_.clear();
  ::close(cdev_fd_);
  cdev_fd_ = -1;
  return step((*ctl)->remove(id_, Control::Wait::until_freed), "DEL_DEV");
}

Result<void> Device::remove_dead(uint32_t id) {
  auto ctl = Control::open();
  if (!ctl) return ctl.failure();
  return step((*ctl)->remove(id, Control::Wait::until_freed), "DEL_DEV");
}

}  // namespace nvmeof::ublk
