#include "control/control_plane.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <system_error>

namespace nvmeof {

void ControlPlaneImpl::kick() noexcept {
  ++polling;
  reactor->poll();
  --polling;
}

bool ControlPlaneImpl::run_until(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
  ++polling;
  const bool ok = reactor->run_until(done, timeout);
  --polling;
  return ok;
}

void ControlPlaneImpl::arm_notify() {
  notify->async_wait(boost::asio::posix::stream_descriptor::wait_read,
                     [this](const boost::system::error_code& ec) {
                       if (ec) return;  // cancelled at shutdown
                       // Reset the counter before reaping: a completion posted after the read
                       // signals the eventfd again, one posted before it is reaped below.
                       uint64_t v;
                       [[maybe_unused]] const ssize_t r = ::read(notify->native_handle(), &v, sizeof v);
                       kick();
                       arm_notify();
                     });
}

// A plane that fails half-way is destroyed like any other: without a thread, the destructor
// only releases what was made.
Result<std::unique_ptr<ControlPlane>> ControlPlane::create() {
  auto cp = std::make_unique<ControlPlaneImpl>();
  ControlPlaneImpl& im = *cp;
  ReactorOptions ro;
  ro.ring_entries = 256;
  ro.post_capacity = 1024;
  ro.notify = CompletionNotify::eventfd;
  auto r = Reactor::create(ro);
  if (!r) return {r.error(), "nvmeof: control plane reactor: " + r.message()};
  im.reactor = std::move(*r);
  const int fd = ::dup(im.reactor->notify_fd());
  if (fd < 0) {
    const std::error_code ec = errno_code(errno);
    return {ec, "nvmeof: control plane eventfd: " + ec.message()};
  }
  im.notify = std::make_unique<boost::asio::posix::stream_descriptor>(im.io, fd);
  im.work.emplace(im.io.get_executor());
  std::promise<void> started;
  auto fut = started.get_future();
  try {
    im.thread = std::thread([&im, &started] {
      im.thread_id = std::this_thread::get_id();
      im.arm_notify();
      started.set_value();
      im.io.run();
    });
  } catch (const std::system_error& e) {  // std::thread reports a thread it cannot start so
    return {e.code(), std::string("nvmeof: control plane thread: ") + e.what()};
  }
  fut.get();
  return std::unique_ptr<ControlPlane>(std::move(cp));
}

ControlPlane::~ControlPlane() = default;

ControlPlaneImpl::~ControlPlaneImpl() {
  ControlPlaneImpl& im = *this;
  if (!im.notify) {  // create() failed before the thread could start
    im.reactor.reset();
    return;
  }
  boost::asio::post(im.io, [&im] {
    boost::system::error_code ignored;
    im.notify->cancel(ignored);
    im.work.reset();
    im.io.stop();  // controllers are gone; nothing left is worth waiting for
  });
  if (im.thread.joinable()) im.thread.join();
  im.notify.reset();
  im.reactor.reset();
}

}  // namespace nvmeof
