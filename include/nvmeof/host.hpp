// The engine: NVMe's *host*, made once per process. It owns a fixed set of reactor threads (each
// an io_uring that polls the queue pairs of every volume placed on it), one control thread (a
// Boost.Asio io_context: admin queues, keep-alive, events, reconnects of every volume) and one
// small pool for blocking work (connects, cross-controller resets, admin reads). Volumes open on
// an engine and start no thread of their own, so a process with many volumes pays per reactor,
// not per volume.
//
// Threading: every member function may be called from any thread. A Host is shared: each open
// volume holds it, and its threads stop when the last holder lets go.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "nvmeof/export.h"
#include "nvmeof/status.hpp"
#include "nvmeof/topology.hpp"

NVMEOF_API_BEGIN  // every declaration below is public API (default visibility)
namespace nvmeof {

/// How the engine's reactor threads wait for completions.
enum class PollMode : uint8_t {
  /// Never sleeps: reaps and submits in a loop (a completion is seen the moment it lands). Costs
  /// a whole CPU per reactor, idle or not (VolumeStats::reactor_cpu_ns shows it).
  busy,
  /// Spins after an event while commands are outstanding, for a bounded time that follows the
  /// paths' recent latency (a completion due soon is not paid for with a wake-up), then sleeps.
  /// An idle reactor sleeps: it costs no CPU.
  adaptive,
  /// Sleeps in the ring whenever a turn found nothing to do (a wake-up per completion). With
  /// commands in flight it also wakes every millisecond for their deadlines; an idle reactor
  /// wakes only a few times a second (VolumeStats::reactor_wakeups shows it).
  sleep,
};
const char* to_string(PollMode m) noexcept;

struct HostOptions {
  unsigned reactors = 1;                 ///< reactor threads (data plane), fixed for the engine's life
  PollMode poll = PollMode::adaptive;    ///< how the reactor threads wait
  /// NUMA placement (nvmeof/topology.hpp). numa: reactor i is pinned to cpus[i % size] (or, when
  /// `cpus` is empty, to a chosen CPU: the nodes interleaved, nodes carrying a path of the first
  /// volume first), its request pools and queue-pair buffers sit on its node, and each volume's
  /// path choice knows the distance from it to each path's node. unpinned: none of that.
  PlacementMode placement = PlacementMode::numa;
  std::vector<int> cpus;                 ///< CPUs for the reactors (numa placement)
  std::string sysfs_root = "/sys";       ///< where the topology is read from
  /// When >= 0, every reactor's memory goes on this node whatever the placement (to measure the
  /// cost of remote memory).
  int memory_node = kUnknownNode;
  /// 128-byte submission entries on every reactor's ring, so that io_uring passthrough paths
  /// (kernel-attached /dev/ngXnY) share it. Volumes with passthrough paths need it; the default
  /// engine of such a volume is made with it.
  bool big_entries = false;
  /// A polling reactor (busy or adaptive) asks its ring for IORING_SETUP_SINGLE_ISSUER |
  /// DEFER_TASKRUN (Linux 6.1+; without it the ring comes up as before): completions are taken
  /// when the reactor looks, never as an interruption. A sleeping reactor never asks. False turns
  /// it off, to compare the two set-ups.
  bool single_issuer = true;
  /// While a reactor spins (always when busy, in its spin windows when adaptive) its NVMe/TCP
  /// queue pairs read and write their sockets with non-blocking system calls each turn, which is
  /// what the polling floor does. False keeps them on the ring then too (to compare).
  bool spin_sockets = true;
  /// A thread waiting for its volume's completions may run the turns of that volume's reactor
  /// itself (Volume::drive), while the reactor's own thread sleeps; the thread takes the reactor
  /// back once no caller has driven it for a millisecond (ARCHITECTURE.md, "Caller-driven
  /// turns"). What a Python loop that reaps and submits in batches wants: no hand-over between
  /// threads per batch, and one busy thread fewer. The rings then come up without
  /// single_issuer (several threads enter them, one at a time).
  bool caller_drive = false;
  /// "ADDR:PORT" (port 0 picks one): serve the engine's Prometheus metrics over HTTP at /metrics
  /// (nvmeof_host_* and, per controller, nvmeof_controller_*: the figures of stats()). Empty: none.
  /// Each volume may serve its own (VolumeOptions::metrics_listen). A library built without
  /// metrics support fails create() with Errc::unsupported when it is set.
  std::string metrics_listen;
};

/// What the engine costs right now (counted, not timed).
enum class PathState : uint8_t {
  connecting,   ///< first connect or reconnect in progress
  live,         ///< takes I/O (subject to ANA)
  failed,       ///< transport error or deadline: takes no I/O, being torn down
  fenced,       ///< torn down and quiesce time elapsed: waiting to reconnect
  /// Being removed (Volume::remove_path): takes no new I/O; its commands complete (or move by
  /// the failover rules if it fails meanwhile), then it closes.
  draining,
  removed,      ///< removed at run time: closed, no longer listed in the stats
};
const char* to_string(PathState s) noexcept;

/// One controller of the engine: a subsystem reached through one path, shared by every volume
/// (namespace) of that subsystem opened over the same paths and settings.
struct HostControllerStats {
  std::string subnqn;
  std::string address;   ///< the path, as TransportAddress::to_string()
  uint16_t cntlid = 0;   ///< the controller's ID (of its current association)
  PathState state = PathState::connecting;
  unsigned volumes = 0;  ///< volumes open on it
  uint64_t keep_alives = 0;  ///< Keep Alive commands sent on it (all its associations)
  double keep_alives_per_s = 0;  ///< as PathStats::keep_alives_per_s
  uint64_t ios = 0;          ///< commands completed on its I/O queues, every volume's
  uint64_t failovers = 0;
  uint64_t reconnects = 0;
  uint32_t write_fence_ms = 0;   ///< as PathStats::write_fence_ms
  std::string write_fence_rule;  ///< as PathStats::write_fence_rule
};

/// A namespace change a controller reported (a Namespace Attribute Changed event, then the
/// Changed Namespace List log and Identify), as the engine saw it: once per change, however many
/// controllers of the subsystem reported it.
struct NamespaceEvent {
  enum class Kind : uint8_t {
    added,    ///< a namespace of the subsystem the engine had not seen (no volume is open on it)
    resized,  ///< an open volume's namespace grew or shrank: Volume::size_blocks() follows
    removed,  ///< an open volume's namespace is gone from every path: its I/O fails (Invalid Namespace)
  };
  Kind kind = Kind::added;
  std::string subnqn;
  uint32_t nsid = 0;         ///< as the reporting controller numbers it
  uint64_t size_blocks = 0;  ///< the size now (0 when removed)
  uint32_t block_size = 0;
};
const char* to_string(NamespaceEvent::Kind k) noexcept;

/// A discovery controller the engine keeps connected (Host::add_discovery).
struct HostDiscoveryStats {
  std::string address;
  bool connected = false;
  bool referral = false;       ///< added because another discovery controller referred to it
  uint64_t log_reads = 0;      ///< discovery log reads: at each connect and each change event
  uint64_t change_events = 0;  ///< Discovery Log Page Change events it sent
  uint64_t reconnects = 0;
  uint64_t genctr = 0;         ///< the log's generation counter at its last read
  uint32_t entries = 0;        ///< entries in that log
  std::string last_error;      ///< why the last connect or read failed; "" while none did
};

struct HostStats {
  unsigned reactors = 0;
  /// Threads the engine runs: reactors, the control thread and the blocking-work pool.
  unsigned threads = 0;
  unsigned volumes = 0;            ///< volumes open on it
  /// Subsystems (each over its own set of paths) the volumes are open on; each has one
  /// controller per path, with one admin queue and one I/O queue per reactor.
  unsigned subsystems = 0;
  std::vector<HostControllerStats> controllers;
  std::vector<uint64_t> reactor_cpu_ns;  ///< CPU each reactor thread has used (its thread clock)
  /// Times each reactor thread came back from a wait in its ring (a completion, a posted
  /// function, a submission, a timer): what an idle engine costs, counted.
  std::vector<uint64_t> reactor_wakeups;
  /// HostOptions::caller_drive: turns of each reactor run by callers' threads, and the times
  /// its own thread parked for them.
  std::vector<uint64_t> reactor_driven_turns;
  std::vector<uint64_t> reactor_parks;
  std::vector<HostDiscoveryStats> discovery;  ///< persistent discovery controllers
};

class Host {
 public:
  /// Starts the reactors, the control thread and the pool. Errors: errno codes when io_uring is
  /// unavailable (ENOSYS, EPERM, ENOMEM), Errc::invalid_argument for zero reactors.
  static Result<std::shared_ptr<Host>> create(const HostOptions& opts = {});
  /// The process's engine for these options: made on first use, shared by every caller that asks
  /// for the same options while one holder keeps it, stopped when the last lets go.
  /// Volume::open(VolumeOptions) uses it. Errors as create().
  static Result<std::shared_ptr<Host>> shared(const HostOptions& opts = {});
  virtual ~Host();  ///< stops the threads; every volume opened on it holds it, so none is left
  Host(const Host&) = delete;
  Host& operator=(const Host&) = delete;

