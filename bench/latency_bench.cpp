// QD1 4 KiB read latency through nvmeof (a Volume over one NVMe/TCP path to the embedded target)
// in each reactor poll mode, side by side with the floors any user-space NVMe/TCP initiator sits
// on: raw io_uring TCP ping-pongs between two threads on the same loopback, moving the same bytes
// (a 72-byte command capsule one way, a 24-byte C2HData header plus 4 KiB the other), one where
// both ends busy-poll the completion ring (the floor a polling initiator and target reach) and
// one where both sleep in io_uring_wait_cqe. `--mechanics` adds busy ping-pongs with other
// io_uring set-ups. Every row alternates in rounds so drift of a shared machine hits all alike;
// the report gives each, the initiator side's CPU per I/O, the target side's (the rest of the
// process) and the ratio (p50, mean, p99) to the busy floor that spins on non-blocking
// recv/send system calls (the lowest here), pooled over the rounds and (rnd/fl) as the median
// of each round's mean over the floor's in that round. Then IOPS of 4 KiB random reads at QD 32 on one
// reactor in each mode, and the CPU an idle adaptive volume uses (`--idle-seconds`). `--target-poll` runs the rows against one embedded target per target
// poll mode (TargetOptions::poll), so a target's own cost is compared in the same run.
#include <arpa/inet.h>
#include <liburing.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <thread>
#include <vector>

#include "control/controller_access.hpp"
#include "core/histogram.hpp"
#include "multipath/option_text.hpp"
#include "nvmeof/controller.hpp"
#include "nvmeof/target.hpp"
#include "nvmeof/volume.hpp"
#include "reactor/reactor.hpp"
#include "transport/tcp/pdu.hpp"
#include "transport/tcp/queue_pair.hpp"

namespace {

using nvmeof::LatencyHistogram;

constexpr size_t kCommandBytes = 72;          // CapsuleCmd PDU: 8-byte header + 64-byte SQE
constexpr size_t kReplyBytes = 4096 + 24;     // C2HData PDU header + one block
constexpr uint32_t kReadBytes = 4096;

uint64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// -- raw io_uring TCP ping-pong ------------------------------------------------------------

enum class Direction : uint8_t { send, recv };

// How a ping-pong side waits for its completion; each is an io_uring mechanic a reactor could
// use (the "physical floor" rows of the report).
enum class Wait : uint8_t {
  sleep,      // io_uring_submit_and_wait: a wake-up per completion (what a sleeping reactor pays)
  peek,       // submit, then spin peeking the CQ ring; task work interrupts us (default setup)
  coop,       // COOP_TASKRUN | TASKRUN_FLAG: spin peeking, enter (GETEVENTS, no wait) when flagged
  defer,      // SINGLE_ISSUER | DEFER_TASKRUN: spin on io_uring_get_events (no wait)
  defer_regfd,  // defer, with the ring fd registered (io_uring_register_ring_fd)
  sqpoll,     // SQPOLL: a kernel thread submits; spin peeking the CQ ring
  multishot,  // defer, receiving with one multishot RECV from a provided buffer ring (armed once)
  send_zc,    // defer, sending with SEND_ZC (zero-copy; its notification CQEs are skipped)
  syscall,    // no ring: spin on non-blocking send/recv system calls (a polling target's way)
};

const char* to_string(Wait w) {
  switch (w) {
    case Wait::sleep: return "sleep";
    case Wait::peek: return "busy: peek CQ";
    case Wait::coop: return "busy: COOP_TASKRUN, enter on flag";
    case Wait::defer: return "busy: DEFER_TASKRUN, get_events";
    case Wait::defer_regfd: return "busy: DEFER_TASKRUN + reg. ring fd";
    case Wait::sqpoll: return "busy: SQPOLL, peek CQ";
    case Wait::multishot: return "busy: DEFER_TASKRUN, multishot recv";
    case Wait::send_zc: return "busy: DEFER_TASKRUN, SEND_ZC";
    case Wait::syscall: return "busy: non-blocking recv/send";
  }
  return "?";
}

int init_ring(io_uring& ring, Wait w) {
  io_uring_params p{};
  switch (w) {
    case Wait::sleep:
    case Wait::peek:
    case Wait::syscall: break;
    case Wait::coop: p.flags = IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG; break;
    case Wait::defer:
    case Wait::defer_regfd:
    case Wait::multishot:
    case Wait::send_zc: p.flags = IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN; break;
    case Wait::sqpoll:
      p.flags = IORING_SETUP_SQPOLL;
      p.sq_thread_idle = 1000;
      break;
  }
  const int r = io_uring_queue_init_params(8, &ring, &p);
  if (r == 0 && w == Wait::defer_regfd) io_uring_register_ring_fd(&ring);
  return r;
}

// One completion, waited for as `w` says.
bool wait_one(io_uring& ring, Wait w, int& res) {
  io_uring_cqe* cqe = nullptr;
  if (w == Wait::sleep) {
    if (io_uring_submit_and_wait(&ring, 1) < 0 || io_uring_wait_cqe(&ring, &cqe) != 0) return false;
  } else {
    if (io_uring_submit(&ring) < 0) return false;
    for (;;) {
      if (io_uring_peek_cqe(&ring, &cqe) == 0 && cqe) break;
      if (w == Wait::defer || w == Wait::defer_regfd || w == Wait::multishot || w == Wait::send_zc) {
        io_uring_get_events(&ring);
      } else if (w == Wait::coop) {
        if (IO_URING_READ_ONCE(*ring.sq.kflags) & IORING_SQ_TASKRUN) io_uring_get_events(&ring);
      }
    }
  }
  if (cqe->flags & IORING_CQE_F_NOTIF) {  // SEND_ZC: the buffer is ours again; not a result
    io_uring_cqe_seen(&ring, cqe);
    return wait_one(ring, w, res);
  }
  res = cqe->res;
  io_uring_cqe_seen(&ring, cqe);
  return true;
}

// Wait::multishot: one RECV armed once, filling buffers of a provided ring; what a completion
// delivered beyond the bytes asked for stays for the next receive (the thread's own state: one
// ping-pong side per thread at a time).
struct Multishot {
  static constexpr unsigned kBufs = 8;
  static constexpr unsigned kBufLen = 16384;
  static constexpr int kGroup = 7;
  io_uring_buf_ring* br = nullptr;
  std::vector<uint8_t> mem;
  bool armed = false;
  int bid = -1;       // buffer being consumed
  size_t off = 0, left = 0;

