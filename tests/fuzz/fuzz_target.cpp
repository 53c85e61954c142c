// libFuzzer target: the embedded NVMe/TCP target, started in this process, fed over a real
// loopback socket. The first input byte picks how far a valid prologue takes the connection
// and what the rest of the input is:
//   bits 1:0  0: nothing (the input starts with its own ICReq), 1: past ICReq, 2: past ICReq and
//             an admin Connect, 3: past ICReq and an I/O queue Connect (queue 1 of a controller
//             whose admin queue is another connection)
//   bit 2/3   header / data digests in the prologue's ICReq
//   bit 4     a lazy peer: small receive window, nothing read until everything is sent
//   bit 5     the rest is a list of commands (command_record.hpp), which the harness sends as
//             capsules and whose R2Ts it answers; otherwise the rest is sent as it is. A list
//             of commands always starts past the ICReq (stage 0 is stage 1).
// Once the input is sent the write side stays open until every command the input carried got
// its completion or the target ended the connection: a command left waiting on an open
// connection is a failure. Only Asynchronous Event Requests may wait (on a queue that may be
// an admin queue), and, in raw input, commands whose data the target must ask for (the input
// may not hold it). Command lists are held to more: no command gets two completions or one it
// never sent, none behind a Disconnect that completed executes (completes with success), and
// an R2T stays inside its command's data.
// Then the write side is shut, and the target must close within a bound (no hang). Past a
// prologue every byte the target sends must parse as valid PDUs. After each input the target
// must still accept a fresh connection and bring up a controller (liveness), and no connection
// may have held more output than the backlog bound. Each input gets a target of its own, so an
// input means the same thing whenever it runs (the first controller is CNTLID 1).
//
// The waits are for events (a completion, the connection's end): the target runs in this
// process and answers a command, or ends its connection, as soon as it took it. The bounds on
// them count from the last byte that moved either way, so they end only a run whose target
// went silent with a command or a connection waiting, never one that is merely slow.
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "auth/messages.hpp"
#include "auth/secret.hpp"
#include "command_record.hpp"
#include "core/auth_command.hpp"
#include "nvmeof/target.hpp"
#include "target_client.hpp"

namespace {

using namespace nvmeof;
using namespace nvmeof::fuzz;
using nvmeof::test::Client;
using Bytes = std::vector<uint8_t>;
using Clock = std::chrono::steady_clock;

constexpr char kNqn[] = "nqn.2024-01.io.nvmeof:fuzz";
// A host whose Connects are asked to authenticate (DH-HMAC-CHAP).
constexpr char kAuthHostNqn[] = "nqn.2014-08.org.nvmexpress:uuid:fuzz-auth-host";
constexpr uint64_t kBacklogBound = 8u << 20;
constexpr int kSendWithinMs = 5000;
constexpr int kAnswerWithinMs = 5000;
constexpr int kCloseWithinMs = 5000;
constexpr uint16_t kFirstCid = 0x1000;
constexpr size_t kMaxRecords = 512;
constexpr uint32_t kInCapsuleLimit = 8192;  // what the harness puts in a capsule at most

std::unique_ptr<Target> g_target;
uint16_t g_port = 0;

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_target: %s\n", what);
  std::abort();
}

void start_target() {
  TargetOptions o;
  o.ports.assign(1, TargetPort{"127.0.0.1", "0", AnaState::optimized});
  o.subsystems[0].nqn = kNqn;
  o.subsystems[0].namespaces[0].size_bytes = 1u << 20;
  TargetHost h;
  h.nqn = kAuthHostNqn;
  h.dhchap_key = auth::format_secret(auth::Secret{auth::HashId::none, Bytes(32, 0x5c)});
  o.subsystems[0].hosts.push_back(h);
  o.max_queue_depth = 128;
  o.cqt_ms = 1;
  auto t = Target::start(o);
  if (!t) fail("target did not start");
  g_target = std::move(*t);
  g_port = g_target->port_number(0);
}

nvmf_connect_data connect_data(uint16_t cntlid, const char* hostnqn) {
  nvmf_connect_data d{};
  std::memset(d.hostid, 0x5a, sizeof d.hostid);
  d.cntlid = cntlid;
  std::strncpy(d.subsysnqn, kNqn, sizeof d.subsysnqn - 1);
  std::strncpy(d.hostnqn, hostnqn, sizeof d.hostnqn - 1);
  return d;
}