  const HostOptions& options() const noexcept;
  /// The reactors' placement (no paths: each volume's own placement() adds its paths).
  const Placement& placement() const noexcept;
  HostStats stats() const;
  /// The TCP port of HostOptions::metrics_listen (0 when it is empty).
  uint16_t metrics_port() const noexcept;
  /// Persistent discovery: keeps a connection to the discovery controller at `addr` (keep-alive,
  /// reconnect with backoff), reads its log at each connect and at each Discovery Log Page
  /// Change event, follows its referrals, and applies the logs to every open subsystem they
  /// list: a port listed for it becomes a path of its volumes (TCP ports chosen by TREQ/TSAS as
  /// Volume::open_discovered does), a listed port that no discovery controller lists any more is
  /// removed (Volume::remove_path). Ports several discovery controllers list are one path.
  /// Paths the application gave itself and no log ever listed are left alone. `opts`: the host
  /// identity, keys and TLS for the discovery connection (subnqn is ignored); its keep-alive
  /// (kato_ms, 4 s when left at its default) detects a lost discovery controller. Returns at
  /// once: it connects in the background (HostStats::discovery shows how it goes). EEXIST when
  /// already watched, EDEADLK from a reactor thread.
  Result<void> add_discovery(const TransportAddress& addr, const ConnectOptions& opts = {});
  /// Stops watching it (and what it referred to); the paths it gave stay. ENOENT when not
  /// watched.
  Result<void> remove_discovery(const TransportAddress& addr);
  /// Namespace changes the controllers of its subsystems reported since the last call, oldest
  /// first (the newest 1024 are kept). Any thread.
  std::vector<NamespaceEvent> take_namespace_events();
  /// Calls `fn` for each namespace change as it is found (on the engine's blocking-work pool,
  /// never a reactor: it may block briefly, e.g. to open a volume on an added namespace with
  /// Volume::open on another thread). An empty function stops the calls. Any thread.
  void on_namespace_event(std::function<void(const NamespaceEvent&)> fn);

 protected:
  Host() = default;  ///< create() and shared() make the library's own kind of Host
};

}  // namespace nvmeof
NVMEOF_API_END
