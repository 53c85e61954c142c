// nvmeof::Task: the smallest coroutine type that can co_await a volume (Volume::read, write,
// flush, write_zeroes, dsm). It starts at once, runs until its first co_await, and continues on
// the reactor thread that completes each I/O; its result (or the exception that ended it) goes
// to a std::future, so another thread can wait for it:
//
//   nvmeof::Task<int> copy(nvmeof::Volume& v) { ... co_await v.read(...); ... co_return 0; }
//   int rc = copy(volume).result.get();
//
// A Task whose result nobody waits for may be dropped: the coroutine runs to its end anyway and
// frees itself. Keep what it uses (buffers, the volume) alive until it ends.
//
// Threading: the coroutine body runs on the thread that called it until the first co_await,
// then on reactor threads: keep it short and never block in it (no waiting for another Task).
#pragma once

#include <coroutine>
#include <exception>
#include <future>
#include <utility>

namespace nvmeof {

namespace task_detail {
template <class T>
struct PromiseBase {
  std::promise<T> promise;
  std::suspend_never initial_suspend() noexcept { return {}; }
  std::suspend_never final_suspend() noexcept { return {}; }
  void unhandled_exception() { promise.set_exception(std::current_exception()); }
};
}  // namespace task_detail

template <class T = void>
struct Task {
  struct promise_type : task_detail::PromiseBase<T> {
    Task get_return_object() { return Task{this->promise.get_future()}; }
    template <class U>
    void return_value(U&& v) {
      this->promise.set_value(std::forward<U>(v));
    }
  };
  std::future<T> result;
};

template <>
struct Task<void> {
  struct promise_type : task_detail::PromiseBase<void> {
    Task get_return_object() { return Task{promise.get_future()}; }
    void return_void() { promise.set_value(); }
  };
  std::future<void> result;
};

}  // namespace nvmeof