  bool setup(io_uring& ring) {
    const size_t ring_bytes = kBufs * sizeof(io_uring_buf);
    void* p = nullptr;
    if (posix_memalign(&p, 4096, ring_bytes) != 0) return false;
    br = static_cast<io_uring_buf_ring*>(p);
    io_uring_buf_reg reg{};
    reg.ring_addr = reinterpret_cast<uintptr_t>(br);
    reg.ring_entries = kBufs;
    reg.bgid = kGroup;
    if (io_uring_register_buf_ring(&ring, &reg, 0) != 0) return false;
    io_uring_buf_ring_init(br);
    mem.assign(size_t{kBufs} * kBufLen, 0);
    for (unsigned i = 0; i < kBufs; ++i)
      io_uring_buf_ring_add(br, mem.data() + size_t{i} * kBufLen, kBufLen, static_cast<unsigned short>(i),
                            io_uring_buf_ring_mask(kBufs), static_cast<int>(i));
    io_uring_buf_ring_advance(br, kBufs);
    armed = false;
    bid = -1;
    return true;
  }
  void teardown(io_uring& ring) {
    if (!br) return;
    io_uring_unregister_buf_ring(&ring, kGroup);
    free(br);
    br = nullptr;
  }
  void recycle() {
    io_uring_buf_ring_add(br, mem.data() + static_cast<size_t>(bid) * kBufLen, kBufLen,
                          static_cast<unsigned short>(bid), io_uring_buf_ring_mask(kBufs), 0);
    io_uring_buf_ring_advance(br, 1);
    bid = -1;
  }
  bool recv(io_uring& ring, int fd, uint8_t* dst, size_t len) {
    while (len > 0) {
      if (bid < 0) {
        if (!armed) {
          io_uring_sqe* sqe = io_uring_get_sqe(&ring);
          io_uring_prep_recv_multishot(sqe, fd, nullptr, 0, 0);
          sqe->flags |= IOSQE_BUFFER_SELECT;
          sqe->buf_group = kGroup;
          armed = true;
        }
        io_uring_cqe* cqe = nullptr;
        if (io_uring_submit(&ring) < 0) return false;
        while (!(io_uring_peek_cqe(&ring, &cqe) == 0 && cqe)) io_uring_get_events(&ring);
        const int res = cqe->res;
        const unsigned flags = cqe->flags;
        io_uring_cqe_seen(&ring, cqe);
        if (!(flags & IORING_CQE_F_MORE)) armed = false;
        if (res == -ENOBUFS) continue;  // re-armed on the next pass
        if (res <= 0 || !(flags & IORING_CQE_F_BUFFER)) return false;
        bid = static_cast<int>(flags >> IORING_CQE_BUFFER_SHIFT);
        off = 0;
        left = static_cast<size_t>(res);
      }
      const size_t n = std::min(len, left);
      std::memcpy(dst, mem.data() + static_cast<size_t>(bid) * kBufLen + off, n);
      dst += n;
      len -= n;
      off += n;
      left -= n;
      if (left == 0) recycle();
    }
    return true;
  }
};
thread_local Multishot t_multishot;

// Sends or receives exactly `len` bytes through the ring, one SQE at a time as a QD1 initiator
// would. Returns false when the peer closed or on an error.
bool ring_io(io_uring& ring, Wait w, int fd, void* buf, size_t len, Direction dir) {
  auto* p = static_cast<uint8_t*>(buf);
  if (w == Wait::multishot && dir == Direction::recv) return t_multishot.recv(ring, fd, p, len);
  while (len > 0 && w == Wait::syscall) {
    const ssize_t n = dir == Direction::send ? ::send(fd, p, len, MSG_DONTWAIT | MSG_NOSIGNAL)
                                             : ::recv(fd, p, len, MSG_DONTWAIT);
    if (n == 0) return false;
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      return false;
    }
    p += n;
    len -= static_cast<size_t>(n);
  }
  while (len > 0) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring);
    if (dir == Direction::send && w == Wait::send_zc) {
      io_uring_prep_send_zc(sqe, fd, p, len, MSG_NOSIGNAL, 0);
    } else if (dir == Direction::send) {
      io_uring_prep_send(sqe, fd, p, len, MSG_NOSIGNAL);
    } else {
      io_uring_prep_recv(sqe, fd, p, len, 0);
    }
    int res = 0;
    if (!wait_one(ring, w, res) || res <= 0) return false;
    p += res;
    len -= static_cast<size_t>(res);
  }
  return true;
}

uint64_t process_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

uint64_t thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

