#include "transport/tcp/queue_pair.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/crc32c.hpp"
#include "tls/session.hpp"
#include "transport/tcp/handshake.hpp"
#include "core/fabrics_command.hpp"
#include "core/log.hpp"

namespace nvmeof::tcp {
namespace {

constexpr uint16_t kNil = CommandSlot::kNil;
constexpr size_t kHdrArea = CommandSlot::kHdrArea;
constexpr unsigned kMaxIov = 256;
constexpr unsigned kArenaEntries = 64;
constexpr auto kDrainBound = std::chrono::seconds(2);
// TLS: ciphertext sent per send (a batch larger than this goes in several), plaintext read out
// of the session per read, and the coalescing of small pieces (one TLS record's worth).
constexpr size_t kTlsTxChunk = 256u << 10;
constexpr size_t kTlsPlain = 64u << 10;
constexpr size_t kTlsStage = 16u << 10;
// A C2HData payload with at least this much still to come is received in place (recv_direct):
// below it the copy costs less than the extra receive call it takes to stop at the payload's end.
constexpr size_t kPlacedRecvMin = 4096;
// From this C2HData payload size on, receives between payloads take only the next header
// (recv_direct): one system call more per PDU, against copying the payload out of rbuf.
constexpr uint32_t kHeaderRecvMin = 32u << 10;

using Dir = CommandSlot::Dir;
using Phase = CommandSlot::Phase;
using SendWork = CommandSlot::SendWork;

}  // namespace

// Everything the kernel may touch while an operation is in flight. It normally dies with the
// pair; if the pair is destroyed while operations are still in flight past the drain bound,
// the core is orphaned and frees itself (closing the socket) when the last one completes.
struct QueuePair::IoCore {
  struct Handler : IoHandler {
    IoCore* core = nullptr;
  };
  Handler recv_h;
  Handler send_h;
  QueuePair* qp = nullptr;
  int fd = -1;
  int inflight = 0;
  bool recv_armed = false;
  bool send_active = false;     // a batch is being sent
  bool send_in_kernel = false;  // its SENDMSG is in flight
  nvmeof::detail::NodeBuffer rbuf;
  uint32_t rbuf_len = 0;
  // The receive buffer sits in the reactor's buffer table (registered once) when it took it:
  // then the socket is read with IORING_OP_READ_FIXED, without mapping the pages per receive.
  Reactor* reactor = nullptr;
  int rbuf_id = -1;
  msghdr msg{};
  iovec iov[kMaxIov];
  unsigned iov_count = 0;
  unsigned iov_start = 0;
  struct ArenaEntry {
    alignas(8) uint8_t hdr[kHdrArea];
    uint32_t ddgst;
  };
  ArenaEntry arena[kArenaEntries];
  unsigned arena_used = 0;
  uint16_t batch[kMaxIov];
  unsigned batch_count = 0;

  // What is left of the batch: one piece goes with SEND, which spares the kernel the msghdr and
  // iovec copies of SENDMSG; more go with `msg` over iov[iov_start..).
  bool one_piece() const noexcept { return iov_count - iov_start == 1; }
  void fill_msg() noexcept {
    msg = msghdr{};
    msg.msg_iov = iov + iov_start;
    msg.msg_iovlen = iov_count - iov_start;
  }
  // TLS: the ciphertext the send in flight reads (allocated only for a TLS connection).
  nvmeof::detail::NodeBuffer tls_tx;

  void release_rbuf() noexcept {
    if (rbuf_id >= 0) reactor->unregister_buffer(static_cast<unsigned>(rbuf_id));
    rbuf_id = -1;
  }