// A command the harness sent, and what became of it.
struct Sent {
  Sqe sqe{};
  Bytes data;               // what the command transfers to the controller (R2Ts read it)
  bool may_wait = false;    // an AER: it may stay outstanding
  bool answered = false;
  NvmeStatus status{};
  uint32_t dw0 = 0;
};

// Builds record `r`'s capsule as command `cid`; `out` gets its PDU.
Sent build(const Record& r, uint16_t cid, const tcp::Negotiated& neg, unsigned stage, Bytes& out) {
  Sent s;
  Sqe& c = s.sqe;
  const auto family = static_cast<Family>(r.kind & 3);
  const auto data_mode = static_cast<DataMode>((r.kind >> 2) & 7);
  const unsigned sel = r.kind >> 6;
  static constexpr uint32_t kNsids[] = {1, 0, 0xffffffff, 2};
  Bytes payload;  // what a host-to-controller transfer starts with, when not only a pattern
  uint32_t len = pick(kLengths, r.len);
  switch (family) {
    case kAdmin: prep_command(c, pick(kAdminOps, r.pick), kNsids[sel]); break;
    case kIo: prep_command(c, pick(kIoOps, r.pick), kNsids[sel]); break;
    case kAnyOpcode: prep_command(c, r.pick, kNsids[sel]); break;
    case kFabrics: {
      const uint8_t type = r.pick < 0xf0 ? pick(kFabricsTypes, r.pick) : r.pick;
      prep_fabrics(c, type);
      c.cdw10 = r.cdw10;
      c.cdw11 = r.cdw11;
      c.cdw12 = r.cdw12;
      if (type == fctype::kConnect) {
        static constexpr uint16_t kQids[] = {0, 1, 2};
        const unsigned q = (r.aux >> 1) & 3;
        const auto qid = static_cast<uint16_t>(q < 3 ? kQids[q] : r.cdw10 >> 16);
        static constexpr uint16_t kCntlids[] = {0xffff, 1, 2};
        const auto cntlid = static_cast<uint16_t>(sel < 3 ? kCntlids[sel] : r.cdw12 & 0xffff);
        prep_connect(c, qid, 0, 0);
        c.cdw11 = r.cdw11;
        c.cdw12 = r.cdw12;
        const auto d = connect_data(cntlid, (r.kind & kAuthHostBit) ? kAuthHostNqn : test::kHostNqn);
        const auto* p = reinterpret_cast<const uint8_t*>(&d);
        payload.assign(p, p + sizeof d);
        if (data_mode == kNatural) len = sizeof d;
      } else if (type == fctype::kPropertyGet || type == fctype::kPropertySet) {
        static constexpr uint32_t kProps[] = {prop::kCap, prop::kCc, prop::kCsts};
        const uint32_t offset = sel < 3 ? kProps[sel] : r.cdw11;
        if (type == fctype::kPropertyGet)
          prep_property_get(c, offset, (r.aux & kAuxSize8) != 0);
        else
          prep_property_set(c, offset, r.cdw12, (r.aux & kAuxSize8) != 0);
      } else if (type == fctype::kAuthenticationSend) {
        if (r.aux & kAuxNegotiate) {
          auth::Negotiate n;
          n.tid = static_cast<uint16_t>(r.cdw12);
          n.hashes = {1, 2, 3};
          n.groups = {0, 1, 2, 3, 4, 5};
          payload = auth::encode(n);
          if (data_mode == kNatural) len = static_cast<uint32_t>(payload.size());
        }
        prep_auth_send(c, len);
      } else if (type == fctype::kAuthenticationReceive) {
        prep_auth_receive(c, len);
      }
      break;
    }
  }
  if (family != kFabrics) {
    c.cdw10 = r.cdw10;
    c.cdw11 = r.cdw11;
    c.cdw12 = r.cdw12;
  }
  c.cid = cid;
  s.may_wait = c.opcode == opcode::kAsyncEventRequest && stage != 3;
  const bool h2c = is_host_to_controller(c);
  uint32_t icd = 0;  // bytes in the capsule
  switch (data_mode) {
    case kNoData: set_sgl(c, sgl::kTransportDataBlock, 0, 0); break;
    case kNatural: {
      if (!h2c && !is_controller_to_host(c)) len = 0;
      const bool in_capsule = h2c && len <= kInCapsuleLimit;
      set_sgl(c, in_capsule ? sgl::kDataBlockOffset : sgl::kTransportDataBlock, 0, len);
      icd = in_capsule ? len : 0;
      break;
    }
    case kInCapsule:
    case kAtOffset:
    case kOverlong:
      len = std::min(len, kInCapsuleLimit);
      icd = data_mode == kOverlong ? len + 16 : len;
      set_sgl(c, sgl::kDataBlockOffset, data_mode == kAtOffset ? 16 : 0, len);
      break;
    case kByPdus: set_sgl(c, sgl::kTransportDataBlock, 0, len); break;
    case kPrp: c.flags = 0; break;
    case kKeyed: set_sgl(c, 0x40 /* keyed data block */, r.cdw12, len); break;
  }
  if (data_mode == kNatural || data_mode == kByPdus) {
    // What an R2T may ask for: the whole SGL length, whatever the target makes of it.
    s.data.assign(len, 0);
    for (uint32_t i = 0; i < len; ++i) s.data[i] = static_cast<uint8_t>(cid + i);
    if (!payload.empty() && len) std::memcpy(s.data.data(), payload.data(), std::min<size_t>(payload.size(), len));
  }
  Bytes icd_bytes(icd, 0);
  for (uint32_t i = 0; i < icd; ++i) icd_bytes[i] = static_cast<uint8_t>(cid ^ i);
  if (!payload.empty() && icd) std::memcpy(icd_bytes.data(), payload.data(), std::min<size_t>(payload.size(), icd));
  tcp::CapsuleCmd cap;
  const size_t hlen = tcp::fill_capsule_cmd(cap, c, icd, neg);
  out = test::encode_pdu(&cap, hlen, icd_bytes.data(), icd);
  return s;
}

