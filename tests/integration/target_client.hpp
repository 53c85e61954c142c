// A small blocking NVMe/TCP host for testing the embedded target alone: raw sockets and the
// shared PDU codec, nothing from the initiator. Every call has a timeout, so a target that
// stops answering fails a test instead of hanging it.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nvme/types.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "core/crc32c.hpp"
#include "core/fabrics_command.hpp"
#include "nvmeof/command.hpp"
#include "tls/socket_stream.hpp"
#include "transport/tcp/pdu.hpp"

namespace nvmeof::test {

inline constexpr char kHostNqn[] = "nqn.2014-08.org.nvmexpress:uuid:target-test-host";

/// A PDU whose header `hdr` (hlen bytes) was filled by the codec, with the digests its flags
/// ask for and `len` bytes of data at its PDO.
inline std::vector<uint8_t> encode_pdu(const void* hdr, size_t hlen, const void* data, uint32_t len) {
  const auto* ch = static_cast<const tcp::CommonHeader*>(hdr);
  std::vector<uint8_t> b(ch->plen, 0);
  std::memcpy(b.data(), hdr, hlen);
  if (ch->flags & tcp::pdu_flag::kHdgst) {
    const uint32_t d = tcp::header_digest(b.data(), hlen);
    std::memcpy(b.data() + hlen, &d, 4);
  }
  if (len) {
    std::memcpy(b.data() + ch->pdo, data, len);
    if (ch->flags & tcp::pdu_flag::kDdgst) {
      const uint32_t d = detail::crc32c(data, len);
      std::memcpy(b.data() + ch->pdo + len, &d, 4);
    }
  }
  return b;
}

struct Pdu {
  tcp::PduType type{};
  std::vector<uint8_t> hdr;   // header (a TermReq keeps the offending bytes with it)
  std::vector<uint8_t> data;
  template <class T>
  T as() const {
    T v{};
    std::memcpy(&v, hdr.data(), std::min(sizeof v, hdr.size()));
    return v;
  }
};

/// Outcome of one command: its completion and the data the target sent for it.
struct Reply {
  bool ok = false;  // a completion arrived (CapsuleResp or C2HData with SUCCESS)
  Cqe cqe{};
  std::vector<uint8_t> data;
  uint32_t r2ts = 0;
  uint8_t c2h_pdo = 0;
  bool success_flag = false;  // the data PDU stood in for the CapsuleResp
  NvmeStatus status() const { return cqe.status(); }
};

class Client {
 public:
  ~Client() { close(); }

  /// SO_RCVBUF for the next connect() (a peer that reads slowly); 0 leaves the default.
  void set_receive_buffer(int bytes) { rcvbuf_ = bytes; }

