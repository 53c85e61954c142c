#include "transport/tcp/handshake.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nvme/types.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/crc32c.hpp"
#include "core/log.hpp"

namespace nvmeof::tcp::detail {
namespace {

using Clock = std::chrono::steady_clock;

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() {
    const int f = fd_;
    fd_ = -1;
    return f;
  }

 private:
  int fd_;
};

// Everything a failed set-up reports goes through here: one line, then the code.
std::error_code logged(const std::string& label, std::error_code ec, const std::string& why) {
  nvmeof::detail::log_warning("nvmeof: %s: %s\n", label.c_str(), why.c_str());
  return ec;
}

std::error_code connect_error(int err) {
  switch (err) {
    case ECONNREFUSED:
    case EHOSTUNREACH:
    case ENETUNREACH:
    case EHOSTDOWN:
    case ENETDOWN:
      return make_error_code(Errc::connection_refused);
    case ETIMEDOUT:
      return make_error_code(Errc::timeout);
    default:
      return errno_code(err);
  }
}

// Waits for `events` on fd until `deadline`. Returns 0, or an errno.
int wait_fd(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return ETIMEDOUT;
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, static_cast<int>(left));
    if (r > 0) return 0;
    if (r == 0) return ETIMEDOUT;
    if (errno != EINTR) return errno;
  }
}

int send_all(int fd, const void* buf, size_t len, Clock::time_point deadline) {
  auto* p = static_cast<const uint8_t*>(buf);
  while (len > 0) {
    const ssize_t n = ::send(fd, p, len, MSG_NOSIGNAL);
    if (n > 0) {
      p += n;
      len -= static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN) return errno;
    if (const int w = wait_fd(fd, POLLOUT, deadline)) return w;
  }
  return 0;
}

// Returns 0, an errno, or -1 when the peer closed the connection.
int recv_exact(int fd, void* buf, size_t len, Clock::time_point deadline) {
  auto* p = static_cast<uint8_t*>(buf);
  while (len > 0) {
    const ssize_t n = ::recv(fd, p, len, 0);
    if (n > 0) {
      p += n;
      len -= static_cast<size_t>(n);
      continue;
    }
    if (n == 0) return -1;
    if (errno == EINTR) continue;
    if (errno != EAGAIN) return errno;
    if (const int w = wait_fd(fd, POLLIN, deadline)) return w;
  }
  return 0;
}

// Collects exactly one PDU of the expected type through the shared receiver.
struct OnePdu {
  PduType want = PduType::ic_resp;
  alignas(8) uint8_t hdr[kMaxHeaderLen + kMaxTermReqData]{};
  bool got = false;
  std::string why;

  Errc on_header(const uint8_t* h, const HeaderCheck&, uint8_t*& dst) noexcept {
    dst = nullptr;
    const auto type = static_cast<PduType>(h[0]);
    if (type == PduType::c2h_term_req) {
      uint16_t fes;
      std::memcpy(&fes, h + 8, sizeof fes);
      why = "controller sent C2HTermReq (FES " + std::to_string(fes) + ")";
      return Errc::peer_terminated;
    }
    if (type != want) {
      why = std::string("expected ") + to_string(want) + ", got " + to_string(type);
      return Errc::protocol_error;
    }
    return Errc::ok;
  }
  Errc on_pdu(const uint8_t* h, const HeaderCheck& hc) noexcept {
    std::memcpy(hdr, h, hc.header_total);
    got = true;
    return Errc::ok;
  }
};

