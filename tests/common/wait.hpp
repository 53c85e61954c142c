// Waiting in tests: for a condition, for a volume's stats to show something, for one I/O. Every
// wait polls for an event and is bounded, so that a test on a loaded machine waits as long as it
// must, and one whose event never comes fails instead of hanging. None of them sleeps for a
// fixed time in place of an event.
#pragma once

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <future>
#include <thread>

#include "nvmeof/volume.hpp"

namespace nvmeof::test {

/// Polls `cond` until it holds or `timeout` passes; returns whether it held.
template <class F>
bool wait_until(F&& cond, std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (!cond()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

/// Polls the volume's stats until `pred` holds or `bound` passes; returns the last snapshot, so
/// that the caller checks (and reports) what the volume showed.
template <class Pred>
VolumeStats wait_for(const Volume& vol, std::chrono::milliseconds bound, Pred&& pred) {
  VolumeStats s;
  wait_until([&] {
    s = vol.stats();
    return pred(s);
  }, bound);
  return s;
}

/// One I/O submitted from this thread and waited for (bounded); its status.
inline NvmeStatus run_io(Volume& v, IoOp op, void* buf, uint64_t slba, uint32_t nlb,
                         std::chrono::milliseconds bound = std::chrono::seconds(20)) {
  std::promise<NvmeStatus> done;
  auto fut = done.get_future();
  VolumeIo io;
  io.op = op;
  io.slba = slba;
  io.nlb = nlb;
  io.buf = buf;
  io.user = &done;
  io.done = [](VolumeIo& i, NvmeStatus s) noexcept { static_cast<std::promise<NvmeStatus>*>(i.user)->set_value(s); };
  REQUIRE(v.submit(io) == 0);
  REQUIRE(fut.wait_for(bound) == std::future_status::ready);
  return fut.get();
}

}  // namespace nvmeof::test
