// What a volume needs from one path, whatever carries it: our own fabric controller (user-space
// NVMe/TCP or NVMe/RDMA), or a kernel controller whose namespace we drive by io_uring
// passthrough on /dev/ngXnY (Transport::passthrough).
//
// Threading: open_endpoint() and every call run on the volume's connect pool or control thread
// and may block up to the admin timeout, except PreparedQueue::start, which runs on the reactor
// thread that will drive the pair.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "control/controller_access.hpp"
#include "nvmeof/controller.hpp"
#include "nvmeof/identify.hpp"
#include "transport/queue_pair.hpp"
#include "reactor/reactor.hpp"

namespace nvmeof::detail {

using nvmeof::PreparedQueue;

class PathEndpoint {
 public:
  virtual ~PathEndpoint() = default;
  virtual const ControllerInfo& info() const noexcept = 0;
  /// The NSID the path is bound to (a kernel namespace device), or none (a controller).
  virtual std::optional<uint32_t> fixed_nsid() const noexcept { return std::nullopt; }
  virtual Result<NamespaceInfo> identify_namespace(uint32_t nsid) = 0;
  virtual Result<std::vector<uint32_t>> active_namespaces() = 0;
  virtual Result<AnaLog> ana_log() = 0;
  /// The Changed Namespace List (fabric::changed_namespaces); unsupported where the kernel owns
  /// the controller's events.
  virtual Result<std::vector<uint32_t>> changed_namespaces() { return Errc::unsupported; }
  /// Connects an I/O queue pair that `reactor` will drive: the blocking part runs here, on the
  /// calling thread (never a reactor), with its memory on `memory_node`; the returned start()
  /// runs on the reactor's thread.
  virtual Result<PreparedQueue> prepare_io_queue(Reactor& reactor, uint32_t depth, int memory_node) = 0;
  /// Asynchronous events (CQE DW0) and admin-queue failure, on the control thread. A kernel
  /// path has neither (the kernel owns both): the volume polls health() and the ANA log.
  virtual bool has_async_events() const noexcept { return true; }
  virtual void on_async_event(std::function<void(uint32_t)> fn) = 0;
  virtual void on_failure(std::function<void(std::error_code)> fn) = 0;
  /// False once the controller has failed (a failure before on_failure() was set told no one).
  virtual bool is_live() const noexcept { return true; }
  /// Polled by the volume for paths without their own failure report; empty while healthy.
  virtual std::error_code health() { return {}; }
  /// The keep-alive timeout the controller counts (ms; 0 when unknown): with CQT it bounds how
  /// long a controller cut off from us may still execute what it received (TP4129).
  virtual uint32_t kato_ms() const noexcept = 0;
  /// Keep Alive commands sent on this path's controller (0 for a kernel path).
  virtual uint64_t keep_alives_sent() const noexcept { return 0; }
  /// True when Cross-Controller Resets can be sent through this path (CCRL > 0).
  virtual bool can_reset_others() const noexcept { return false; }
  /// Cross-Controller Reset of `impacted` through this path (TP8028). Errors: unsupported, and
  /// those of Controller::cross_controller_reset.
  virtual Result<void> cross_controller_reset(const ControllerInfo&, std::chrono::milliseconds) {
    return Errc::unsupported;
  }
  /// Fence after a failure: tear our side of the connection down (which by itself proves
  /// nothing to a controller that cannot see it).
  virtual void fence() = 0;
  /// Let the path go when the volume closes.
  virtual void close() = 0;
};

/// Connects a path: a fabric controller for tcp/rdma addresses, a kernel path for passthrough
/// ones (addr.traddr is the /dev/ngXnY device). Errors: those of Controller::connect, and for a
/// kernel path ENOENT (no such device or controller), not_connected (its controller is not
/// live), the errors of the admin device.
Result<std::shared_ptr<PathEndpoint>> open_endpoint(ControlPlane& cp, const TransportAddress& addr,
                                                    const ConnectOptions& opts);

/// The kernel path behind addr.traddr (/dev/ngXnY). Errc::unsupported when built without
/// io_uring passthrough.
Result<std::shared_ptr<PathEndpoint>> open_kernel_endpoint(const TransportAddress& addr);

}  // namespace nvmeof::detail
