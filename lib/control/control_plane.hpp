// The control plane's insides: one thread running a Boost.Asio io_context, and the Reactor that
// drives every admin queue on that thread. The reactor is created with
// CompletionNotify::eventfd; the io_context waits on that eventfd and runs reactor.poll(0)
// whenever completions arrive, so admin completions, keep-alive timers and posted work all run
// on the one control thread.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>

#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <thread>
#include <type_traits>

#include "nvmeof/controller.hpp"
#include "reactor/reactor.hpp"

namespace nvmeof {

// Threading: `io` and `thread_id` are set before the thread starts and never change; the reactor
// and the stream descriptor are used only on the control thread after that.
struct NVMEOF_LOCAL ControlPlaneImpl final : ControlPlane {
  ControlPlaneImpl() = default;
  ~ControlPlaneImpl() override;

  boost::asio::io_context io;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work;
  std::unique_ptr<Reactor> reactor;
  std::unique_ptr<boost::asio::posix::stream_descriptor> notify;
  std::thread thread;
  std::thread::id thread_id;
  int polling = 0;  // nesting of reactor polls on the control thread

  bool on_control_thread() const noexcept { return std::this_thread::get_id() == thread_id; }

  /// Runs the reactor once without blocking (sends what admin submits queued). Control thread.
  void kick() noexcept;
  /// Runs the reactor until `done()` or `timeout` (control thread; used by calls made from a
  /// control-thread callback, which cannot wait on a future).
  bool run_until(const std::function<bool()>& done, std::chrono::milliseconds timeout);

  /// Runs `fn` on the control thread and returns its result: inline when already there,
  /// otherwise posted and waited for.
  template <class F>
  auto call(F&& fn) -> std::invoke_result_t<F&> {
    using R = std::invoke_result_t<F&>;
    if (on_control_thread()) return fn();
    auto task = std::make_shared<std::packaged_task<R()>>(std::forward<F>(fn));
    auto fut = task->get_future();
    boost::asio::post(io, [task] { (*task)(); });
    return fut.get();
  }

  void arm_notify();
};

/// The library's way to a ControlPlane's thread and io_context: every ControlPlane is a
/// ControlPlaneImpl, the only kind ControlPlane::create() makes.
struct ControllerAccess {
  static ControlPlaneImpl& impl(ControlPlane& cp) noexcept { return static_cast<ControlPlaneImpl&>(cp); }
};

}  // namespace nvmeof
