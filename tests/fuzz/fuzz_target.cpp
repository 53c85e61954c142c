// libFuzzer target: the embedded NVMe/TCP target, started in this process, fed over a real
// loopback socket. The first input byte picks how far a valid prologue takes the connection
// before the rest of the input is sent raw:
//   bits 1:0  0: nothing (the input starts with its own ICReq), 1: past ICReq, 2: past ICReq and
//             an admin Connect, 3: past ICReq and an I/O queue Connect (queue 1 of a controller
//             whose admin queue is another connection)
//   bit 2/3   header / data digests in the prologue's ICReq
//   bit 4     a lazy peer: small receive window, nothing read until everything is sent
// Then the write side is shut, and the target must close within a bound (no hang). Past a
// prologue every byte the target sends must parse as valid PDUs. After each input the target
// must still accept a fresh connection and bring up a controller (liveness), and no connection
// may have held more output than the backlog bound. Each input gets a target of its own, so an
// input means the same thing whenever it runs (the first controller is CNTLID 1).
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "nvmeof/target.hpp"
#include "target_client.hpp"

namespace {

using namespace nvmeof;
using nvmeof::test::Client;

constexpr char kNqn[] = "nqn.2024-01.io.nvmeof:fuzz";
constexpr uint64_t kBacklogBound = 8u << 20;
constexpr int kCloseWithinMs = 5000;

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
  o.max_queue_depth = 128;
  o.cqt_ms = 1;
  auto t = Target::start(o);
  if (!t) fail("target did not start");
  g_target = std::move(*t);
  g_port = g_target->port_number(0);
}

struct Sink {
  Errc on_header(const uint8_t*, const tcp::HeaderCheck& hc, uint8_t*& dst) noexcept {
    buf.resize(hc.data_len);
    dst = buf.data();
    return Errc::ok;
  }
  Errc on_pdu(const uint8_t*, const tcp::HeaderCheck&) noexcept { return Errc::ok; }
  std::vector<uint8_t> buf;
};

// Sends `data`, reads (and, when `check` is set, parses) what comes back, shuts the write side
// and waits for the target to close.
void exchange(int fd, const uint8_t* data, size_t size, bool lazy, tcp::PduReader* check) {
  const int fl = ::fcntl(fd, F_GETFL);
  ::fcntl(fd, F_SETFL, fl | O_NONBLOCK);
  Sink sink;
  size_t sent = 0;
  bool shut = false;
  auto stalled_since = std::chrono::steady_clock::now();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kCloseWithinMs);
  uint8_t buf[65536];
  for (;;) {
    const auto now = std::chrono::steady_clock::now();
    if (now > deadline) fail("the target did not close its connection after the input ended");
    if (!shut && sent == size) {
      ::shutdown(fd, SHUT_WR);
      shut = true;
    }
    // A lazy peer reads only once it has sent everything, or once the target stopped taking.
    const bool reading = !lazy || shut || now - stalled_since > std::chrono::milliseconds(200);
    pollfd p{fd, static_cast<short>((reading ? POLLIN : 0) | (shut ? 0 : POLLOUT)), 0};
    if (::poll(&p, 1, 50) < 0) continue;
    if (!shut && (p.revents & POLLOUT)) {
      const ssize_t n = ::send(fd, data + sent, size - sent, MSG_NOSIGNAL);
      if (n > 0) {
        sent += static_cast<size_t>(n);
        stalled_since = now;
      } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
        shut = true;  // the target closed on us: read what it said
      }
    }
    if (reading && (p.revents & (POLLIN | POLLHUP | POLLERR))) {
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) return;
      if (check) {
        size_t off = 0;
        while (off < static_cast<size_t>(n)) {
          Errc err = Errc::ok;
          off += check->consume(buf + off, static_cast<size_t>(n) - off, sink, err);
          if (err != Errc::ok) fail("the target sent a malformed PDU");
        }
      }
    }
  }
}

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
  const unsigned stage = mode & 3;
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
    std::unique_ptr<tcp::PduReader> check;
    if (stage >= 1) {
      if (!c.ic(hd, dd)) fail("no ICResp");
      if (stage == 2 && !c.connect_queue(kNqn, 0).status().is_success()) fail("admin Connect refused");
      if (stage == 3 && !c.connect_queue(kNqn, 1, admin.cntlid()).status().is_success())
        fail("I/O queue Connect refused");
      check = std::make_unique<tcp::PduReader>(tcp::Role::host, 1u << 20);
      check->set_negotiated(tcp::Negotiated{hd, dd, 0});
    }
    exchange(c.fd(), data, size, lazy, check.get());
    c.close();
    check_alive();
  }
  g_target.reset();
  return 0;
}
