// A connection to one NVMe-oF controller over the user-space NVMe/TCP or NVMe/RDMA transport: the admin
// queue (owned by the control plane thread) and I/O queue pairs (each owned by a Reactor; those
// are internal to the library: a Volume is the public way to do I/O).
//
// Threading: connect(), the admin calls and create_io_queue() may be called from any thread;
// they block the caller (never a reactor other than the one passed in) up to their timeout.
// The admin queue, keep-alive and asynchronous events run on the ControlPlane's thread; admin
// calls made from a callback on that thread run its reactor inline instead of waiting.
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
#include "nvmeof/status.hpp"
#include "nvmeof/export.h"

NVMEOF_API_BEGIN  // every declaration below is public API (default visibility)
namespace nvmeof {

enum class Transport : uint8_t { tcp, rdma, passthrough };

/// Where a controller listens.
struct TransportAddress {
  Transport transport = Transport::tcp;
  std::string traddr = "127.0.0.1";
  std::string trsvcid = "4420";
  std::string host_iface;  ///< optional: bind the connection to this interface
  /// "tcp://127.0.0.1:4420" style ("tcp://[::1]:4420" for IPv6, "passthrough:///dev/ng0n1").
  std::string to_string() const;
  /// Parses "addr:port", "addr" (port 4420), "tcp://addr:port", "rdma://addr:port",
  /// "[v6addr]:port" and "passthrough://path". Errc::invalid_argument otherwise (empty address,
  /// port not in 1..65535, an IPv6 address without brackets).
  static Result<TransportAddress> parse(std::string_view s);
};

enum class Digest : uint8_t { none = 0, header = 1, data = 2, both = 3 };

/// ConnectOptions::kato_ms: the shortest keep-alive timeout the controller's granularity (KAS)
/// allows, at least 100 ms. A short KATO is what bounds a safe failover without CCR (TP4129:
/// a write may move only 2 x KATO + CQT after the loss, 3 x KATO + CQT with TBKAS).
inline constexpr uint32_t kKatoShortest = 0xffffffffu;

/// ConnectOptions::tls: whether NVMe/TCP queues run inside TLS 1.3 (the secure channel).
enum class TlsUse : uint8_t {
  when_keyed,  ///< TLS exactly when ConnectOptions::tls_psk is set (the default)
  off,         ///< never, even with a key (a port that requires TLS then refuses the host)
  on,          ///< always: without tls_psk, connect() fails with invalid_argument
};

struct ConnectOptions {
  std::string subnqn;                 ///< required (kDiscoveryNqn for a discovery controller)
  /// default: "nqn.2014-08.org.nvmexpress:uuid:<hostid as a UUID>"
  std::string hostnqn;
  std::array<uint8_t, 16> hostid{};   ///< default (all zero): a fixed per-process random id
  Digest digest = Digest::none;
  uint32_t io_queue_depth = 128;      ///< 1..1024 (clamped to CAP.MQES + 1)
  uint32_t admin_queue_depth = 32;    ///< 2..1024 (one slot is the asynchronous event request)
  uint32_t max_io_queues = 64;        ///< asked for with Set Features Number of Queues
  /// Keep-alive timeout asked for (rounded up to the controller's granularity); 0 disables it;
  /// kKatoShortest: the shortest the controller allows. Connect asks for 1 s when set to
  /// kKatoShortest, then Set Features Keep Alive Timer lowers it once Identify told KAS.
  uint32_t kato_ms = kKatoShortest;
  std::chrono::milliseconds connect_timeout{3000};
  std::chrono::milliseconds admin_timeout{3000};
  /// DH-HMAC-CHAP (in-band authentication after Fabrics Connect, on the admin queue and every
  /// I/O queue, again on every reconnect): the host's secret in the interchange form
  /// `nvme gen-dhchap-key` prints (`DHHC-1:0X:<base64>:`), or `@PATH` of a file holding one.
  /// Empty: the host does not authenticate (a controller that requires it refuses the queue
  /// with Errc::authentication_required).
  std::string dhchap_secret;
  /// The controller's secret (same forms): set, the host also authenticates the controller
  /// (bidirectional). Needs dhchap_secret.
  std::string dhchap_ctrl_secret;
  /// NVMe/TCP TLS 1.3 with a pre-shared key (the secure channel, before ICReq; every queue of
  /// the controller, again on every reconnect): the configured PSK in the interchange form
  /// `nvme gen-tls-key` prints (`NVMeTLSkey-1:0X:<base64>:`), or `@PATH` of a file holding
  /// one. The host offers the identity "NVMe0R0X <hostnqn> <subnqn>" with the TLS PSK derived
  /// from it (X: the key's hash; 01 selects TLS_AES_128_GCM_SHA256, 02 TLS_AES_256_GCM_SHA384).
  /// A malformed key fails connect() with invalid_argument. Errors a connection can then meet:
  /// Errc::tls_handshake_failed (the controller refused the PSK: another key or identity, or no
  /// common suite), Errc::tls_not_offered (the port answered in plaintext: it does not speak
  /// TLS), timeout (no handshake within connect_timeout). Without TLS, a port that requires it
  /// closes the connection after the ICReq: Errc::tls_required. RDMA has no TLS: unsupported.
  std::string tls_psk;
  TlsUse tls = TlsUse::when_keyed;
  /// With TLS: after the handshake, hand both directions' record layer to the kernel (kernel
  /// TLS: TCP_ULP "tls") when the kernel offers it, so the reactor moves plaintext as without
  /// TLS; else (or false) the reactor encrypts in user space. A kernel that refuses the keys is
  /// not asked again by this process.
  bool tls_kernel = true;
};

/// The control-plane thread: one Boost.Asio io_context that owns every admin queue, sends
/// keep-alives, and delivers asynchronous events. Many controllers share one.
class ControlPlane {
 public:
  /// Starts the thread. Errors: the errno of io_uring set-up (e.g. ENOSYS, EPERM, ENOMEM when
  /// io_uring is unavailable or refused) or of starting the thread, the detail naming which.
  static Result<std::unique_ptr<ControlPlane>> create();
  virtual ~ControlPlane();  ///< stops the thread; controllers must be gone first
  ControlPlane(const ControlPlane&) = delete;
  ControlPlane& operator=(const ControlPlane&) = delete;

