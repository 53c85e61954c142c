// One namespace reached over N paths (controllers of one subsystem), made to look like one
// volume: ANA-aware active-active path selection, failover that never lets a stale write land,
// reconnect with backoff and failback.
//
// Threading: a volume runs on an engine (nvmeof/host.hpp): the engine's reactor threads carry
// its I/O (each reactor owns an io_uring and polls the queue pairs of every volume placed on
// it) and the engine's one control thread its admin queues, keep-alive, ANA and reconnects.
// Opening a volume starts no thread of its own.
// submit() and the coroutine forms may be called from any thread; a call from a reactor thread
// (e.g. from inside a completion) stays on that reactor, others are handed through its bounded
// MPSC ring to a reactor on the caller's NUMA node (any reactor when that node has none). Completions run on the reactor thread that executed the I/O.
#pragma once

#include <chrono>
#include <coroutine>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "nvmeof/controller.hpp"
#include "nvmeof/host.hpp"
#include "nvmeof/identify.hpp"
#include "nvmeof/status.hpp"
#include "nvmeof/topology.hpp"
#include "nvmeof/export.h"

NVMEOF_API_BEGIN  // every declaration below is public API (default visibility)
namespace nvmeof {

enum class SelectorKind : uint8_t { round_robin, queue_depth, numa, service_time };

/// Whether writes whose outcome is unknown wait for their old controller to be fenced.
enum class FenceMode : uint8_t {
  safe,         ///< they wait (CCR, the controller closing on us, or the TP4129 hold)
  /// They move the moment the path fails. Unsafe: a stale write may land after a newer one.
  /// Exists only as the negative control of the tests that prove the fence works.
  skip_unsafe,
};
const char* to_string(SelectorKind k) noexcept;

// PollMode: nvmeof/host.hpp (how the engine's reactor threads wait).


struct VolumeOptions {
  std::vector<TransportAddress> paths;   ///< one entry per path (controller)
  ConnectOptions connect;                ///< subnqn, digests, queue depth, KATO
  uint32_t nsid = 1;                     ///< the namespace on the first path; matched on the
                                         ///< others by NGUID/EUI-64/UUID, not by NSID
  SelectorKind selector = SelectorKind::service_time;
  uint32_t round_robin_ios = 1;          ///< I/Os per turn for round_robin
  // -- the engine (HostOptions) Volume::open(opts) shares with volumes that ask for the same --
  unsigned reactors = 1;                 ///< the engine's reactor threads
  PollMode poll = PollMode::adaptive;    ///< how the reactor threads wait
  /// NUMA placement (nvmeof/topology.hpp). numa: reactor i is pinned to cpus[i % size] (or, when
  /// `cpus` is empty, to a chosen CPU: the nodes interleaved, nodes carrying a path first), its
  /// request pool and queue-pair buffers sit on its node, and its path choice knows the distance
  /// to each path's node. unpinned: none of that (a baseline to measure against).
  PlacementMode placement = PlacementMode::numa;
  std::vector<int> cpus;                 ///< CPUs for the reactors (numa placement)
  std::string sysfs_root = "/sys";       ///< where the topology is read from
  /// When >= 0, every reactor's memory goes on this node whatever the placement (to measure the
  /// cost of remote memory).
  int memory_node = kUnknownNode;
  bool single_issuer = true;             ///< HostOptions::single_issuer
  bool spin_sockets = true;              ///< HostOptions::spin_sockets
  /// Per-command deadline; 0 derives it from the path's own latency (never above 25 ms).
  std::chrono::microseconds io_deadline{0};
  /// How long an I/O waits when no path is usable (a timer enforces it, not only completions).
  std::chrono::milliseconds no_path_timeout{30000};
  /// Stands in for the Command Quiesce Time when a controller reports none; with CQT it makes
  /// the hold of the time rule (2 x KATO + CQT, 3 x with traffic-based keep-alive).
  std::chrono::milliseconds fence_bound{0};  ///< 0: the keep-alive timeout
  FenceMode fence = FenceMode::safe;
  /// How long a Cross-Controller Reset may take before the time rule is all that is left;
  /// 0: the failed controller's hold time.
  std::chrono::milliseconds ccr_timeout{0};
  /// Whether a failed path's controller is reset through another controller (TP8028) when the
  /// subsystem supports it. Off: writes across a silent failure wait the TP4129 hold.
  bool use_ccr = true;
  std::chrono::milliseconds reconnect_min{10};
  std::chrono::milliseconds reconnect_max{1000};
  /// Per I/O, across all paths: how many times the controllers may refuse it with a retryable
  /// status. The moves made by failovers (path errors, ANA refusals) do not count; no_path_timeout
  /// bounds those. A retry delay a controller asks for (CRD) that would end past no_path_timeout
  /// is not waited out: the I/O moves to another usable path, or completes with that status.
  uint32_t max_attempts = 16;
  /// The failover timeline (VolumeStats::timeline) keeps the newest this many events (at least
  /// one); older ones are let go and counted in VolumeStats::timeline_dropped.
  size_t timeline_max = 1024;

