// The connection's byte stream: plaintext, or TLS 1.3 with the port's PSK (lib/tls). Kept apart
// from tcp_connection.cpp, which only calls wire_recv/wire_send where it used recv/send.
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
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
// Plaintext encrypted per TLS send: the ciphertext a host that stops reading leaves here.
constexpr size_t kTlsSendChunk = 256u << 10;

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
    // Read what arrived (the ICReq) so that the close is a FIN, not a reset: the host then
    // sees the port close on its ICReq, which is what tells it TLS is required.
    uint8_t icreq[256];
    while (::recv(fd_, icreq, sizeof icreq, MSG_DONTWAIT) > 0) {
    }
    port_.counters().tls_plaintext_refused.fetch_add(1, std::memory_order_relaxed);
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
    port_.counters().tls_failures.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  port_.counters().tls_sessions.fetch_add(1, std::memory_order_relaxed);
  tls_ = std::move(*st);
  tls_session_ = &tls_->session();
  return true;
}

ssize_t TcpConnection::wire_recv(uint8_t* buf, size_t len) {
  if (!channel_settled_) {
    channel_settled_ = true;
    if (!open_secure_channel()) return 0;  // seen as the host closing
  }
  if (!tls_) return ::recv(fd_, buf, len, MSG_DONTWAIT);
  // Through the session directly (not SocketStream::try_read, whose blocking flush would put
  // an answer to a post-handshake message ahead of ciphertext still waiting in tls_tx_).
  tls::Session& s = *tls_session_;
  for (;;) {
    auto n = s.read({buf, len});
    if (s.output_pending() > 0 && !send_pending_ciphertext()) return -1;
    if (!n) {
      if (n.error() == tls::TlsErrc::peer_closed) return 0;
      log("TLS receive failed", s.error_detail().c_str());
      errno = EPROTO;
      return -1;
    }
    if (*n > 0) return static_cast<ssize_t>(*n);
    const ssize_t r = ::recv(fd_, tls_rx_.data(), tls_rx_.size(), MSG_DONTWAIT);
    if (r > 0) {
      s.feed({tls_rx_.data(), static_cast<size_t>(r)});
    } else if (r == 0 || errno == ECONNRESET) {
      s.peer_closed();
    } else {
      return -1;  // EAGAIN (nothing yet), EINTR, or the socket's error
    }
  }
}

ssize_t TcpConnection::wire_send(const uint8_t* buf, size_t len) {
  if (!tls_) return ::send(fd_, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL);
  // Ciphertext of an earlier chunk goes first; until it is out nothing new is taken, so a host
  // that stops reading holds at most one chunk here (beside the output the caller bounds).
  tls::Session& s = tls_->session();
  if (!send_pending_ciphertext()) return -1;
  if (s.output_pending() > 0 || len == 0) {
    errno = EAGAIN;
    return s.output_pending() > 0 ? -1 : 0;
  }
  const size_t n = std::min(len, kTlsSendChunk);
  if (auto w = s.write({buf, n}); !w) {
    log("TLS send failed", s.error_detail().c_str());
    errno = EPROTO;
    return -1;
  }
  // The chunk is taken (encrypted) whether or not the socket takes its ciphertext now.
  if (!send_pending_ciphertext()) return -1;
  return static_cast<ssize_t>(n);
}

// Sends what the socket takes of the session's ciphertext without waiting. False (errno set)
// when the socket failed; true otherwise, whatever is left.
bool TcpConnection::send_pending_ciphertext() {
  tls::Session& s = tls_->session();
  for (;;) {
    // Bytes taken out of the session go first; then the next piece of its output.
    if (tls_tx_off_ == tls_tx_len_) {
      if (s.output_pending() == 0) return true;
      tls_tx_len_ = s.take_output({tls_tx_.data(), tls_tx_.size()});
      tls_tx_off_ = 0;
    }
    const ssize_t w = ::send(fd_, tls_tx_.data() + tls_tx_off_, tls_tx_len_ - tls_tx_off_,
                             MSG_DONTWAIT | MSG_NOSIGNAL);
    if (w > 0) {
      tls_tx_off_ += static_cast<size_t>(w);
      continue;
    }
    if (w < 0 && errno == EINTR) continue;
    return w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }
}

size_t TcpConnection::wire_pending() const noexcept {
  if (!tls_) return 0;
  return tls_session_->output_pending() + (tls_tx_len_ - tls_tx_off_);
}

void TcpConnection::wire_close() noexcept {
  if (!tls_ || tls_closed_) return;
  tls_closed_ = true;
  tls_->session().close();
  (void)send_pending_ciphertext();
}

}  // namespace nvmeof::target
