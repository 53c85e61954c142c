#include "transport/tcp/handshake.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nvme/types.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "core/crc32c.hpp"
#include "core/fabrics_command.hpp"
#include "core/log.hpp"
#include "fabric/connect.hpp"
#include "tls/ktls.hpp"
#include "tls/session.hpp"

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

// The set-up byte stream: the socket itself, or the TLS session over it. Returns as
// send_all/recv_exact do (0, an errno, -1 when the peer closed); EPROTO for a TLS record error.
class Wire {
 public:
  explicit Wire(int fd) : fd_(fd) {}
  int fd() const noexcept { return fd_; }
  bool is_tls() const noexcept { return tls_ != nullptr; }
  const std::string& tls_detail() const noexcept { return tls_->error_detail(); }

  int send_all(const void* buf, size_t len, Clock::time_point deadline) {
    if (!tls_) return detail::send_all(fd_, buf, len, deadline);
    if (!tls_->write({static_cast<const uint8_t*>(buf), len})) return EPROTO;
    return flush(deadline);
  }

  int recv_exact(void* buf, size_t len, Clock::time_point deadline) {
    if (!tls_) return detail::recv_exact(fd_, buf, len, deadline);
    auto* p = static_cast<uint8_t*>(buf);
    size_t off = 0;
    while (off < len) {
      auto n = tls_->read({p + off, len - off});
      if (tls_->output_pending() > 0)  // a post-handshake message may want an answer
        if (const int w = flush(deadline)) return w;
      if (!n) return n.error() == tls::TlsErrc::peer_closed ? -1 : EPROTO;
      off += *n;
      if (*n == 0)
        if (const int r = receive(deadline)) return r;
    }
    return 0;
  }

