// The admin commands the embedded target executes for NVM and discovery controllers: Identify
// (CNS 0-3), Get Log Page (error, SMART, firmware slot, ANA, discovery), Set/Get Features
// (Number of Queues, Keep Alive Timer, Async Event Configuration) and Keep Alive. Fabrics
// commands and Asynchronous Event Requests are the connection's (they bind or hold it).
// Threading: runs on the admin queue's connection thread, the only one that touches the
// controller's admin state.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nvmeof/command.hpp"
#include "nvmeof/status.hpp"

namespace nvmeof::target {

class Controller;
struct TargetCore;

struct AdminContext {
  TargetCore& core;
  Controller& ctrl;
  const std::string& local_addr;  ///< the address the host reached us at (discovery entries)
};

struct AdminResult {
  NvmeStatus status;
  uint32_t dw0 = 0;
};

/// Executes admin command `c`; data for the host goes to `out` (the caller sends at most the
/// SGL length of it). Errors: invalid opcode, invalid field, invalid namespace, invalid log page.
AdminResult execute_admin(const AdminContext& ctx, const Sqe& c, std::vector<uint8_t>& out);

}  // namespace nvmeof::target
