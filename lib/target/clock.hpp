// The target's one clock: steady nanoseconds, shared by deadlines in every thread.
#pragma once

#include <time.h>

#include <cstdint>

namespace nvmeof::target {

inline uint64_t now_ns() noexcept {
  timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace nvmeof::target
