// A connection to one NVMe-oF controller over the user-space NVMe/TCP transport: the admin
// queue (owned by the control plane thread) and I/O queue pairs (each owned by a Reactor).
//
// Threading: connect(), the admin calls and create_io_queue() may be called from any thread;
// they block the caller (never a reactor other than the one passed in) up to their timeout.
// The admin queue, keep-alive and asynchronous events run on the ControlPlane's thread.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "nvmeof/command.hpp"
#include "nvmeof/identify.hpp"
#include "nvmeof/queue_pair.hpp"
#include "nvmeof/reactor.hpp"
#include "nvmeof/status.hpp"

namespace nvmeof {

enum class Transport : uint8_t { tcp, rdma, passthrough };

/// Where a controller listens.
struct TransportAddress {
  Transport transport = Transport::tcp;
  std::string traddr = "127.0.0.1";
  std::string trsvcid = "4420";
  std::string host_iface;  ///< optional: bind the connection to this interface
  /// "tcp://127.0.0.1:4420" style.
  std::string to_string() const;
  /// Parses "addr:port", "tcp://addr:port" or "[v6addr]:port". Errc::invalid_argument otherwise.
  static Result<TransportAddress> parse(std::string_view s);
};

enum class Digest : uint8_t { none = 0, header = 1, data = 2, both = 3 };

struct ConnectOptions {
  std::string subnqn;                 ///< required (kDiscoveryNqn for a discovery controller)
  std::string hostnqn;                ///< default: derived from hostid
  std::array<uint8_t, 16> hostid{};   ///< default (all zero): a fixed per-process random id
  Digest digest = Digest::none;
  uint32_t io_queue_depth = 128;      ///< 1..1024
  uint32_t admin_queue_depth = 32;
  uint32_t kato_ms = 5000;            ///< keep-alive timeout asked for; 0 disables
  std::chrono::milliseconds connect_timeout{3000};
  std::chrono::milliseconds admin_timeout{3000};
};

/// The control-plane thread: one Boost.Asio io_context that owns every admin queue, sends
/// keep-alives, and delivers asynchronous events. Many controllers share one.
class ControlPlane {
 public:
  ControlPlane();
  ~ControlPlane();  ///< stops the thread; controllers must be gone first
  ControlPlane(const ControlPlane&) = delete;
  ControlPlane& operator=(const ControlPlane&) = delete;
  struct Impl;
  Impl& impl() noexcept { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

/// Completion of an admin command: status and DW0 (DW1 for 8-byte properties).
struct AdminResult {
  NvmeStatus status;
  uint32_t dw0 = 0;
  uint32_t dw1 = 0;
};

class Controller {
 public:
  /// Connects the admin queue (ICReq/ICResp, Fabrics Connect), enables the controller
  /// (CC.EN, waits for CSTS.RDY within CAP.TO), reads Identify Controller, negotiates the number
  /// of I/O queues, arms keep-alive at KATO/2 and posts an Asynchronous Event Request.
  /// Errors: connection_refused, timeout, malformed_pdu/protocol_error (bad peer), an NVMe
  /// status (nvme_category) when the controller rejects Connect, controller_fatal.
  static Result<std::shared_ptr<Controller>> connect(ControlPlane& cp, const TransportAddress& addr,
                                                     const ConnectOptions& opts);
  ~Controller();  ///< disconnects

  const ControllerInfo& info() const noexcept;
  const TransportAddress& address() const noexcept;
  const ConnectOptions& options() const noexcept;

  /// Creates and connects one I/O queue pair driven by `reactor` (set-up runs on the calling
  /// thread, which should be that reactor's thread). `depth` 0 means options().io_queue_depth.
  Result<std::unique_ptr<QueuePair>> create_io_queue(Reactor& reactor, uint32_t depth = 0);

  /// Raw admin command; `data` is read or written per the opcode's direction.
  Result<AdminResult> admin(const Sqe& cmd, void* data, uint32_t len);
  Result<NamespaceInfo> identify_namespace(uint32_t nsid);  ///< includes the descriptor list
  Result<std::vector<uint32_t>> active_namespaces();
  Result<AnaLog> ana_log();
  Result<DiscoveryLog> discovery_log();
  Result<void> keep_alive();

  /// Called on the control thread for each asynchronous event (CQE DW0); the request is
  /// re-armed after the callback.
  void on_async_event(std::function<void(uint32_t dw0)> fn);
  /// Called on the control thread once when the admin queue fails (transport error or no
  /// answer to keep-alive).
  void on_failure(std::function<void(std::error_code)> fn);
  /// True while the admin queue is live.
  bool is_live() const noexcept;
  /// Tears the admin connection down (Disconnect is implicit in closing the socket).
  void disconnect();

  struct Impl;

 private:
  explicit Controller(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace nvmeof
