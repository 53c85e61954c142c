#include "tls/socket_stream.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>

namespace nvmeof::tls {
namespace {

int ms_left(std::chrono::steady_clock::time_point until) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      until - std::chrono::steady_clock::now());
  return left.count() <= 0 ? 0 : static_cast<int>(std::min<long long>(left.count(), 1 << 30));
}

}  // namespace

Result<void> SocketStream::flush(std::chrono::steady_clock::time_point until) {
  while (session_->output_pending() > 0) {
    const size_t n = session_->take_output(buf_);
    size_t off = 0;
    while (off < n) {
      const ssize_t w = ::send(fd_, buf_.data() + off, n - off, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w > 0) {
        off += static_cast<size_t>(w);
        continue;
      }
      if (w < 0 && errno == EINTR) continue;
      if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        pollfd p{fd_, POLLOUT, 0};
        const int left = ms_left(until);
        if (left == 0 || ::poll(&p, 1, left) == 0) return make_error_code(Errc::timeout);
        continue;
      }
      if (w < 0 && (errno == EPIPE || errno == ECONNRESET)) return make_error_code(TlsErrc::peer_closed);
      return make_error_code(TlsErrc::io_error);
    }
  }
  return {};
}

Result<void> SocketStream::receive(std::chrono::steady_clock::time_point until,
                                   std::error_code on_timeout) {
  for (;;) {
    const ssize_t r = ::recv(fd_, buf_.data(), buf_.size(), MSG_DONTWAIT);
    if (r > 0) {
      session_->feed({buf_.data(), static_cast<size_t>(r)});
      return {};
    }
    if (r == 0 || (r < 0 && errno == ECONNRESET)) {
      session_->peer_closed();
      return {};
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return make_error_code(TlsErrc::io_error);
    pollfd p{fd_, POLLIN, 0};
    const int left = ms_left(until);
    if (left == 0) return on_timeout;
    const int pr = ::poll(&p, 1, left);
    if (pr < 0 && errno != EINTR) return make_error_code(TlsErrc::io_error);
  }
}

Result<std::unique_ptr<SocketStream>> SocketStream::handshake(int fd, SessionConfig cfg) {
  auto s = Session::create(std::move(cfg));
  if (!s) return s.error();
  std::unique_ptr<SocketStream> st(new SocketStream(fd, std::move(*s)));
  const auto until = st->session_->handshake_deadline();
  for (;;) {
    auto h = st->session_->handshake();
    // Send what the step produced, the alert of a failure included (best effort then).
    auto f = st->flush(until);
    if (!h) return h.error();
    if (!f) return f.error() == make_error_code(Errc::timeout)
                       ? make_error_code(TlsErrc::handshake_timeout)
                       : f.error();
    if (*h == HandshakeState::done) return st;
    auto r = st->receive(until, make_error_code(TlsErrc::handshake_timeout));
    if (!r) {
      if (r.error() == make_error_code(TlsErrc::handshake_timeout)) {
        // Let the session record the timeout so its state and detail agree.
        (void)st->session_->handshake(until);
      }
      return r.error();
    }
  }
}

Result<void> SocketStream::write_all(std::span<const uint8_t> data, std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  // Encrypt in pieces so the ciphertext buffered at once stays bounded.
  constexpr size_t kChunk = 256 * 1024;
  for (size_t off = 0; off < data.size(); off += kChunk) {
    auto w = session_->write(data.subspan(off, std::min(kChunk, data.size() - off)));
    if (!w) return w;
    auto f = flush(until);
    if (!f) return f;
  }
  return {};
}

Result<size_t> SocketStream::read_some(std::span<uint8_t> out, std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto n = session_->read(out);
    // A post-handshake message (KeyUpdate) may need an answer.
    if (session_->output_pending() > 0) {
      auto f = flush(until);
      if (!f) return f.error();
    }
    if (!n) return n.error();
    if (*n > 0) return *n;
    auto r = receive(until, make_error_code(Errc::timeout));
    if (!r) return r.error();
  }
}

Result<size_t> SocketStream::try_read(std::span<uint8_t> out) {
  for (;;) {
    auto n = session_->read(out);
    if (session_->output_pending() > 0) {
      auto f = flush(std::chrono::steady_clock::now() + std::chrono::seconds(1));
      if (!f) return f.error();
    }
    if (!n) return n.error();
    if (*n > 0) return *n;
    const ssize_t r = ::recv(fd_, buf_.data(), buf_.size(), MSG_DONTWAIT);
    if (r > 0) {
      session_->feed({buf_.data(), static_cast<size_t>(r)});
    } else if (r == 0 || errno == ECONNRESET) {
      session_->peer_closed();
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      return size_t{0};
    } else if (errno != EINTR) {
      return make_error_code(TlsErrc::io_error);
    }
  }
}

Result<void> SocketStream::read_exact(std::span<uint8_t> out, std::chrono::milliseconds timeout) {
  size_t off = 0;
  while (off < out.size()) {
    auto n = read_some(out.subspan(off), timeout);
    if (!n) return n.error();
    off += *n;
  }
  return {};
}

void SocketStream::close() noexcept {
  session_->close();
  (void)flush(std::chrono::steady_clock::now() + std::chrono::seconds(1));
}

}  // namespace nvmeof::tls
