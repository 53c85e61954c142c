// The embedded user-space NVMe/TCP target: the demo's peer, the tests' peer, and a small
// standalone server (the nvmeof-target tool). Several ports, subsystems with RAM- or file-backed
// namespaces, one ANA group per port, discovery, keep-alive as NVMe TP4129 says (KATO in 100 ms
// units, restarted by any command on any queue, never paused), a Command Quiesce Time it
// honours, Cross-Controller Reset (NVMe TP8028), and per-port fault injection.
//
// Ending a controller (keep-alive expiry, its admin queue closing, a Cross-Controller Reset)
// closes every queue of its association and quiesces its commands: nothing of that controller
// executes later than CQT after the teardown, and after a Cross-Controller Reset reports success
// nothing of it executes at all (held writes with QuiesceMode::honour are dropped).
//
// Keep-alive: a host's KATO (Connect CDW12, Set Features 0Fh) is rounded up to a multiple of
// 100 ms (KAS 1); Get Features returns the rounded value. CTRATT bit 6 (TBKAS) is reported.
//
// Cross-Controller Reset (opcode 38h, admin queue of an NVM subsystem controller): CDW10 bits
// 15:0 ICID, 23:16 CIU, CDW12/13 the CIRN of the impacted controller, which must be another live
// controller of the subsystem with the same host NQN and that CIU and CIRN (Identify reports
// both; CIU changes and CIRN is drawn anew each time CSTS.RDY is asserted), else Invalid Field.
// A reset already in progress from this controller for that one: SCT 1 SC 3Fh; kCcrLimit in
// progress: SC 41h; the log full: SC 40h. The impacted controller is torn down as by keep-alive
// expiry; when its queues have all stopped within CQT + 5 ms the command completes with DW0 =
// IRS | V | CLRI, else with DW0 0 and the reset goes on: a CCR log entry (page 1Eh, entries of
// this controller's resets, LSP bit 0 removes completed ones once returned) reads in progress
// until it ends, then success (or failed), and an Asynchronous Event Request of the issuing
// controller completes with DW0 0x001EF402 (notice, information F4h, log page 1Eh).
//
// Threading: the target runs its own threads (an acceptor per port, a thread per connection, one
// for held writes). Every method here may be called from any thread while it runs; fault and ANA
// changes take effect for commands received after the call returns. Methods taking a port index
// ignore an index out of range (getters then return an empty/zero value).
//
// Access: a Connect (admin or I/O queue) from a host a subsystem does not allow (see HostAccess;
// HostAccess::automatic decides once, at start, from every port's configured traddr) completes
// with Connect Invalid Host (SCT 1h SC 84h, DNR) and one line naming the host is logged to
// stderr. The discovery subsystem allows any host; its log lists a host only the subsystems
// that host may connect to.
//
// Protocol errors from a host (malformed PDU, bad digest, H2CData outside its R2T, a second
// ICReq) never stop the target: that connection gets a C2HTermReq and is closed, one line is
// logged to stderr, and PortStats::errors counts it. A data digest error fails only its command
// (transient transport error) and is counted the same way.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "nvmeof/identify.hpp"
#include "nvmeof/status.hpp"
#include "nvmeof/export.h"