// Reads one PDU: the common header first, so that only this PDU's bytes leave the socket.
std::error_code read_pdu(int fd, OnePdu& sink, const Negotiated& neg, Clock::time_point deadline,
                         const std::string& label) {
  PduReader reader(Role::host, 4096);
  reader.set_negotiated(neg);
  alignas(8) uint8_t buf[kMaxHeaderLen + kMaxTermReqData + 4096];
  auto io_error = [&](int r) {
    if (r == -1) return logged(label, Errc::connection_closed, "connection closed by controller during set-up");
    if (r == ETIMEDOUT) return logged(label, Errc::timeout, "timed out waiting for " + std::string(to_string(sink.want)));
    const std::error_code ec = socket_error(r);
    return logged(label, ec, "set-up receive failed: " + ec.message());
  };
  if (const int r = recv_exact(fd, buf, sizeof(CommonHeader), deadline)) return io_error(r);
  CommonHeader ch;
  std::memcpy(&ch, buf, sizeof ch);
  const HeaderCheck hc = check_common_header(ch, Role::host, neg, 4096);
  if (hc.err != Errc::ok)
    return logged(label, hc.err, make_error_code(hc.err).message() + ": " + hc.what);
  if (ch.plen > sizeof buf) return logged(label, Errc::malformed_pdu, "malformed PDU: PLEN too large");
  if (const int r = recv_exact(fd, buf + sizeof ch, ch.plen - sizeof ch, deadline)) return io_error(r);
  Errc err = Errc::ok;
  reader.consume(buf, ch.plen, sink, err);
  if (err != Errc::ok) {
    const std::string why = sink.why.empty()
                                ? make_error_code(err).message() + ": " + reader.last_check().what
                                : sink.why;
    return logged(label, err, why);
  }
  if (!sink.got) return logged(label, Errc::malformed_pdu, "malformed PDU: incomplete");
  return {};
}

}  // namespace

std::error_code socket_error(int err) noexcept {
  switch (err) {
    case ECONNRESET:
    case EPIPE:
    case ECONNABORTED:
      return make_error_code(Errc::connection_reset);
    case ETIMEDOUT:
      return make_error_code(Errc::timeout);
    default:
      return errno_code(err);
  }
}

std::string make_label(const QpConfig& cfg) {
  const bool v6 = cfg.traddr.find(':') != std::string::npos;
  std::string s = "tcp ";
  s += v6 ? "[" + cfg.traddr + "]" : cfg.traddr;
  s += ":" + cfg.trsvcid + " qid " + std::to_string(cfg.qid);
  return s;
}

