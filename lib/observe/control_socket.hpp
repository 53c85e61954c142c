// A small request/response server on a Unix stream socket: one JSON object per line in, one per
// line out. The live-volume socket (VolumeOptions::control_socket) and nvmeof-target's --control
// socket both use it; control_request() is the client side the tools use.
//
// Threading: the socket lives on one Boost.Asio io_context. open() and close() must be called on
// that context's thread (or before it runs / after it stopped); the handler runs there too. After
// close() the handler is never called again, so it may capture objects that close() outlives.
#pragma once

#include <boost/asio/io_context.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "nvmeof/status.hpp"

namespace nvmeof::detail {

/// Longest request line accepted; a longer one gets an error reply and the connection closes.
inline constexpr size_t kControlMaxRequest = 64 * 1024;

class ControlSocket {
 public:
  /// Takes one request line (without the newline), returns the reply (without the newline).
  using Handler = std::function<std::string(std::string_view request)>;

  /// Binds `path` (a stale socket file nobody listens on is replaced; a live one is
  /// Errc::address_in_use / EADDRINUSE), makes it mode 0600 and starts accepting on `ctx`.
  /// Errors: errno codes from socket/bind/listen/chmod, EADDRINUSE, ENAMETOOLONG (path longer
  /// than sun_path).
  static Result<std::unique_ptr<ControlSocket>> open(boost::asio::io_context& ctx, std::string path,
                                                     Handler handler);
  ~ControlSocket();  ///< close()

  /// Stops accepting, closes every connection and removes the socket file. Idempotent.
  void close();
  const std::string& path() const noexcept { return path_; }

  struct State;

 private:
  ControlSocket(std::string path, std::shared_ptr<State> st);
  std::string path_;
  std::shared_ptr<State> st_;
};

/// Client: connects to `path`, sends `request` plus a newline, returns the reply line. Errors:
/// errno codes (ENOENT: no such socket, ECONNREFUSED: nobody listens, ETIMEDOUT after `timeout`,
/// ENAMETOOLONG, EPROTO: the peer closed without a reply).
Result<std::string> control_request(const std::string& path, std::string_view request,
                                    std::chrono::milliseconds timeout = std::chrono::seconds(5));

}  // namespace nvmeof::detail