  void orphan_step() noexcept {
    if (inflight > 0) return;
    if (fd >= 0) ::close(fd);
    release_rbuf();
    delete this;
  }
};

struct QueuePair::RecvSink {
  QueuePair& qp;
  Errc on_header(const uint8_t* hdr, const HeaderCheck& hc, uint8_t*& dst) noexcept {
    return qp.on_header(hdr, hc, dst);
  }
  Errc on_pdu(const uint8_t* hdr, const HeaderCheck& hc) noexcept { return qp.on_pdu(hdr, hc); }
};

Result<std::unique_ptr<QueuePair>> QueuePair::connect(Reactor& reactor, const QpConfig& cfg) {
  const std::string label = detail::make_label(cfg);
  if (cfg.depth == 0 || cfg.depth > kMaxQueueDepth || cfg.recv_buffer < 4096) {
    nvmeof::detail::log_warning("nvmeof: %s: invalid queue depth %u or receive buffer\n", label.c_str(),
                 cfg.depth);
    return Errc::invalid_argument;
  }
  auto c = detail::handshake(cfg, label);
  if (!c) return c.error();
  return std::unique_ptr<QueuePair>(
      new QueuePair(reactor, cfg, c->fd, c->session, label, std::move(c->tls)));
}

QueuePair::QueuePair(Reactor& reactor, const QpConfig& cfg, int fd, const Session& s,
                     std::string label, std::unique_ptr<tls::Session> tls)
    : QueuePairBase(std::move(label), cfg.depth),
      reactor_(reactor),
      cfg_(cfg),
      session_(s),
      reader_(Role::host, 4096),
      sendq_head_(kNil),
      sendq_tail_(kNil) {
  in_capsule_ = cfg.in_capsule_data ? cfg.in_capsule_data : (cfg.qid == 0 ? kAdminInCapsuleData : 0);
  max_transfer_ = kLimits.max_transfer(cfg.max_transfer);
  send_neg_ = Negotiated{s.hdgst, s.ddgst, s.cpda};
  reader_.set_negotiated(Negotiated{s.hdgst, s.ddgst, 0});
  reader_.set_max_data(std::max<uint32_t>(max_transfer_, 4096));
  // The pair is created on the thread that will drive it (a pinned reactor): its slots (see
  // QueuePairBase) and staging buffer go on that thread's memory node.
  core_ = new IoCore();
  core_->qp = this;
  core_->fd = fd;
  core_->rbuf_len = cfg.recv_buffer;
  core_->rbuf = nvmeof::detail::NodeBuffer(cfg.recv_buffer, nvmeof::detail::thread_memory_node());
  if (tls) {
    tls_ = std::move(tls);
    const int node = nvmeof::detail::thread_memory_node();
    core_->tls_tx = nvmeof::detail::NodeBuffer(kTlsTxChunk, node);
    tls_plain_ = nvmeof::detail::NodeBuffer(kTlsPlain, node);
    tls_stage_ = nvmeof::detail::NodeBuffer(kTlsStage, node);
  }
  core_->recv_h.core = core_;
  core_->send_h.core = core_;
  core_->recv_h.fn = [](IoHandler* h, const io_uring_cqe& cqe) noexcept {
    IoCore* c = static_cast<IoCore::Handler*>(h)->core;
    --c->inflight;
    c->recv_armed = false;
    if (c->qp) {
      if (cqe.res > 0) c->qp->ack_at_once();
      c->qp->on_recv(cqe);
    } else {
      c->orphan_step();
    }
  };
  core_->send_h.fn = [](IoHandler* h, const io_uring_cqe& cqe) noexcept {
    IoCore* c = static_cast<IoCore::Handler*>(h)->core;
    --c->inflight;
    c->send_in_kernel = false;
    if (c->qp) c->qp->on_send(cqe);
    else c->orphan_step();
  };
}

QueuePair::~QueuePair() {
  close();
  const uint64_t deadline =
      Reactor::clock_ns() +
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(kDrainBound).count());
  while (core_->inflight > 0 && Reactor::clock_ns() < deadline)
    reactor_.poll(std::chrono::milliseconds(1));
  if (core_->inflight > 0) {
    nvmeof::detail::log_warning("nvmeof: %s: %d socket operations still in flight at destruction\n",
                 label_.c_str(), core_->inflight);
    core_->qp = nullptr;  // the core frees itself and closes the socket when they complete
    finish_teardown();    // orphaned, the core counts as quiet: the requests complete now
  } else {
    finish_teardown();
    if (core_->fd >= 0) ::close(core_->fd);
    core_->release_rbuf();
    delete core_;
  }
  core_ = nullptr;
  if (poller_added_) reactor_.remove_poller(&QueuePair::poll_fn, this);
  if (cfg_.on_destroy) cfg_.on_destroy();
}

bool QueuePair::registered_receive() const noexcept { return core_ && core_->rbuf_id >= 0; }

int QueuePair::inflight_ops() const noexcept { return core_ ? core_->inflight : 0; }

int QueuePair::socket_fd() const noexcept { return core_ ? core_->fd : -1; }

void QueuePair::start() noexcept {
  if (!go_live()) return;
  core_->reactor = &reactor_;
  if (auto id = reactor_.register_buffer({core_->rbuf.data(), core_->rbuf_len}))
    core_->rbuf_id = static_cast<int>(*id);  // else plain IORING_OP_RECV
  reactor_.add_poller(&QueuePair::poll_fn, this);
  poller_added_ = true;
  if (tls_) tls_receive(0);  // records the set-up read ahead of its last PDU
  arm_recv();
}

