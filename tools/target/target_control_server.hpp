// The control socket of a running nvmeof-target: its own thread with a Boost.Asio loop serving
// lib/control's ControlSocket, answering with answer_target_request().
#pragma once

#include <boost/asio/io_context.hpp>

#include <memory>
#include <string>
#include <thread>

#include "observe/control_socket.hpp"
#include "nvmeof/target.hpp"

namespace nvmeof::tools {

class TargetControlServer {
 public:
  TargetControlServer() = default;
  ~TargetControlServer() { stop(); }
  TargetControlServer(const TargetControlServer&) = delete;
  TargetControlServer& operator=(const TargetControlServer&) = delete;

  /// Opens the socket at `path` and starts serving `t` (which must outlive stop()). Errors as
  /// ControlSocket::open. Main thread.
  Result<void> start(Target& t, const std::string& path);
  /// Closes the socket (the file goes) and joins the thread. Idempotent. Main thread.
  void stop();

 private:
  boost::asio::io_context ctx_;
  std::unique_ptr<detail::ControlSocket> sock_;
  std::thread thread_;
};

}  // namespace nvmeof::tools
