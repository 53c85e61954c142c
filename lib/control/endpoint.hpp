// What a volume needs from one path, whatever carries it: our own fabric controller (user-space
// NVMe/TCP or NVMe/RDMA), or a kernel controller whose namespace we drive by io_uring
// passthrough on /dev/ngXnY (Transport::passthrough).
//
// Threading: open_endpoint() and every call except create_io_queue() run on the volume's
// connect pool or control thread and may block up to the admin timeout; create_io_queue() runs
// on the reactor thread that will drive the pair.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "nvmeof/controller.hpp"
#include "nvmeof/identify.hpp"
#include "nvmeof/queue_pair.hpp"
#include "nvmeof/reactor.hpp"

namespace nvmeof::detail {

class PathEndpoint {
 public:
  virtual ~PathEndpoint() = default;
  virtual const ControllerInfo& info() const noexcept = 0;
  /// The NSID the path is bound to (a kernel namespace device), or none (a controller).
  virtual std::optional<uint32_t> fixed_nsid() const noexcept { return std::nullopt; }
  virtual Result<NamespaceInfo> identify_namespace(uint32_t nsid) = 0;
  virtual Result<std::vector<uint32_t>> active_namespaces() = 0;
  virtual Result<AnaLog> ana_log() = 0;
  /// A started I/O queue pair driven by `reactor` (called on its thread).
  virtual Result<std::unique_ptr<QueuePair>> create_io_queue(Reactor& reactor, uint32_t depth) = 0;
  /// Asynchronous events (CQE DW0) and admin-queue failure, on the control thread. A kernel
  /// path has neither (the kernel owns both): the volume polls health() and the ANA log.
  virtual bool has_async_events() const noexcept { return true; }
  virtual void on_async_event(std::function<void(uint32_t)> fn) = 0;
  virtual void on_failure(std::function<void(std::error_code)> fn) = 0;
  /// Polled by the volume for paths without their own failure report; empty while healthy.
  virtual std::error_code health() { return {}; }
  /// Fence after a failure: tear the connection down so that nothing sent on it can still run.
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