  // -- observability: the control socket and the metrics endpoint --
  /// A directory in which the volume publishes its state on a Unix socket (mode 0600) named
  /// `nvmeof-<pid>-<n>.sock`, n numbering this process's volumes from 0; the directory is created
  /// (mode 0700) if absent. Empty (the default): the environment variable NVMEOF_CONTROL_DIR
  /// when set, else no socket. It answers one JSON object per line: {"op":"stats"} (paths, ANA,
  /// counters, latency percentiles, the failover timeline) and {"op":"set-selector","selector":
  /// "round-robin"}; `nvmeof-paths` reads it. Served on the control thread from the same
  /// snapshot stats() takes. Volume::open fails with the socket's error (errno codes) when it
  /// cannot be opened.
  std::string control_socket;
  /// "ADDR:PORT" (e.g. "127.0.0.1:9464"; port 0 picks one): serve Prometheus metrics of this
  /// volume over HTTP at /metrics (nvmeof_volume_* and nvmeof_path_*; see README). Empty (the
  /// default): none. Collected from the stats() snapshot at each scrape, nothing on the I/O
  /// path. Volume::open fails with EADDRINUSE or invalid_argument when it cannot listen, and with
  /// Errc::unsupported when the library was built without metrics support.
  std::string metrics_listen;
};

/// One I/O on a volume. Owned by the caller until `done` runs; no allocation per I/O.
struct VolumeIo;
using VolumeCallback = void (*)(VolumeIo& io, NvmeStatus status) noexcept;

enum class IoOp : uint8_t { read, write, flush, write_zeroes, dsm };

struct VolumeIo {
  IoOp op = IoOp::read;
  uint64_t slba = 0;
  uint32_t nlb = 0;          ///< blocks (for dsm: number of ranges)
  void* buf = nullptr;       ///< data (read into / write from / dsm ranges)
  VolumeCallback done = nullptr;
  void* user = nullptr;
  /// Owned by the volume while the I/O is in flight (its queue link, split pieces, first error):
  /// opaque storage so that an I/O needs no allocation. Do not touch.
  alignas(8) unsigned char reserved_[48]{};
};

struct LatencyPercentiles {
  double p50_us = 0, p99_us = 0, p999_us = 0, max_us = 0, mean_us = 0;
};

/// One path of a volume. The path is a controller shared by every volume of the subsystem opened
/// with the same paths and settings: its counters (I/O, bytes, errors, retries, hedges, latency,
/// outstanding, failovers, keep-alives) count every such volume's commands; `ana_state` and
/// `ana_group` are the volume's namespace's.
struct PathStats {
  int index = 0;
  std::string address;
  PathState state = PathState::connecting;
  AnaState ana_state = AnaState::optimized;
  uint32_t ana_group = 0;
  uint32_t outstanding = 0;
  uint64_t ios = 0;
  uint64_t bytes = 0;
  double iops = 0;           ///< since the volume opened
  LatencyPercentiles latency;
  uint64_t errors = 0;       ///< failed completions seen on this path (retried or not)
  uint64_t retries = 0;      ///< I/Os resubmitted away from this path or on it
  /// Reads past their deadline on this path re-issued on another one (the path not failed:
  /// slow is not dead), and how many of them the other path answered first.
  uint64_t hedges = 0;
  uint64_t hedge_wins = 0;
  uint64_t failovers = 0;    ///< times this path failed
  uint16_t cntlid = 0;  ///< the controller's ID (its current association), 0 before the first
  /// Keep Alive commands its controller has sent (none while I/O completes on a controller with
  /// traffic-based keep-alive).
  uint64_t keep_alives = 0;
  /// Of those, how many a second over the last window of about a second (0 while I/O
  /// completes on a controller with traffic-based keep-alive, about 4 / KATO idle).
  double keep_alives_per_s = 0;
  uint64_t reconnects = 0;
  /// (Re)connect attempts that failed (retried with backoff), and why the last one did, e.g.
  /// "authentication failed" for a wrong DH-HMAC-CHAP key; empty while none failed.
  uint64_t connect_failures = 0;
  std::string last_connect_error;
  uint16_t cqt_ms = 0;
  /// After this path fails, how long its writes whose outcome is unknown may wait before they
  /// move (the fence; known at connect), and the rule that gives it: "ccr" (a cross-controller
  /// reset through another path: about the target's CQT), "kato+cqt" (no CCR: 2 or 3 x KATO +
  /// CQT), "kato+bound" (no CCR, no CQT reported: VolumeOptions::fence_bound or the KATO stands
  /// in for CQT), "kernel" (a kernel path), "" before the first connect.
  uint32_t write_fence_ms = 0;
  std::string write_fence_rule;
  // -- observability: what nvmeof-paths and the metrics show per path --
  std::string transport;     ///< "tcp", "rdma", "passthrough"
  std::string traddr;
  std::string trsvcid;
  int numa_node = -1;        ///< the path's node (placement), -1 unknown
  uint64_t reads = 0;        ///< completed read commands (split pieces counted each)
  uint64_t writes = 0;
  uint64_t read_bytes = 0;
  uint64_t write_bytes = 0;
};

/// One failover, with times in microseconds since detection (absolute monotonic ns kept too).
struct FailoverEvent {
  int path = -1;
  std::string cause;            ///< "connection reset", "deadline 25 ms", "ana inaccessible", ...
  uint64_t detect_ns = 0;       ///< monotonic clock
  int64_t fenced_us = -1;       ///< the old controller can no longer execute (writes may move)
  std::string fence_rule;       ///< "ccr", "peer closed", "time", "skipped (unsafe)"; "" until fenced
  int64_t first_resubmit_us = -1;
  int64_t first_success_us = -1;
  int64_t reconnected_us = -1;
  uint32_t reads_moved = 0;
  uint32_t writes_moved = 0;
};

struct VolumeStats {
  NamespaceInfo ns;  ///< as identified at open, with the size now (a resize is followed)
  /// The controllers reported the namespace changed and no path shows it any more: its I/O
  /// completes with Invalid Namespace (status::kInvalidNamespace, DNR) until a path shows it again.
  bool namespace_removed = false;
  SelectorKind selector = SelectorKind::service_time;
  std::vector<PathStats> paths;
  std::vector<FailoverEvent> timeline;  ///< the newest VolumeOptions::timeline_max failovers, oldest first
  uint64_t timeline_dropped = 0;         ///< older failovers no longer in `timeline`
  uint64_t completed = 0;
  uint64_t failed = 0;           ///< completed with an error status to the application
  uint64_t waiting = 0;          ///< I/Os queued for a usable path right now
  PollMode poll = PollMode::adaptive;
  /// CPU time each reactor thread has used since it started (its thread CPU clock): what the
  /// poll mode costs, to set against `completed`.
  std::vector<uint64_t> reactor_cpu_ns;
  /// Loop turns each reactor thread has run since it started: a busy reactor (or an adaptive
  /// one in a spin window) runs one per pass, hundreds of thousands a second; a sleeping one
  /// about two per wake-up. Counts, not times: what a poll mode costs in events.
  std::vector<uint64_t> reactor_turns;
  /// Times each reactor thread has slept in its ring and woken again: for a completion, a
  /// submission, a posted function (stats() itself posts one), or the end of its wait. An idle
  /// adaptive or sleeping reactor wakes a few times a second; a busy one never sleeps.
  std::vector<uint64_t> reactor_wakeups;
  /// Of those wake-ups, the ones for the end of its wait (its timeout or a timer's deadline)
  /// with nothing else to wake it: the rest were woken by something that happened.
  std::vector<uint64_t> reactor_timeouts;
  /// Reactors that did not answer within 200 ms (one held up by a completion callback that
  /// blocks): their paths' latency and outstanding counts are missing from these stats.
  uint32_t lanes_unanswered = 0;
};

/// Text and JSON (snake_case keys, arrays always arrays) forms of the stats.
std::string to_text(const VolumeStats& s);
std::string to_json(const VolumeStats& s);

class Volume {
 public:
  /// Connects every path, identifies the namespace on each and checks they are the same one
  /// (Errc::namespace_mismatch otherwise), reads ANA state, starts the reactors. A path that
  /// cannot be reached at open is kept and reconnected in the background; open fails only when
  /// no path can be opened (the first path's error is returned).
  ///
  /// This form runs on the process's shared engine for the engine fields of `opts` (reactors,
  /// poll, placement, cpus, sysfs_root, memory_node; Host::shared), made on first use: volumes
  /// opened with the same fields share its threads. Errc::invalid_argument for zero reactors.
  static Result<std::unique_ptr<Volume>> open(const VolumeOptions& opts);
  /// As open(opts), on `host`: the engine fields of `opts` are not used (the engine's own
  /// options hold). A volume with an io_uring passthrough path needs an engine made with
  /// HostOptions::big_entries (Errc::invalid_argument otherwise). The volume holds `host`.
  static Result<std::unique_ptr<Volume>> open(std::shared_ptr<Host> host, const VolumeOptions& opts);
  /// Opens every subsystem path a discovery controller lists for `opts.connect.subnqn`. With a
  /// TLS key (ConnectOptions::tls_psk) the discovery controller is reached through TLS (in
  /// plaintext when its port does not offer TLS and tls is when_keyed) and the paths are the
  /// TCP entries that offer TLS 1.3 (TSAS SECTYPE); without, those that do not require it
  /// (TREQ). Errc::tls_required / tls_not_offered when that leaves none for that reason.
  static Result<std::unique_ptr<Volume>> open_discovered(const TransportAddress& discovery,
                                                         VolumeOptions opts);
  /// As open_discovered(discovery, opts), on `host` (see open(host, opts)).
  static Result<std::unique_ptr<Volume>> open_discovered(std::shared_ptr<Host> host,
                                                         const TransportAddress& discovery, VolumeOptions opts);
  ~Volume();  ///< waits for in-flight I/O (bounded by no_path_timeout), then tears down