NVMEOF_API_BEGIN  // every declaration below is public API (default visibility)
namespace nvmeof {

/// A namespace of a subsystem.
struct TargetNamespace {
  uint32_t nsid = 1;
  uint64_t size_bytes = 64ull << 20;
  uint32_t block_size = 4096;   ///< 512 or 4096
  std::string file;             ///< empty: RAM-backed; else backed by this file (created if absent)
  Nguid nguid{};                ///< all zero: derived from subsystem NQN + nsid
};

/// A host allowed to use a subsystem, with the keys it authenticates with (DH-HMAC-CHAP).
struct TargetHost {
  std::string nqn;              ///< the host NQN (Connect HOSTNQN)
  /// The host's secret in the interchange form `DHHC-1:0X:<base64>:`; empty: the host is not
  /// asked to authenticate.
  std::string dhchap_key;
  /// The controller's secret (same form): when set, the host may also authenticate the
  /// controller (bidirectional). Only with dhchap_key.
  std::string dhchap_ctrl_key;
  /// The hash function and DH group this host must use ("sha256", "sha384", "sha512";
  /// "null", "ffdhe2048" ... "ffdhe8192"), as nvmet's dhchap_hash and dhchap_dhgroup; empty:
  /// whichever the host prefers among all of them.
  std::string dhchap_hash;
  std::string dhchap_dhgroup;
};

/// Whether any host may connect to a subsystem.
enum class HostAccess : uint8_t {
  /// Any host when every port listens on a loopback address; otherwise only `hosts`.
  automatic,
  any,          ///< any host (hosts listed in `hosts` still authenticate with their keys)
  allow_list,   ///< only the hosts in `hosts`
};

/// An NVM subsystem. The discovery subsystem (kDiscoveryNqn) always exists besides these.
struct TargetSubsystem {
  std::string nqn = "nqn.2024-01.io.nvmeof:target";
  std::vector<TargetNamespace> namespaces{TargetNamespace{}};
  std::string serial = "NVMEOF0001";
  std::string model = "nvmeof embedded target";
  std::vector<TargetHost> hosts;  ///< allowed hosts and their keys (see access)
  HostAccess access = HostAccess::automatic;
};

/// A listening port. Its ANA group id (and discovery PORTID) is the port index + 1. Controllers
/// reached through it report their namespaces in that group, with the port's ANA state.
/// The NVMe/TCP secure channel of a port: TLS 1.3 with a pre-shared key, negotiated before the
/// ICReq. Reported in each discovery log entry of the port (TREQ secure channel, TSAS SECTYPE).
enum class PortTls : uint8_t {
  none,          ///< plaintext only; TREQ "not specified", SECTYPE none
  not_required,  ///< TLS 1.3 or plaintext, the host chooses; TREQ "not required", SECTYPE TLS 1.3
  required,      ///< TLS 1.3 only, a plaintext connection is closed; TREQ "required", SECTYPE TLS 1.3
};

struct TargetPort {
  std::string traddr = "127.0.0.1";  ///< IPv4 or IPv6 literal (or host name); "0.0.0.0": any
  std::string trsvcid = "4420";  ///< "0": pick a free port (read it back with port_address())
  AnaState ana_state = AnaState::optimized;
  PortTls tls = PortTls::none;
  /// With tls other than none: the configured PSK in the NVMe interchange form
  /// ("NVMeTLSkey-1:01:<base64>:", as nvme gen-tls-key prints it). A host offers the identity
  /// "NVMe0R0X <hostnqn> <subnqn>" (or NVMe1R0X with the digest) and the TLS PSK derived from
  /// the retained PSK of its host NQN; the target derives the same and accepts any host NQN.
  /// Target::start fails with invalid_argument when it does not parse.
  std::string tls_psk = {};
};

/// When the last C2HData PDU of a read carries the SUCCESS flag, which replaces the CapsuleResp.
enum class C2hSuccess : uint8_t {
  /// Only on queues whose host disabled SQ flow control at Connect (CATTR bit 2): the CapsuleResp
  /// otherwise carries SQHD. NVMe/TCP's rule, and what Linux nvmet does.
  sq_flow_control_disabled,
  always,  ///< on every successful read: one PDU less, and it exercises a host's SUCCESS path
};

/// Whether NVM subsystem controllers accept the Cross-Controller Reset command (TP8028).
enum class CcrSupport : uint8_t {
  enabled,   ///< Identify CCRL = kCcrLimit; CIU and CIRN reported
  disabled,  ///< CCRL = 0 and the opcode completes with Invalid Opcode (CIU/CIRN still reported)
};

/// CCRL reported when CCR is enabled: in-progress resets one controller may have outstanding.
inline constexpr uint8_t kCcrLimit = 4;

/// How a connection's thread waits once a pass over its socket found nothing to do.
enum class TargetPoll : uint8_t {
  /// Never sleeps while the connection lives: non-blocking receives in a loop, as a polling
  /// target does (a core per connection, even when idle).
  busy,
  /// After each pass that did work, keeps receiving without blocking for `poll_spin_us`, then
  /// sleeps in ppoll: the next command of a closed loop is usually picked up without a
  /// wake-up, and an idle connection costs no CPU.
  adaptive,
  /// Sleeps in ppoll after every pass that found nothing (one wake-up per command).
  sleep,
};

/// Everything Target::start needs. The limits are reported to hosts (CAP, Identify, ICResp).
struct TargetOptions {
  std::vector<TargetPort> ports{TargetPort{}};
  std::vector<TargetSubsystem> subsystems{TargetSubsystem{}};
  uint32_t max_queue_depth = 1024;   ///< CAP.MQES + 1
  uint32_t max_io_queues = 64;       ///< per controller (Set Features Number of Queues)
  uint32_t in_capsule_data = 8192;   ///< I/O queues; IOCCSZ = 64 + this (a multiple of 16)
  uint32_t maxh2cdata = 131072;      ///< at least 4096
  uint8_t mdts = 5;                  ///< 2^mdts * 4 KiB = 128 KiB (0: unlimited; at most 16)
  uint16_t cqt_ms = 10;              ///< Command Quiesce Time honoured (and reported, see below)
  /// false: Identify reports CQT 0 ("not reported", as Linux nvmet does) while the target still
  /// honours cqt_ms, so a host must fall back to its own configured bound.
  bool report_cqt = true;
  CcrSupport ccr = CcrSupport::enabled;
  /// Test option: every Cross-Controller Reset takes the asynchronous path even when it could
  /// finish at once. The command completes with DW0 0 (reset in progress), a CCR log entry
  /// (in progress) appears, and when the reset is done (and ccr_async_delay has passed since
  /// the command) the entry turns to success and the issuing controller gets the CCR notice.
  /// The impacted controller is torn down at once either way; only the report waits.
  bool ccr_async = false;
  std::chrono::milliseconds ccr_async_delay{0};  ///< see ccr_async; also applies to fallbacks
  uint8_t anatt_s = 2;               ///< ANA transition time reported (Identify ANATT)
  /// Command Retry Delay Times reported (Identify CRDT1 to CRDT3, in 100 ms units): how long a
  /// host waits before retrying a command whose status sets CRD to 1, 2 or 3 (fail_commands
  /// with such a status asks for it).
  std::array<uint16_t, 3> crdt_100ms{};
  C2hSuccess c2h_success = C2hSuccess::sq_flow_control_disabled;
  /// false: a Connect that asks for SQ flow control off is refused with Connect Invalid
  /// Parameters (IPO naming CATTR), as a controller that cannot disable it must.
  bool allow_sq_flow_control_disable = true;
  bool log_connections = false;      ///< print connects/disconnects/errors to stderr
  /// DH-HMAC-CHAP: a queue asked to authenticate (its host entry has a key) that has not
  /// finished the transaction this long after its Connect or its last authentication command
  /// is dropped (its connection closed, PortStats::auth_failures counted).
  std::chrono::milliseconds auth_timeout{5000};
  /// How connection threads wait. sleep by default: an embedded target shares its cores with
  /// the host it serves (nvmeof-target's own default is adaptive).
  TargetPoll poll = TargetPoll::sleep;
  uint32_t poll_spin_us = 50;        ///< TargetPoll::adaptive: the spin after work, µs
};

/// Fault injection, per port. Combine freely; `clear_faults` restores normal service.
enum class FaultKind : uint8_t {
  reset,        ///< close every connection on the port now (RST); new connects still accepted
  /// A target whose process stalls while its TCP stack still runs: the port's connections stop
  /// reading and answering (sockets stay open, nothing comes back; commands already received
  /// still execute and their answers wait), yet a host that closes its socket is still noticed
  /// (its connection ends; that time starts the CQT clock of held writes). The keep-alive timer
  /// is not paused: with nothing read, a controller with a KATO ends at KATO and its sockets are
  /// closed then (a really stalled process would close them only once it resumes). New
  /// connections are accepted but get no ICResp. What it does not model: a host's close going
  /// unnoticed (that is `partition`).
  blackhole,
  refuse,       ///< close new connections at once (RST)
  /// A pulled cable on the port: its connections neither read nor send anything and do not look
  /// at their sockets at all, so a host that closes its socket goes unnoticed. Commands already
  /// received still execute (held and latency-delayed ones included) and their answers wait. The
  /// keep-alive timer keeps counting, so only keep-alive expiry or a Cross-Controller Reset
  /// through a controller on another port ends a controller reached through this port. New
  /// connections are accepted by the kernel and get nothing. Sockets of controllers that ended
  /// meanwhile stay open (no FIN crosses a pulled cable) until clear_faults, then close.
  partition,
};

/// Whether held writes respect the Command Quiesce Time after their connection dies.
enum class QuiesceMode : uint8_t {
  honour,  ///< never executed later than CQT after the teardown; dropped by a CCR
  ignore,  ///< the misbehaving target: executed when the delay ends, even after a CCR
};

/// A namespace as the target serves it now (Target::namespaces).
struct TargetNamespaceInfo {
  uint32_t nsid = 0;
  uint64_t size_bytes = 0;
  uint32_t block_size = 0;
};

/// Counters of one port.
struct PortStats {
  uint64_t connections = 0;      ///< accepted since start
  uint64_t live_connections = 0;
  uint64_t commands = 0;
  uint64_t reads = 0;
  uint64_t writes = 0;
  uint64_t errors = 0;           ///< protocol errors seen (malformed PDUs, digests)
  uint64_t delayed_writes_executed = 0;  ///< writes executed after a delay (ghost-write tests)
  uint64_t delayed_writes_dropped = 0;   ///< held writes dropped to honour CQT or by a CCR
  uint64_t writes_dropped_after_teardown = 0;  ///< writes whose connection died before they ran
  uint64_t commands_dropped = 0;     ///< I/O commands swallowed by drop_commands
  /// Cross-Controller Reset commands received by controllers whose admin queue is on this port
  /// (every outcome, rejected ones included).
  uint64_t ccr_received = 0;
  /// Resets those commands carried out: completed with IRS, or asynchronously with CCRS success.
  uint64_t ccr_completed = 0;
  /// Controllers (admin queue on this port) ended by keep-alive expiry.
  uint64_t keep_alive_expiries = 0;
  /// Keep Alive commands answered on this port's admin queues.
  uint64_t keep_alive_commands = 0;
  /// The most output (bytes) any one connection of this port held unsent at once, a peer that
  /// does not read included. It stays within 8 MiB, or one transfer (MDTS) if that is larger.
  uint64_t max_output_backlog = 0;
  uint64_t authentications = 0;  ///< queues that completed DH-HMAC-CHAP
  /// Queues whose DH-HMAC-CHAP failed: a wrong key, no common hash or group, a malformed
  /// message, a Failure2 from the host, or the auth_timeout (each is logged to stderr).
  uint64_t auth_failures = 0;
  uint64_t tls_sessions = 0;        ///< connections whose TLS handshake completed
  uint64_t tls_failures = 0;        ///< TLS handshakes that failed (wrong PSK, unknown identity)
  uint64_t tls_plaintext_refused = 0;  ///< plaintext connections a TLS-only port closed
  /// I/O queues whose host connected with SQ flow control disabled (Connect CATTR bit 2): their
  /// reads end with a SUCCESS-flagged C2HData, no CapsuleResp.
  uint64_t io_queues_without_sq_flow_control = 0;
  /// Admin queues so connected (the host asked for the whole controller).
  uint64_t admin_queues_without_sq_flow_control = 0;
  /// Passes of this port's connection threads over their sockets, closed connections included
  /// (each pass looks once at the socket, posted completions, faults and deadlines). A
  /// connection that spins (TargetPoll::busy on a live I/O queue, adaptive right after work)
  /// makes one per non-blocking receive, hundreds of thousands a second; one that sleeps makes
  /// about one per wake-up. Counts, not times: what a poll mode costs in events.
  uint64_t poll_passes = 0;
  /// Times those threads woke from a sleep in ppoll (a command, a completion or fault change
  /// from another thread, a keep-alive or other deadline).
  uint64_t poll_wakeups = 0;
};

/// A running target; stop() or the destructor ends it.
class Target {
 public:
  /// Binds every port and starts serving. Errors: errno codes (EADDRINUSE, ...; from open/mmap
  /// for namespaces), invalid_argument for bad options (no port, duplicate NQN or NSID, a block
  /// size other than 512/4096, a size not a multiple of it, out-of-range limits, a host entry
  /// with an empty, over 223-byte or duplicate NQN).
  static Result<std::unique_ptr<Target>> start(const TargetOptions& opts);
  ~Target();  ///< stop()