// The commands of a raw input as the target's reader frames them (the same codec), each with
// where its capsule ends in the input.
struct Framed {
  uint16_t cid;
  bool may_wait;  // an AER, or a command whose data the target asks for by R2T
  size_t end;
};

struct Mirror {
  tcp::PduReader reader{tcp::Role::controller, UINT32_MAX};
  std::vector<Framed> cmds;
  unsigned stage = 0;
  uint8_t hpda = 0;  // the input's own ICReq's (stage 0)
  bool saw_icreq = false;
  size_t at = 0;

  void take(const uint8_t* hdr) {
    const auto type = static_cast<tcp::PduType>(hdr[0]);
    if (type == tcp::PduType::ic_req && !saw_icreq) {
      tcp::IcReq r;
      std::memcpy(&r, hdr, sizeof r);
      reader.set_negotiated(tcp::Negotiated{(r.digest & tcp::ic_digest::kHeader) != 0,
                                            (r.digest & tcp::ic_digest::kData) != 0, 0});
      hpda = r.hpda;
      saw_icreq = true;
    }
    if (type != tcp::PduType::capsule_cmd) return;
    Sqe c;
    std::memcpy(&c, hdr + sizeof(tcp::CommonHeader), sizeof c);
    const bool by_r2t = (c.flags & 0xc0) == sgl::kPsdtSgl && sgl_id(c) == sgl::kTransportDataBlock &&
                        sgl_length(c) > 0 && is_host_to_controller(c);
    const bool aer = c.opcode == opcode::kAsyncEventRequest && stage != 3;
    cmds.push_back({c.cid, by_r2t || aer, at});
  }
  Errc on_header(const uint8_t*, const tcp::HeaderCheck&, uint8_t*& dst) noexcept {
    dst = nullptr;
    return Errc::ok;
  }
  Errc on_pdu(const uint8_t* hdr, const tcp::HeaderCheck&) noexcept {
    take(hdr);
    return Errc::ok;
  }
  void frame(const uint8_t* p, size_t n) {
    while (at < n) {
      const auto [used, err] = reader.consume(p + at, n - at, *this, tcp::ConsumeUntil::pdu_end);
      at += used;
      if (err == Errc::data_digest_error) {  // the target answers that command with an error
        if (static_cast<tcp::PduType>(reader.header()[0]) == tcp::PduType::capsule_cmd)
          take(reader.header());
        continue;
      }
      if (err != Errc::ok) return;  // the target fails the connection here
    }
  }
};

