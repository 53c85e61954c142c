// libFuzzer target: the host's NVMe/TCP queue pair (transport/tcp/queue_pair.hpp) against a fake
// controller the harness plays on a loopback socket. The harness answers ICReq and Connect
// itself, the host submits a few commands, and once all their capsules have arrived the input's
// bytes go to the host as the controller's stream, in chunks. Input:
//   byte 0   bit 0/1 header/data digests; bits 3:2 CPDA (0, 1, 7, 31); bit 4 MAXH2CDATA 4096
//            (else 32 KiB); bit 5 writes up to 8 KiB go in the capsule (else all by R2T);
//            bits 7:6 how the input ends: 0 the controller closes, 1 the host calls close(),
//            2 the controller shuts its write side only, 3 the controller resets (RST)
//   byte 1   bits 2:0 commands - 1 (CIDs 0, 1, ... in that order); bits 7:3 chunk size / 16
//            (0: the stream in one send)
//   then one byte per command: bits 1:0 0/3 read, 1 write, 2 flush; bits 7:2 blocks - 1 (512 B)
//   then the controller's stream (PDUs, valid or not)
// Invariants: every command completes exactly once whatever arrives, the pair reaches closed
// within a bound after the input ends (no hang), what the host sends parses as valid PDUs, and
// nothing trips ASan/UBSan.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/crc32c.hpp"
#include "nvmeof/command.hpp"
#include "reactor/reactor.hpp"
#include "transport/tcp/pdu.hpp"
#include "transport/tcp/queue_pair.hpp"

namespace {

using namespace nvmeof;
using Clock = std::chrono::steady_clock;

constexpr uint32_t kDepth = 8;
constexpr uint32_t kMaxTransfer = 32 * 1024;
constexpr auto kBound = std::chrono::seconds(10);  // far above anything a healthy run needs
constexpr uint8_t kCpda[4] = {0, 1, 7, 31};

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz_queue_pair: %s\n", what);
  std::abort();
}

std::unique_ptr<Reactor> g_reactor;
int g_listen = -1;
uint16_t g_port = 0;

void init() {
  auto r = Reactor::create();
  if (!r) fail("no reactor");
  g_reactor = std::move(*r);
  g_listen = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (g_listen < 0 || ::bind(g_listen, reinterpret_cast<sockaddr*>(&a), sizeof a) < 0 ||
      ::listen(g_listen, 4) < 0 || ::getsockname(g_listen, reinterpret_cast<sockaddr*>(&a), &len) < 0)
    fail("no listening socket");
  g_port = ntohs(a.sin_port);
}

