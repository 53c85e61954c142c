#include "target/target_control_server.hpp"

#include <boost/asio/post.hpp>

#include <future>

#include "target/target_control.hpp"

namespace nvmeof::tools {

Result<void> TargetControlServer::start(Target& t, const std::string& path) {
  auto s = detail::ControlSocket::open(ctx_, path, [&t](std::string_view line) {
    return answer_target_request(t, line);
  });
  if (!s) return s.error();
  sock_ = std::move(*s);
  thread_ = std::thread([this] {
    auto guard = boost::asio::make_work_guard(ctx_);
    ctx_.run();
  });
  return {};
}

void TargetControlServer::stop() {
  if (!thread_.joinable()) return;
  std::promise<void> closed;
  boost::asio::post(ctx_, [this, &closed] {
    sock_->close();
    closed.set_value();
  });
  closed.get_future().wait();
  ctx_.stop();
  thread_.join();
  sock_.reset();
}

}  // namespace nvmeof::tools