int QueuePair::submit(IoRequest& req) noexcept {
  if (state_ != QpState::live) [[unlikely]] return -ENOTCONN;
  const uint32_t len = req.data_len;
  if (len > max_transfer_) [[unlikely]] return -EINVAL;
  Dir dir = Dir::none;
  if (len) {
    if (is_host_to_controller(req.cmd)) dir = Dir::to_controller;
    else if (is_controller_to_host(req.cmd)) dir = Dir::from_controller;
    else return -EINVAL;  // bidirectional or no-data opcode with a buffer
    if (!req.data) return -EINVAL;
  }
  if (!has_free_slot()) [[unlikely]] return -EAGAIN;
  const uint16_t cid = take_slot(req);
  Slot& s = slots_[cid];
  s.phase = Phase::active;
  s.dir = dir;
  s.work = SendWork::capsule;
  s.in_capsule = dir == Dir::to_controller && len <= in_capsule_;
  s.h2c_off = s.h2c_left = s.r2t_next = s.c2h_next = 0;
  s.discard = false;
  req.submit_ns = reactor_.now_ns();

  const uint32_t icd = s.in_capsule ? len : 0;
  set_sgl(req.cmd, s.in_capsule ? sgl::kDataBlockOffset : sgl::kTransportDataBlock, 0, len);
  CapsuleCmd cap;
  fill_capsule_cmd(cap, req.cmd, icd, send_neg_);
  std::memcpy(s.hdr, &cap, sizeof cap);
  uint32_t end = sizeof cap;
  if (send_neg_.hdgst) {
    const uint32_t c = header_digest(s.hdr, sizeof cap);
    std::memcpy(s.hdr + end, &c, sizeof c);
    end += kDigestLen;
  }
  if (icd) {
    std::memset(s.hdr + end, 0, cap.ch.pdo - end);  // CPDA padding
    end = cap.ch.pdo;
    if (send_neg_.ddgst) s.ddgst = nvmeof::detail::crc32c(req.data, len);
  }
  s.hdr_len = end;
  enqueue(cid);
  return 0;
}

void QueuePair::enqueue(uint16_t cid) noexcept {
  Slot& s = slots_[cid];
  s.queued = true;
  s.next = kNil;
  if (sendq_tail_ == kNil) sendq_head_ = cid;
  else slots_[sendq_tail_].next = cid;
  sendq_tail_ = cid;
}

void QueuePair::unlink(uint16_t cid) noexcept {
  uint16_t prev = kNil;
  for (uint16_t i = sendq_head_; i != kNil; prev = i, i = slots_[i].next) {
    if (i != cid) continue;
    if (prev == kNil) sendq_head_ = slots_[i].next;
    else slots_[prev].next = slots_[i].next;
    if (sendq_tail_ == cid) sendq_tail_ = prev;
    break;
  }
  slots_[cid].queued = false;
  slots_[cid].next = kNil;
}

// Every turn, after the completions: the send first, then the receive is armed again. A receive
// that finds no data arms a poll before the next SQE is issued, so queued ahead of the send it
// would hold back every QD1 command by that much.
int QueuePair::poll_fn(void* self) noexcept {
  auto& qp = *static_cast<QueuePair*>(self);
  if (qp.reactor_.spinning() && !qp.core_->recv_armed) {
    // What was submitted since the last turn (from the lane's ring) goes out before the
    // receive, then what the receive's completions submitted, all in this turn.
    int work = qp.flush();
    work += qp.recv_direct();
    if (qp.sendq_head_ != kNil) work += qp.flush();
    return work;
  }
  const int work = qp.flush();
  if (!qp.core_->recv_armed) qp.arm_recv();
  return work;
}