// One connection's exchange: sends the input, reads and checks what comes back.
class Exchange {
 public:
  Exchange(int fd, bool lazy, tcp::PduReader* check, bool strict)
      : fd_(fd), lazy_(lazy), check_(check), strict_(strict) {}

  Bytes stream;                     // what is sent, in order
  std::vector<size_t> boundaries;   // where PDUs end in it (H2CData goes only there)
  std::map<uint16_t, Sent> sent;    // command lists: by CID, in sending order
  std::vector<uint16_t> order;      // command lists: CIDs in sending order
  const Mirror* mirror = nullptr;   // raw input
  // Stage 3 command lists: where in the stream a Disconnect goes to the admin queue instead.
  std::vector<size_t> admin_disconnects;
  Client* admin = nullptr;
  uint32_t maxh2cdata = 0;
  tcp::Negotiated neg{};

  void run() {
    const int fl = ::fcntl(fd_, F_GETFL);
    ::fcntl(fd_, F_SETFL, fl | O_NONBLOCK);
    // Each bound counts from the last byte that moved either way: a target that is slow with a
    // large input (75 MiB of replies under ASan, on a busy machine) is still answering.
    auto bound = std::chrono::milliseconds(kSendWithinMs);
    const char* late = "the target did not take the input";
    enum { sending, answering, closing } phase = sending;
    stalled_since_ = moved_ = Clock::now();
    for (;;) {
      if (ended_) {
        // By the target: whatever was outstanding ended with it. A command list knows why the
        // target may end it, and the target must have said so first.
        if (strict_ && phase != closing && !end_explained_)
          fail("the target ended the connection without a C2HTermReq, a completed Disconnect or "
               "an authentication outcome before it");
        return;
      }
      const auto now = Clock::now();
      if (phase == sending && sent_ == stream.size() && urgent_.empty() &&
          next_admin_ == admin_disconnects.size()) {
        phase = answering;
        bound = std::chrono::milliseconds(kAnswerWithinMs);
        moved_ = now;
        late = "a command was left unanswered on a connection the target kept open";
      }
      if (phase == answering && (ended_ || all_answered())) {
        ::shutdown(fd_, SHUT_WR);
        shut_ = true;
        phase = closing;
        bound = std::chrono::milliseconds(kCloseWithinMs);
        moved_ = now;
        late = "the target did not close its connection after the input ended";
      }
      if (now - moved_ > bound) {
        if (phase == answering) report_unanswered();
        fail(late);
      }
      // A lazy peer reads only once it has sent everything, or once the target stopped taking.
      const bool reading = !lazy_ || phase != sending || now - stalled_since_ > std::chrono::milliseconds(200);
      const bool writing = !shut_ && !ended_ &&
                           (sent_ < stream.size() || !urgent_.empty() || next_admin_ < admin_disconnects.size());
      pollfd p{fd_, static_cast<short>((reading ? POLLIN : 0) | (writing ? POLLOUT : 0)), 0};
      if (::poll(&p, 1, 50) < 0) continue;
      if (writing && (p.revents & POLLOUT)) send_some(now);
      if (reading && (p.revents & (POLLIN | POLLHUP | POLLERR))) receive();
    }
  }