  const NamespaceInfo& ns() const noexcept;
  uint32_t block_size() const noexcept;
  uint64_t size_blocks() const noexcept;
  /// The most bytes one command moves on every path (the smallest MDTS of the paths at open, at
  /// most 65536 blocks): a larger I/O is split into commands of this size.
  uint32_t max_transfer() const noexcept;

  /// Starts `io`. Returns 0, -EINVAL on a bad request (beyond the namespace, nlb 0), -EAGAIN when
  /// the target reactor's submission ring is full. Never fails for lack of a path: the I/O waits
  /// up to no_path_timeout, then completes with status::kHostPathError (DNR set).
  int submit(VolumeIo& io) noexcept;

  /// Starts `io` on reactor `reactor` (modulo the number of reactors) whatever the calling
  /// thread: for a caller that spreads its own work over the reactors (and put its buffers on
  /// each reactor's node, placement().reactors[i].node). Returns as submit().
  int submit(VolumeIo& io, unsigned reactor) noexcept;

  /// On an engine made with HostOptions::caller_drive: runs the turns of this volume's first
  /// reactor on the calling thread, spinning, until `until()` is true (checked after each turn)
  /// or `timeout` passes. False, having run no turn, when that cannot be done now: the engine
  /// does not allow it, another thread drives that reactor, or the caller is a reactor thread;
  /// the caller then waits as it otherwise would. ARCHITECTURE.md, "Caller-driven turns".
  bool drive(const std::function<bool()>& until, std::chrono::microseconds timeout);
  /// True on a thread that runs one of this volume's reactors (a completion callback, or a
  /// caller inside drive()): what must not block waiting for this volume's I/O.
  bool on_reactor_thread() const noexcept;

