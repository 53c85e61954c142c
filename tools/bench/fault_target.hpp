// Where nvmeof-bench sends its faults: the embedded target in-process, or an external
// nvmeof-target through its control socket (--target-control). Main thread only.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "nvmeof/target.hpp"

namespace nvmeof::bench {

class FaultTarget {
 public:
  virtual ~FaultTarget() = default;
  /// Each returns false with `error()` set when the fault could not be delivered.
  virtual bool set_ana_state(size_t port, AnaState s) = 0;
  virtual bool inject(size_t port, FaultKind kind) = 0;
  virtual bool set_latency(size_t port, std::chrono::microseconds latency) = 0;
  virtual bool fail_commands(size_t port, NvmeStatus status) = 0;
  virtual bool clear_faults(size_t port) = 0;
  const std::string& error() const noexcept { return error_; }

 protected:
  std::string error_;
};

/// The embedded target (never fails).
std::unique_ptr<FaultTarget> local_fault_target(Target& t);
/// An external target's control socket. Checks it answers (a stats request) and has more than
/// `max_port` ports; nullptr with `error` set otherwise.
std::unique_ptr<FaultTarget> remote_fault_target(const std::string& path, size_t max_port, std::string& error);

}  // namespace nvmeof::bench