  // PduReader handler for what the target sends.
  Errc on_header(const uint8_t*, const tcp::HeaderCheck&, uint8_t*& dst) noexcept {
    dst = nullptr;
    return Errc::ok;
  }
  Errc on_pdu(const uint8_t* hdr, const tcp::HeaderCheck&) noexcept {
    switch (static_cast<tcp::PduType>(hdr[0])) {
      case tcp::PduType::ic_resp: {
        // Stage 0: the digests the input's own ICReq asked for, now in force.
        tcp::IcResp r;
        std::memcpy(&r, hdr, sizeof r);
        check_->set_negotiated(tcp::Negotiated{(r.digest & tcp::ic_digest::kHeader) != 0,
                                               (r.digest & tcp::ic_digest::kData) != 0,
                                               mirror ? mirror->hpda : uint8_t{0}});
        break;
      }
      case tcp::PduType::capsule_resp: {
        tcp::CapsuleResp r;
        std::memcpy(&r, hdr, sizeof r);
        completed(r.cqe.cid, r.cqe.status(), r.cqe.dw0);
        break;
      }
      case tcp::PduType::c2h_data: {
        tcp::DataHeader d;
        std::memcpy(&d, hdr, sizeof d);
        if (strict_ && !sent.count(d.cccid)) fail("C2HData for a command never sent");
        if (d.ch.flags & tcp::pdu_flag::kSuccess) completed(d.cccid, status::kSuccess);
        break;
      }
      case tcp::PduType::r2t: {
        tcp::R2t t;
        std::memcpy(&t, hdr, sizeof t);
        if (strict_) answer_r2t(t);
        break;
      }
      case tcp::PduType::c2h_term_req: end_explained_ = true; break;
      default: break;
    }
    return Errc::ok;
  }

