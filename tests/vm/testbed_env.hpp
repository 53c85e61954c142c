// What the testbed guest tells a test binary through its environment (guest_lib.sh exports NQN,
// TCP1, TCP2, RDMA_ADDR, NVMET), and connect options sized for TCG.
#pragma once

#include <chrono>
#include <cstdlib>
#include <string>

#include "nvmeof/controller.hpp"

namespace nvmeof::test {

inline std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

inline std::string testbed_nqn() { return env_or("NQN", "nqn.2014-08.org.nvmexpress:nvmeof-testbed"); }

/// Connect options for the guest's subsystem. TCG makes everything about 50 times slower than
/// on hardware, hence the long timeouts.
inline ConnectOptions testbed_options(Digest d = Digest::none) {
  ConnectOptions o;
  o.subnqn = testbed_nqn();
  o.digest = d;
  o.connect_timeout = std::chrono::seconds(10);
  o.admin_timeout = std::chrono::seconds(10);
  return o;
}

}  // namespace nvmeof::test