// Gathers every queued PDU (up to the iovec and header-arena limits) into one SENDMSG.
int QueuePair::flush() noexcept {
  if (state_ != QpState::live) return 0;
  IoCore& c = *core_;
  int work = 0;
  if (c.send_active) {
    if (!c.send_in_kernel && submit_batch()) ++work;  // an SQE was missing last turn
    return work;
  }
  if (sendq_head_ == kNil) {
    // TLS: a post-handshake message (KeyUpdate) to answer, with no PDU to carry it.
    if (tls_ && tls_->output_pending() > 0) [[unlikely]] {
      c.batch_count = 0;
      if (tls_next_chunk()) {
        c.send_active = true;
        submit_batch();
        ++work;
      }
    }
    return work;
  }

  c.iov_count = c.iov_start = c.arena_used = c.batch_count = 0;
  const bool dd = send_neg_.ddgst;
  auto push = [&c](const void* p, size_t n) {
    c.iov[c.iov_count].iov_base = const_cast<void*>(p);
    c.iov[c.iov_count].iov_len = n;
    ++c.iov_count;
  };
  while (sendq_head_ != kNil) {
    const uint16_t cid = sendq_head_;
    Slot& s = slots_[cid];
    IoRequest& req = *s.req;
    bool done_with_slot = true;
    if (s.work == SendWork::capsule) {
      const bool data = s.in_capsule && req.data_len;
      if (c.iov_count + 1 + (data ? 1 + dd : 0) > kMaxIov) break;
      push(s.hdr, s.hdr_len);
      if (data) {
        push(req.data, req.data_len);
        if (dd) push(&s.ddgst, kDigestLen);
      }
    } else {
      bool progressed = false;
      while (s.h2c_left > 0 && c.iov_count + 2 + dd <= kMaxIov && c.arena_used < kArenaEntries) {
        const uint32_t len = std::min(s.h2c_left, session_.maxh2cdata);
        IoCore::ArenaEntry& e = c.arena[c.arena_used++];
        DataHeader dh;
        fill_h2c_data(dh, cid, s.ttag, s.h2c_off, len, len == s.h2c_left, send_neg_);
        std::memcpy(e.hdr, &dh, sizeof dh);
        uint32_t end = sizeof dh;
        if (send_neg_.hdgst) {
          const uint32_t h = header_digest(e.hdr, sizeof dh);
          std::memcpy(e.hdr + end, &h, sizeof h);
          end += kDigestLen;
        }
        std::memset(e.hdr + end, 0, dh.ch.pdo - end);
        const uint8_t* src = static_cast<const uint8_t*>(req.data) + s.h2c_off;
        push(e.hdr, dh.ch.pdo);
        push(src, len);
        if (dd) {
          e.ddgst = nvmeof::detail::crc32c(src, len);
          push(&e.ddgst, kDigestLen);
        }
        s.h2c_off += len;
        s.h2c_left -= len;
        progressed = true;
      }
      if (!progressed) break;
      done_with_slot = s.h2c_left == 0;
    }
    if (!s.in_batch) {
      s.in_batch = true;
      c.batch[c.batch_count++] = cid;
    }
    if (!done_with_slot) break;  // out of room: the rest of this R2T goes in the next batch
    sendq_head_ = s.next;
    if (sendq_head_ == kNil) sendq_tail_ = kNil;
    s.queued = false;
    s.next = kNil;
  }
  if (c.iov_count == 0) return work;
  if (tls_ && !tls_encrypt_batch()) return work + 1;
  c.send_active = true;
  submit_batch();
  return work + 1;
}

bool QueuePair::submit_batch() noexcept {
  if (reactor_.spinning()) return send_direct();
  IoCore& c = *core_;
  io_uring_sqe* sqe = reactor_.get_sqe();
  if (!sqe) return false;  // flush() retries on the next turn
  if (c.one_piece()) {  // a QD1 command capsule, a TLS record
    io_uring_prep_send(sqe, c.fd, c.iov[c.iov_start].iov_base, c.iov[c.iov_start].iov_len, MSG_NOSIGNAL);
  } else {
    c.fill_msg();
    io_uring_prep_sendmsg(sqe, c.fd, &c.msg, MSG_NOSIGNAL);
  }
  io_uring_sqe_set_data(sqe, &c.send_h);
  ++c.inflight;
  c.send_in_kernel = true;
  return true;
}

void QueuePair::on_send(const io_uring_cqe& cqe) noexcept {
  IoCore& c = *core_;
  if (state_ != QpState::live) {
    batch_done();
    if (c.inflight == 0) finish_teardown();
    return;
  }
  if (cqe.res < 0) {
    if (cqe.res == -EAGAIN || cqe.res == -EINTR) {
      submit_batch();
      return;
    }
    fail(detail::socket_error(-cqe.res), "send failed");
    return;
  }
  // A short send: skip what went out and send the rest, still the only send in flight.
  c.iov_start = advance_iov(c.iov, c.iov_start, c.iov_count, static_cast<size_t>(cqe.res));
  if (c.iov_start < c.iov_count) {
    submit_batch();
    return;
  }
  // TLS: the batch's ciphertext may need more chunks.
  if (tls_ && tls_next_chunk()) {
    submit_batch();
    return;
  }
  batch_done();
}