 private:
  void send_some(Clock::time_point now) {
    // H2CData answers go between the input's PDUs, never inside one.
    const bool at_boundary = std::binary_search(boundaries.begin(), boundaries.end(), sent_) || sent_ == 0;
    if (!urgent_.empty() && at_boundary) {
      Bytes& b = urgent_.front();
      const ssize_t n = ::send(fd_, b.data() + urgent_off_, b.size() - urgent_off_, MSG_NOSIGNAL);
      if (n > 0) {
        urgent_off_ += static_cast<size_t>(n);
        stalled_since_ = moved_ = now;
        if (urgent_off_ == b.size()) {
          urgent_.pop_front();
          urgent_off_ = 0;
        }
      } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
        shut_ = true;  // the target closed on us: read what it said
      }
      return;
    }
    if (next_admin_ < admin_disconnects.size() && admin_disconnects[next_admin_] == sent_) {
      // The association ends under what follows on the I/O queue; the I/O queue's host hears
      // of it on the admin queue, so the I/O connection may end without a word.
      Sqe d;
      prep_fabrics(d, fctype::kDisconnect);
      d.cid = 0xfff0;
      set_sgl(d, sgl::kTransportDataBlock, 0, 0);
      const Bytes b = admin->capsule_bytes(d);
      admin->send_raw(b.data(), b.size());
      ++next_admin_;
      end_explained_ = true;
      return;
    }
    if (sent_ == stream.size()) return;
    auto next = std::upper_bound(boundaries.begin(), boundaries.end(), sent_);
    size_t until = urgent_.empty() || next == boundaries.end() ? stream.size() : *next;
    if (next_admin_ < admin_disconnects.size()) until = std::min(until, admin_disconnects[next_admin_]);
    const ssize_t n = ::send(fd_, stream.data() + sent_, until - sent_, MSG_NOSIGNAL);
    if (n > 0) {
      sent_ += static_cast<size_t>(n);
      stalled_since_ = moved_ = now;
    } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
      shut_ = true;
    }
  }

  void receive() {
    uint8_t buf[65536];
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) {
      if (n == 0 || (errno != EAGAIN && errno != EINTR)) ended_ = true;
      return;
    }
    moved_ = Clock::now();
    if (!check_ || unparsed_) return;
    size_t off = 0;
    while (off < static_cast<size_t>(n)) {
      const auto [used, err] = check_->consume(buf + off, static_cast<size_t>(n) - off, *this);
      off += used;
      if (err == Errc::ok) continue;
      // Stage 0 inputs bring their own ICReq, whatever it says: their output is not held to
      // parse (nor, then, their commands to be answered).
      if (strict_ || mirror->stage != 0) fail("the target sent a malformed PDU");
      unparsed_ = true;
      return;
    }
  }

  void completed(uint16_t cid, NvmeStatus st, uint32_t dw0 = 0) {
    if (!strict_) {
      ++answers_[cid];
      return;
    }
    auto it = sent.find(cid);
    if (it == sent.end()) fail("a completion for a command never sent");
    if (it->second.answered) fail("two completions for one command");
    it->second.answered = true;
    it->second.status = st;
    it->second.dw0 = dw0;
    const Sqe& c = it->second.sqe;
    if (ends_queue(it->second)) end_explained_ = true;
    // A Disconnect that completed deleted its queue: nothing behind it may execute.
    if (c.opcode == opcode::kFabrics && fabrics_type(c) == fctype::kDisconnect && st.is_success()) {
      const auto pos = std::find(order.begin(), order.end(), cid);
      for (auto j = pos + 1; j != order.end(); ++j) {
        const Sent& later = sent.at(*j);
        if (later.answered && later.status.is_success()) fail("a command behind a completed Disconnect executed");
      }
      disconnected_at_ = static_cast<size_t>(pos - order.begin());
    } else if (disconnected_at_ != SIZE_MAX && st.is_success()) {
      const auto pos = static_cast<size_t>(std::find(order.begin(), order.end(), cid) - order.begin());
      if (pos > disconnected_at_) fail("a command behind a completed Disconnect executed");
    }
  }

  // Whether this completion may be the last thing the host hears before the target ends the
  // connection: a Disconnect, an authentication step (a failed one ends the queue), a Connect
  // or Set Features that set a keep-alive timeout, a Connect that must authenticate (its
  // timer may end it).
  bool ends_queue(const Sent& s) const {
    const Sqe& c = s.sqe;
    if (c.opcode == opcode::kSetFeatures)
      return s.status.is_success() && (c.cdw10 & 0xff) == feature::kKeepAliveTimer && c.cdw11 != 0;
    if (c.opcode != opcode::kFabrics) return false;
    switch (fabrics_type(c)) {
      case fctype::kDisconnect: return s.status.is_success();
      case fctype::kAuthenticationSend:
      case fctype::kAuthenticationReceive: return true;
      case fctype::kConnect:
        return s.status.is_success() && ((c.cdw12 != 0 && (c.cdw10 >> 16) == 0) || (s.dw0 & kAuthReqAtr));
      default: return false;
    }
  }

  void answer_r2t(const tcp::R2t& t) {
    auto it = sent.find(t.cccid);
    if (it == sent.end() || it->second.answered) fail("an R2T for a command not outstanding");
    const Bytes& data = it->second.data;
    if (uint64_t{t.r2to} + t.r2tl > data.size() || t.r2tl == 0) fail("an R2T outside its command's data");
    const uint32_t chunk = maxh2cdata ? maxh2cdata : t.r2tl;
    for (uint32_t off = 0; off < t.r2tl; off += chunk) {
      const uint32_t n = std::min(chunk, t.r2tl - off);
      tcp::DataHeader h;
      const size_t hlen = tcp::fill_h2c_data(h, t.cccid, t.ttag, t.r2to + off, n, off + n == t.r2tl, neg);
      urgent_.push_back(test::encode_pdu(&h, hlen, data.data() + t.r2to + off, n));
    }
  }

  bool all_answered() const {
    if (!check_ || unparsed_) return true;
    if (strict_) {
      for (const auto& [cid, s] : sent)
        if (!s.answered && !s.may_wait) return false;
      return true;
    }
    std::map<uint16_t, unsigned> expected;
    for (const Framed& f : mirror->cmds)
      if (f.end <= sent_ && !f.may_wait) ++expected[f.cid];
    for (const auto& [cid, n] : expected) {
      auto it = answers_.find(cid);
      if (it == answers_.end() || it->second < n) return false;
    }
    return true;
  }

  void report_unanswered() const {
    if (strict_) {
      for (const uint16_t cid : order) {
        const Sent& s = sent.at(cid);
        if (s.answered || s.may_wait) continue;
        std::fprintf(stderr, "fuzz_target: unanswered: cid 0x%x opcode 0x%02x fctype 0x%02x\n", cid,
                     s.sqe.opcode, fabrics_type(s.sqe));
      }
      return;
    }
    for (const Framed& f : mirror->cmds) {
      if (f.end > sent_ || f.may_wait) continue;
      auto it = answers_.find(f.cid);
      std::fprintf(stderr, "fuzz_target: cid 0x%x sent, %u completions for that cid\n", f.cid,
                   it == answers_.end() ? 0u : it->second);
    }
  }

  int fd_;
  bool lazy_;
  tcp::PduReader* check_;
  bool strict_;  // a command list: every command is known
  size_t sent_ = 0;
  size_t next_admin_ = 0;  // admin_disconnects done
  std::deque<Bytes> urgent_;
  size_t urgent_off_ = 0;
  bool shut_ = false;
  bool ended_ = false;
  bool unparsed_ = false;
  bool end_explained_ = false;  // command lists: a reason the target may end the connection
  size_t disconnected_at_ = SIZE_MAX;
  std::map<uint16_t, unsigned> answers_;  // raw input: completions per CID
  Clock::time_point stalled_since_;  // the last byte sent (a lazy peer starts reading 200 ms on)
  Clock::time_point moved_;          // the last byte sent or received
};