  /// Stops accepting, closes every connection, joins the threads. Idempotent.
  void stop();
  /// The bound address of port `i` (the real port number when "0" was asked).
  std::string port_address(size_t i) const;  ///< "127.0.0.1:4420", "[::1]:4420"
  /// The bound TCP port number of port `i`.
  uint16_t port_number(size_t i) const;

  /// Changes the ANA state of port `port`'s group. Every controller connected through that port
  /// gets an ANA change notice: its outstanding Asynchronous Event Request completes with
  /// DW0 0x000C0302 (or the next one does, when none is outstanding). No-op when unchanged.
  void set_ana_state(size_t port, AnaState s);
  /// The current ANA state of port `port`'s group.
  AnaState ana_state(size_t port) const;

  /// Injects a fault on port `port` (see FaultKind); reset acts once, the others last until
  /// clear_faults.
  void inject(size_t port, FaultKind kind);
  /// Delays each command received on the port by `latency` before it executes and is answered
  /// (0 removes it). With a constant latency commands keep their order.
  void set_latency(size_t port, std::chrono::microseconds latency);
  /// A slow link: each I/O queue of the port moves data at most `bytes_per_second` (0 removes
  /// it). A command is answered once the data of the queue's earlier commands and its own have
  /// passed at that rate (after any set_latency delay), so large transfers queue behind each
  /// other as on a saturated link; commands keep their order.
  void set_bandwidth(size_t port, uint64_t bytes_per_second);
  /// I/O commands on the port complete with `status` instead of executing (nullopt: stop).
  /// Admin commands still work, so a host can read the ANA log.
  void fail_commands(size_t port, std::optional<NvmeStatus> status);
  /// Writes received on the port from now on are held for `delay` and then executed, even if their
  /// connection died meanwhile, unless the Command Quiesce Time has passed since the
  /// connection closed (the target honours CQT by never executing a held command later than
  /// CQT after its connection's teardown). The teardown is timed when the target notices it, a
  /// little after the host made it, so the target gives up min(CQT/4, 2 ms) early.
  /// QuiesceMode::ignore executes them whenever the delay ends: the misbehaving target a
  /// ghost-write test needs. A delay of 0 stops holding new writes.
  void delay_writes(size_t port, std::chrono::milliseconds delay,
                    QuiesceMode mode = QuiesceMode::honour);
  /// The next `count` I/O commands received on the port (on any of its I/O queues, counted from
  /// this call) are accepted and never answered nor executed: a command lost on a path that
  /// still serves others. Later ones are served normally. Counted in PortStats::commands_dropped.
  /// Replaces any count still pending; 0 cancels it.
  void drop_commands(size_t port, uint32_t count);
  /// Ends blackhole, partition, refuse, latency, bandwidth, failing, dropping and held writes on the port
  /// (writes already held still run their course).
  void clear_faults(size_t port);