 protected:
  ControlPlane() = default;  // create() makes the library's own kind, which holds the thread
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
  /// TCP and RDMA ("rdma://addr:port") are implemented (Errc::unsupported for passthrough, and
  /// for RDMA when the library was built without rdma-core). The caller's thread
  /// blocks up to connect_timeout for the connection and admin_timeout per admin command.
  static Result<std::shared_ptr<Controller>> connect(ControlPlane& cp, const TransportAddress& addr,
                                                     const ConnectOptions& opts);
  virtual ~Controller();  ///< disconnects
  Controller(const Controller&) = delete;
  Controller& operator=(const Controller&) = delete;

  const ControllerInfo& info() const noexcept;
  const TransportAddress& address() const noexcept;
  /// The options in force: hostid and hostnqn filled in when they were left empty.
  const ConnectOptions& options() const noexcept;
  /// I/O queues the controller granted (Set Features Number of Queues); 0 for discovery.
  uint32_t io_queues() const noexcept;
  /// The keep-alive timeout in force (ms; 0: none), after rounding to the controller's KAS.
  uint32_t kato_ms() const noexcept;
  /// Keep Alive commands this controller has sent. With traffic-based keep-alive (TBKAS) none
  /// is sent while I/O completes on its queues. Any thread.
  uint64_t keep_alives_sent() const noexcept;

  // I/O queue pairs (create_io_queue, prepare_io_queue) are internal to the library.

  /// Raw admin command; `data` is read or written per the opcode's direction (copied through a
  /// buffer of the controller's, so a timed-out command never touches the caller's memory).
  /// Errors: timeout (no answer within admin_timeout; the command stays outstanding),
  /// not_connected, the admin queue's own error when it failed meanwhile, invalid_argument.
  /// A completion with an error status is a value: check AdminResult::status.
  Result<AdminResult> admin(const Sqe& cmd, void* data, uint32_t len);
  /// The calls below return an nvme_category() error for a non-success status, short_data for a
  /// page shorter than its header says, and the errors of admin().
  Result<NamespaceInfo> identify_namespace(uint32_t nsid);  ///< includes the descriptor list
  Result<std::vector<uint32_t>> active_namespaces();
  /// Reads the ANA log header, then the whole page (split at MDTS).
  Result<AnaLog> ana_log();
  /// Reads the discovery log header, then every entry; retried when GENCTR changes meanwhile.
  Result<DiscoveryLog> discovery_log();
  Result<void> keep_alive();
  /// Cross-Controller Reset (NVMe TP8028) of `impacted`, another controller of this subsystem
  /// (its CNTLID, CIU and CIRN from its Identify Controller), sent through this controller.
  /// Returns once the controller reports the reset done: at once (DW0 IRS), or when its
  /// asynchronous event (or a poll of the CCR log page 1Eh) shows the entry completed.
  /// Errors: unsupported (CCRL 0: no CCR through this controller), timeout (no result within
  /// `timeout`; the impacted controller may still be running), an nvme_category() status (the
  /// controller refused: wrong identity, limit reached), Errc::controller_fatal when the log
  /// says the reset failed, and those of admin(). Any thread but the control thread.
  Result<void> cross_controller_reset(const ControllerInfo& impacted, std::chrono::milliseconds timeout);

  /// Called on the control thread for each asynchronous event (CQE DW0); the request is
  /// re-armed when the event arrives, before the callback runs. Replaces an earlier callback.
  void on_async_event(std::function<void(uint32_t dw0)> fn);
  /// Called on the control thread once when the admin queue fails (transport error, keep-alive
  /// failure, or no answer to keep-alive within KATO: Errc::keep_alive_timeout); never for
  /// disconnect(). Replaces an earlier callback.
  void on_failure(std::function<void(std::error_code)> fn);
  /// True while the admin queue is live.
  bool is_live() const noexcept;
  /// Tears the admin connection down (Disconnect is implicit in closing the socket). I/O queue
  /// pairs stay with their reactors; they fail on their own when the controller drops them.
  /// Idempotent; any thread.
  void disconnect();

 protected:
  Controller() = default;  ///< connect() makes the library's own kind of Controller
};

}  // namespace nvmeof
NVMEOF_API_END
