#include "target/tcp_connection.hpp"

#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "core/spin_governor.hpp"
#include "target/clock.hpp"
#include "target/controller.hpp"
#include "target/identify_data.hpp"
#include "target/port.hpp"
#include "target/subsystem.hpp"
#include "target/target_core.hpp"

namespace nvmeof::target {
namespace {

constexpr size_t kRecvChunk = 128 * 1024;
// The output a connection may hold for a peer that does not read. A command is taken only when
// its largest possible reply still fits, so the bound holds before execution, not after a batch.
constexpr size_t kMaxBacklog = 8u << 20;
// Headers, R2Ts and completions that arrive without a new command (held writes, events).
constexpr size_t kBacklogSlack = 64u << 10;
// A closing connection's last words (a Disconnect's completion, a C2HTermReq, and every reply
// queued before them) go out whole before its FIN: it waits for the host to take them as long as
// the host keeps taking some within this long. After the FIN, the host gets kLingerNs to close
// before we do.
constexpr uint64_t kClosingStallNs = 2'000'000'000;
constexpr uint64_t kLingerNs = 100'000'000;
constexpr NvmeStatus kTransientTransportError = NvmeStatus::make(Sct::generic, 0x22);

}  // namespace

TcpConnection::TcpConnection(TargetCore& core, Port& port, int fd, uint64_t id, std::string peer,
                             std::string local_addr)
    : core_(core),
      port_(port),
      fd_(fd),
      id_(id),
      peer_(std::move(peer)),
      local_addr_(std::move(local_addr)),
      reader_(tcp::Role::controller, kAdminInCapsuleData),
      icd_limit_(kAdminInCapsuleData),
      max_transfer_(core.max_transfer()),
      spin_ns_(core.opts.poll == TargetPoll::busy       ? UINT64_MAX
               : core.opts.poll == TargetPoll::adaptive ? uint64_t{core.opts.poll_spin_us} * 1000
                                                        : 0) {
  efd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  rbuf_.resize(kRecvChunk);
}

TcpConnection::~TcpConnection() {
  if (fd_ >= 0) ::close(fd_);
  if (efd_ >= 0) ::close(efd_);
}

void TcpConnection::request_close(CloseKind k) noexcept {
  uint8_t cur = close_req_.load(std::memory_order_acquire);
  for (;;) {
    const auto c = static_cast<CloseKind>(cur);
    // A connection that lingers behind a partition after its association ended must still obey
    // a stop or a reset.
    const bool raise = c == CloseKind::none || (c == CloseKind::association && k != CloseKind::association);
    if (!raise) break;
    if (close_req_.compare_exchange_weak(cur, static_cast<uint8_t>(k), std::memory_order_acq_rel)) break;
  }
  wake();
}

void TcpConnection::wake() noexcept {
  woken_.store(true, std::memory_order_release);
  const uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(efd_, &one, sizeof one);
}

void TcpConnection::post_completion(uint16_t slot, uint16_t cid, NvmeStatus st) {
  {
    std::lock_guard lock(posted_mu_);
    posted_.push_back({slot, cid, st});
  }
  has_posted_.store(true, std::memory_order_release);
  wake();
}

void TcpConnection::post_event(uint32_t dw0) {
  {
    std::lock_guard lock(posted_mu_);
    posted_events_.push_back(dw0);
  }
  has_posted_.store(true, std::memory_order_release);
  wake();
}

void TcpConnection::log(const char* what, const char* detail) const {
  std::fprintf(stderr, "nvmeof-target: %s conn %llu from %s: %s%s%s\n", port_.address().c_str(),
               static_cast<unsigned long long>(id_), peer_.c_str(), what, detail ? ": " : "",
               detail ? detail : "");
}

void TcpConnection::run() noexcept {
  CloseKind why = CloseKind::none;
  const char* reason = "closed by the host";
  uint64_t last_work_ns = 0;
  // An adaptive spin that lost its CPU stops, and none starts for a while: the thread sleeps in
  // ppoll and is woken like a sleeping one (core/spin_governor.hpp). A busy target keeps spinning.
  detail::SpinGovernor governor;
  // A busy target spins without end only on a live I/O queue. Its admin queue (keep-alives,
  // log pages) and a queue still waiting for its Connect spin like an adaptive one: a second
  // thread that never sleeps on the I/O queue's CPU would take the CPU from it for a whole
  // scheduler slice (4 ms at HZ=250) every so often.
  const uint64_t adaptive_ns = uint64_t{core_.opts.poll_spin_us} * 1000;
  uint32_t idle_passes = 0;
  for (;;) {
    passes_.store(passes_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    // A connection already closing finishes that on its own terms (its last words out, then
    // the FIN) when its association ends meanwhile: the admin queue's own Disconnect ends the
    // association, and its completion must not be cut off by that. Stop and reset still win.
    why = drain_wakeups();
    if (why != CloseKind::none && !(why == CloseKind::association && phase_ == Phase::closing)) {
      reason = why == CloseKind::reset ? "reset (fault injection)"
               : why == CloseKind::stop ? "target stopping" : "association ended";
      break;
    }
    const uint64_t now = now_ns();
    governor.turn_start(now);
    blackholed_ = port_.blackholed();
    partitioned_ = port_.partitioned();
    run_due(now);
    bool progress = false;
    if (!blackholed_ && !partitioned_) {
      if (!backlog_full() || phase_ == Phase::closing) {
        const RecvResult r = receive();
        if (r == RecvResult::closed) break;
        progress = r == RecvResult::progress;
      }
      note_backlog();
      if (!flush()) {
        reason = "send failed";
        break;
      }
      if (phase_ == Phase::closing) {
        const size_t pending = backlog();
        if (pending == 0 && !write_shut_) {
          wire_close();
          ::shutdown(fd_, SHUT_WR);
          write_shut_ = true;
          closing_deadline_ = now + kLingerNs;
        } else if (pending < closing_backlog_) {
          closing_deadline_ = now + kClosingStallNs;  // the host reads: it gets the rest
        }
        closing_backlog_ = pending;
        if (now > closing_deadline_) {
          reason = closing_why_;
          break;
        }
      }
    }
    // After the receive: a thread held off its CPU past KATO first reads the Keep Alive that
    // waited in its socket. A fault that keeps commands from arriving (nothing is read) still
    // ends the controller at KATO, as on a real target.
    if (now > kato_deadline()) {
      why = CloseKind::association;
      reason = "keep-alive timeout";
      port_.counters().keep_alive_expiries.fetch_add(1, std::memory_order_relaxed);
      break;
    }
    // Polling: the next pass is the next non-blocking receive. A wake-up from ppoll costs more
    // than the gap between a completion and the next command of a closed loop, and every pass
    // still looks at close requests, posted completions, faults and deadlines. A busy spinner
    // never consults the governor, so its passes skip the second clock read.
    const bool busy = spin_ns_ == UINT64_MAX && qid_ != 0 && ctrl_;
    if (progress) {
      last_work_ns = now;
      if (!busy) governor.turn_end(now_ns());
      continue;
    }
    const uint64_t spin = busy ? UINT64_MAX : spin_ns_ == UINT64_MAX ? adaptive_ns : spin_ns_;
    if (spin && now - last_work_ns < spin && can_spin() && (busy || governor.may_spin(now))) {
      // A busy spinner that shares its CPU (several I/O queues, or the host's own threads)
      // lets the other runnable thread in between its idle passes instead of after a slice:
      // every 64 idle passes (tens of microseconds), so that a command rarely waits on a yield.
      if (busy) {
        if ((++idle_passes & 63) == 0) ::sched_yield();
      } else {
        governor.turn_end(now_ns());
      }
      continue;
    }
    governor.stopped();
    const short rev = wait_for_events(now);
    wakeups_.store(wakeups_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    // Not reading while blackholed, but a host that gives up and closes must still be noticed
    // (and its teardown timed for the held writes). A partition looks at nothing.
    if (blackholed_ && !partitioned_ && (rev & (POLLRDHUP | POLLHUP | POLLERR))) {
      reason = "closed by the host while blackholed";
      break;
    }
  }
  if (core_.opts.log_connections) log("closed", reason);
  stop_serving();
  const CloseKind k = close_request();
  if (k != CloseKind::stop && k != CloseKind::reset) linger_while_partitioned();
  if (k != CloseKind::reset && !partitioned_ && !write_shut_) wire_close();  // a reset sends none
  close_socket();
}

CloseKind TcpConnection::drain_wakeups() {
  // A load first: an exchange is a locked write on every idle pass of a spinning thread.
  if (woken_.load(std::memory_order_relaxed) && woken_.exchange(false, std::memory_order_acq_rel)) {
    uint64_t v;
    [[maybe_unused]] auto n = ::read(efd_, &v, sizeof v);
  }
  const auto k = static_cast<CloseKind>(close_req_.load(std::memory_order_acquire));
  if (k != CloseKind::none) return k;
  if (has_posted_.load(std::memory_order_relaxed) &&
      has_posted_.exchange(false, std::memory_order_acq_rel)) {
    std::vector<Posted> done;
    std::vector<uint32_t> events;
    {
      std::lock_guard lock(posted_mu_);
      done.swap(posted_);
      events.swap(posted_events_);
    }
    for (const auto& p : done) {
      if (p.slot >= slots_.size()) continue;
      Slot& s = *slots_[p.slot];
      if (s.state == SlotState::held && s.sqe.cid == p.cid) complete(s, p.st);
    }
    if (qid_ == 0 && ctrl_)
      for (const uint32_t e : events) {
        // Notices the host did not ask for, or of a kind whose log it has not read since the
        // last one, are not sent (the change stays in the log it will read).
        if (e == kNsAttrChangedEvent) {
          if (!(ctrl_->aec & kAecNsAttr) || ctrl_->ns_notice_masked) continue;
          ctrl_->ns_notice_masked = true;
        } else if (e == kDiscoveryChangeEvent) {
          if (!(ctrl_->aec & kAecDiscoveryChange) || ctrl_->disc_notice_masked) continue;
          ctrl_->disc_notice_masked = true;
        }
        raise_event(e);
      }
  }
  if (qid_ == 0 && ctrl_ && !subsys_->is_discovery()) {
    const uint64_t c = port_.ana_chgcnt();
    if (c != seen_ana_chgcnt_) {
      seen_ana_chgcnt_ = c;
      raise_ana_event();
    }
  }
  return CloseKind::none;
}

uint64_t TcpConnection::kato_deadline() const noexcept {
  if (qid_ != 0 || !ctrl_ || ctrl_->kato_ms == 0) return UINT64_MAX;
  return ctrl_->last_command_ns() + static_cast<uint64_t>(ctrl_->kato_ms) * 1'000'000;
}

short TcpConnection::wait_for_events(uint64_t now) {
  short ev = 0;
  if (partitioned_) {
    // Not even POLLHUP: poll reports it whatever `events` asks, so the socket stays out.
  } else if (blackholed_) {
    ev = POLLRDHUP;
  } else {
    // With a full backlog the loop stops reading; polling for input would only spin.
    if ((phase_ != Phase::closing && !backlog_full()) || write_shut_) ev |= POLLIN;
    if (backlog() > 0) ev |= POLLOUT;
  }
  uint64_t deadline = kato_deadline();
  // Delayed commands wait for the backlog too (run_due), so their due time must not spin us.
  if (!delayed_.empty() && !backlog_full()) deadline = std::min(deadline, delayed_.begin()->first);
  if (phase_ == Phase::closing) deadline = std::min(deadline, closing_deadline_);
  deadline = std::min(deadline, auth_deadline_ns_);
  timespec ts{};
  timespec* tsp = nullptr;
  if (deadline != UINT64_MAX) {
    const uint64_t d = deadline > now ? deadline - now : 0;
    ts.tv_sec = static_cast<time_t>(d / 1'000'000'000);
    ts.tv_nsec = static_cast<long>(d % 1'000'000'000);
    tsp = &ts;
  }
  pollfd fds[2] = {{partitioned_ ? -1 : fd_, ev, 0}, {efd_, POLLIN, 0}};
  if (::ppoll(fds, 2, tsp, nullptr) <= 0) return 0;
  return fds[0].revents;
}

bool TcpConnection::can_spin() const noexcept {
  // Only while the socket is read and nothing waits for room to send: a fault, a closing
  // connection or a peer that does not read are waited for in ppoll.
  return !blackholed_ && !partitioned_ && phase_ != Phase::closing && backlog() == 0;
}

bool TcpConnection::backlog_full() const noexcept {
  // An empty backlog always takes a command: a transfer limit above the bound must not stall.
  const size_t pending = backlog();
  return pending > 0 && pending + max_transfer_ + kBacklogSlack > kMaxBacklog;
}

void TcpConnection::note_backlog() noexcept {
  const size_t b = backlog();
  if (b <= max_backlog_seen_) return;
  max_backlog_seen_ = b;
  auto& peak = port_.counters().max_output_backlog;
  uint64_t cur = peak.load(std::memory_order_relaxed);
  while (cur < b && !peak.compare_exchange_weak(cur, b, std::memory_order_relaxed)) {
  }
}

TcpConnection::RecvResult TcpConnection::receive() {
  if (rbuf_pos_ == rbuf_len_) {
    const ssize_t n = wire_recv(rbuf_.data(), kRecvChunk);
    if (n == 0) return RecvResult::closed;
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return RecvResult::idle;
      return RecvResult::closed;
    }
    if (phase_ == Phase::closing) return RecvResult::progress;  // discarded: we are leaving
    rbuf_pos_ = 0;
    rbuf_len_ = static_cast<size_t>(n);
  }
  Handler h{*this};
  const size_t start = rbuf_pos_;
  while (rbuf_pos_ < rbuf_len_ && phase_ != Phase::closing) {
    // One PDU at a time, each only while the output has room for the largest reply it can
    // cause; the rest of the chunk waits here until the peer reads.
    if (reader_.at_boundary() && backlog_full()) break;
    term_what_ = nullptr;
    const auto [used, err] =
        reader_.consume(rbuf_.data() + rbuf_pos_, rbuf_len_ - rbuf_pos_, h, tcp::ConsumeUntil::pdu_end);
    rbuf_pos_ += used;
    if (err == Errc::ok || phase_ == Phase::closing) continue;
    if (err == Errc::data_digest_error) {
      on_data_digest_error();
      continue;
    }
    if (err == Errc::peer_terminated) {
      log("host sent H2CTermReq", "closing");
      return RecvResult::closed;
    }
    if (term_what_) {
      tcp::CommonHeader ch;
      std::memcpy(&ch, reader_.header(), sizeof ch);
      fail_connection(term_fes_, term_fei_, term_what_, ch.hlen);
    } else {
      // Only a header that passed the common checks was read whole.
      const tcp::HeaderCheck& hc = reader_.last_check();
      const bool whole = err == Errc::header_digest_error || err == Errc::unsupported ||
                         (hc.fes == tcp::Fes::invalid_header_field && hc.fei == 16);
      fail_connection(hc.fes, hc.fei, hc.what, whole ? hc.header_total : sizeof(tcp::CommonHeader));
    }
  }
  if (phase_ == Phase::closing) rbuf_pos_ = rbuf_len_;
  return rbuf_pos_ != start ? RecvResult::progress : RecvResult::idle;
}

bool TcpConnection::flush() {
  // Nothing to send (most passes of a polling thread): no work at all.
  if (out_.size() == 0 && !tls_) return true;
  while (out_head_ < out_.size()) {
    const ssize_t n = wire_send(out_.data() + out_head_, out_.size() - out_head_);
    if (n > 0) {
      out_head_ += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (out_head_ > (1u << 20)) {  // keep the pending tail near the front
        out_.consume_front(out_head_);
        out_head_ = 0;
      }
      return true;
    }
    return false;
  }
  out_.clear();
  out_head_ = 0;
  out_.shrink_if_idle(16u << 20);
  // TLS: ciphertext the socket did not take yet.
  if (wire_pending() > 0 && wire_send(nullptr, 0) < 0 && errno != EAGAIN && errno != EWOULDBLOCK &&
      errno != EINTR)
    return false;
  return true;
}

void TcpConnection::stop_serving() {
  // A Disconnect stops serving before the loop ends; the first moment is the one that counts.
  uint64_t none = 0;
  teardown_ns_.compare_exchange_strong(none, now_ns(), std::memory_order_acq_rel);
  if (ctrl_) {
    if (qid_ == 0) {
      subsys_->remove_controller(ctrl_.get());
      ctrl_->tear_down();
    }
    ctrl_->queue_stopped(qid_, this);
    ctrl_.reset();
  }
}

void TcpConnection::linger_while_partitioned() {
  for (;;) {
    const CloseKind k = close_request();
    if (k == CloseKind::stop || k == CloseKind::reset || !port_.partitioned()) return;
    pollfd pfd{efd_, POLLIN, 0};
    ::ppoll(&pfd, 1, nullptr, nullptr);
    woken_.store(false, std::memory_order_release);
    uint64_t v;
    [[maybe_unused]] auto n = ::read(efd_, &v, sizeof v);
  }
}

void TcpConnection::close_socket() {
  if (close_request() == CloseKind::reset)
    abort_socket(fd_);
  else
    ::close(fd_);
  fd_ = -1;
  port_.counters().live_connections.fetch_sub(1, std::memory_order_relaxed);
  finished_.store(true, std::memory_order_release);
}

Errc TcpConnection::protocol_error(tcp::Fes fes, uint32_t fei, const char* what) noexcept {
  term_fes_ = fes;
  term_fei_ = fei;
  term_what_ = what;
  return Errc::protocol_error;
}

void TcpConnection::fail_connection(tcp::Fes fes, uint32_t fei, const char* what, size_t offending_len) {
  port_.counters().errors.fetch_add(1, std::memory_order_relaxed);
  char detail[160];
  std::snprintf(detail, sizeof detail, "%s (FES 0x%02x, FEI %u): sent C2HTermReq, closing", what,
                static_cast<unsigned>(fes), fei);
  log("fatal protocol error", detail);
  const size_t kept = std::min(offending_len, tcp::kMaxTermReqData);
  tcp::TermReq t;
  tcp::fill_term_req(t, tcp::PduType::c2h_term_req, fes, fei, static_cast<uint32_t>(kept));
  out_.append(&t, sizeof t);
  out_.append(reader_.header(), kept);
  begin_closing("closed after a protocol error");
}

void TcpConnection::begin_closing(const char* why) {
  phase_ = Phase::closing;
  closing_why_ = why;
  closing_backlog_ = backlog();
  closing_deadline_ = now_ns() + kClosingStallNs;
}

void TcpConnection::on_data_digest_error() {
  port_.counters().errors.fetch_add(1, std::memory_order_relaxed);
  if (!digest_error_logged_) {
    digest_error_logged_ = true;
    log("data digest mismatch", "command completes with a transient transport error");
  }
  // The reader is back at a PDU boundary; only the command the data belonged to fails.
  const auto type = static_cast<tcp::PduType>(reader_.header()[0]);
  if (type == tcp::PduType::capsule_cmd) {
    Slot& s = *slots_[cur_slot_];
    s.early = kTransientTransportError;
    start_command(s, 0);
  } else if (type == tcp::PduType::h2c_data) {
    Slot& s = *slots_[cur_h2c_];
    s.poisoned = true;
    tcp::DataHeader d;
    std::memcpy(&d, reader_.header(), sizeof d);
    on_h2c_done(s, d.datal);
  }
}

Errc TcpConnection::on_header(const uint8_t* hdr, const tcp::HeaderCheck& hc, uint8_t*& dst) noexcept {
  // A handler that failed the connection mid-chunk: nothing after it is looked at.
  if (phase_ == Phase::closing) return Errc::protocol_error;
  const auto type = static_cast<tcp::PduType>(hdr[0]);
  switch (type) {
    case tcp::PduType::ic_req:
      if (phase_ != Phase::await_icreq) return protocol_error(tcp::Fes::sequence_error, 0, "second ICReq");
      return Errc::ok;
    case tcp::PduType::h2c_term_req: return Errc::peer_terminated;
    case tcp::PduType::capsule_cmd:
      if (phase_ == Phase::await_icreq) return protocol_error(tcp::Fes::sequence_error, 0, "capsule before ICReq");
      return on_capsule_header(hdr, hc, dst);
    case tcp::PduType::h2c_data:
      // While connecting, only the Connect's own data can be awaited (on_h2c_header checks).
      if (phase_ != Phase::live && phase_ != Phase::connecting)
        return protocol_error(tcp::Fes::sequence_error, 0, "H2CData before Connect");
      return on_h2c_header(hdr, dst);
    default: return protocol_error(tcp::Fes::invalid_header_field, 0, "unexpected PDU type");
  }
}

Errc TcpConnection::on_pdu(const uint8_t* hdr, const tcp::HeaderCheck& hc) noexcept {
  switch (static_cast<tcp::PduType>(hdr[0])) {
    case tcp::PduType::ic_req: on_ic_req(hdr); return Errc::ok;
    case tcp::PduType::capsule_cmd: start_command(*slots_[cur_slot_], hc.data_len); return Errc::ok;
    case tcp::PduType::h2c_data: on_h2c_done(*slots_[cur_h2c_], hc.data_len); return Errc::ok;
    default: return Errc::ok;
  }
}

void TcpConnection::on_ic_req(const uint8_t* hdr) {
  tcp::IcReq r;
  std::memcpy(&r, hdr, sizeof r);
  if (r.hpda > 31) {
    fail_connection(tcp::Fes::invalid_header_field, 10, "HPDA out of range", sizeof r);
    return;
  }
  const bool hd = (r.digest & tcp::ic_digest::kHeader) != 0;
  const bool dd = (r.digest & tcp::ic_digest::kData) != 0;
  send_neg_ = tcp::Negotiated{hd, dd, r.hpda};
  reader_.set_negotiated(tcp::Negotiated{hd, dd, 0});  // CPDA 0: no alignment asked of the host
  tcp::IcResp p;
  tcp::fill_ic_resp(p, 0, hd, dd, core_.opts.maxh2cdata);
  out_.append(&p, sizeof p);
  phase_ = Phase::await_connect;
}

Errc TcpConnection::on_capsule_header(const uint8_t* hdr, const tcp::HeaderCheck& hc, uint8_t*& dst) {
  Slot* s = alloc_slot();
  if (!s) return protocol_error(tcp::Fes::sequence_error, 0, "more commands outstanding than SQSIZE allows");
  std::memcpy(&s->sqe, hdr + sizeof(tcp::CommonHeader), sizeof s->sqe);
  s->state = SlotState::receiving;
  cur_slot_ = s->index;
  if (hc.data_len == 0) return Errc::ok;
  if (hc.data_len > icd_limit_) {
    // More than IOCCSZ allows: drop the data, fail only this command.
    s->early = NvmeStatus::make(Sct::generic, 0x0f, true);  // data SGL length invalid
    dst = nullptr;
    return Errc::ok;
  }
  s->buf.resize(hc.data_len);
  dst = s->buf.data();
  return Errc::ok;
}

Errc TcpConnection::on_h2c_header(const uint8_t* hdr, uint8_t*& dst) {
  tcp::DataHeader d;
  std::memcpy(&d, hdr, sizeof d);
  if (d.ttag >= slots_.size() || slots_[d.ttag]->state != SlotState::awaiting_data)
    return protocol_error(tcp::Fes::invalid_header_field, 10, "H2CData for an unknown TTAG");
  Slot& s = *slots_[d.ttag];
  if (d.cccid != s.sqe.cid) return protocol_error(tcp::Fes::invalid_header_field, 8, "H2CData CCCID does not match its TTAG");
  if (d.datao != s.received || d.datal > s.r2t_end - s.received)
    return protocol_error(tcp::Fes::data_out_of_range, 12, "H2CData outside the R2T");
  cur_h2c_ = s.index;
  dst = s.buf.data() + d.datao;
  return Errc::ok;
}

void TcpConnection::on_h2c_done(Slot& s, uint32_t datal) {
  s.received += datal;
  if (s.received < s.r2t_end) return;
  if (s.received < s.xfer_len) {
    send_r2t(s);
    return;
  }
  if (s.poisoned) {
    complete(s, kTransientTransportError);
    return;
  }
  command_ready(s);
}

void TcpConnection::put_header(const void* hdr, size_t hlen) {
  const bool hd = (static_cast<const tcp::CommonHeader*>(hdr)->flags & tcp::pdu_flag::kHdgst) != 0;
  uint8_t* p = out_.grow(hlen + (hd ? tcp::kDigestLen : 0));
  std::memcpy(p, hdr, hlen);
  if (hd) {
    const uint32_t d = tcp::header_digest(p, hlen);
    std::memcpy(p + hlen, &d, sizeof d);
  }
}

uint8_t* TcpConnection::begin_c2h(uint16_t cid, uint32_t len, bool success) {
  tcp::DataHeader h;
  const size_t hlen = tcp::fill_c2h_data(h, cid, 0, len, true, success, send_neg_);
  c2h_mark_ = out_.size();
  uint8_t* p = out_.grow(h.ch.plen);
  std::memcpy(p, &h, hlen);
  size_t at = hlen;
  if (h.ch.flags & tcp::pdu_flag::kHdgst) {
    const uint32_t d = tcp::header_digest(p, hlen);
    std::memcpy(p + at, &d, sizeof d);
    at += sizeof d;
  }
  std::memset(p + at, 0, h.ch.pdo - at);  // HPDA padding
  return p + h.ch.pdo;
}

void TcpConnection::seal_c2h(uint32_t len) {
  uint8_t* p = out_.data() + c2h_mark_;
  // The PDU starts wherever the output stream stands: copied out, never read in place.
  tcp::CommonHeader ch;
  std::memcpy(&ch, p, sizeof ch);
  if (!(ch.flags & tcp::pdu_flag::kDdgst)) return;
  const uint32_t d = detail::crc32c(p + ch.pdo, len);
  std::memcpy(p + ch.pdo + len, &d, sizeof d);
}

void TcpConnection::cancel_c2h() { out_.resize(c2h_mark_); }

void TcpConnection::send_r2t(Slot& s) {
  const uint32_t len = std::min(s.xfer_len - s.received, core_.opts.maxh2cdata);
  s.r2t_end = s.received + len;
  s.state = SlotState::awaiting_data;
  tcp::R2t r;
  const size_t hlen = tcp::fill_r2t(r, s.sqe.cid, s.index, s.received, len, send_neg_);
  put_header(&r, hlen);
}

void TcpConnection::complete(Slot& s, NvmeStatus st, uint32_t dw0, uint32_t dw1) {
  // Past our FIN nothing more can be said; the end of the connection ends the command.
  if (write_shut_) return free_slot(s);
  Cqe cqe{};
  cqe.dw0 = dw0;
  cqe.dw1 = dw1;
  cqe.sq_head = sq_flow_control_ ? static_cast<uint16_t>(sq_head_) : 0xffff;
  cqe.sq_id = qid_;
  cqe.cid = s.sqe.cid;
  cqe.status_field = st.cqe_field();
  tcp::CapsuleResp r;
  const size_t hlen = tcp::fill_capsule_resp(r, cqe, send_neg_);
  put_header(&r, hlen);
  free_slot(s);
}

TcpConnection::Slot* TcpConnection::alloc_slot() {
  if (free_.empty()) {
    // Room for a host that reuses a slot the moment its completion is queued, and more.
    const size_t limit = std::min<size_t>(2 * std::max<uint32_t>(sq_entries_, 32) + 16, 0xffff);
    if (slots_.size() >= limit) return nullptr;
    auto s = std::make_unique<Slot>();
    s->index = static_cast<uint16_t>(slots_.size());
    slots_.push_back(std::move(s));
    free_.push_back(slots_.back()->index);
  }
  Slot& s = *slots_[free_.back()];
  free_.pop_back();
  s.early = status::kSuccess;
  s.poisoned = false;
  s.in_capsule = false;
  s.h2c = false;
  s.xfer_len = s.received = s.r2t_end = 0;
  return &s;
}

void TcpConnection::free_slot(Slot& s) {
  // A Connect that ended without making the queue live lets the host try again.
  if (phase_ == Phase::connecting && s.index == connect_slot_) phase_ = Phase::await_connect;
  s.state = SlotState::free;
  s.buf.clear();
  s.buf.shrink_if_idle(1u << 20);
  free_.push_back(s.index);
}

}  // namespace nvmeof::target
