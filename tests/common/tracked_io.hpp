// One VolumeIo a test submits and then waits for: the status it completed with, and a bounded
// wait, so that an I/O the volume never finishes fails the test instead of hanging it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

#include "nvmeof/volume.hpp"

namespace nvmeof::test {

struct TrackedIo {
  VolumeIo io;
  std::atomic<bool> fin{false};
  std::atomic<uint16_t> raw{0};

  TrackedIo(IoOp op, void* buf, uint64_t lba, uint32_t nlb = 1) {
    io.op = op;
    io.slba = lba;
    io.nlb = nlb;
    io.buf = buf;
    io.user = this;
    io.done = [](VolumeIo& i, NvmeStatus st) noexcept {
      auto* self = static_cast<TrackedIo*>(i.user);
      self->raw.store(st.raw);
      self->fin.store(true);
    };
  }
  TrackedIo(const TrackedIo&) = delete;
  TrackedIo& operator=(const TrackedIo&) = delete;

  /// Whether it completed within `limit`.
  bool wait(std::chrono::milliseconds limit = std::chrono::seconds(10)) {
    const auto give_up = std::chrono::steady_clock::now() + limit;
    while (!fin.load() && std::chrono::steady_clock::now() < give_up)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return fin.load();
  }
  NvmeStatus status() const { return NvmeStatus{raw.load()}; }
};

}  // namespace nvmeof::test