bool recv_all(int fd, void* buf, size_t n) {
  auto* p = static_cast<uint8_t*>(buf);
  while (n > 0) {
    pollfd pf{fd, POLLIN, 0};
    if (::poll(&pf, 1, 5000) <= 0) return false;
    const ssize_t k = ::recv(fd, p, n, 0);
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

// The controller's half of set-up: ICReq -> ICResp, Connect -> success (CNTLID 1).
int fake_controller_handshake(uint8_t cpda, bool hd, bool dd, uint32_t maxh2cdata) {
  pollfd pf{g_listen, POLLIN, 0};
  if (::poll(&pf, 1, 5000) <= 0) return -1;
  const int fd = ::accept4(g_listen, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) return -1;
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  tcp::IcReq req;
  tcp::IcResp resp;
  tcp::fill_ic_resp(resp, cpda, hd, dd, maxh2cdata);
  tcp::CommonHeader ch;
  std::vector<uint8_t> rest;
  alignas(8) uint8_t out[tcp::kShortHlen + tcp::kDigestLen];
  tcp::CapsuleResp cr;
  Cqe cqe{};
  cqe.dw0 = 1;
  tcp::fill_capsule_resp(cr, cqe, tcp::Negotiated{hd, dd, 0});
  std::memcpy(out, &cr, sizeof cr);
  if (hd) {
    const uint32_t d = tcp::header_digest(out, sizeof cr);
    std::memcpy(out + sizeof cr, &d, sizeof d);
  }
  if (!recv_all(fd, &req, sizeof req) || ::send(fd, &resp, sizeof resp, MSG_NOSIGNAL) != sizeof resp ||
      !recv_all(fd, &ch, sizeof ch) || ch.plen < sizeof ch || ch.plen > 4096 ||
      (rest.resize(ch.plen - sizeof ch), !recv_all(fd, rest.data(), rest.size())) ||
      ::send(fd, out, cr.ch.plen, MSG_NOSIGNAL) != static_cast<ssize_t>(cr.ch.plen)) {
    ::close(fd);
    return -1;
  }
  return fd;
}

struct Cmd {
  IoRequest req;
  std::vector<uint8_t> buf;
  int completions = 0;
};

// Parses what the host sends; it must always be valid PDUs of the kinds a host sends.
struct HostStream {
  explicit HostStream(bool hd, bool dd) : reader(tcp::Role::controller, 1u << 20) {
    reader.set_negotiated(tcp::Negotiated{hd, dd, 0});
  }
  Errc on_header(const uint8_t* h, const tcp::HeaderCheck& hc, uint8_t*& dst) noexcept {
    const auto t = static_cast<tcp::PduType>(h[0]);
    if (t != tcp::PduType::capsule_cmd && t != tcp::PduType::h2c_data) return Errc::protocol_error;
    data.resize(hc.data_len);
    dst = data.empty() ? nullptr : data.data();
    return Errc::ok;
  }
  Errc on_pdu(const uint8_t* h, const tcp::HeaderCheck&) noexcept {
    if (static_cast<tcp::PduType>(h[0]) == tcp::PduType::capsule_cmd) ++capsules;
    return Errc::ok;
  }
  // Reads whatever waits on fd; false once the host closed its side.
  bool drain(int fd) {
    uint8_t buf[65536];
    for (;;) {
      const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
      if (n == 0) return false;
      if (n < 0) return errno == EAGAIN || errno == EINTR;
      size_t off = 0;
      while (off < static_cast<size_t>(n)) {
        const auto [used, err] = reader.consume(buf + off, static_cast<size_t>(n) - off, *this);
        off += used;
        if (err != Errc::ok) fail("the host sent a malformed PDU");
      }
    }
  }
  tcp::PduReader reader;
  std::vector<uint8_t> data;
  unsigned capsules = 0;
};

const bool g_verbose = std::getenv("FUZZ_QP_VERBOSE") != nullptr;  // each completion on stderr

void on_done(IoRequest& req, const Cqe& cqe) noexcept {
  auto* c = static_cast<Cmd*>(req.user);
  if (++c->completions > 1) fail("a command completed twice");
  if (g_verbose)
    std::fprintf(stderr, "fuzz_queue_pair: CID %u: %s\n", req.cmd.cid, to_string(cqe.status()).c_str());
}

// Polls the reactor (draining the host's output) until a few turns pass without work.
void settle(HostStream& hs, int fd, bool& host_open) {
  for (int idle = 0, turns = 0; idle < 2 && turns < 2000; ++turns) {
    const int n = g_reactor->poll(std::chrono::microseconds(idle == 0 ? 0 : 50));
    if (host_open) host_open = hs.drain(fd);
    idle = n == 0 ? idle + 1 : 0;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (!g_reactor) init();
  if (size < 2) return 0;
  const uint8_t f = data[0];
  const bool hd = f & 1, dd = f & 2;
  const uint8_t cpda = kCpda[(f >> 2) & 3];
  const uint32_t maxh2cdata = (f & 16) ? 4096 : 32768;
  const bool in_capsule = f & 32;
  const unsigned ending = f >> 6;
  const unsigned ncmds = 1 + (data[1] & 7);
  const size_t chunk = static_cast<size_t>(data[1] >> 3) * 16;
  if (size < 2 + ncmds) return 0;
  const uint8_t* spec = data + 2;
  const uint8_t* stream = data + 2 + ncmds;
  const size_t stream_len = size - 2 - ncmds;

  int ctrl = -1;
  std::thread peer([&] { ctrl = fake_controller_handshake(cpda, hd, dd, maxh2cdata); });
  tcp::QpConfig cfg;
  cfg.traddr = "127.0.0.1";
  cfg.trsvcid = std::to_string(g_port);
  cfg.qid = 1;
  cfg.cntlid = 1;
  cfg.depth = kDepth;
  cfg.subnqn = "nqn.2024-01.io.nvmeof:fuzz";
  cfg.hostnqn = "nqn.2024-01.io.nvmeof:fuzz-host";
  cfg.digest = hd && dd ? Digest::both : hd ? Digest::header : dd ? Digest::data : Digest::none;
  cfg.in_capsule_data = in_capsule ? 8192 : 0;
  cfg.max_transfer = kMaxTransfer;
  cfg.recv_buffer = 16 * 1024;
  cfg.connect_timeout = std::chrono::milliseconds(5000);
  auto qpr = tcp::QueuePair::connect(*g_reactor, cfg);
  peer.join();
  if (!qpr) fail("the host did not connect to the fake controller");
  if (ctrl < 0) fail("the fake controller's set-up failed");
  std::unique_ptr<tcp::QueuePair> qp = std::move(*qpr);
  qp->start();

  std::vector<std::unique_ptr<Cmd>> cmds;
  for (unsigned i = 0; i < ncmds; ++i) {
    auto c = std::make_unique<Cmd>();
    const unsigned kind = spec[i] & 3;
    const uint32_t blocks = 1u + (spec[i] >> 2);
    if (kind == 2) {
      prep_flush(c->req.cmd, 1);
    } else {
      c->buf.assign(blocks * 512, static_cast<uint8_t>(0xa0 + i));
      c->req.data = c->buf.data();
      c->req.data_len = static_cast<uint32_t>(c->buf.size());
      if (kind == 1) prep_write(c->req.cmd, 1, i * 64, blocks);
      else prep_read(c->req.cmd, 1, i * 64, blocks);
    }
    c->req.on_complete = &on_done;
    c->req.user = c.get();
    if (qp->submit(c->req) != 0) fail("submit refused a command on a live pair");
    if (c->req.cmd.cid != i) fail("CIDs are not handed out in order");
    cmds.push_back(std::move(c));
  }

  // Every capsule reaches the controller before its answers start, so an input means the same
  // thing on every run.
  HostStream hs(hd, dd);
  bool host_open = true;
  const auto deadline = Clock::now() + kBound;
  while (hs.capsules < ncmds) {
    if (Clock::now() > deadline) fail("the host never sent its capsules");
    g_reactor->poll(std::chrono::microseconds(500));
    if (!hs.drain(ctrl)) fail("the host closed before any answer");
  }

  size_t off = 0;
  while (off < stream_len && qp->state() == QpState::live) {
    const size_t n = chunk ? std::min(chunk, stream_len - off) : stream_len - off;
    size_t sent = 0;
    while (sent < n && qp->state() == QpState::live) {
      const ssize_t k = ::send(ctrl, stream + off + sent, n - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (k > 0) sent += static_cast<size_t>(k);
      else if (k < 0 && errno != EAGAIN && errno != EINTR) break;
      else settle(hs, ctrl, host_open);
      if (Clock::now() > deadline) fail("the host stopped taking the controller's stream");
    }
    off += n;
    settle(hs, ctrl, host_open);
  }

  switch (ending) {
    case 1: qp->close(); break;
    case 2: ::shutdown(ctrl, SHUT_WR); break;
    case 3: {
      const linger lg{1, 0};
      ::setsockopt(ctrl, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
      ::close(ctrl);
      ctrl = -1;
      break;
    }
    default: ::close(ctrl); ctrl = -1; break;
  }
  while (qp->state() != QpState::closed) {
    if (Clock::now() > deadline) fail("the queue pair did not close after the stream ended");
    g_reactor->poll(std::chrono::microseconds(500));
    if (ctrl >= 0 && host_open) host_open = hs.drain(ctrl);
  }
  if (qp->outstanding() != 0) fail("a closed pair still counts outstanding commands");
  for (const auto& c : cmds)
    if (c->completions != 1) fail("a command never completed");
  qp.reset();
  if (ctrl >= 0) ::close(ctrl);
  for (const auto& c : cmds)
    if (c->completions != 1) fail("a command completed during destruction");
  return 0;
}
