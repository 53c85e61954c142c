// The connection's byte stream: plaintext, or TLS 1.3 with the port's PSK (lib/tls). Kept apart
// from tcp_connection.cpp, which only calls wire_recv/wire_send where it used recv/send.
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>

#include "target/port.hpp"
#include "target/target_core.hpp"
#include "target/tcp_connection.hpp"
#include "tls/psk.hpp"

namespace nvmeof::target {
namespace {

// The first byte of a TLS handshake record; an NVMe/TCP ICReq starts with PDU type 0.
constexpr uint8_t kTlsHandshakeRecord = 0x16;
constexpr int kFirstByteTimeoutMs = 10000;
constexpr int kSliceMs = 100;

}  // namespace

bool TcpConnection::open_secure_channel() {
  const TargetPort& cfg = port_.config();
  if (cfg.tls == PortTls::none) return true;
  // The host speaks first either way: a ClientHello or an ICReq tells which it chose.
  // Waited for in slices, so that a target stopping meanwhile is not held up.
  uint8_t first = 0;
  bool ready = false;
  for (int waited = 0; !ready && waited < kFirstByteTimeoutMs; waited += kSliceMs) {
    if (close_request() != CloseKind::none) return false;
    pollfd p{fd_, POLLIN, 0};
    ready = ::poll(&p, 1, kSliceMs) == 1;
  }
  if (!ready || ::recv(fd_, &first, 1, MSG_PEEK) != 1) {
    log("closed", "no data from the host");
    return false;
  }
  if (first != kTlsHandshakeRecord) {
    if (cfg.tls == PortTls::not_required) return true;
    log("closed", "the port requires TLS and the host sent plaintext");
    return false;
  }
  auto psk = tls::parse_interchange(cfg.tls_psk);  // validated by Target::start
  if (!psk) {
    log("closed", "the port's TLS PSK does not parse");
    return false;
  }
  TargetCore& core = core_;
  // The discovery subsystem and every NVM subsystem of the target.
  auto lookup = tls::nvme_psk_lookup(std::move(*psk), [&core](std::string_view subnqn) {
    return core.subsystem(subnqn) != nullptr;
  });
  auto st = tls::SocketStream::handshake(fd_, tls::SessionConfig::server(std::move(lookup)));
  if (!st) {
    log("TLS handshake failed", st.error().message().c_str());
    return false;
  }
  tls_ = std::move(*st);
  return true;
}

ssize_t TcpConnection::wire_recv(uint8_t* buf, size_t len) {
  if (!channel_settled_) {
    channel_settled_ = true;
    if (!open_secure_channel()) return 0;  // seen as the host closing
  }
  if (!tls_) return ::recv(fd_, buf, len, MSG_DONTWAIT);
  auto n = tls_->try_read({buf, len});
  if (!n) {
    if (n.error() == tls::TlsErrc::peer_closed) return 0;
    log("TLS receive failed", n.error().message().c_str());
    errno = EPROTO;
    return -1;
  }
  if (*n == 0) {
    errno = EAGAIN;
    return -1;
  }
  return static_cast<ssize_t>(*n);
}

ssize_t TcpConnection::wire_send(const uint8_t* buf, size_t len) {
  if (!tls_) return ::send(fd_, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL);
  // Encrypted and sent whole (waiting for socket space, bounded): the caller's bookkeeping of
  // what is sent stays exact, with no ciphertext left behind in between.
  if (auto w = tls_->write_all({buf, len}, std::chrono::seconds(30)); !w) {
    errno = EPIPE;
    return -1;
  }
  return static_cast<ssize_t>(len);
}

}  // namespace nvmeof::target