  // The TLS 1.3 handshake as the client, bounded by `deadline`: success, or the library's error
  // with the reason as its detail.
  Result<void> start_tls(const tls::TlsPsk& psk, bool want_kernel, Clock::time_point deadline) {
    tls::SessionConfig sc = tls::SessionConfig::client(psk);
    sc.keep_traffic_secrets = want_kernel;
    sc.handshake_timeout = std::max(std::chrono::milliseconds(1),
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
    auto s = tls::Session::create(std::move(sc));
    if (!s) return {Errc::tls_handshake_failed, "TLS session: " + s.error().message()};
    tls_ = std::move(*s);
    for (;;) {
      auto h = tls_->handshake();
      const int w = flush(deadline);  // the step's output, a failure's alert included
      if (!h) return handshake_error(h.error());
      if (w != 0)
        return {w == ETIMEDOUT ? make_error_code(Errc::timeout) : socket_error(w),
                std::string("TLS handshake: send failed: ") + std::strerror(w)};
      if (*h == tls::HandshakeState::done) return {};
      if (const int r = receive(deadline); r != 0) {
        if (r == EPROTONOSUPPORT)
          return {Errc::tls_not_offered,
                  "the controller answered the TLS ClientHello in plaintext: the port does not offer TLS"};
        if (r == ETIMEDOUT) {
          (void)tls_->handshake(tls_->handshake_deadline());  // records the timeout
          return {Errc::timeout, "no TLS handshake within the connect timeout"};
        }
        return {socket_error(r), std::string("TLS handshake: receive failed: ") + std::strerror(r)};
      }
    }
  }

  std::unique_ptr<tls::Session> release_tls() noexcept { return std::move(tls_); }

  // After start_tls: hands the record layer to the kernel. True when it took it (the wire is
  // plaintext from now on), false when the kernel offers no kernel TLS (user space goes on), an
  // error when the socket was changed and is unusable.
  Result<bool> to_kernel() {
    bool changed = false;
    auto handed = tls::enable_ktls(fd_, *tls_, &changed);
    if (handed) {
      tls_.reset();
      return true;
    }
    if (changed)
      return {Errc::tls_handshake_failed, "kernel TLS refused the session's keys: " + handed.message()};
    return false;
  }

 private:
  Result<void> handshake_error(std::error_code ec) {
    const std::string detail = tls_->error_detail().empty() ? "" : " (" + tls_->error_detail() + ")";
    if (ec == tls::TlsErrc::handshake_timeout)
      return {Errc::timeout, "no TLS handshake within the connect timeout"};
    if (ec == tls::TlsErrc::peer_closed && !received_)
      return {Errc::tls_not_offered,
              "the controller closed the connection on the TLS ClientHello: the port does not offer TLS"};
    // "TLS handshake failed: the PSKs differ (...)"
    return {Errc::tls_handshake_failed, ec.message() + detail};
  }

  int flush(Clock::time_point deadline) {
    while (tls_->output_pending() > 0) {
      const size_t n = tls_->take_output(cbuf_);
      if (const int w = detail::send_all(fd_, cbuf_.data(), n, deadline)) return w;
    }
    return 0;
  }

  // One receive of ciphertext into the session (EOF tells the session). EPROTONOSUPPORT when
  // the very first byte from the controller cannot start a TLS record (handshake 16h, alert 15h).
  int receive(Clock::time_point deadline) {
    for (;;) {
      const ssize_t n = ::recv(fd_, cbuf_.data(), cbuf_.size(), MSG_DONTWAIT);
      if (n > 0) {
        if (!received_ && cbuf_[0] != 0x16 && cbuf_[0] != 0x15) return EPROTONOSUPPORT;
        received_ = true;
        tls_->feed({cbuf_.data(), static_cast<size_t>(n)});
        return 0;
      }
      if (n == 0 || errno == ECONNRESET) {
        tls_->peer_closed();
        return 0;
      }
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return errno;
      if (const int w = wait_fd(fd_, POLLIN, deadline)) return w;
    }
  }

  int fd_;
  bool received_ = false;
  std::unique_ptr<tls::Session> tls_;
  std::vector<uint8_t> cbuf_ = std::vector<uint8_t>(64 * 1024);
};

// Collects exactly one PDU of the expected type through the shared receiver. Waiting for a
// command's response (want == capsule_resp) with a buffer `in`, it also takes that command's
// C2HData PDUs, in order, into `in`.
struct OnePdu {
  PduType want = PduType::ic_resp;
  uint16_t cid = 0;
  std::span<uint8_t> in;
  uint32_t received = 0;
  alignas(8) uint8_t hdr[kMaxHeaderLen + kMaxTermReqData]{};
  PduType got_type = PduType::ic_resp;
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
    if (type == PduType::c2h_data && want == PduType::capsule_resp && !in.empty()) {
      DataHeader dh;
      std::memcpy(&dh, h, sizeof dh);
      if (dh.cccid != cid) {
        why = "C2HData names CID " + std::to_string(dh.cccid) + ", expected " + std::to_string(cid);
        return Errc::protocol_error;
      }
      if (dh.datao != received || dh.datal > in.size() - received) {
        why = "C2HData at offset " + std::to_string(dh.datao) + " length " + std::to_string(dh.datal) +
              " outside the " + std::to_string(in.size()) + "-byte buffer or out of order";
        return Errc::protocol_error;
      }
      dst = in.data() + dh.datao;
      return Errc::ok;
    }
    if (type != want) {
      why = std::string("expected ") + to_string(want) + ", got " + to_string(type);
      return Errc::protocol_error;
    }
    return Errc::ok;
  }
  Errc on_pdu(const uint8_t* h, const HeaderCheck& hc) noexcept {
    std::memcpy(hdr, h, hc.header_total);
    got_type = static_cast<PduType>(h[0]);
    if (got_type == PduType::c2h_data) received += hc.data_len;
    got = true;
    return Errc::ok;
  }
};

