// A blocking TLS stream over a connected socket fd, for code that owns a thread per connection
// (the embedded target's connections, tests, tools). It drives a memory-BIO Session (session.hpp)
// with poll/recv/send on the fd, so it behaves exactly as the reactor's non-blocking use does.
//
// Threading: one thread uses a SocketStream at a time. The fd stays owned by the caller (never
// closed here) and may be blocking or non-blocking (every wait is a poll with a timeout).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "nvmeof/status.hpp"
#include "tls/session.hpp"

namespace nvmeof::tls {

class SocketStream {
 public:
  /// Runs the handshake on `fd` in cfg.role until done or cfg.handshake_timeout.
  /// Errors: those of Session::handshake, io_error (send/recv failed).
  static Result<std::unique_ptr<SocketStream>> handshake(int fd, SessionConfig cfg);

  /// Encrypts and sends all of `data`; waits at most `timeout` for socket space each time.
  /// Errors: record_error, io_error, handshake_timeout is never returned here; Errc::timeout.
  Result<void> write_all(std::span<const uint8_t> data,
                         std::chrono::milliseconds timeout = std::chrono::seconds(30));
  /// At least one plaintext byte (at most out.size()), waiting at most `timeout`.
  /// Errors: peer_closed, record_error, io_error, Errc::timeout.
  Result<size_t> read_some(std::span<uint8_t> out,
                           std::chrono::milliseconds timeout = std::chrono::seconds(30));
  /// Never waits for the socket: plaintext the session holds or can decrypt from what the
  /// socket has now (at most out.size()); 0 when there is none yet (poll the fd for POLLIN).
  /// Errors: peer_closed, record_error, io_error.
  Result<size_t> try_read(std::span<uint8_t> out);
  /// Exactly out.size() plaintext bytes. Errors: as read_some.
  Result<void> read_exact(std::span<uint8_t> out,
                          std::chrono::milliseconds timeout = std::chrono::seconds(30));
  /// Sends close_notify (best effort).
  void close() noexcept;

  Session& session() noexcept { return *session_; }
  /// Gives up the session (the stream is unusable afterwards): for code that did the
  /// handshake and the ICReq blocking and then drives the session from a reactor.
  std::unique_ptr<Session> release_session() noexcept { return std::move(session_); }
  int fd() const noexcept { return fd_; }

 private:
  SocketStream(int fd, std::unique_ptr<Session> s) : fd_(fd), session_(std::move(s)) {}
  Result<void> flush(std::chrono::steady_clock::time_point until);
  Result<void> receive(std::chrono::steady_clock::time_point until, std::error_code on_timeout);

  int fd_;
  std::unique_ptr<Session> session_;
  std::vector<uint8_t> buf_ = std::vector<uint8_t>(64 * 1024);
};

}  // namespace nvmeof::tls