  bool connect(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (rcvbuf_ > 0) ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf_, sizeof rcvbuf_);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  void close() {
    tls_.reset();
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  int fd() const { return fd_; }

  /// TLS 1.3 with `psk` on the connected socket (before ic()); every PDU then goes through it.
  /// The handshake's error, if any.
  std::error_code start_tls(tls::TlsPsk psk) {
    auto st = tls::SocketStream::handshake(fd_, tls::SessionConfig::client(std::move(psk)));
    if (!st) return st.error();
    tls_ = std::move(*st);
    return {};
  }

  /// ICReq / ICResp; nullopt when no ICResp came back.
  std::optional<tcp::IcResp> ic(bool hdgst = false, bool ddgst = false, uint8_t hpda = 0) {
    tcp::IcReq r;
    tcp::fill_ic_req(r, hpda, hdgst, ddgst, 0);
    send_raw(&r, sizeof r);
    auto p = next(1000);
    if (!p || p->type != tcp::PduType::ic_resp) return std::nullopt;
    auto resp = p->as<tcp::IcResp>();
    neg_ = tcp::Negotiated{hdgst, ddgst, resp.cpda};
    reader_.set_negotiated(tcp::Negotiated{hdgst, ddgst, hpda});
    maxh2cdata_ = resp.maxh2cdata;
    return resp;
  }

  void send_raw(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    if (tls_) {
      (void)tls_->write_all({b, n}, std::chrono::seconds(5));
      return;
    }
    while (n) {
      const ssize_t k = ::send(fd_, b, n, MSG_NOSIGNAL);
      if (k <= 0) return;
      b += k;
      n -= static_cast<size_t>(k);
    }
  }

  /// Sends a capsule; `data` (if any) goes in the capsule.
  void send_capsule(const Sqe& sqe, const void* data = nullptr, uint32_t len = 0) {
    tcp::CapsuleCmd c;
    const size_t hlen = tcp::fill_capsule_cmd(c, sqe, len, neg_);
    send_pdu(&c, hlen, data, len);
  }

  /// Sends any PDU whose header `hdr` (hlen bytes) was filled by the codec, with digests.
  void send_pdu(const void* hdr, size_t hlen, const void* data, uint32_t len) {
    const std::vector<uint8_t> b = encode_pdu(hdr, hlen, data, len);
    send_raw(b.data(), b.size());
  }

  /// The bytes of a capsule as send_capsule sends them (with this connection's digests): to
  /// pipeline several commands in one send_raw.
  std::vector<uint8_t> capsule_bytes(const Sqe& sqe, const void* data = nullptr, uint32_t len = 0) const {
    tcp::CapsuleCmd c;
    const size_t hlen = tcp::fill_capsule_cmd(c, sqe, len, neg_);
    return encode_pdu(&c, hlen, data, len);
  }

  /// Executes one command: in-capsule data up to `icd`, R2T/H2CData beyond, C2HData into the
  /// reply. `wdata` is what a write sends; `rlen` what a read expects.
  Reply exec(Sqe sqe, const void* wdata = nullptr, uint32_t wlen = 0, uint32_t rlen = 0,
             int timeout_ms = 2000) {
    sqe.cid = ++cid_;
    const uint32_t len = wlen ? wlen : rlen;
    const bool in_capsule = wlen && wlen <= icd_;
    set_sgl(sqe, in_capsule ? sgl::kDataBlockOffset : sgl::kTransportDataBlock, 0, len);
    send_capsule(sqe, in_capsule ? wdata : nullptr, in_capsule ? wlen : 0);
    return wait_reply(sqe.cid, wdata, timeout_ms);
  }

  Reply wait_reply(uint16_t cid, const void* wdata = nullptr, int timeout_ms = 2000) {
    Reply r;
    for (;;) {
      auto p = next(timeout_ms);
      if (!p) return r;
      if (p->type == tcp::PduType::r2t) {
        auto t = p->as<tcp::R2t>();
        ++r.r2ts;
        uint32_t off = t.r2to;
        const uint32_t end = t.r2to + t.r2tl;
        while (off < end) {
          const uint32_t n = std::min(end - off, maxh2cdata_);
          tcp::DataHeader h;
          const size_t hlen = tcp::fill_h2c_data(h, t.cccid, t.ttag, off, n, off + n == end, neg_);
          send_pdu(&h, hlen, static_cast<const uint8_t*>(wdata) + off, n);
          off += n;
        }
        continue;
      }
      if (p->type == tcp::PduType::c2h_data) {
        auto d = p->as<tcp::DataHeader>();
        if (d.cccid != cid) return r;
        r.c2h_pdo = d.ch.pdo;
        if (r.data.size() < d.datao + d.datal) r.data.resize(d.datao + d.datal);
        std::memcpy(r.data.data() + d.datao, p->data.data(), d.datal);
        if (d.ch.flags & tcp::pdu_flag::kSuccess) {
          r.ok = true;
          r.success_flag = true;
          r.cqe.cid = cid;
          return r;
        }
        continue;
      }
      if (p->type == tcp::PduType::capsule_resp) {
        r.cqe = p->as<tcp::CapsuleResp>().cqe;
        r.ok = r.cqe.cid == cid;
        if (r.ok) return r;
        continue;
      }
      return r;  // a TermReq or something unexpected
    }
  }

  /// Fabrics Connect; returns the reply (DW0 = CNTLID).
  Reply connect_queue(const std::string& subnqn, uint16_t qid, uint16_t cntlid = 0xffff,
                      uint32_t kato_ms = 0, uint16_t sqsize = 31, const char* hostnqn = kHostNqn,
                      uint8_t cattr = 0) {
    Sqe c;
    prep_connect(c, qid, sqsize, kato_ms, cattr);
    nvmf_connect_data d{};
    std::memset(d.hostid, 0x5a, sizeof d.hostid);
    d.cntlid = cntlid;
    std::strncpy(d.subsysnqn, subnqn.c_str(), sizeof d.subsysnqn - 1);
    std::strncpy(d.hostnqn, hostnqn, sizeof d.hostnqn - 1);
    return exec(c, &d, sizeof d);
  }

  Reply property_get(uint32_t offset, bool size8) {
    Sqe c;
    prep_property_get(c, offset, size8);
    return exec(c);
  }
  Reply property_set(uint32_t offset, uint64_t v) {
    Sqe c;
    prep_property_set(c, offset, v, false);
    return exec(c);
  }
  Reply identify(uint8_t cns_value, uint32_t nsid = 0) {
    Sqe c;
    prep_identify(c, cns_value, nsid);
    return exec(c, nullptr, 0, 4096);
  }
  Reply get_log(uint8_t lid, uint32_t len, uint64_t offset = 0, uint8_t lsp = 0) {
    Sqe c;
    prep_get_log_page(c, lid, 0xffffffff, len, offset, lsp);
    return exec(c, nullptr, 0, len);
  }
  /// Cross-Controller Reset of controller `icid` named by its CIU and CIRN.
  Reply ccr(uint16_t icid, uint8_t ciu, uint64_t cirn) {
    Sqe c;
    prep_cross_controller_reset(c, icid, ciu, cirn);
    return exec(c);
  }
  /// Sends an Asynchronous Event Request with command id `cid` (wait_reply(cid) collects it).
  void send_aer(uint16_t cid) {
    Sqe c;
    prep_async_event_request(c);
    c.cid = cid;
    set_sgl(c, sgl::kTransportDataBlock, 0, 0);
    send_capsule(c);
  }
  Reply write(uint32_t nsid, uint64_t slba, uint32_t nlb, const void* data, uint32_t len) {
    Sqe c;
    prep_write(c, nsid, slba, nlb);
    return exec(c, data, len);
  }
  Reply read(uint32_t nsid, uint64_t slba, uint32_t nlb, uint32_t len) {
    Sqe c;
    prep_read(c, nsid, slba, nlb);
    return exec(c, nullptr, 0, len);
  }

  /// Admin queue up to a ready controller: ICReq, Connect, CC.EN = 1.
  bool open_admin(uint16_t port, const std::string& subnqn, uint32_t kato_ms = 0,
                  const char* hostnqn = kHostNqn) {
    if (!connect(port) || !ic()) return false;
    auto r = connect_queue(subnqn, 0, 0xffff, kato_ms, 31, hostnqn);
    if (!r.ok || !r.status().is_success()) return false;
    cntlid_ = static_cast<uint16_t>(r.cqe.dw0);
    return property_set(prop::kCc, 1 | (6u << 16) | (4u << 20)).ok;
  }
  bool open_io(uint16_t port, const std::string& subnqn, uint16_t cntlid, uint16_t qid = 1,
               const char* hostnqn = kHostNqn) {
    if (!connect(port) || !ic()) return false;
    icd_ = 8192;
    auto r = connect_queue(subnqn, qid, cntlid, 0, 31, hostnqn);
    return r.ok && r.status().is_success();
  }
  uint16_t cntlid() const { return cntlid_; }

  /// The next PDU within `timeout_ms`, or nullopt (timeout, close, or a receive error).
  std::optional<Pdu> next(int timeout_ms) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (pdus_.empty()) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          until - std::chrono::steady_clock::now()).count();
      if (left <= 0 || closed_) return std::nullopt;
      uint8_t buf[65536];
      ssize_t n = 0;
      if (tls_) {
        auto r = tls_->read_some({buf, sizeof buf}, std::chrono::milliseconds(left));
        if (!r && r.error() == make_error_code(Errc::timeout)) continue;
        n = r ? static_cast<ssize_t>(*r) : 0;
      } else {
        pollfd p{fd_, POLLIN, 0};
        if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
        n = ::recv(fd_, buf, sizeof buf, 0);
      }
      if (n <= 0) {
        closed_ = true;
        return std::nullopt;
      }
      size_t off = 0;
      while (off < static_cast<size_t>(n)) {
        const auto [used, err] = reader_.consume(buf + off, static_cast<size_t>(n) - off, *this);
        off += used;
        if (err != Errc::ok) {
          reader_error = err;
          closed_ = true;
          return std::nullopt;
        }
      }
    }
    Pdu p = std::move(pdus_.front());
    pdus_.pop_front();
    return p;
  }

  /// Whether the target closed the connection (FIN or RST) as far as next() has read.
  bool closed() const { return closed_; }

  /// True when the target closes the connection (FIN or RST) within `timeout_ms`; PDUs that
  /// arrive first are discarded.
  bool closed_within(int timeout_ms) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (!closed_) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          until - std::chrono::steady_clock::now()).count();
      if (left <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
      uint8_t buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) closed_ = true;
    }
    return true;
  }

  // PduReader handler.
  Errc on_header(const uint8_t* h, const tcp::HeaderCheck& hc, uint8_t*& dst) {
    cur_ = Pdu{};
    cur_.type = static_cast<tcp::PduType>(h[0]);
    cur_.hdr.assign(h, h + hc.header_total);
    cur_.data.resize(hc.data_len);
    dst = cur_.data.data();
    return Errc::ok;
  }
  Errc on_pdu(const uint8_t*, const tcp::HeaderCheck&) {
    pdus_.push_back(std::move(cur_));
    return Errc::ok;
  }

  Errc reader_error = Errc::ok;
  uint32_t icd_ = 8192;  // what this client puts in capsules (admin: 8192; I/O: the target's)

 private:
  int fd_ = -1;
  std::unique_ptr<tls::SocketStream> tls_;
  int rcvbuf_ = 0;
  bool closed_ = false;
  uint16_t cid_ = 0;
  uint16_t cntlid_ = 0;
  uint32_t maxh2cdata_ = 131072;
  tcp::Negotiated neg_{};
  tcp::PduReader reader_{tcp::Role::host, 1u << 20};
  std::deque<Pdu> pdus_;
  Pdu cur_;
};

}  // namespace nvmeof::test