Result<Connected> handshake(const QpConfig& cfg, const std::string& label) {
  const auto deadline = Clock::now() + cfg.connect_timeout;
  const bool hd = cfg.digest == Digest::header || cfg.digest == Digest::both;
  const bool dd = cfg.digest == Digest::data || cfg.digest == Digest::both;

  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* ai = nullptr;
  if (const int g = ::getaddrinfo(cfg.traddr.c_str(), cfg.trsvcid.c_str(), &hints, &ai); g != 0)
    return logged(label, Errc::invalid_argument, std::string("cannot resolve address: ") + gai_strerror(g));
  const int family = ai->ai_family;
  sockaddr_storage sa{};
  std::memcpy(&sa, ai->ai_addr, ai->ai_addrlen);
  const socklen_t salen = ai->ai_addrlen;
  ::freeaddrinfo(ai);

  Fd fd(::socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_TCP));
  if (fd.get() < 0) return logged(label, errno_code(errno), std::string("socket: ") + std::strerror(errno));
  if (!cfg.host_iface.empty() &&
      ::setsockopt(fd.get(), SOL_SOCKET, SO_BINDTODEVICE, cfg.host_iface.c_str(),
                   static_cast<socklen_t>(cfg.host_iface.size())) < 0)
    return logged(label, errno_code(errno), "SO_BINDTODEVICE " + cfg.host_iface + ": " + std::strerror(errno));
  const int one = 1;
  ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);

  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&sa), salen) < 0) {
    if (errno != EINPROGRESS)
      return logged(label, connect_error(errno), std::string("connect: ") + std::strerror(errno));
    if (const int w = wait_fd(fd.get(), POLLOUT, deadline))
      return logged(label, connect_error(w), std::string("connect: ") + std::strerror(w));
    int soerr = 0;
    socklen_t len = sizeof soerr;
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &soerr, &len);
    if (soerr != 0)
      return logged(label, connect_error(soerr), std::string("connect: ") + std::strerror(soerr));
  }

  // ICReq: HPDA 0 (no receive alignment needed), MAXR2T 0 (one R2T outstanding per command).
  IcReq icreq;
  fill_ic_req(icreq, 0, hd, dd, 0);
  if (const int w = send_all(fd.get(), &icreq, sizeof icreq, deadline))
    return logged(label, w == ETIMEDOUT ? make_error_code(Errc::timeout) : socket_error(w),
                  std::string("sending ICReq: ") + std::strerror(w));
  OnePdu ic;
  ic.want = PduType::ic_resp;
  if (auto ec = read_pdu(fd.get(), ic, Negotiated{}, deadline, label)) return ec;
  IcResp resp;
  std::memcpy(&resp, ic.hdr, sizeof resp);
  const bool got_hd = resp.digest & ic_digest::kHeader;
  const bool got_dd = resp.digest & ic_digest::kData;
  if ((got_hd && !hd) || (got_dd && !dd))
    return logged(label, Errc::protocol_error, "ICResp enables a digest the host did not ask for");
  if (got_hd != hd || got_dd != dd)
    return logged(label, Errc::unsupported, "controller refused the requested digests");
  if (resp.maxh2cdata < 4096 || resp.maxh2cdata % 4 != 0)
    return logged(label, Errc::malformed_pdu, "malformed PDU: ICResp MAXH2CDATA " +
                                                  std::to_string(resp.maxh2cdata) + " below 4096 or unaligned");
  if (resp.cpda > 31)
    return logged(label, Errc::malformed_pdu, "malformed PDU: ICResp CPDA out of range");

  Connected out;
  out.session.hdgst = hd;
  out.session.ddgst = dd;
  out.session.cpda = resp.cpda;
  out.session.maxh2cdata = resp.maxh2cdata;

  // Fabrics Connect with its 1024-byte data in the capsule.
  nvmf_connect_data data{};
  static_assert(sizeof data == 1024);
  std::memcpy(data.hostid, cfg.hostid.data(), sizeof data.hostid);
  data.cntlid = cfg.cntlid;
  std::strncpy(data.subsysnqn, cfg.subnqn.c_str(), sizeof data.subsysnqn - 1);
  std::strncpy(data.hostnqn, cfg.hostnqn.c_str(), sizeof data.hostnqn - 1);
  Sqe sqe;
  prep_connect(sqe, cfg.qid, static_cast<uint16_t>(cfg.depth - 1), cfg.kato_ms);
  sqe.cid = 0;
  set_sgl(sqe, sgl::kDataBlockOffset, 0, sizeof data);
  const Negotiated send_neg{hd, dd, resp.cpda};
  CapsuleCmd cap;
  fill_capsule_cmd(cap, sqe, sizeof data, send_neg);
  std::vector<uint8_t> pdu(cap.ch.plen, 0);
  std::memcpy(pdu.data(), &cap, sizeof cap);
  if (hd) {
    const uint32_t c = header_digest(&cap, sizeof cap);
    std::memcpy(pdu.data() + sizeof cap, &c, sizeof c);
  }
  std::memcpy(pdu.data() + cap.ch.pdo, &data, sizeof data);
  if (dd) {
    const uint32_t c = nvmeof::detail::crc32c(&data, sizeof data);
    std::memcpy(pdu.data() + cap.ch.pdo + sizeof data, &c, sizeof c);
  }
  if (const int w = send_all(fd.get(), pdu.data(), pdu.size(), deadline))
    return logged(label, w == ETIMEDOUT ? make_error_code(Errc::timeout) : socket_error(w),
                  std::string("sending Connect: ") + std::strerror(w));
  OnePdu rsp;
  rsp.want = PduType::capsule_resp;
  if (auto ec = read_pdu(fd.get(), rsp, Negotiated{hd, dd, 0}, deadline, label)) return ec;
  CapsuleResp cr;
  std::memcpy(&cr, rsp.hdr, sizeof cr);
  if (cr.cqe.cid != 0)
    return logged(label, Errc::protocol_error, "Connect response names CID " + std::to_string(cr.cqe.cid));
  const NvmeStatus st = cr.cqe.status();
  if (!st.is_success())
    return logged(label, make_error_code(st), "Connect rejected: " + to_string(st));
  out.session.cntlid = static_cast<uint16_t>(cr.cqe.dw0 & 0xffff);
  out.fd = fd.release();
  return out;
}

}  // namespace nvmeof::tcp::detail