// Reads one PDU: the common header first, so that only this PDU's bytes leave the socket.
std::error_code read_pdu(Wire& wire, OnePdu& sink, const Negotiated& neg, Clock::time_point deadline,
                         const std::string& label) {
  const uint32_t max_data = std::max<uint32_t>(4096, static_cast<uint32_t>(sink.in.size()));
  PduReader reader(Role::host, max_data);
  reader.set_negotiated(neg);
  // Header, its digest, padding up to a 128-byte PDO, the data and its digest.
  std::vector<uint8_t> buf(kMaxHeaderLen + kMaxTermReqData + 256 + max_data + kDigestLen);
  auto io_error = [&](int r) {
    if (r == -1 && sink.want == PduType::ic_resp && !wire.is_tls())
      return logged(label, Errc::tls_required,
                    "the controller closed the connection right after the ICReq: a port that "
                    "requires TLS does so (no TLS PSK is configured)");
    if (r == -1) return logged(label, Errc::connection_closed, "connection closed by controller during set-up");
    if (r == EPROTO)
      return logged(label, Errc::protocol_error, "TLS record error during set-up: " + wire.tls_detail());
    if (r == ETIMEDOUT) return logged(label, Errc::timeout, "timed out waiting for " + std::string(to_string(sink.want)));
    const std::error_code ec = socket_error(r);
    return logged(label, ec, "set-up receive failed: " + ec.message());
  };
  sink.got = false;
  if (const int r = wire.recv_exact(buf.data(), sizeof(CommonHeader), deadline)) return io_error(r);
  CommonHeader ch;
  std::memcpy(&ch, buf.data(), sizeof ch);
  const HeaderCheck hc = check_common_header(ch, Role::host, neg, max_data);
  if (hc.err != Errc::ok)
    return logged(label, hc.err, make_error_code(hc.err).message() + ": " + hc.what);
  if (ch.plen > buf.size()) return logged(label, Errc::malformed_pdu, "malformed PDU: PLEN too large");
  if (const int r = wire.recv_exact(buf.data() + sizeof ch, ch.plen - sizeof ch, deadline)) return io_error(r);
  if (const Errc err = reader.consume(buf.data(), ch.plen, sink).error; err != Errc::ok) {
    const std::string why = sink.why.empty()
                                ? make_error_code(err).message() + ": " + reader.last_check().what
                                : sink.why;
    return logged(label, err, why);
  }
  if (!sink.got) return logged(label, Errc::malformed_pdu, "malformed PDU: incomplete");
  return {};
}

std::error_code send_error(const std::string& label, int w, const char* what) {
  return logged(label, w == ETIMEDOUT ? make_error_code(Errc::timeout) : socket_error(w),
                std::string("sending ") + what + ": " + std::strerror(w));
}

// The set-up socket as the fabric layer's command channel: one capsule at a time, data out in
// the capsule (no R2T during set-up), data in by C2HData.
class SetupChannel final : public fabric::CommandChannel {
 public:
  SetupChannel(Wire& wire, bool hd, bool dd, uint8_t cpda, uint32_t in_capsule_max, const std::string& label)
      : wire_(wire), hd_(hd), dd_(dd), cpda_(cpda), icd_max_(in_capsule_max), label_(label) {}