void pin_self(int cpu) {
  if (cpu < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

void unpin_self() {
  cpu_set_t set;
  CPU_ZERO(&set);
  const unsigned n = std::thread::hardware_concurrency();
  for (unsigned c = 0; c < n && c < CPU_SETSIZE; ++c) CPU_SET(c, &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

// A client (the calling thread) and a server thread on one loopback connection; the client
// waits as `client`, the server as `server` (a polling floor polls on both ends, as SPDK's
// initiator and target do).
class PingPong {
 public:
  PingPong(Wait client, Wait server, int server_cpu) : client_(client), server_wait_(server), server_cpu_(server_cpu) {}

  // Listens on an ephemeral loopback port, starts the server thread, connects.
  bool start() {
    listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof a;
    if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        listen(listen_fd_, 1) != 0 ||
        getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &alen) != 0)
      return false;
    server_ = std::thread([this] { serve(); });
    client_fd_ = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(client_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return false;
    set_nodelay(client_fd_);
    ring_ok_ = init_ring(ring_, client_) == 0;
    if (ring_ok_ && client_ == Wait::multishot && !t_multishot.setup(ring_)) return false;
    return ring_ok_;
  }

  ~PingPong() {
    // The ring first: an armed multishot RECV holds the socket open past close().
    if (ring_ok_ && client_ == Wait::multishot) t_multishot.teardown(ring_);
    if (ring_ok_) io_uring_queue_exit(&ring_);
    if (client_fd_ >= 0) close(client_fd_);
    if (server_.joinable()) server_.join();
    if (listen_fd_ >= 0) close(listen_fd_);
  }

  // Round trips for `duration`, each recorded in `h`; the client thread's CPU time is added to
  // `cpu_ns`.
  bool run(std::chrono::nanoseconds duration, LatencyHistogram& h, uint64_t& cpu_ns) {
    std::vector<uint8_t> cmd(kCommandBytes, 0x5a), reply(kReplyBytes);
    const uint64_t cpu0 = thread_cpu_ns();
    const uint64_t end = now_ns() + static_cast<uint64_t>(duration.count());
    bool ok = true;
    while (ok && now_ns() < end) {
      const uint64_t t0 = now_ns();
      ok = ring_io(ring_, client_, client_fd_, cmd.data(), cmd.size(), Direction::send) &&
           ring_io(ring_, client_, client_fd_, reply.data(), reply.size(), Direction::recv);
      if (ok) h.record(now_ns() - t0);
    }
    cpu_ns += thread_cpu_ns() - cpu0;
    return ok;
  }

 private:
  static void set_nodelay(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }

  void serve() {
    pin_self(server_cpu_);
    const int fd = accept(listen_fd_, nullptr, nullptr);
    if (fd < 0) return;
    set_nodelay(fd);
    io_uring ring{};
    if (init_ring(ring, server_wait_) == 0 && (server_wait_ != Wait::multishot || t_multishot.setup(ring))) {
      std::vector<uint8_t> cmd(kCommandBytes), reply(kReplyBytes, 0xa5);
      while (ring_io(ring, server_wait_, fd, cmd.data(), cmd.size(), Direction::recv) &&
             ring_io(ring, server_wait_, fd, reply.data(), reply.size(), Direction::send)) {
      }
      if (server_wait_ == Wait::multishot) t_multishot.teardown(ring);
      io_uring_queue_exit(&ring);
    }
    close(fd);
  }

  Wait client_, server_wait_;
  int server_cpu_;
  int listen_fd_ = -1;
  int client_fd_ = -1;
  io_uring ring_{};
  bool ring_ok_ = false;
  std::thread server_;
};

// -- the queue pair alone: against our target, and against the least an NVMe/TCP target does --

// Answers on one loopback connection, spinning on non-blocking recv/send like the busy floor's
// server: the ICReq, every Connect and any other command with a success CQE, and a read with one
// SUCCESS-flagged C2HData whose data is a fixed buffer (no namespace, no copy, no checks). No
// NVMe/TCP target can answer a read with less work, so a real target's latency over this one's,
// for the same initiator, bounds from above its ratio to any other target's (nvmf_tgt included)
// on the same socket calls.
class MinResponder {
 public:
  explicit MinResponder(int cpu) : cpu_(cpu), out_(sizeof(nvmeof::tcp::DataHeader) + (1u << 20), 0xa5) {}
  bool start() {
    listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof a;
    if (listen_fd_ < 0 || bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        listen(listen_fd_, 4) != 0 || getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &alen) != 0)
      return false;
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { serve(); });
    return true;
  }
  ~MinResponder() {
    stop_.store(true);
    if (listen_fd_ >= 0) shutdown(listen_fd_, SHUT_RDWR);
    if (thread_.joinable()) thread_.join();
    if (listen_fd_ >= 0) close(listen_fd_);
  }
  uint16_t port() const { return port_; }

 private:
  static bool send_all(int fd, const void* p, size_t n) {
    auto* b = static_cast<const uint8_t*>(p);
    while (n > 0) {
      const ssize_t w = ::send(fd, b, n, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (w > 0) {
        b += w;
        n -= static_cast<size_t>(w);
      } else if (w < 0 && errno != EAGAIN && errno != EINTR) {
        return false;
      }
    }
    return true;
  }
  bool answer(int fd, const uint8_t* pdu, const nvmeof::tcp::CommonHeader& ch) {
    using namespace nvmeof::tcp;
    if (ch.type == PduType::ic_req) {
      IcResp r;
      fill_ic_resp(r, 0, false, false, 131072);
      return send_all(fd, &r, sizeof r);
    }
    if (ch.type != PduType::capsule_cmd || ch.hlen < sizeof(CapsuleCmd)) return true;
    nvmeof::Sqe sqe;
    std::memcpy(&sqe, pdu + sizeof(CommonHeader), sizeof sqe);
    if (sqe.opcode == nvmeof::opcode::kRead) {
      const uint32_t len = std::min<uint32_t>(((sqe.cdw12 & 0xffff) + 1) * 4096, 1u << 20);
      DataHeader h;
      fill_c2h_data(h, sqe.cid, 0, len, true, true, Negotiated{});
      std::memcpy(out_.data(), &h, sizeof h);  // the data stays where it is, behind the header
      return send_all(fd, out_.data(), h.ch.plen);
    }
    nvmeof::Cqe cqe{};
    cqe.cid = sqe.cid;
    cqe.dw0 = 1;  // a Connect's CNTLID
    cqe.sq_head = 0xffff;
    CapsuleResp r;
    fill_capsule_resp(r, cqe, Negotiated{});
    return send_all(fd, &r, sizeof r);
  }
  void serve() {
    pin_self(cpu_);
    for (;;) {
      const int fd = accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) return;
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      std::vector<uint8_t> in(1u << 17);
      size_t have = 0;
      bool ok = true;
      while (ok && !stop_.load(std::memory_order_relaxed)) {
        const ssize_t n = ::recv(fd, in.data() + have, in.size() - have, MSG_DONTWAIT);
        if (n == 0) break;
        if (n < 0) {
          if (errno == EAGAIN || errno == EINTR) continue;
          break;
        }
        have += static_cast<size_t>(n);
        size_t at = 0;
        while (ok && have - at >= sizeof(nvmeof::tcp::CommonHeader)) {
          nvmeof::tcp::CommonHeader ch;
          std::memcpy(&ch, in.data() + at, sizeof ch);
          if (ch.plen < sizeof ch || ch.plen > in.size()) {
            ok = false;
            break;
          }
          if (have - at < ch.plen) break;
          ok = answer(fd, in.data() + at, ch);
          at += ch.plen;
        }
        std::memmove(in.data(), in.data() + at, have - at);
        have -= at;
      }
      close(fd);
    }
  }

  int cpu_;
  std::vector<uint8_t> out_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// QD1 reads of one block of `block_size` on one queue pair, the reactor spinning (poll(0)) on
// the calling thread, which owns it; every latency into `h`, the thread's CPU into `cpu_ns`.
bool qp_read_loop(nvmeof::Reactor& reactor, nvmeof::QueuePair& qp, uint32_t nsid, uint32_t block_size,
                  uint64_t blocks, std::chrono::nanoseconds d, LatencyHistogram& h, uint64_t& cpu_ns) {
  struct State {
    bool done = false;
    bool ok = true;
  } st;
  std::vector<uint8_t> buf(kReadBytes);
  nvmeof::IoRequest req;
  const uint32_t nlb = kReadBytes / block_size;
  uint64_t rng = 0x9e3779b97f4a7c15ull;
  const uint64_t cpu0 = thread_cpu_ns();
  const uint64_t end = now_ns() + static_cast<uint64_t>(d.count());
  while (st.ok && now_ns() < end) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    req = nvmeof::IoRequest{};
    nvmeof::prep_read(req.cmd, nsid, (rng % (blocks / nlb)) * nlb, nlb);
    req.data = buf.data();
    req.data_len = kReadBytes;
    req.user = &st;
    req.on_complete = [](nvmeof::IoRequest& r, const nvmeof::Cqe& c) noexcept {
      auto& s = *static_cast<State*>(r.user);
      s.done = true;
      s.ok = c.status().is_success();
    };
    st.done = false;
    const uint64_t t0 = now_ns();
    if (qp.submit(req) != 0) return false;
    while (!st.done) reactor.poll(std::chrono::microseconds{0});
    h.record(now_ns() - t0);
  }
  cpu_ns += thread_cpu_ns() - cpu0;
  return st.ok;
}

// -- nvmeof closed loop ---------------------------------------------------------------------

// `depth` reads kept in flight, each resubmitted from its own completion on the reactor thread.
class ReadLoop {
 public:
  ReadLoop(nvmeof::Volume& v, unsigned depth) : volume_(v), slots_(depth) {
    blocks_per_io_ = kReadBytes / v.block_size();
    ios_in_ns_ = v.size_blocks() / blocks_per_io_;
    for (size_t i = 0; i < slots_.size(); ++i) {
      slots_[i].loop = this;
      slots_[i].buf.resize(kReadBytes);
      slots_[i].rng = 0x9e3779b97f4a7c15ull * (i + 1);
    }
  }

  // Runs for `duration`; latencies go to `h`. Returns completed I/Os, or -1 on an error.
  int64_t run(std::chrono::nanoseconds duration, LatencyHistogram& h) {
    stop_.store(false);
    errors_.store(0);
    for (Slot& s : slots_) {
      s.latency.reset();
      s.ios = 0;
    }
    for (Slot& s : slots_) {
      active_.fetch_add(1);
      submit(s);
    }
    std::this_thread::sleep_for(duration);
    stop_.store(true);
    while (active_.load(std::memory_order_acquire) != 0)
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    int64_t ios = 0;
    for (Slot& s : slots_) {
      h.merge(s.latency);
      ios += static_cast<int64_t>(s.ios);
    }
    return errors_.load() ? -1 : ios;
  }

 private:
  struct Slot {
    nvmeof::VolumeIo io;
    ReadLoop* loop = nullptr;
    std::vector<uint8_t> buf;
    uint64_t rng = 1;
    uint64_t start_ns = 0;
    uint64_t ios = 0;
    LatencyHistogram latency;
  };

  void submit(Slot& s) noexcept {
    s.rng ^= s.rng << 13;
    s.rng ^= s.rng >> 7;
    s.rng ^= s.rng << 17;
    s.io = nvmeof::VolumeIo{};
    s.io.op = nvmeof::IoOp::read;
    s.io.slba = (s.rng % ios_in_ns_) * blocks_per_io_;
    s.io.nlb = blocks_per_io_;
    s.io.buf = s.buf.data();
    s.io.done = &ReadLoop::on_complete;
    s.io.user = &s;
    s.start_ns = now_ns();
    if (volume_.submit(s.io) != 0) {
      errors_.fetch_add(1);
      active_.fetch_sub(1, std::memory_order_acq_rel);
    }
  }

  static void on_complete(nvmeof::VolumeIo& io, nvmeof::NvmeStatus st) noexcept {
    auto& s = *static_cast<Slot*>(io.user);
    ReadLoop& loop = *s.loop;
    s.latency.record(now_ns() - s.start_ns);
    ++s.ios;
    if (!st.is_success()) loop.errors_.fetch_add(1);
    if (loop.stop_.load(std::memory_order_relaxed) || !st.is_success()) {
      loop.active_.fetch_sub(1, std::memory_order_acq_rel);
      return;
    }
    loop.submit(s);
  }

  nvmeof::Volume& volume_;
  std::vector<Slot> slots_;
  uint32_t blocks_per_io_ = 1;
  uint64_t ios_in_ns_ = 1;
  std::atomic<bool> stop_{false};
  std::atomic<unsigned> active_{0};
  std::atomic<uint64_t> errors_{0};
};

nlohmann::json latency_json(const LatencyHistogram& h) {
  auto us = [](uint64_t ns) { return std::round(static_cast<double>(ns) / 10.0) / 100.0; };
  return {{"ios", h.count()},
          {"p50_us", us(h.percentile(50))},
          {"p99_us", us(h.percentile(99))},
          {"p999_us", us(h.percentile(99.9))},
          {"max_us", us(h.max())},
          {"mean_us", std::round(h.mean() / 10.0) / 100.0}};
}

struct Row {
  std::string name;
  LatencyHistogram h;
  uint64_t cpu_ns = 0;  // the initiator side's thread CPU (the reactor's, the client's)
  // The rest of the process over the same time: the target side (the embedded target's
  // connection threads, the ping-pong server), plus what little the idle threads use.
  uint64_t peer_cpu_ns = 0;
  int64_t ios = 0;
  // Each round's mean, so a ratio can pair a row with the floor measured in the same round.
  std::vector<double> round_means{};
  uint64_t counted = 0, summed = 0;
  void close_round() {
    const uint64_t n = h.count() - counted, s = h.sum() - summed;
    round_means.push_back(n ? static_cast<double>(s) / static_cast<double>(n) : 0.0);
    counted = h.count();
    summed = h.sum();
  }
};

// The median over rounds of (this row's mean in a round / the floor's mean in the same round):
// a burst of load from elsewhere on a shared machine spoils the rounds it lands in, not the
// figure, where the pooled means let one bad slice of one row move that row's ratio.
double median_round_ratio(const Row& r, const Row& floor) {
  std::vector<double> q;
  for (size_t i = 0; i < r.round_means.size() && i < floor.round_means.size(); ++i)
    if (r.round_means[i] > 0 && floor.round_means[i] > 0) q.push_back(r.round_means[i] / floor.round_means[i]);
  if (q.empty()) return 0.0;
  std::sort(q.begin(), q.end());
  const size_t m = q.size() / 2;
  const double v = q.size() % 2 ? q[m] : (q[m - 1] + q[m]) / 2.0;
  return std::round(v * 100.0) / 100.0;
}

nlohmann::json row_json(const Row& r, double seconds) {
  nlohmann::json j = latency_json(r.h);
  const auto n = static_cast<double>(r.h.count());
  j["cpu_us_per_io"] = n > 0 ? std::round(static_cast<double>(r.cpu_ns) / 1e3 / n * 100.0) / 100.0 : 0.0;
  j["target_cpu_us_per_io"] = n > 0 ? std::round(static_cast<double>(r.peer_cpu_ns) / 1e3 / n * 100.0) / 100.0 : 0.0;
  if (r.ios > 0) j["iops"] = std::round(static_cast<double>(r.ios) / seconds);
  return j;
}

uint64_t reactor_cpu(const nvmeof::Volume& v) {
  uint64_t sum = 0;
  for (uint64_t c : v.stats().reactor_cpu_ns) sum += c;
  return sum;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"latency_bench: nvmeof QD1 read latency in each reactor poll mode against raw io_uring "
               "TCP ping-pong floors (sleeping and busy-polling), and QD32 IOPS per mode"};
  double seconds = 3.0;
  unsigned rounds = 3;
  unsigned depth = 32;
  bool json_out = false;
  bool mechanics = false;
  bool target_floor = false;
  int client_cpu = std::thread::hardware_concurrency() >= 2 ? 0 : -1;
  int server_cpu = std::thread::hardware_concurrency() >= 2 ? 1 : -1;
  app.add_option("--seconds", seconds, "time per measurement (split across the rounds)")
      ->check(CLI::Range(0.1, 600.0));
  app.add_option("--rounds", rounds, "alternations of the QD1 measurements")
      ->check(CLI::Range(1u, 100u));
  app.add_option("--iodepth", depth, "queue depth of the IOPS runs (1: none)")->check(CLI::Range(1u, 1024u));
  app.add_option("--client-cpu", client_cpu, "CPU of the initiator side (reactor, ping-pong client); -1: unpinned");
  app.add_option("--server-cpu", server_cpu, "CPU of the target side (embedded target, ping-pong server); -1: unpinned");
  app.add_flag("--mechanics", mechanics,
               "also measure busy ping-pongs with other io_uring mechanics (COOP_TASKRUN, DEFER_TASKRUN, "
               "registered ring fd, SQPOLL, multishot receive, SEND_ZC), and busy and adaptive volumes whose "
               "queue pairs keep their sockets on the ring while spinning (nvmeof_*_ring_sockets)");
  std::vector<std::string> host_modes{"busy", "adaptive", "sleep"};
  app.add_option("--modes", host_modes, "initiator poll modes to measure")
      ->check(CLI::IsMember({"busy", "adaptive", "sleep"}))
      ->delimiter(',');
  std::vector<std::string> target_polls{"adaptive"};
  app.add_option("--target-poll", target_polls,
                 "embedded target poll modes (TargetOptions::poll); several: one target each, rows "
                 "alternate between them")
      ->check(CLI::IsMember({"busy", "adaptive", "sleep"}))
      ->delimiter(',');
  double idle_seconds = 2.0;
  app.add_option("--idle-seconds", idle_seconds,
                 "how long an idle adaptive volume is watched for its CPU use (0: not measured)")
      ->check(CLI::Range(0.0, 600.0));
  app.add_flag("--target-floor", target_floor,
               "also measure one queue pair (no Volume) against each embedded target and against a "
               "responder that does the least an NVMe/TCP target can (the target's own cost)");
  app.add_flag("--json", json_out, "print JSON");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }

  // The target's threads inherit the affinity of the thread that starts it.
  pin_self(server_cpu);
  nvmeof::TargetOptions topts;
  topts.ports[0].trsvcid = "0";
  // One target per target poll mode; an idle one (no connection) costs nothing.
  std::vector<std::unique_ptr<nvmeof::Target>> targets;
  for (const auto& tp : target_polls) {
    topts.poll = tp == "busy" ? nvmeof::TargetPoll::busy
                 : tp == "sleep" ? nvmeof::TargetPoll::sleep : nvmeof::TargetPoll::adaptive;
    auto target = nvmeof::Target::start(topts);
    if (!target) {
      std::fprintf(stderr, "latency_bench: target: %s\n", target.error().message().c_str());
      return 1;
    }
    targets.push_back(std::move(*target));
  }
  pin_self(client_cpu);

  std::vector<nvmeof::PollMode> modes;
  for (const auto& m : host_modes) modes.push_back(*nvmeof::parse_poll_mode(m));
  // Row i: host mode modes[i % modes.size()] against targets[i / modes.size()].
  const size_t nrows = modes.size() * targets.size();
  auto row_name = [&](size_t i) {
    std::string n = std::string("nvmeof_") + nvmeof::to_string(modes[i % modes.size()]);
    if (targets.size() > 1) n += "_tgt_" + target_polls[i / modes.size()];
    return n;
  };
  // One volume at a time: a busy reactor left running would steal the CPU the others measure on.
  auto open_volume = [&](nvmeof::PollMode mode, size_t t,
                         bool spin_sockets = true) -> std::unique_ptr<nvmeof::Volume> {
    nvmeof::VolumeOptions vopts;
    vopts.paths = {*nvmeof::TransportAddress::parse(targets[t]->port_address(0))};
    vopts.connect.subnqn = topts.subsystems[0].nqn;
    vopts.reactors = 1;
    vopts.poll = mode;
    vopts.spin_sockets = spin_sockets;
    if (client_cpu >= 0) vopts.cpus = {client_cpu};
    else vopts.placement = nvmeof::PlacementMode::unpinned;
    // The volume's control thread (keep-alive every KATO / 4) inherits the opener's affinity:
    // opened from the pinned client thread it would share the reactor's CPU, and a busy
    // reactor there would hold its keep-alives past the 100 ms KATO on a loaded machine.
    unpin_self();
    auto v = nvmeof::Volume::open(vopts);
    pin_self(client_cpu);
    if (!v) {
      std::fprintf(stderr, "latency_bench: volume: %s\n", v.error().message().c_str());
      return nullptr;
    }
    return std::move(*v);
  };
  // QD`qd` reads on a fresh volume in `mode` for `d`, after a short warm-up.
  auto run_volume_on = [&](nvmeof::PollMode mode, size_t t, unsigned qd, std::chrono::nanoseconds d, Row& row,
                           bool spin_sockets = true) {
    auto v = open_volume(mode, t, spin_sockets);
    if (!v) return false;
    ReadLoop loop(*v, qd);
    LatencyHistogram warm;
    if (loop.run(std::chrono::milliseconds(100), warm) < 0) return false;
    const uint64_t cpu0 = reactor_cpu(*v), pcpu0 = process_cpu_ns();
    const int64_t ios = loop.run(d, row.h);
    const uint64_t own = reactor_cpu(*v) - cpu0, all = process_cpu_ns() - pcpu0;
    row.cpu_ns += own;
    row.peer_cpu_ns += all > own ? all - own : 0;
    if (ios < 0) return false;
    row.ios += ios;
    return true;
  };
  auto run_volume = [&](size_t i, unsigned qd, std::chrono::nanoseconds d, Row& row) {
    return run_volume_on(modes[i % modes.size()], i / modes.size(), qd, d, row);
  };
  // --mechanics: busy and adaptive volumes whose queue pairs stay on the ring for their sockets
  // while they spin (VolumeOptions::spin_sockets off), against each target, beside the rows that poll
  // the sockets with non-blocking system calls then (the default).
  struct RingRow {
    nvmeof::PollMode mode;
    size_t target;
    Row row;
  };
  std::vector<RingRow> ring_rows;
  if (mechanics)
    for (nvmeof::PollMode m : modes) {
      if (m == nvmeof::PollMode::sleep) continue;
      for (size_t t = 0; t < targets.size(); ++t)
        ring_rows.push_back({m, t, {std::string("nvmeof_") + nvmeof::to_string(m) + "_ring_sockets" +
                                        (targets.size() > 1 ? "_tgt_" + target_polls[t] : ""), {}, 0, 0}});
    }
  auto run_pingpong = [&](Wait client, Wait server, std::chrono::nanoseconds d, Row& row) {
    PingPong pp(client, server, server_cpu);
    if (!pp.start()) {
      std::fprintf(stderr, "latency_bench: ping-pong set-up (%s): %s\n", to_string(client), std::strerror(errno));
      return false;
    }
    LatencyHistogram warm;
    uint64_t warm_cpu = 0;
    if (!pp.run(std::chrono::milliseconds(50), warm, warm_cpu)) return false;
    const uint64_t own0 = row.cpu_ns, pcpu0 = process_cpu_ns();
    const bool ok = pp.run(d, row.h, row.cpu_ns);
    const uint64_t own = row.cpu_ns - own0, all = process_cpu_ns() - pcpu0;
    row.peer_cpu_ns += all > own ? all - own : 0;
    return ok;
  };

  struct Floor {
    Wait client, server;
    Row row;
  };
  std::vector<Floor> floors = {{Wait::peek, Wait::peek, {"pingpong_busy", {}, 0, 0}},
                               {Wait::sleep, Wait::sleep, {"pingpong_sleep", {}, 0, 0}},
                               {Wait::syscall, Wait::syscall, {"pingpong_busy_syscalls", {}, 0, 0}}};
  if (mechanics)
    for (Wait w : {Wait::coop, Wait::defer, Wait::defer_regfd, Wait::sqpoll})
      floors.push_back({w, Wait::peek, {std::string("pingpong_") + to_string(w), {}, 0, 0}});
  // What a polling nvmeof initiator against a polling embedded target can reach at best.
  if (mechanics) {
    floors.push_back({Wait::defer, Wait::syscall, {"pingpong_defer_vs_syscalls", {}, 0, 0}});
    // An initiator that receives through one multishot RECV (no re-arm per completion) ...
    floors.push_back({Wait::multishot, Wait::syscall, {"pingpong_multishot_vs_syscalls", {}, 0, 0}});
    // ... and a target side on a ring, sending its 4 KiB replies with SEND or with SEND_ZC.
    floors.push_back({Wait::syscall, Wait::defer, {"pingpong_syscalls_vs_defer", {}, 0, 0}});
    floors.push_back({Wait::syscall, Wait::send_zc, {"pingpong_syscalls_vs_send_zc", {}, 0, 0}});
  }
  std::vector<Row> qd1, qdn;
  for (size_t i = 0; i < nrows; ++i) {
    qd1.push_back({row_name(i), {}, 0, 0});
    qdn.push_back({row_name(i), {}, 0, 0});
  }

  // --target-floor: one queue pair, no Volume, against each target and against the responder
  // that does the least a target can; the ratio between them is the target's own cost.
  std::vector<Row> qprows;
  std::unique_ptr<MinResponder> responder;
  if (target_floor) {
    for (const auto& tp : target_polls) qprows.push_back({"qp_busy_vs_target_" + tp, {}, 0, 0});
    qprows.push_back({"qp_busy_vs_least_target", {}, 0, 0});
    responder = std::make_unique<MinResponder>(server_cpu);
    if (!responder->start()) {
      std::fprintf(stderr, "latency_bench: responder: %s\n", std::strerror(errno));
      return 1;
    }
  }
  const nvmeof::TargetNamespace& ns0 = topts.subsystems[0].namespaces[0];
  auto run_qp = [&](size_t k, std::chrono::nanoseconds d, Row& row) -> bool {
    nvmeof::ReactorOptions ro;
    ro.single_issuer = true;
    auto reactor = nvmeof::Reactor::create(ro);
    if (!reactor) return false;
    (*reactor)->set_spinning(true);  // as a busy volume's lane: the pair polls its socket itself
    std::unique_ptr<nvmeof::ControlPlane> cp;
    std::shared_ptr<nvmeof::Controller> ctrl;
    std::unique_ptr<nvmeof::QueuePair> qp;
    if (k < targets.size()) {
      nvmeof::ConnectOptions co;
      co.subnqn = topts.subsystems[0].nqn;
      // The control plane's thread (keep-alives) must not share the pinned reactor's CPU.
      unpin_self();
      auto cp_made = nvmeof::ControlPlane::create();
      if (!cp_made) return false;
      cp = std::move(*cp_made);
      auto c = nvmeof::Controller::connect(*cp, *nvmeof::TransportAddress::parse(targets[k]->port_address(0)), co);
      pin_self(client_cpu);
      if (!c) {
        std::fprintf(stderr, "latency_bench: controller: %s\n", c.error().message().c_str());
        return false;
      }
      ctrl = std::move(*c);
      auto q = nvmeof::create_io_queue(*ctrl, **reactor, 32);
      if (!q) {
        std::fprintf(stderr, "latency_bench: I/O queue: %s\n", q.error().message().c_str());
        return false;
      }
      qp = std::move(*q);
    } else {
      nvmeof::tcp::QpConfig cfg;
      cfg.trsvcid = std::to_string(responder->port());
      cfg.qid = 1;
      cfg.depth = 32;
      cfg.cntlid = 1;
      cfg.subnqn = "nqn.2024-01.io.nvmeof:least-target";
      cfg.hostnqn = "nqn.2024-01.io.nvmeof:latency-bench";
      cfg.in_capsule_data = 8192;
      auto q = nvmeof::tcp::QueuePair::connect(**reactor, cfg);
      if (!q) {
        std::fprintf(stderr, "latency_bench: responder queue: %s\n", q.error().message().c_str());
        return false;
      }
      (*q)->start();
      qp = std::move(*q);
    }
    LatencyHistogram warm;
    uint64_t warm_cpu = 0;
    const uint64_t blocks = ns0.size_bytes / ns0.block_size;
    if (!qp_read_loop(**reactor, *qp, ns0.nsid, ns0.block_size, blocks, std::chrono::milliseconds(50), warm, warm_cpu))
      return false;
    const uint64_t own0 = row.cpu_ns, pcpu0 = process_cpu_ns();
    const bool ok = qp_read_loop(**reactor, *qp, ns0.nsid, ns0.block_size, blocks, d, row.h, row.cpu_ns);
    const uint64_t own = row.cpu_ns - own0, all = process_cpu_ns() - pcpu0;
    row.peer_cpu_ns += all > own ? all - own : 0;
    qp.reset();  // on the reactor's thread, before the reactor
    return ok;
  };

  const auto slice = std::chrono::nanoseconds(static_cast<int64_t>(seconds * 1e9 / rounds));
  int rc = 0;
  // Alternating rounds, so that drift of a shared machine hits every row alike.
  for (unsigned r = 0; r < rounds && rc == 0; ++r) {
    for (Floor& f : floors)
      if (!run_pingpong(f.client, f.server, slice, f.row)) rc = 1;
    for (size_t i = 0; i < nrows && rc == 0; ++i)
      if (!run_volume(i, 1, slice, qd1[i])) rc = 1;
    for (size_t k = 0; k < ring_rows.size() && rc == 0; ++k)
      if (!run_volume_on(ring_rows[k].mode, ring_rows[k].target, 1, slice, ring_rows[k].row, false)) rc = 1;
    for (size_t k = 0; k < qprows.size() && rc == 0; ++k)
      if (!run_qp(k, slice, qprows[k])) rc = 1;
    for (Floor& f : floors) f.row.close_round();
    for (Row& x : qd1) x.close_round();
    for (RingRow& x : ring_rows) x.row.close_round();
    for (Row& x : qprows) x.close_round();
    if (depth > 1)
      for (size_t i = 0; i < nrows && rc == 0; ++i)
        if (!run_volume(i, depth, slice, qdn[i])) rc = 1;
  }
  if (rc != 0) std::fprintf(stderr, "latency_bench: a measurement failed\n");

  // What an idle adaptive volume costs: connected, nothing submitted, for `idle_seconds`
  // (after the connect's own work has settled). The reactor's thread CPU, and the rest of the
  // process over the same time (the control plane, the idle target connections).
  double idle_reactor_ms_per_s = -1, idle_process_ms_per_s = -1;
  if (idle_seconds > 0) {
    // Against an adaptive target when there is one (a busy target's connection threads spin
    // whatever the volume does).
    size_t idle_target = 0;
    for (size_t t = 0; t < target_polls.size(); ++t)
      if (target_polls[t] == "adaptive") idle_target = t;
    if (auto v = open_volume(nvmeof::PollMode::adaptive, idle_target)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      const uint64_t r0 = reactor_cpu(*v), p0 = process_cpu_ns(), t0 = now_ns();
      std::this_thread::sleep_for(std::chrono::nanoseconds(static_cast<int64_t>(idle_seconds * 1e9)));
      const uint64_t r1 = reactor_cpu(*v), p1 = process_cpu_ns(), t1 = now_ns();
      const double secs = static_cast<double>(t1 - t0) / 1e9;
      idle_reactor_ms_per_s = static_cast<double>(r1 - r0) / 1e6 / secs;
      idle_process_ms_per_s = static_cast<double>(p1 - p0) / 1e6 / secs;
    }
  }

  // The ratios are to the lowest of the busy floors on this machine: the ping-pong spinning on
  // non-blocking recv/send (a polling target's way).
  const Row& floor = floors[2].row;
  auto ratio = [](double a, double b) { return b > 0 ? std::round(a / b * 100.0) / 100.0 : 0.0; };
  nlohmann::json jq = nlohmann::json::object(), jn = nlohmann::json::object();
  for (const Floor& f : floors) jq[f.row.name] = row_json(f.row, seconds);
  std::vector<Row> qd1_all = qd1;
  for (const RingRow& r : ring_rows) qd1_all.push_back(r.row);
  for (const Row& r : qd1_all) {
    nlohmann::json x = row_json(r, seconds);
    x["ratio_p50_to_busy_floor"] = ratio(static_cast<double>(r.h.percentile(50)), static_cast<double>(floor.h.percentile(50)));
    x["ratio_mean_to_busy_floor"] = ratio(r.h.mean(), floor.h.mean());
    x["ratio_p99_to_busy_floor"] = ratio(static_cast<double>(r.h.percentile(99)), static_cast<double>(floor.h.percentile(99)));
    x["ratio_mean_to_busy_floor_median_of_rounds"] = median_round_ratio(r, floor);
    jq[r.name] = x;
  }
  for (const Row& r : qdn) jn[r.name] = row_json(r, seconds);
  nlohmann::json jqp = nlohmann::json::object();
  for (const Row& r : qprows) {
    nlohmann::json x = row_json(r, seconds);
    const Row& least = qprows.back();
    x["ratio_p50_to_least_target"] = ratio(static_cast<double>(r.h.percentile(50)), static_cast<double>(least.h.percentile(50)));
    x["ratio_mean_to_least_target"] = ratio(r.h.mean(), least.h.mean());
    x["ratio_p50_to_busy_floor"] = ratio(static_cast<double>(r.h.percentile(50)), static_cast<double>(floor.h.percentile(50)));
    x["ratio_mean_to_busy_floor_median_of_rounds"] = median_round_ratio(r, floor);
    x["ratio_mean_to_least_target_median_of_rounds"] = median_round_ratio(r, least);
    jqp[r.name] = x;
  }
  const nlohmann::json j = {{"config", {{"seconds", seconds}, {"rounds", rounds}, {"client_cpu", client_cpu},
                                        {"server_cpu", server_cpu}, {"target_poll", target_polls}}},
                            {"qd1_read_4k", jq},
                            {"randread_4k_qd", {{"iodepth", depth}, {"reactors", 1}, {"modes", jn}}},
                            {"qd1_queue_pair", jqp},
                            {"idle_adaptive_volume",
                             {{"seconds", idle_seconds},
                              {"reactor_cpu_ms_per_s", std::round(idle_reactor_ms_per_s * 1000.0) / 1000.0},
                              {"process_cpu_ms_per_s", std::round(idle_process_ms_per_s * 1000.0) / 1000.0}}},
                            {"ok", rc == 0}};
  if (json_out) {
    std::cout << j.dump(2) << "\n";
    return rc;
  }
  std::printf("QD1 4 KiB read, loopback, initiator CPU %d, target CPU %d\n", client_cpu, server_cpu);
  std::printf("  %-40s %8s %8s %8s %8s %10s %10s %8s %8s %8s %8s\n", "(us)", "p50", "p99", "p99.9", "mean", "CPU/IO",
              "tgtCPU/IO", "p50/fl", "mean/fl", "p99/fl", "rnd/fl");
  auto print_row = [&](const Row& r) {
    const auto n = static_cast<double>(r.h.count());
    std::printf("  %-40s %8.2f %8.2f %8.2f %8.2f %10.2f %10.2f %7.2fx %7.2fx %7.2fx %7.2fx  (%llu I/Os)\n", r.name.c_str(),
                static_cast<double>(r.h.percentile(50)) / 1e3, static_cast<double>(r.h.percentile(99)) / 1e3,
                static_cast<double>(r.h.percentile(99.9)) / 1e3, r.h.mean() / 1e3,
                n > 0 ? static_cast<double>(r.cpu_ns) / 1e3 / n : 0.0,
                n > 0 ? static_cast<double>(r.peer_cpu_ns) / 1e3 / n : 0.0,
                ratio(static_cast<double>(r.h.percentile(50)), static_cast<double>(floor.h.percentile(50))),
                ratio(r.h.mean(), floor.h.mean()),
                ratio(static_cast<double>(r.h.percentile(99)), static_cast<double>(floor.h.percentile(99))),
                median_round_ratio(r, floor), static_cast<unsigned long long>(r.h.count()));
  };
  for (const Floor& f : floors) print_row(f.row);
  for (const Row& r : qd1_all) print_row(r);
  for (const Row& r : qprows) print_row(r);
  if (!qprows.empty()) {
    const Row& least = qprows.back();
    for (size_t k = 0; k + 1 < qprows.size(); ++k)
      std::printf("  the target (%s) over the least target, same queue pair: p50 %.2fx, mean %.2fx, "
                  "median of the rounds' means %.2fx\n",
                  target_polls[k].c_str(),
                  ratio(static_cast<double>(qprows[k].h.percentile(50)), static_cast<double>(least.h.percentile(50))),
                  ratio(qprows[k].h.mean(), least.h.mean()), median_round_ratio(qprows[k], least));
  }
  if (depth > 1) std::printf("4 KiB randread QD%u, one reactor\n", depth);
  for (const Row& r : qdn) {
    if (depth <= 1) break;
    const auto n = static_cast<double>(r.h.count());
    std::printf("  %-28s %9.0f IOPS  p50 %8.2f us  p99 %8.2f us  CPU/IO %6.2f us  tgtCPU/IO %6.2f us\n",
                r.name.c_str(), static_cast<double>(r.ios) / seconds, static_cast<double>(r.h.percentile(50)) / 1e3,
                static_cast<double>(r.h.percentile(99)) / 1e3, n > 0 ? static_cast<double>(r.cpu_ns) / 1e3 / n : 0.0,
                n > 0 ? static_cast<double>(r.peer_cpu_ns) / 1e3 / n : 0.0);
  }
  if (idle_seconds > 0)
    std::printf("Idle adaptive volume (%.1f s, nothing submitted): reactor %.3f ms CPU per s, whole process %.3f ms per s\n",
                idle_seconds, idle_reactor_ms_per_s, idle_process_ms_per_s);
  return rc;
}