  /// The placement plan, computed once at open (a path added later is placed when added and is
  /// not in it). Any thread.
  const Placement& placement() const noexcept;
  /// The engine the volume runs on (the shared one for Volume::open(opts)): for
  /// Host::add_discovery, the engine's stats and namespace events.
  std::shared_ptr<Host> host() const noexcept;

  /// Adds a path at run time: a controller of the same subsystem at `addr`. It connects in the
  /// background (reconnecting with backoff while it cannot) and takes its share of the I/O once
  /// live; the call returns its path index at once. A path belongs to the subsystem's shared
  /// controllers, so every volume open on them (the same subsystem, paths and settings) gains
  /// it. A path removed earlier comes back under its old index; a new one takes a new index, or,
  /// once kMaxPaths have been used, the index of a removed one. Errors: EEXIST (already a path),
  /// EBUSY (it is being removed), ENOSPC (kMaxPaths paths at once),
  /// Errc::invalid_argument (an io_uring passthrough path on an engine without big ring entries).
  /// Not from a reactor thread (a completion callback): EDEADLK.
  Result<int> add_path(const TransportAddress& addr);
  /// Removes a path at run time and returns once it is gone: it takes no new I/O at once (the
  /// other paths carry it; with none left, I/O waits up to no_path_timeout), its commands in
  /// flight complete (a failure meanwhile moves them by the usual rules: writes only after their
  /// fence), then its controller is closed. No I/O fails for it. Every volume on the subsystem's
  /// controllers loses the path. Errors: ENOENT (not a path), Errc::timeout (not gone within
  /// no_path_timeout plus its write-fence bound; it goes on being removed), EDEADLK from a
  /// reactor thread or the engine's control thread.
  Result<void> remove_path(const TransportAddress& addr);
  /// The most paths a subsystem's controllers may have at once.
  static constexpr unsigned kMaxPaths = 16;