void check_alive() {
  Client c;
  if (!c.open_admin(g_port, kNqn)) fail("the target no longer brings up a controller");
  if (!c.identify(cns::kController).ok) fail("the target no longer answers Identify");
  const PortStats st = g_target->stats(0);
  if (st.max_output_backlog > kBacklogBound) fail("a connection held more output than the bound");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t mode = data[0];
  const bool commands = (mode & kModeCommands) != 0;
  const unsigned stage = commands && (mode & 3) == 0 ? 1 : mode & 3;
  const bool hd = (mode & 4) != 0, dd = (mode & 8) != 0, lazy = (mode & 16) != 0;
  ++data;
  --size;

  start_target();
  {
    Client admin;  // stage 3: the controller the input's queue joins
    if (stage == 3 && !admin.open_admin(g_port, kNqn)) fail("no controller for the I/O queue");
    Client c;
    if (lazy) c.set_receive_buffer(16 * 1024);
    if (!c.connect(g_port)) fail("the target refused a connection");
    std::unique_ptr<tcp::PduReader> check = std::make_unique<tcp::PduReader>(tcp::Role::host, 1u << 20);
    uint32_t maxh2cdata = 0;
    if (stage >= 1) {
      const auto ic = c.ic(hd, dd);
      if (!ic) fail("no ICResp");
      maxh2cdata = ic->maxh2cdata;
      if (stage == 2 && !c.connect_queue(kNqn, 0).status().is_success()) fail("admin Connect refused");
      if (stage == 3 && !c.connect_queue(kNqn, 1, admin.cntlid()).status().is_success())
        fail("I/O queue Connect refused");
      check->set_negotiated(tcp::Negotiated{hd, dd, 0});
    }
    Exchange x(c.fd(), lazy, check.get(), commands);
    x.admin = &admin;
    Mirror mirror;
    x.maxh2cdata = maxh2cdata;
    x.neg = tcp::Negotiated{hd, dd, 0};
    if (commands) {
      const size_t n = std::min(size / sizeof(Record), kMaxRecords);
      for (size_t i = 0; i < n; ++i) {
        Record r;
        std::memcpy(&r, data + i * sizeof r, sizeof r);
        const auto cid = static_cast<uint16_t>(kFirstCid + i);
        if (stage == 3 && (r.kind & kOnAdminBit) && (r.kind & 3) == kFabrics && r.pick < 0xf0 &&
            pick(kFabricsTypes, r.pick) == fctype::kDisconnect) {
          x.admin_disconnects.push_back(x.stream.size());
          continue;
        }
        Bytes pdu;
        x.sent.emplace(cid, build(r, cid, x.neg, stage, pdu));
        x.order.push_back(cid);
        x.stream.insert(x.stream.end(), pdu.begin(), pdu.end());
        x.boundaries.push_back(x.stream.size());
      }
    } else {
      x.stream.assign(data, data + size);
      mirror.stage = stage;
      if (stage >= 1) mirror.reader.set_negotiated(tcp::Negotiated{hd, dd, 0});
      mirror.saw_icreq = stage >= 1;
      mirror.frame(data, size);
      x.mirror = &mirror;
    }
    x.run();
    c.close();
    check_alive();
  }
  g_target.reset();
  return 0;
}