  // -- the fabric changing under its hosts --
  /// Adds a port and starts serving on it; returns its index (ports are never renumbered: a
  /// removed one keeps its index). The discovery log gains its entries (GENCTR moves) and every
  /// discovery controller whose host enabled Discovery Log Page Change notices gets one.
  /// Errors: invalid_argument (a bad ANA state or TLS key, 1024 ports added over the target's
  /// life), errno codes of bind/listen (EADDRINUSE, EADDRNOTAVAIL).
  Result<size_t> add_port(const TargetPort& port);
  /// Removes port `port`: it stops listening and closes its connections (the controllers
  /// reached through it end, as with a pulled cable whose FIN got through), and leaves the
  /// discovery log, with the same notice. Errors: invalid_argument for a port that does not
  /// exist or is removed already.
  Result<void> remove_port(size_t port);
  /// Attaches namespace `ns` to subsystem `nqn`, or detaches namespace `nsid` (new commands to
  /// it complete with Invalid Namespace, those running finish), or grows or shrinks one to
  /// `size_bytes` (the data below both sizes is kept; commands past the new end complete with
  /// LBA Out of Range; the same size changes nothing). A detached namespace's store is kept
  /// until the target stops (a command on it may still be running). Each change puts the NSID
  /// in the Changed Namespace List log of every
  /// controller of the subsystem and sends those whose host enabled Namespace Attribute notices
  /// a Namespace Attribute Changed event (one until the host reads the log). Errors:
  /// invalid_argument (an unknown subsystem or NSID, an NSID in use, a size of 0 or not a
  /// multiple of the block size), errno codes from the backing store.
  Result<void> attach_namespace(const std::string& nqn, const TargetNamespace& ns);
  Result<void> detach_namespace(const std::string& nqn, uint32_t nsid);
  Result<void> resize_namespace(const std::string& nqn, uint32_t nsid, uint64_t size_bytes);
  /// The namespaces subsystem `nqn` serves now, by NSID (empty for an unknown NQN).
  std::vector<TargetNamespaceInfo> namespaces(const std::string& nqn) const;
  /// The discovery log's generation counter (GENCTR): 1 at start, one more per port change.
  uint64_t discovery_generation() const;
  /// Ports, the removed ones included (their indexes stay).
  size_t port_count() const;
  /// Whether port `port` is removed.
  bool port_removed(size_t port) const;

  /// Counters of port `port` since start (relaxed snapshots).
  PortStats stats(size_t port) const;
  /// Every port's counters summed (live_connections included).
  PortStats total_stats() const;

  /// Direct access to namespace contents (tests verify data through it). Errors:
  /// invalid_argument (unknown NQN or NSID, range past the end), errno codes for a file.
  Result<void> read_ns(const std::string& nqn, uint32_t nsid, uint64_t offset, void* buf, size_t len);
  Result<void> write_ns(const std::string& nqn, uint32_t nsid, uint64_t offset, const void* buf,
                        size_t len);

 private:
  struct Impl;  // opaque, defined inside the library
  explicit Target(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace nvmeof
NVMEOF_API_END
