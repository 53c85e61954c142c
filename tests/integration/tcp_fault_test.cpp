// The TCP queue pair against a tiny scripted fake controller: every malformed or hostile answer
// fails the pair with the documented error, completes outstanding commands with a host path
// error, and never crashes. The faults during the set-up and those on an established pair are
// each a table of cases run by one test with the same checks. The faults on an established pair,
// short sends and a SUCCESS-flagged read each run twice: on an ordinary reactor (ring receives
// and sends) and on a busy one, where the pair calls recv() and send() on its socket itself every
// turn (direct_socket()).
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <iterator>
#include <system_error>
#include <thread>
#include <vector>

#include "core/fabrics_command.hpp"
#include "reactor/reactor.hpp"
#include "transport/tcp/pdu.hpp"
#include "transport/tcp/queue_pair.hpp"

using namespace nvmeof;
using namespace nvmeof::tcp;
using namespace std::chrono_literals;

namespace {

bool read_exact(int fd, void* buf, size_t n) {
  auto* p = static_cast<uint8_t*>(buf);
  while (n) {
    const ssize_t r = ::recv(fd, p, n, 0);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

void write_all(int fd, const void* buf, size_t n) {
  auto* p = static_cast<const uint8_t*>(buf);
  while (n) {
    const ssize_t r = ::send(fd, p, n, MSG_NOSIGNAL);
    if (r <= 0) return;
    p += r;
    n -= static_cast<size_t>(r);
  }
}

// One listening socket on an ephemeral port; one accepted connection runs `script`.
class FakeController {
 public:
  // `rcvbuf` > 0 shrinks the receive buffer (inherited by the accepted socket).
  explicit FakeController(std::function<void(int)> script, int rcvbuf = 0) {
    lfd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (rcvbuf > 0) ::setsockopt(lfd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(lfd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    socklen_t len = sizeof a;
    ::getsockname(lfd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    REQUIRE(::listen(lfd_, 4) == 0);
    thread_ = std::thread([this, script = std::move(script)] {
      const int fd = ::accept(lfd_, nullptr, nullptr);
      if (fd < 0) return;
      script(fd);
      // Keep the socket open until the host is done, so the host sees our PDU, not a close.
      uint8_t sink[4096];
      while (::recv(fd, sink, sizeof sink, 0) > 0) {
      }
      ::close(fd);
    });
  }
  ~FakeController() {
    ::shutdown(lfd_, SHUT_RDWR);
    thread_.join();
    ::close(lfd_);
  }
  std::string port() const { return std::to_string(port_); }

 private:
  int lfd_ = -1;
  uint16_t port_ = 0;
  std::thread thread_;
};

void answer_icreq(int fd) {
  IcReq req;
  REQUIRE(read_exact(fd, &req, sizeof req));
  IcResp resp;
  fill_ic_resp(resp, 0, false, false, 131072);
  write_all(fd, &resp, sizeof resp);
}

// A Connect answered with `dw0` (CNTLID, and the authentication flags above it).
void answer_connect_with(int fd, uint32_t dw0) {
  uint8_t cap[kCapsuleCmdHlen + 1024];
  REQUIRE(read_exact(fd, cap, sizeof cap));
  Cqe cqe{};
  cqe.cid = 0;
  cqe.dw0 = dw0;
  CapsuleResp r;
  fill_capsule_resp(r, cqe, Negotiated{});
  write_all(fd, &r, sizeof r);
}

void handshake(int fd) {
  answer_icreq(fd);
  answer_connect_with(fd, 1);  // CNTLID 1, no authentication
}

// Reads one capsule the host sends (no digests, no in-capsule data) and returns its CID.
uint16_t read_command(int fd) {
  CapsuleCmd c;
  if (!read_exact(fd, &c, sizeof c)) return 0xffff;
  return c.sqe.cid;
}

std::unique_ptr<Reactor> make_reactor(bool busy) {
  auto r = Reactor::create().value();
  r->set_spinning(busy);
  return r;
}

QpConfig config(const FakeController& f) {
  QpConfig c;
  c.trsvcid = f.port();
  c.qid = 1;
  c.depth = 8;
  c.cntlid = 1;
  c.subnqn = "nqn.fake";
  c.hostnqn = "nqn.host";
  c.in_capsule_data = 8192;
  c.connect_timeout = 2000ms;
  return c;
}

struct Outcome {
  bool done = false;
  NvmeStatus status;
};

void on_done(IoRequest& r, const Cqe& c) noexcept {
  auto* o = static_cast<Outcome*>(r.user);
  o->done = true;
  o->status = c.status();
}

// One 4 KiB read of LBA 0 into `buf` on `qp` through `req`, run to its completion (3 s at most).
Outcome read_block0(Reactor& reactor, nvmeof::QueuePair& qp, std::vector<uint8_t>& buf, IoRequest& req) {
  buf.assign(4096, 0);
  Outcome out;
  prep_read(req.cmd, 1, 0, 1);
  req.data = buf.data();
  req.data_len = 4096;
  req.on_complete = &on_done;
  req.user = &out;
  REQUIRE(qp.submit(req) == 0);
  REQUIRE(reactor.run_until([&] { return out.done; }, 3000ms));
  return out;
}

struct Failed final : QueuePairListener {
  std::error_code why;
  int calls = 0;
  void on_queue_failed(nvmeof::QueuePair&, std::error_code e) noexcept override {
    why = e;
    ++calls;
  }
};

// Connects, submits one 4 KiB read, lets `misbehave` answer it, and checks the pair failed with
// `want` and completed the read with a host path error.
void expect_failure(const std::function<void(int, uint16_t)>& misbehave, Errc want) {
  FakeController fake([&](int fd) {
    handshake(fd);
    const uint16_t cid = read_command(fd);
    misbehave(fd, cid);
  });
  const bool busy = GENERATE(false, true);
  INFO("busy reactor: " << busy);
  auto reactor = make_reactor(busy);
  auto qp = tcp::QueuePair::connect(*reactor, config(fake));
  REQUIRE(qp);
  Failed listener;
  (*qp)->set_listener(&listener);
  (*qp)->start();
  CHECK((*qp)->direct_socket() == busy);
  std::vector<uint8_t> buf;
  IoRequest req;
  const Outcome out = read_block0(*reactor, **qp, buf, req);
  CHECK(out.status == status::kHostPathError);
  CHECK((*qp)->error() == make_error_code(want));
  CHECK(listener.calls == 1);
  CHECK(listener.why == make_error_code(want));
  CHECK((*qp)->state() == QpState::closed);
  CHECK((*qp)->submit(req) == -ENOTCONN);
  qp->reset();
}

}  // namespace

namespace {

// A controller that misbehaves during the set-up (ICReq/ICResp, then Connect): the connect
// fails with the error each case names.
struct SetupFault {
  const char* what;
  void (*script)(int fd);
  std::error_code want;
  std::chrono::milliseconds connect_timeout;  ///< 0: config()'s
};

const std::vector<SetupFault>& setup_faults() {
  static const std::vector<SetupFault> cases = {
      {"a bad ICResp fails the set-up with malformed_pdu",
       [](int fd) {
         IcReq req;
         REQUIRE(read_exact(fd, &req, sizeof req));
         IcResp resp;
         fill_ic_resp(resp, 0, false, false, 131072);
         resp.ch.hlen = 64;  // wrong HLEN
         write_all(fd, &resp, sizeof resp);
       },
       make_error_code(Errc::malformed_pdu), {}},
      {"an ICResp with a tiny MAXH2CDATA is refused",
       [](int fd) {
         IcReq req;
         REQUIRE(read_exact(fd, &req, sizeof req));
         IcResp resp;
         fill_ic_resp(resp, 0, false, false, 512);
         write_all(fd, &resp, sizeof resp);
       },
       make_error_code(Errc::malformed_pdu), {}},
      {"a C2HTermReq instead of ICResp fails the set-up with peer_terminated",
       [](int fd) {
         IcReq req;
         REQUIRE(read_exact(fd, &req, sizeof req));
         TermReq t;
         fill_term_req(t, PduType::c2h_term_req, Fes::invalid_header_field, 0, 0);
         write_all(fd, &t, sizeof t);
       },
       make_error_code(Errc::peer_terminated), {}},
      {"a rejected Connect returns its NVMe status",
       [](int fd) {
         answer_icreq(fd);
         uint8_t cap[kCapsuleCmdHlen + 1024];
         REQUIRE(read_exact(fd, cap, sizeof cap));
         Cqe cqe{};
         cqe.status_field = status::kConnectInvalidHost.cqe_field();
         CapsuleResp r;
         fill_capsule_resp(r, cqe, Negotiated{});
         write_all(fd, &r, sizeof r);
       },
       make_error_code(status::kConnectInvalidHost), {}},
      {"a controller that never answers ICReq times out",
       [](int fd) {
         IcReq req;
         REQUIRE(read_exact(fd, &req, sizeof req));
       },
       make_error_code(Errc::timeout), 200ms},
      {"a Connect response that requires authentication fails the set-up without a key",
       [](int fd) {
         answer_icreq(fd);
         answer_connect_with(fd, kAuthReqAtr | 1);
       },
       make_error_code(Errc::authentication_required), {}},
  };
  return cases;
}

}  // namespace

TEST_CASE("a controller that misbehaves during the set-up fails the connect with the documented error") {
  const SetupFault& c = setup_faults().at(GENERATE(range(size_t{0}, setup_faults().size())));
  INFO(c.what);
  FakeController fake(c.script);
  auto reactor = Reactor::create().value();
  QpConfig cfg = config(fake);
  if (c.connect_timeout.count() > 0) cfg.connect_timeout = c.connect_timeout;
  auto qp = tcp::QueuePair::connect(*reactor, cfg);
  REQUIRE_FALSE(qp);
  CHECK(qp.error() == c.want);
}

TEST_CASE("a closed port is refused at once") {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(s);  // nobody listens there now
  auto reactor = Reactor::create().value();
  QpConfig c;
  c.trsvcid = std::to_string(ntohs(a.sin_port));
  c.subnqn = "nqn.fake";
  // Refused, not waited out: a connect that ran into its timeout fails with Errc::timeout.
  auto qp = tcp::QueuePair::connect(*reactor, c);
  REQUIRE_FALSE(qp);
  CHECK(qp.error() == make_error_code(Errc::connection_refused));
}

namespace {

// A controller that answers a read on an established pair with something hostile.
struct PairFault {
  const char* what;
  void (*misbehave)(int fd, uint16_t cid);
  Errc want;
};

const PairFault kPairFaults[] = {
    {"a PDU with a wrong HLEN fails the pair with malformed_pdu",
     [](int fd, uint16_t cid) {
       Cqe cqe{};
       cqe.cid = cid;
       CapsuleResp r;
       fill_capsule_resp(r, cqe, Negotiated{});
       r.ch.hlen = 20;
       write_all(fd, &r, sizeof r);
     },
     Errc::malformed_pdu},
    {"C2HData past the command's buffer fails the pair with malformed_pdu",
     [](int fd, uint16_t cid) {
       DataHeader d;
       fill_c2h_data(d, cid, 2048, 4096, true, true, Negotiated{});
       write_all(fd, &d, sizeof d);
       std::vector<uint8_t> junk(4096, 0xee);
       write_all(fd, junk.data(), junk.size());
     },
     Errc::malformed_pdu},
    {"a CapsuleResp for an unknown CID fails the pair with protocol_error",
     [](int fd, uint16_t cid) {
       Cqe cqe{};
       cqe.cid = static_cast<uint16_t>(cid + 5);
       CapsuleResp r;
       fill_capsule_resp(r, cqe, Negotiated{});
       write_all(fd, &r, sizeof r);
     },
     Errc::protocol_error},
    {"a C2HTermReq fails the pair with peer_terminated",
     [](int fd, uint16_t) {
       TermReq t;
       fill_term_req(t, PduType::c2h_term_req, Fes::invalid_header_field, 0, 0);
       write_all(fd, &t, sizeof t);
     },
     Errc::peer_terminated},
    {"an R2T for a read fails the pair with protocol_error",
     [](int fd, uint16_t cid) {
       R2t r;
       fill_r2t(r, cid, 1, 0, 4096, Negotiated{});
       write_all(fd, &r, sizeof r);
     },
     Errc::protocol_error},
    {"the controller closing the socket fails the pair with connection_closed",
     [](int fd, uint16_t) { ::shutdown(fd, SHUT_RDWR); }, Errc::connection_closed},
    {"the controller closing in the middle of a CapsuleResp fails the pair once",
     [](int fd, uint16_t cid) {
       Cqe cqe{};
       cqe.cid = cid;
       CapsuleResp r;
       fill_capsule_resp(r, cqe, Negotiated{});
       write_all(fd, &r, sizeof r / 2);
       ::shutdown(fd, SHUT_RDWR);
     },
     Errc::connection_closed},
    {"the controller closing in the middle of C2HData fails the pair once",
     [](int fd, uint16_t cid) {
       DataHeader d;
       fill_c2h_data(d, cid, 0, 4096, true, true, Negotiated{});
       write_all(fd, &d, sizeof d);
       std::vector<uint8_t> half(2048, 0x5a);
       write_all(fd, half.data(), half.size());
       ::shutdown(fd, SHUT_RDWR);
     },
     Errc::connection_closed},
};

}  // namespace

TEST_CASE("a hostile answer on an established pair fails it with the documented error") {
  const PairFault& f = kPairFaults[GENERATE(range(size_t{0}, std::size(kPairFaults)))];
  INFO(f.what);
  expect_failure(f.misbehave, f.want);
}

TEST_CASE("a good C2HData with SUCCESS completes the read without a CapsuleResp") {
  FakeController fake([](int fd) {
    handshake(fd);
    const uint16_t cid = read_command(fd);
    std::vector<uint8_t> data(4096);
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 7);
    // Two PDUs, the last with SUCCESS.
    DataHeader d;
    fill_c2h_data(d, cid, 0, 1000, false, false, Negotiated{});
    write_all(fd, &d, sizeof d);
    write_all(fd, data.data(), 1000);
    fill_c2h_data(d, cid, 1000, 3096, true, true, Negotiated{});
    write_all(fd, &d, sizeof d);
    write_all(fd, data.data() + 1000, 3096);
  });
  const bool busy = GENERATE(false, true);
  INFO("busy reactor: " << busy);
  auto reactor = make_reactor(busy);
  auto qp = tcp::QueuePair::connect(*reactor, config(fake));
  REQUIRE(qp);
  (*qp)->start();
  CHECK((*qp)->direct_socket() == busy);
  std::vector<uint8_t> buf;
  IoRequest req;
  const Outcome out = read_block0(*reactor, **qp, buf, req);
  CHECK(out.status.is_success());
  for (size_t i = 0; i < buf.size(); ++i) REQUIRE(buf[i] == static_cast<uint8_t>(i * 7));
  CHECK((*qp)->state() == QpState::live);
  (*qp)->close();
  REQUIRE(reactor->run_until([&] { return (*qp)->state() == QpState::closed; }, 2000ms));
  CHECK((*qp)->inflight_ops() == 0);
}

TEST_CASE("advance_iov resumes a short send at the right byte") {
  uint8_t a[10], b[20], c[5];
  iovec v[3] = {{a, sizeof a}, {b, sizeof b}, {c, sizeof c}};
  unsigned start = advance_iov(v, 0, 3, 4);
  CHECK(start == 0);
  CHECK(v[0].iov_base == a + 4);
  CHECK(v[0].iov_len == 6);
  start = advance_iov(v, start, 3, 6 + 15);
  CHECK(start == 1);
  CHECK(v[1].iov_base == b + 15);
  CHECK(v[1].iov_len == 5);
  start = advance_iov(v, start, 3, 5);
  CHECK(start == 2);
  CHECK(v[2].iov_len == 5);
  CHECK(advance_iov(v, start, 3, 5) == 3);
}

TEST_CASE("a slow reader with a tiny window still gets every capsule byte in order") {
  constexpr uint32_t kCmds = 32, kLen = 8192;
  std::vector<int> good(kCmds, 0);
  FakeController fake([&](int fd) {
    handshake(fd);
    // Let the host's batch hit a full socket buffer before reading anything.
    std::this_thread::sleep_for(100ms);
    for (uint32_t n = 0; n < kCmds; ++n) {
      CapsuleCmd c;
      if (!read_exact(fd, &c, sizeof c)) return;
      std::vector<uint8_t> data(c.ch.plen - c.ch.pdo);
      if (!read_exact(fd, data.data(), data.size())) return;
      bool ok = data.size() == kLen;
      uint64_t tag;
      std::memcpy(&tag, data.data(), 8);
      for (size_t i = 8; ok && i < data.size(); ++i) ok = data[i] == static_cast<uint8_t>(tag + i);
      if (ok && tag < kCmds) good[tag] = 1;
      Cqe cqe{};
      cqe.cid = c.sqe.cid;
      CapsuleResp r;
      fill_capsule_resp(r, cqe, Negotiated{});
      write_all(fd, &r, sizeof r);
      if (n % 4 == 0) std::this_thread::sleep_for(1ms);
    }
  }, 4096);
  const bool busy = GENERATE(false, true);
  INFO("busy reactor: " << busy);
  auto reactor = make_reactor(busy);
  QpConfig cfg = config(fake);
  cfg.depth = kCmds;
  auto qp = tcp::QueuePair::connect(*reactor, cfg);
  REQUIRE(qp);
  (*qp)->start();
  CHECK((*qp)->direct_socket() == busy);
  // 256 KiB in one batch against a 4 KiB receive window: the SENDMSG goes out in pieces.
  std::vector<std::vector<uint8_t>> bufs(kCmds, std::vector<uint8_t>(kLen));
  std::vector<IoRequest> reqs(kCmds);
  std::vector<Outcome> outs(kCmds);
  for (uint32_t i = 0; i < kCmds; ++i) {
    uint64_t tag = i;
    std::memcpy(bufs[i].data(), &tag, 8);
    for (size_t b = 8; b < kLen; ++b) bufs[i][b] = static_cast<uint8_t>(tag + b);
    prep_write(reqs[i].cmd, 1, i * 2, 2);
    reqs[i].data = bufs[i].data();
    reqs[i].data_len = kLen;
    reqs[i].on_complete = &on_done;
    reqs[i].user = &outs[i];
    REQUIRE((*qp)->submit(reqs[i]) == 0);
  }
  REQUIRE(reactor->run_until(
      [&] { return std::all_of(outs.begin(), outs.end(), [](const Outcome& o) { return o.done; }); },
      5000ms));
  for (uint32_t i = 0; i < kCmds; ++i) {
    CHECK(outs[i].status.is_success());
    CHECK(good[i] == 1);
  }
  CHECK((*qp)->state() == QpState::live);
  qp->reset();
}

// The post-connect step of the shared Fabrics Connect (fabric/connect.hpp) over the set-up
// socket: the AuthSend/AuthReceive exchange.

TEST_CASE("the authenticator's AuthSend and AuthReceive reach the controller on the set-up socket") {
  const std::vector<uint8_t> msg = {0x10, 0x00, 0x01, 0x02, 0x03, 0x04};  // any bytes
  const std::vector<uint8_t> reply = {0x90, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77};
  Sqe send_seen{}, recv_seen{};
  std::vector<uint8_t> data_seen(msg.size());
  FakeController fake([&](int fd) {
    answer_icreq(fd);
    answer_connect_with(fd, kAuthReqAtr | 1);
    // AuthSend: the message in the capsule.
    CapsuleCmd c;
    REQUIRE(read_exact(fd, &c, sizeof c));
    send_seen = c.sqe;
    REQUIRE(read_exact(fd, data_seen.data(), data_seen.size()));
    Cqe cqe{};
    cqe.cid = c.sqe.cid;
    CapsuleResp r;
    fill_capsule_resp(r, cqe, Negotiated{});
    write_all(fd, &r, sizeof r);
    // AuthReceive: the answer in two C2HData PDUs, the last one standing for the response.
    REQUIRE(read_exact(fd, &c, sizeof c));
    recv_seen = c.sqe;
    for (uint32_t off = 0; off < reply.size(); off += 4) {
      DataHeader dh;
      fill_c2h_data(dh, c.sqe.cid, off, 4, off + 4 == reply.size(), off + 4 == reply.size(), Negotiated{});
      write_all(fd, &dh, sizeof dh);
      write_all(fd, reply.data() + off, 4);
    }
  });
  auto reactor = Reactor::create().value();
  QpConfig cfg = config(fake);
  std::vector<uint8_t> got(reply.size());
  fabric::PostConnect seen;
  cfg.authenticate = [&](fabric::CommandChannel& ch, const fabric::PostConnect& ctx) {
    seen = ctx;
    if (auto sent = fabric::auth_send(ch, msg, ctx.deadline); !sent) return sent;
    return fabric::auth_receive(ch, got, ctx.deadline);
  };
  auto qp = tcp::QueuePair::connect(*reactor, cfg);
  REQUIRE(qp);
  CHECK((*qp)->state() == QpState::connecting);
  CHECK(seen.qid == 1);
  CHECK(seen.cntlid == 1);
  CHECK(seen.response.auth_required);
  CHECK(fabrics_type(send_seen) == fctype::kAuthenticationSend);
  CHECK(send_seen.cdw10 == 0xe9010100u);
  CHECK(send_seen.cdw11 == msg.size());
  CHECK(sgl_id(send_seen) == sgl::kDataBlockOffset);
  CHECK(data_seen == msg);
  CHECK(fabrics_type(recv_seen) == fctype::kAuthenticationReceive);
  CHECK(recv_seen.cdw11 == reply.size());
  CHECK(sgl_id(recv_seen) == sgl::kTransportDataBlock);
  CHECK(sgl_length(recv_seen) == reply.size());
  CHECK(got == reply);
  CHECK(send_seen.cid != recv_seen.cid);
}

TEST_CASE("C2HData beyond the authenticator's buffer fails the set-up with protocol_error") {
  FakeController fake([](int fd) {
    answer_icreq(fd);
    answer_connect_with(fd, 1);
    CapsuleCmd c;
    REQUIRE(read_exact(fd, &c, sizeof c));
    DataHeader dh;
    uint8_t junk[16] = {};
    fill_c2h_data(dh, c.sqe.cid, 0, sizeof junk, true, true, Negotiated{});
    write_all(fd, &dh, sizeof dh);
    write_all(fd, junk, sizeof junk);
  });
  auto reactor = Reactor::create().value();
  QpConfig cfg = config(fake);
  cfg.authenticate = [](fabric::CommandChannel& ch, const fabric::PostConnect& ctx) {
    uint8_t small[8];
    return fabric::auth_receive(ch, small, ctx.deadline);
  };
  auto qp = tcp::QueuePair::connect(*reactor, cfg);
  REQUIRE_FALSE(qp);
  CHECK(qp.error() == make_error_code(Errc::protocol_error));
}