// What on_send does for a ring send, in a loop: send until the batch (and with TLS its last
// chunk of ciphertext) is out or the socket is full. Full: the batch stays active and flush()
// calls again next turn. False when nothing went out.
bool QueuePair::send_direct() noexcept {
  IoCore& c = *core_;
  bool sent = false;
  for (;;) {
    ssize_t n;
    if (c.one_piece()) {
      n = ::send(c.fd, c.iov[c.iov_start].iov_base, c.iov[c.iov_start].iov_len,
                 MSG_DONTWAIT | MSG_NOSIGNAL);
    } else {
      c.fill_msg();
      n = ::sendmsg(c.fd, &c.msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    }
    if (n < 0) {
      const int e = errno;
      if (e == EAGAIN || e == EWOULDBLOCK || e == EINTR) return sent;
      fail(detail::socket_error(e), "send failed");
      return true;
    }
    sent = true;
    c.iov_start = advance_iov(c.iov, c.iov_start, c.iov_count, static_cast<size_t>(n));
    if (c.iov_start < c.iov_count) continue;
    if (tls_ && tls_next_chunk()) continue;
    batch_done();
    return true;
  }
}

// Non-blocking receives while the reactor spins, each handled as a ring receive's completion.
int QueuePair::recv_direct() noexcept {
  IoCore& c = *core_;
  if (state_ != QpState::live) return 0;
  // A header received alone is followed at once by its payload's receive (the next pass).
  for (int pass = 0; pass < 2 && state_ == QpState::live; ++pass) {
    // The rest of a large C2HData payload is received straight into the command's buffer: the
    // kernel's copy only, not that and ours out of rbuf. Only here, where the receive ends
    // within this call: a hedge that wins later (detach_data) can never meet a receive still
    // writing into the buffer it gave back. A ring receive (armed while the reactor sleeps)
    // always uses rbuf.
    const std::span<uint8_t> room = tls_ ? std::span<uint8_t>{} : reader_.data_room();
    const bool placed = room.size() >= kPlacedRecvMin;
    // While large payloads come, a receive between them takes only the next header, so that
    // the payload behind it stays in the socket for the placed receive above rather than
    // arriving in rbuf to be copied out (ARCHITECTURE.md, "NVMe/TCP receive").
    size_t want = c.rbuf_len;
    bool header_only = false;
    if (!placed && header_reads_ && !tls_ && !g_no_header_recv_for_test) {
      const size_t left = reader_.header_left(
          static_cast<uint32_t>(kShortHlen + (reader_.negotiated().hdgst ? kDigestLen : 0)));
      if (left && left < want) {
        want = left;
        header_only = true;
      }
    }
    const ssize_t n = placed ? ::recv(c.fd, room.data(), room.size(), MSG_DONTWAIT)
                             : ::recv(c.fd, c.rbuf.data(), want, MSG_DONTWAIT);
    // The header-sized receive's ACK too, though the payload's receive follows at once: at
    // depth that payload is often still arriving, and the ACK lets the target send on
    // (bench/README.md, "Large transfers against SPDK").
    if (n > 0) ack_at_once();
    io_uring_cqe cqe{};
    if (n < 0) {
      const int e = errno;
      if (e == EAGAIN || e == EWOULDBLOCK || e == EINTR) return pass;
      cqe.res = -e;
    } else {
      cqe.res = static_cast<int32_t>(n);
    }
    if (placed && n > 0) {
      placed_bytes_ += static_cast<uint64_t>(n);
      RecvSink sink{*this};
      fail_detail_ = nullptr;
      after_consume(reader_.consume_placed(static_cast<size_t>(n), sink).error);
      return 1;
    }
    if (header_only && n > 0) ++header_recvs_;
    on_recv(cqe);
    if (!header_only || n != static_cast<ssize_t>(want)) return 1;
  }
  return 1;
}

// While large payloads come, every receive that took bytes, on the ring or direct, is
// acknowledged at once (ARCHITECTURE.md, "NVMe/TCP receive"). Our capsules follow our receives
// closely, so the kernel takes the connection for an interactive one and holds its ACKs back to
// ride on the next capsule, which at depth goes out only once a whole payload is in. The
// target's TCP sends no further than its congestion window lets it, so it waits for ACKs that
// are held back. TCP_QUICKACK sends a held ACK now and leaves that mode until our next send.
void QueuePair::ack_at_once() noexcept {
  if (!header_reads_ || g_no_quick_ack_for_test || state_ != QpState::live) return;
  const int one = 1;
  if (::setsockopt(core_->fd, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof one) == 0) ++quick_acks_;
}

void QueuePair::batch_done() noexcept {
  IoCore& c = *core_;
  c.send_active = false;
  const unsigned count = c.batch_count;
  c.batch_count = 0;
  for (unsigned i = 0; i < count; ++i) {
    const uint16_t cid = c.batch[i];
    Slot& s = slots_[cid];
    s.in_batch = false;
    if (s.phase == Phase::answered && state_ == QpState::live) release(cid, s.cqe);
  }
}

void QueuePair::arm_recv() noexcept {
  IoCore& c = *core_;
  if (c.recv_armed || reactor_.spinning() || state_ != QpState::live) return;
  io_uring_sqe* sqe = reactor_.get_sqe();
  if (!sqe) return;  // flush() retries on the next turn
  if (c.rbuf_id >= 0)
    io_uring_prep_read_fixed(sqe, c.fd, c.rbuf.data(), c.rbuf_len, 0, c.rbuf_id);
  else
    io_uring_prep_recv(sqe, c.fd, static_cast<uint8_t*>(c.rbuf.data()), c.rbuf_len, 0);
  io_uring_sqe_set_data(sqe, &c.recv_h);
  c.recv_armed = true;
  ++c.inflight;
}

void QueuePair::on_recv(const io_uring_cqe& cqe) noexcept {
  IoCore& c = *core_;
  if (state_ != QpState::live) {
    if (c.inflight == 0) finish_teardown();
    return;
  }
  if (cqe.res <= 0) {
    if (cqe.res == -EAGAIN || cqe.res == -EINTR) {
      arm_recv();
    } else if (cqe.res == 0) {
      fail(make_error_code(Errc::connection_closed),
           reader_.at_boundary() ? "between PDUs" : "in the middle of a PDU");
    } else {
      fail(detail::socket_error(-cqe.res), std::strerror(-cqe.res));
    }
    return;
  }
  if (tls_) {
    tls_receive(static_cast<size_t>(cqe.res));
    if (state_ != QpState::live) {
      if (c.inflight == 0) finish_teardown();
      return;
    }
    return;  // the poller arms the next receive after this turn's send
  }
  RecvSink sink{*this};
  fail_detail_ = nullptr;
  after_consume(reader_.consume(static_cast<uint8_t*>(c.rbuf.data()), static_cast<size_t>(cqe.res), sink).error);
  // The poller arms the next receive once this turn's send is queued (poll_fn).
}

void QueuePair::after_consume(Errc err) noexcept {
  if (state_ != QpState::live) {
    // A completion callback closed the pair, or a handler failed it.
    if (core_->inflight == 0) finish_teardown();
    return;
  }
  if (err != Errc::ok) fail(make_error_code(err), fail_detail_ ? fail_detail_ : reader_.last_check().what);
}

bool QueuePair::detach_data(IoRequest& req) noexcept {
  const uint16_t cid = req.cmd.cid;
  if (cid >= cfg_.depth) return false;
  Slot& s = slots_[cid];
  if (s.phase != Phase::active || s.req != &req || s.dir != Dir::from_controller) return false;
  s.discard = true;
  // A C2HData PDU of this command may be half read: its remaining bytes go nowhere either.
  reader_.drop_data_into(static_cast<const uint8_t*>(req.data), req.data_len);
  return true;
}

Errc QueuePair::on_header(const uint8_t* hdr, const HeaderCheck&, uint8_t*& dst) noexcept {
  dst = nullptr;
  switch (static_cast<PduType>(hdr[0])) {
    case PduType::capsule_resp:
    case PduType::r2t:
      return Errc::ok;
    case PduType::c2h_term_req: {
      fail_detail_ = "controller sent C2HTermReq";
      return Errc::peer_terminated;
    }
    case PduType::c2h_data: {
      DataHeader d;
      std::memcpy(&d, hdr, sizeof d);
      if (d.cccid >= cfg_.depth || slots_[d.cccid].phase != Phase::active) {
        fail_detail_ = "C2HData for an unknown CID";
        return Errc::protocol_error;
      }
      Slot& s = slots_[d.cccid];
      if (s.dir != Dir::from_controller) {
        fail_detail_ = "C2HData for a command that reads no data";
        return Errc::protocol_error;
      }
      if (static_cast<uint64_t>(d.datao) + d.datal > s.req->data_len) {
        fail_detail_ = "C2HData out of the command's range";
        return Errc::malformed_pdu;
      }
      if (d.datao != s.c2h_next) {
        fail_detail_ = "C2HData out of order";
        return Errc::protocol_error;
      }
      if (!s.discard) dst = static_cast<uint8_t*>(s.req->data) + d.datao;
      header_reads_ = d.datal >= kHeaderRecvMin;
      return Errc::ok;
    }
    default:
      fail_detail_ = "unexpected PDU type";
      return Errc::protocol_error;
  }
}

Errc QueuePair::on_pdu(const uint8_t* hdr, const HeaderCheck&) noexcept {
  switch (static_cast<PduType>(hdr[0])) {
    case PduType::capsule_resp: {
      CapsuleResp r;
      std::memcpy(&r, hdr, sizeof r);
      const uint16_t cid = r.cqe.cid;
      if (cid >= cfg_.depth || slots_[cid].phase != Phase::active) {
        fail_detail_ = "CapsuleResp for an unknown CID";
        return Errc::protocol_error;
      }
      Slot& s = slots_[cid];
      if (s.queued) {
        if (s.work == SendWork::capsule) {
          fail_detail_ = "CapsuleResp for a command not sent yet";
          return Errc::protocol_error;
        }
        unlink(cid);  // the controller gave up on the write: its remaining data is moot
      }
      complete(cid, r.cqe);
      break;
    }
    case PduType::c2h_data: {
      DataHeader d;
      std::memcpy(&d, hdr, sizeof d);
      Slot& s = slots_[d.cccid];
      s.c2h_next += d.datal;
      if (d.ch.flags & pdu_flag::kSuccess) {
        if (!(d.ch.flags & pdu_flag::kLastPdu)) {
          fail_detail_ = "C2HData SUCCESS without LAST_PDU";
          return Errc::malformed_pdu;
        }
        if (s.c2h_next != s.req->data_len) {
          fail_detail_ = "C2HData SUCCESS before all data arrived";
          return Errc::protocol_error;
        }
        Cqe cqe{};
        cqe.cid = d.cccid;
        complete(d.cccid, cqe);
      }
      break;
    }
    case PduType::r2t: {
      R2t r;
      std::memcpy(&r, hdr, sizeof r);
      if (const Errc e = on_r2t(r); e != Errc::ok) return e;
      break;
    }
    default:
      break;
  }
  // A completion callback may have closed the pair: stop parsing.
  return state_ == QpState::live ? Errc::ok : Errc::not_connected;
}

Errc QueuePair::on_r2t(const R2t& r) noexcept {
  if (r.cccid >= cfg_.depth || slots_[r.cccid].phase != Phase::active) {
    fail_detail_ = "R2T for an unknown CID";
    return Errc::protocol_error;
  }
  Slot& s = slots_[r.cccid];
  if (s.dir != Dir::to_controller || s.in_capsule || s.queued) {
    fail_detail_ = "R2T for a command that expects none";
    return Errc::protocol_error;
  }
  if (s.h2c_left != 0) {
    fail_detail_ = "R2T while the previous one is still being served";
    return Errc::protocol_error;
  }
  if (r.r2tl == 0 || r.r2to != s.r2t_next ||
      static_cast<uint64_t>(r.r2to) + r.r2tl > s.req->data_len) {
    fail_detail_ = "R2T offset or length out of range";
    return Errc::malformed_pdu;
  }
  s.ttag = r.ttag;
  s.h2c_off = r.r2to;
  s.h2c_left = r.r2tl;
  s.r2t_next = r.r2to + r.r2tl;
  s.work = SendWork::h2c;
  enqueue(r.cccid);
  return Errc::ok;
}

void QueuePair::complete(uint16_t cid, const Cqe& cqe) noexcept {
  Slot& s = slots_[cid];
  if (s.in_batch) {
    s.phase = Phase::answered;
    s.cqe = cqe;
    return;
  }
  release(cid, cqe);
}

void QueuePair::release(uint16_t cid, const Cqe& cqe) noexcept {
  QueuePair::retire_slot(cid);  // qualified: a direct call on the hot path
  // The slot is free before the callback runs, so the callback can submit again.
  complete_slot(cid, cqe);
}

void QueuePair::retire_slot(uint16_t cid) noexcept {
  Slot& s = slots_[cid];
  s.phase = Phase::free;
  s.queued = s.in_batch = false;
  s.next = kNil;
}

// The socket is shut down at once (waking a pending receive with 0 and a send with EPIPE); the
// cancellations cover a kernel that has not yet picked the operations up. The descriptor itself
// is closed only once nothing is in flight (on_quiet), so its number cannot be reused under a
// pending operation.
void QueuePair::stop_transport() noexcept {
  IoCore& c = *core_;
  // TLS: our own close tells the controller with a close_notify (best effort, never waits),
  // unless a send is in flight (the alert would land inside its record stream).
  if (tls_ && error_ == errno_code(ECANCELED) && !c.send_active) {
    tls_->close();
    uint8_t alert[64];
    const size_t n = tls_->take_output(alert);
    if (n > 0) (void)::send(c.fd, alert, n, MSG_DONTWAIT | MSG_NOSIGNAL);
  }
  ::shutdown(c.fd, SHUT_RDWR);
  auto cancel = [this](IoHandler* h) {
    if (io_uring_sqe* sqe = reactor_.get_sqe()) {
      io_uring_prep_cancel(sqe, h, 0);
      io_uring_sqe_set_data(sqe, nullptr);
    }
  };
  if (c.recv_armed) cancel(&c.recv_h);
  if (c.send_in_kernel) cancel(&c.send_h);
}

// An orphaned core (the destructor gave up waiting) counts as quiet: what it still has in flight
// is the kernel's, freed with the core.
bool QueuePair::transport_quiet() const noexcept {
  return !core_ || core_->qp != this || core_->inflight == 0;
}

void QueuePair::finish_teardown() noexcept { settle(); }

void QueuePair::on_quiet() noexcept {
  if (core_ && core_->qp == this && core_->inflight == 0 && core_->fd >= 0) {
    ::close(core_->fd);
    core_->fd = -1;
  }
  sendq_head_ = sendq_tail_ = kNil;
  if (core_) core_->send_active = false;
}

// ---- TLS (QpConfig::tls): the session between the PDUs and the socket -----------------------

tls::CipherSuite QueuePair::tls_suite() const noexcept {
  return tls_ ? tls_->suite() : tls::CipherSuite::aes_128_gcm_sha256;
}

// Encrypts the gathered batch (c.iov) into the session, small pieces coalesced into one record
// and large ones written in place, then points the send at the first chunk of ciphertext. The
// caller's buffers are no longer read once this returns; the batch still completes only when
// its last chunk is sent. False when the session failed (the pair is failed then).
bool QueuePair::tls_encrypt_batch() noexcept {
  IoCore& c = *core_;
  auto* stage = static_cast<uint8_t*>(tls_stage_.data());
  size_t staged = 0;
  bool ok = true;
  auto put = [&](const uint8_t* p, size_t n) {
    if (ok && n > 0 && !tls_->write({p, n})) ok = false;
  };
  for (unsigned i = 0; i < c.iov_count && ok; ++i) {
    const auto* p = static_cast<const uint8_t*>(c.iov[i].iov_base);
    const size_t n = c.iov[i].iov_len;
    if (staged + n <= kTlsStage) {
      std::memcpy(stage + staged, p, n);
      staged += n;
      continue;
    }
    put(stage, staged);
    staged = 0;
    if (n < kTlsStage) {
      std::memcpy(stage, p, n);
      staged = n;
    } else {
      put(p, n);
    }
  }
  put(stage, staged);
  if (!ok) {
    c.batch_count = 0;  // nothing of it reached the socket
    for (uint32_t cid = 0; cid < cfg_.depth; ++cid) slots_[cid].in_batch = false;
    fail(make_error_code(Errc::protocol_error), ("TLS: " + tls_->error_detail()).c_str());
    return false;
  }
  if (!tls_next_chunk()) {  // only empty pieces: nothing to send, the batch is done
    batch_done();
    return false;
  }
  return true;
}

// Points the send at the next chunk of pending ciphertext; false when there is none.
bool QueuePair::tls_next_chunk() noexcept {
  IoCore& c = *core_;
  const size_t n = tls_->take_output({static_cast<uint8_t*>(c.tls_tx.data()), c.tls_tx.size()});
  if (n == 0) return false;
  c.iov[0].iov_base = c.tls_tx.data();
  c.iov[0].iov_len = n;
  c.iov_count = 1;
  c.iov_start = 0;
  return true;
}

// Feeds `n` received bytes of ciphertext (the receive buffer) to the session and parses the
// plaintext it gives; fails the pair on a session or PDU error.
void QueuePair::tls_receive(size_t n) noexcept {
  IoCore& c = *core_;
  if (n > 0) tls_->feed({static_cast<const uint8_t*>(c.rbuf.data()), n});
  RecvSink sink{*this};
  auto* plain = static_cast<uint8_t*>(tls_plain_.data());
  while (state_ == QpState::live) {
    auto got = tls_->read({plain, tls_plain_.size()});
    if (!got) {
      if (got.error() == tls::TlsErrc::peer_closed)
        fail(make_error_code(Errc::connection_closed), "TLS close_notify from the controller");
      else
        fail(make_error_code(Errc::protocol_error), ("TLS record: " + tls_->error_detail()).c_str());
      return;
    }
    if (*got == 0) break;
    fail_detail_ = nullptr;
    const Errc err = reader_.consume(plain, *got, sink).error;
    if (state_ != QpState::live) return;
    if (err != Errc::ok) {
      fail(make_error_code(err), fail_detail_ ? fail_detail_ : reader_.last_check().what);
      return;
    }
  }
}

}  // namespace nvmeof::tcp