  Result<Cqe> execute(const Sqe& cmd, std::span<const uint8_t> out, std::span<uint8_t> in,
                      Clock::time_point deadline) override {
    if (!out.empty() && !in.empty())
      return logged(label_, Errc::invalid_argument, "a set-up command with data in both directions");
    if (out.size() > icd_max_)
      return logged(label_, Errc::invalid_argument,
                    "set-up command data of " + std::to_string(out.size()) + " bytes exceeds the " +
                        std::to_string(icd_max_) + "-byte in-capsule limit");
    Sqe sqe = cmd;
    sqe.cid = next_cid_++;
    const auto len = static_cast<uint32_t>(out.empty() ? in.size() : out.size());
    set_sgl(sqe, out.empty() ? sgl::kTransportDataBlock : sgl::kDataBlockOffset, 0, len);
    CapsuleCmd cap;
    fill_capsule_cmd(cap, sqe, static_cast<uint32_t>(out.size()), Negotiated{hd_, dd_, cpda_});
    std::vector<uint8_t> pdu(cap.ch.plen, 0);
    std::memcpy(pdu.data(), &cap, sizeof cap);
    if (hd_) {
      const uint32_t c = header_digest(&cap, sizeof cap);
      std::memcpy(pdu.data() + sizeof cap, &c, sizeof c);
    }
    if (!out.empty()) {
      std::memcpy(pdu.data() + cap.ch.pdo, out.data(), out.size());
      if (dd_) {
        const uint32_t c = nvmeof::detail::crc32c(out.data(), out.size());
        std::memcpy(pdu.data() + cap.ch.pdo + out.size(), &c, sizeof c);
      }
    }
    const bool connect = fabrics_type(cmd) == fctype::kConnect;
    if (const int w = wire_.send_all(pdu.data(), pdu.size(), deadline))
      return send_error(label_, w, connect ? "Connect" : "a set-up command");
    OnePdu rsp;
    rsp.want = PduType::capsule_resp;
    rsp.cid = sqe.cid;
    rsp.in = in;
    for (;;) {
      if (auto ec = read_pdu(wire_, rsp, Negotiated{hd_, dd_, 0}, deadline, label_)) return ec;
      if (rsp.got_type == PduType::capsule_resp) break;
      DataHeader dh;
      std::memcpy(&dh, rsp.hdr, sizeof dh);
      if (dh.ch.flags & pdu_flag::kSuccess) {  // the last C2HData stands for the response
        Cqe cqe{};
        cqe.cid = sqe.cid;
        return cqe;
      }
    }
    CapsuleResp cr;
    std::memcpy(&cr, rsp.hdr, sizeof cr);
    if (cr.cqe.cid != sqe.cid)
      return logged(label_, Errc::protocol_error,
                    std::string(connect ? "Connect" : "set-up") + " response names CID " +
                        std::to_string(cr.cqe.cid) + ", expected " + std::to_string(sqe.cid));
    return cr.cqe;
  }

 private:
  Wire& wire_;
  bool hd_;
  bool dd_;
  uint8_t cpda_;
  uint32_t icd_max_;
  const std::string& label_;
  uint16_t next_cid_ = 0;
};

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

  Wire wire(fd.get());
  bool ktls = false;
  if (cfg.tls) {
    // Kernel TLS is tried until a kernel refuses it once: then user space for this process.
    static std::atomic<bool> kernel_refused{false};
    const bool want_kernel = cfg.ktls && !kernel_refused.load(std::memory_order_relaxed);
    if (auto started = wire.start_tls(*cfg.tls, want_kernel, deadline); !started)
      return logged(label, started.error(), started.detail());
    if (want_kernel) {
      auto handed = wire.to_kernel();
      if (!handed) {
        kernel_refused.store(true, std::memory_order_relaxed);
        return logged(label, handed.error(), handed.detail());
      }
      ktls = *handed;
    }
  }

  // ICReq: HPDA 0 (no receive alignment needed), MAXR2T 0 (one R2T outstanding per command).
  IcReq icreq;
  fill_ic_req(icreq, 0, hd, dd, 0);
  if (const int w = wire.send_all(&icreq, sizeof icreq, deadline))
    return send_error(label, w, "ICReq");
  OnePdu ic;
  ic.want = PduType::ic_resp;
  if (auto ec = read_pdu(wire, ic, Negotiated{}, deadline, label)) return ec;
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

  // Fabrics Connect (its 1024-byte data in the capsule), then the post-connect step.
  const uint32_t icd = cfg.qid == 0 && cfg.in_capsule_data == 0 ? kAdminInCapsuleData : cfg.in_capsule_data;
  SetupChannel channel(wire, hd, dd, resp.cpda,
                       std::max<uint32_t>(icd, static_cast<uint32_t>(fabric::kConnectDataLen)), label);
  const fabric::ConnectParams params{cfg.qid,     cfg.depth,   cfg.kato_ms, cfg.cntlid,
                                     cfg.subnqn,  cfg.hostnqn, cfg.hostid,  cfg.disable_sq_flow_control};
  auto rsp = fabric::connect_queue(channel, params, cfg.authenticate, deadline, label);
  if (!rsp) return rsp.error();
  out.session.cntlid = rsp.value().cntlid;
  out.session.ktls = ktls;
  out.tls = wire.release_tls();
  out.fd = fd.release();
  return out;
}

}  // namespace nvmeof::tcp::detail
