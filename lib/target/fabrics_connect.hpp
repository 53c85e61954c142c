// Fabrics Connect on the embedded target: an admin queue connect creates a controller with a
// dynamic id; an I/O queue connect joins an existing controller of the same host.
// Threading: runs on the connecting queue's connection thread; the subsystem's controller
// registry and the controller's I/O queue registry synchronize themselves.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "nvmeof/command.hpp"
#include "nvmeof/status.hpp"
#include "nvmeof/target.hpp"

namespace nvmeof::target {

class Controller;
class Subsystem;
class TcpConnection;
struct TargetCore;

struct ConnectResult {
  /// The host's entry in the subsystem's configuration (its keys), or nullptr.
  const TargetHost* host = nullptr;
  NvmeStatus status;
  uint32_t dw0 = 0;  ///< CNTLID on success; IATTR/IPO of the bad parameter on failure
  Subsystem* subsys = nullptr;
  std::shared_ptr<Controller> ctrl;
  uint16_t qid = 0;
  uint32_t sq_entries = 0;  ///< SQSIZE + 1
  bool sq_flow_control = true;  ///< false when the host disabled it (CATTR bit 2)
  /// Set when the subsystem does not allow the host (status connect-invalid-host): its NQNs,
  /// for the one line the connection logs.
  std::string refused_host;
  std::string refused_subsystem;
  /// Set with status connect-invalid-parameters: which parameter, in words (logged).
  const char* refused_why = nullptr;
};

/// Validates and executes a Connect that arrived on `port` with connect data `data`.
/// Errors (CQE status): connect-invalid-host (SCT 1h SC 84h) when the subsystem does not allow
/// the host NQN (Subsystem::allows), connect-incompatible-format (RECFMT), connect-invalid-parameters with
/// DW0 naming the field (empty host NQN, unknown subsystem NQN, SQSIZE 0 or above MQES, unknown CNTLID, another
/// host's controller, QID out of range or on the discovery subsystem), connect-controller-busy
/// (QID already connected, association being torn down, no free controller id).
ConnectResult accept_connect(TargetCore& core, size_t port, const Sqe& c,
                             std::span<const uint8_t> data, const std::shared_ptr<TcpConnection>& conn);

}  // namespace nvmeof::target