  /// Changes the path selector; safe while I/O runs.
  void set_selector(SelectorKind k) noexcept;

  VolumeStats stats() const;
  /// Paths usable for I/O right now.
  unsigned usable_paths() const noexcept;

  // -- observability: the control socket and the metrics endpoint --
  /// The TCP port of the metrics endpoint (VolumeOptions::metrics_listen), 0 when none.
  uint16_t metrics_port() const noexcept;
  /// The path of this volume's control socket, "" when none.
  std::string control_socket_path() const;

  /// Awaitable form: `NvmeStatus s = co_await volume.read(buf, slba, nlb);` An I/O that submit()
  /// refuses resumes at once with `rc` set to submit()'s code and a status that says the same:
  /// -EINVAL as status::kInvalidField (DNR: the request itself is wrong), -EAGAIN (the reactor's
  /// submission ring was full) as status::kCommandInterrupted (no DNR: try again).
  struct Awaitable {
    Volume* vol;
    VolumeIo io;
    std::coroutine_handle<> handle;
    NvmeStatus status{};
    int rc = 0;
    bool await_ready() const noexcept { return false; }
    bool await_suspend(std::coroutine_handle<> h) noexcept;
    NvmeStatus await_resume() const noexcept;
  };
  Awaitable read(void* buf, uint64_t slba, uint32_t nlb) noexcept;
  Awaitable write(const void* buf, uint64_t slba, uint32_t nlb) noexcept;
  Awaitable flush() noexcept;
  Awaitable write_zeroes(uint64_t slba, uint32_t nlb) noexcept;
  Awaitable dsm(DsmRange* ranges, uint32_t nr) noexcept;

 private:
  struct Impl;  // opaque, defined inside the library
  explicit Volume(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace nvmeof
NVMEOF_API_END
