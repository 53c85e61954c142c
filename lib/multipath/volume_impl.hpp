// Internals of Volume: a subsystem reached over its paths (SubsystemPaths: one controller per
// path, the lanes, one per engine reactor, that run the data plane, and the failover machine),
// shared by every volume (namespace) open on it, and the volume itself (VolumeNs, VolumeImpl).
// ARCHITECTURE.md, "Shared controllers".
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>

#include <time.h>

#include <array>
#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "core/histogram.hpp"
#include "core/mpsc_ring.hpp"
#include "control/control_plane.hpp"
#include "control/controller_access.hpp"
#include "control/endpoint.hpp"
#include "core/node_memory.hpp"
#include "multipath/engine.hpp"
#include "multipath/failover_machine.hpp"
#include "multipath/io_trace.hpp"
#include "multipath/observers.hpp"
#include "multipath/path_selector.hpp"
#include "nvmeof/controller.hpp"
#include "transport/queue_pair.hpp"
#include "reactor/reactor.hpp"
#include "nvmeof/topology.hpp"
#include "nvmeof/volume.hpp"

namespace nvmeof::detail {

/// Path slots of a subsystem: the paths it opened with, then the ones added at run time. The
/// tables are sized once so that other threads read them without a lock; a removed path keeps
/// its slot (and takes it again when added back) until every slot has been used, then a new
/// path takes a removed one's (its address changes under SharedPath::addr_mu).
inline constexpr size_t kMaxPaths = Volume::kMaxPaths;

/// One path (one controller) as the whole subsystem sees it, for every volume on it.
///
/// Threading: `state`, `generation`, `quiesce_ns`, `fenced_through` and `event` are
/// written by the control thread only and read by the lanes with relaxed (or acquire) loads. A
/// stale read is safe: an I/O sent to a path that just failed or turned inaccessible comes back
/// with a transport or path status and is retried by the decision table; a lane never uses a
/// queue pair from an older generation; a write waiting for its fence that reads an old
/// `fenced_through` only waits one more turn (the value only grows). The fields under "control
/// thread only" belong to the control thread and the connect pool task it started (never both
/// at once: a path has one connect or CCR task at a time).
struct SharedPath {
  int index = 0;
  /// Where the path leads. A removed slot may be taken by another address (add_path), so it is
  /// read through address() (a copy under addr_mu) and changed only by set_address.
  TransportAddress address() const {
    std::lock_guard lock(addr_mu);
    return addr;
  }
  void set_address(const TransportAddress& a) {
    std::lock_guard lock(addr_mu);
    addr = a;
  }
  std::atomic<int> numa_node{kUnknownNode};  ///< the path's node (placement), set with the address
  std::atomic<PathState> state{PathState::connecting};
  std::atomic<AnaState> ana{AnaState::optimized};
  std::atomic<uint32_t> generation{0};
  std::atomic<uint64_t> quiesce_ns{0};   ///< CQT (or the configured bound) in ns
  /// Generation + 1 of the newest generation proven fenced (0: none): commands sent on a queue
  /// pair of generation g can no longer execute once fenced_through > g.
  std::atomic<uint32_t> fenced_through{0};
  std::atomic<int> event{-1};            ///< timeline index of the open failover, -1 none
  /// Timeline index of the failover of an older generation that reconnected before its fence
  /// (control thread only): its fence, when it comes, is stamped there.
  int unfenced_event = -1;
  /// What the lanes' probe of a silent path reads (one block): a namespace of some volume on
  /// this path (the newest bound; a closed volume's stays until another is bound, and any
  /// answer, even an error, shows the controller alive).
  std::atomic<uint32_t> probe_nsid{0};
  std::atomic<uint32_t> probe_block_size{512};
  // -- control thread only --
  std::shared_ptr<PathEndpoint> ctrl;  ///< a fabric controller or a kernel path (ctrl_mu to replace)
  /// Guards replacing `ctrl` against readers off the control thread (endpoint()).
  mutable std::mutex ctrl_mu;
  std::shared_ptr<PathEndpoint> endpoint() const {
    std::lock_guard lock(ctrl_mu);
    return ctrl;
  }
  PathFacts facts;                     ///< what the failover machine knows of its controller
  uint16_t cqt_ms = 0;
  /// How long its writes may wait for their fence after a failure (write_fence_bound), set at
  /// each connect; read by stats from any thread.
  std::atomic<uint32_t> write_fence_ms{0};
  std::atomic<WriteFenceRule> write_fence_rule{WriteFenceRule::unknown};
  std::atomic<bool> write_fence_logged{false};  ///< the over-budget line is said once per path
  std::array<uint16_t, 3> crdt_100ms{};
  uint32_t reported_generation = UINT32_MAX;  // guarded by SubsystemPaths::timeline_mu_
  std::atomic<uint64_t> failovers{0};
  std::atomic<uint64_t> keep_alives{0};  // its controller's, copied by ana_poll (control thread)
  /// Keep Alive commands a second over the last window of at least a second, published by
  /// ana_poll from the count above; the window's start and count are control thread only.
  std::atomic<double> keep_alives_per_s{0};
  uint64_t ka_window_ns = 0, ka_window_count = 0;
  std::atomic<uint64_t> reconnects{0};
  std::atomic<uint64_t> connect_failures{0};
  // -- removal at run time (control thread only) --
  bool retiring = false;          ///< remove_path() asked; cleared when added back
  uint32_t drain_waiting = 0;     ///< lanes that have not yet drained the path
  std::vector<std::function<void()>> on_removed;  ///< run once the path is removed
  /// The newest ANA log read on `ana_log_of` (this path's controller when it was read), so that
  /// binding one more volume takes its group's state from it instead of reading the log again.
  /// Both guarded by SubsystemPaths::ns_mu_; written by connect_path() and refresh_ana_now().
  std::shared_ptr<const AnaLog> ana_log;
  const PathEndpoint* ana_log_of = nullptr;
  mutable std::mutex error_mu;
  std::string last_connect_error;  ///< guarded by error_mu: why the last (re)connect failed

 private:
  mutable std::mutex addr_mu;
  TransportAddress addr;  // addr_mu
};

class SubsystemPaths;

/// One volume: a namespace of the subsystem, as its I/O needs it on every path. A VolumeIo
/// carries its VolumeNs (VolumeIoState::ns) into the lanes, which serve every volume alike.
///
/// Threading: `info`, `max_blocks_per_cmd` and `round_robin_ios` are written before the volume
/// accepts I/O and only read afterwards. Per path, `nsid`, `ana` and `anagrpid` are written by
/// the control side (bind, reconnect, ANA refresh: the control thread or its pool) and read
/// relaxed by the lanes; a stale read is safe for the reasons SharedPath gives. `change_since_ns`
/// is the control thread's. The counters are relaxed atomics.
struct VolumeNs {
  struct OnPath {
    std::atomic<uint32_t> nsid{0};  ///< 0: not found behind this path's controller (unusable)
    std::atomic<AnaState> ana{AnaState::optimized};
    std::atomic<uint32_t> anagrpid{0};
    uint64_t change_since_ns = 0;  // control thread: when it entered ANA change, 0 if not in it
    uint64_t next_look_ns = 0;     // control thread: when to look for it again while nsid is 0
  };
  VolumeNs() : on(kMaxPaths) {}
  NamespaceInfo info;
  uint32_t max_blocks_per_cmd = 1;
  uint32_t round_robin_ios = 1;
  std::vector<OnPath> on;  // one per path slot (kMaxPaths); never resized
  std::atomic<SelectorKind> selector{SelectorKind::service_time};
  /// The namespace's size now (info.size_blocks is its size at open): a resize reported by the
  /// controllers (refresh_namespaces) stores it; submit() bounds I/O by it. Any thread, relaxed.
  std::atomic<uint64_t> size_blocks{0};
  /// Gone from every path (the controllers reported it changed and no longer show it): its I/O
  /// completes with Invalid Namespace. Cleared when a path shows it again.
  std::atomic<bool> removed{false};
  std::atomic<uint64_t> completed{0};
  std::atomic<uint64_t> failed{0};
  /// Accepted by submit() and not completed yet (any thread): what closing the volume waits for.
  std::atomic<uint64_t> inflight{0};
  /// Path p can carry this volume's I/O as far as the namespace goes (found there, ANA usable).
  bool usable_on(size_t p) const noexcept;

  /// Writes of this volume waiting for their old controller's fence, from every lane, from the
  /// moment they are held until they complete: a new write overlapping one waits until it has
  /// completed (Lane::overlaps_held), so the held write, which may still execute on the old
  /// controller, can never land after it. `held_count` is the lanes' one relaxed load per write
  /// while nothing is held; the list is under `held_mu`.
  struct HeldWrite {
    uint64_t slba = 0;
    uint64_t nlb = 0;  ///< 0: a DSM (its ranges are in its buffer), taken as overlapping all
    const void* owner = nullptr;
  };
  std::atomic<uint32_t> held_count{0};
  std::mutex held_mu;
  std::vector<HeldWrite> held;
};

struct AttemptList;

/// One in-flight piece of a VolumeIo on one path.
struct Attempt {
  IoRequest req;             // req.user points back here
  VolumeIo* io = nullptr;
  uint64_t slba = 0;
  uint32_t nlb = 0;
  uint32_t byte_off = 0;
  uint32_t bytes = 0;        // data bytes this piece moves
  int path = -1;             // where it is (or was last) submitted
  uint32_t generation = 0;
  uint64_t issue_ns = 0;
  uint64_t ahead_bytes = 0;  // data bytes outstanding on its path when it was issued
  uint64_t release_ns = 0;   // fence / CRD / no-path deadline, per list
  uint32_t attempts = 0;     // submissions made so far
  // Failures with a controller status other than a path error: what max_attempts bounds (path
  // trouble is bounded by no_path_timeout instead, so failovers do not use up the attempts).
  uint32_t status_failures = 0;
  int event = -1;            // failover this piece was moved by
  int exclude = -1;          // path to avoid on the next issue
  // Hedging (a read past its deadline re-issued on another path). The primary reads into the
  // application's buffer, its hedge into `bounce` (its own), so the loser never writes where
  // the winner's data went back to the application: the primary's transport drops its data once
  // the hedge won (QueuePair::detach_data), or, when it cannot promise that, the piece completes
  // only when the primary does.
  enum class Role : uint8_t { plain, primary, hedge } role = Role::plain;
  Lane* lane = nullptr;        // the lane that owns it (its pool), for completions
  Attempt* twin = nullptr;     // the other attempt of a hedged read while both are in flight
  bool abandoned = false;      // its result is not wanted: freed when it completes
  bool hedge_won = false;      // primary: its hedge delivered the data; finish when it completes
  bool hedge_failed = false;   // primary: a hedge of it failed; hedged again only on a clean path
  bool held = false;           // in its volume's held writes (VolumeNs::held) until it completes
  std::unique_ptr<uint8_t[]> bounce;  // hedge: where its data lands
  AttemptList* list = nullptr;  // the list it is on, if any
  Attempt* prev = nullptr;   // in-flight list of its path, or a wait list
  Attempt* next = nullptr;
};

/// Doubly linked FIFO of attempts (in-flight per path, or waiting).
struct AttemptList {
  Attempt* head = nullptr;
  Attempt* tail = nullptr;
  uint32_t size = 0;
  void push_back(Attempt* a) noexcept;
  void remove(Attempt* a) noexcept;
  Attempt* pop_front() noexcept;
  bool empty() const noexcept { return head == nullptr; }
};

/// A lane's view of one path. Counters are written by the lane only (relaxed stores) and read
/// by stats() from another thread: a torn snapshot across counters is acceptable for stats.
struct LanePath {
  std::unique_ptr<QueuePair> qp;
  bool draining = false;  // remove_path: close the pair once its commands are done
  uint32_t generation = 0;
  AttemptList inflight;
  uint64_t outstanding_bytes = 0;
  double latency_ns = 0;     // EWMA of completion latency
  double bytes_per_ns = 0;   // EWMA of delivered bandwidth
  // How fast the path drains its queue while busy (a moving average over windows of at least 5 ms that
  // start when it goes from idle to busy): what a command's transfer allowance divides by.
  double drain_bytes_per_ns = 0;
  uint64_t drain_window_ns = 0;
  uint64_t drain_window_bytes = 0;
  uint64_t teardown_ns = 0;  // when this lane's connection was torn down
  uint64_t peer_closed_ns = 0;  // when the controller closed this generation's queue pair, 0 if not
  uint64_t last_completion_ns = 0;
  uint64_t last_completed_issue_ns = 0;  // newest issue time among completed commands
  int stamped_resubmit = -1; // failover events whose timeline this lane already stamped
  int stamped_success = -1;
  uint32_t error_streak = 0;  // failed completions since this pair's last success
  // The controller's traffic-based keep-alive clock (PreparedQueue::traffic), and when this lane
  // last stored into it: at most once a millisecond, so reactors rarely share its cache line.
  std::shared_ptr<std::atomic<uint64_t>> traffic;
  uint64_t traffic_noted_ns = 0;
  std::atomic<uint64_t> ios{0};
  std::atomic<uint64_t> bytes{0};
  std::atomic<uint64_t> errors{0};
  std::atomic<uint64_t> retries{0};
  std::atomic<uint64_t> hedges{0};      // reads past their deadline here re-issued elsewhere
  std::atomic<uint64_t> hedge_wins{0};  // of those, the ones the other path answered first
  // The probe of a silent path: a one-block read on its I/O queue, sent when its oldest command
  // passes the deadline; any answer (the probe's or another command's) shows it alive.
  IoRequest probe;
  std::unique_ptr<uint8_t[]> probe_buf;
  uint32_t probe_buf_size = 0;
  // A failure of this generation's queue pair reported before the generation was published
  // (the report was refused): reported again once it is.
  bool unpublished_failure = false;
  LossCause unpublished_loss = LossCause::local;
  uint64_t unpublished_ns = 0;
  std::string unpublished_cause;
  bool probe_inflight = false;
  uint32_t probe_generation = 0;
  uint64_t probe_sent_ns = 0;
  std::atomic<uint64_t> read_ios{0};   // completed pieces of reads (ios counts every op)
  std::atomic<uint64_t> read_bytes{0};
  std::atomic<uint64_t> write_ios{0};
  std::atomic<uint64_t> write_bytes{0};
  LatencyHistogram latency;  // lane thread only; copied out by a posted snapshot
};

/// Tests only: when set, called on the lane's thread right after attach_prepared() installed a
/// path's new queue pair (before its generation is published); true fails that queue pair at
/// once, as a connection lost in that window would.
inline bool (*g_fail_after_attach_for_test)(int path, uint32_t generation) = nullptr;

/// A volume's share of the data plane on one engine reactor: one queue pair per path on it, the
/// I/O it owns in flight or waiting. It has no thread: it is a poller of its reactor
/// (EngineReactor), whose loop serves every volume's lane on it.
///
/// Threading: everything belongs to the reactor's thread except `ring_` (an MPSC ring: any
/// thread pushes through enqueue(), the lane pops), `inflight_total_` (written by the lane,
/// read relaxed by shutdown(), which only waits for it to reach 0: a stale value waits one more
/// millisecond), the per-path counters of LanePath (see there) and `stop_` (atomic).
/// Other threads reach the lane only by post() (the reactor's MPSC function ring), which is how
/// the control thread attaches and closes queue pairs; snapshot() posts and waits. A function
/// posted to a lane that has stopped since does nothing (`alive_`, reactor thread only).
class Lane final : public QueuePairListener {
 public:
  Lane(SubsystemPaths& sub, EngineReactor& reactor, int index);
  ~Lane();
  /// Joins its reactor's loop (its request pool on the reactor's node). Blocks until done.
  Result<void> start();
  /// Fails what waits, closes its queue pairs, waits (bounded) for their commands and leaves
  /// the reactor. Blocks until done; any thread but the reactor's.
  void stop();

  /// Any thread. False when the ring is full.
  bool enqueue(VolumeIo* io) noexcept;
  /// Lane thread only.
  void start_io(VolumeIo& io) noexcept;
  bool on_lane_thread() const noexcept;
  EngineReactor& engine_reactor() noexcept { return er_; }

  // Messages from the control thread (run on the lane thread through Reactor::post).
  void post(std::function<void()> fn);
  /// Lane thread: starts a queue pair prepared off this thread for `path` and `generation`.
  Result<void> attach_prepared(int path, uint32_t generation, PreparedQueue& q);
  void close_path(int path, uint64_t now_ns);
  /// Lane thread: a path slot published since the lane started (add_path) joins its views, at
  /// NUMA `distance`; its LanePath was made before the slot was published.
  void add_path_slot(int path, int distance);
  /// Lane thread: the path takes no new I/O (its published state already says draining); once
  /// its commands here are done its queue pair closes and the control thread is told
  /// (SubsystemPaths::lane_drained).
  void drain_path(int path);
  /// Reports every live path of the current generation whose queue pair on this lane is missing
  /// or dead (after open: failures reported before the failover machine knew the path).
  void recheck_paths() noexcept;
  Reactor& reactor() noexcept { return er_.reactor(); }

  struct Snapshot {
    std::vector<LatencyHistogram> latency;
    std::vector<uint32_t> outstanding;
    uint64_t waiting = 0;
    bool answered = true;  // false: the lane did not answer within the wait; nothing else set
  };
  /// The lane's own figures, taken on its thread: asked for with snapshot_request() (posted
  /// from another thread, taken at once on the lane's own), then received with
  /// snapshot_wait() by `deadline`; a lane held up longer (a completion callback that blocks,
  /// a stopped lane) gives an empty, unanswered snapshot instead of blocking stats(). Asking
  /// every lane first makes stats() wait once for all of them, not once per held-up lane.
  std::future<Snapshot> snapshot_request();
  static Snapshot snapshot_wait(std::future<Snapshot>& f, std::chrono::steady_clock::time_point deadline);
  uint64_t inflight_total() const noexcept { return inflight_total_.load(std::memory_order_relaxed); }
  /// Submissions handed to enqueue() that the lane has not taken from its ring yet (any thread;
  /// relaxed: shutdown() only waits for it to reach 0).
  uint64_t queued() const noexcept {
    return enqueued_.load(std::memory_order_relaxed) - dequeued_.load(std::memory_order_relaxed);
  }
  /// Path slot `i` below SubsystemPaths::paths().size() (any thread).
  LanePath& path(int i) noexcept { return *paths_[static_cast<size_t>(i)]; }
  /// Control thread, before publishing slot `i`: its LanePath (kept when the slot is reused).
  void make_path(size_t i) {
    if (!paths_[i]) paths_[i] = std::make_unique<LanePath>();
  }
  /// CPU time the lane's reactor thread has used (its thread CPU clock), for every volume on it.
  uint64_t cpu_ns() const noexcept { return er_.cpu_ns(); }
  /// Its reactor's loop turns, wake-ups from a sleep in the ring and the wake-ups that were its
  /// timeout (Reactor::turns, waits, wait_timeouts), for every volume on it. Any thread.
  uint64_t turns() const noexcept { return er_.reactor().turns(); }
  uint64_t wakeups() const noexcept { return er_.reactor().waits(); }
  uint64_t timeouts() const noexcept { return er_.reactor().wait_timeouts(); }
  /// The node this lane runs on and keeps its memory on (the plan's), or kUnknownNode.
  int node() const noexcept;

  void on_queue_failed(QueuePair& qp, std::error_code why) noexcept override;

  /// How long the adaptive loop spins after an event while commands are outstanding: follows
  /// the fastest busy path's recent latency; 0 when no completion is due soon enough to spin for.
  /// Reactor thread.
  uint64_t spin_budget_ns() const noexcept;
  /// Nothing outstanding and nothing waiting on a timer-less list: the lane may sleep long.
  /// Reactor thread.
  bool quiescent() const noexcept;

 private:
  void shutdown_on_reactor() noexcept;
  static int poll_hook(void* self) noexcept;
  int turn() noexcept;
  static void on_complete(IoRequest& req, const Cqe& cqe) noexcept;
  void handle_completion(Attempt& a, const Cqe& cqe) noexcept;
  void launch(VolumeIo& io) noexcept;
  void issue(Attempt& a) noexcept;
  void finish_piece(Attempt& a, NvmeStatus st) noexcept;
  void fail_path_here(int p, const std::string& cause) noexcept;
  /// report_path_failure for this lane's generation of path p, kept for later when refused.
  void report_failure(int p, const std::string& cause, LossCause loss, uint64_t now) noexcept;
  /// Deadline handling of path `p` (its oldest command is past the deadline).
  void check_deadline(int p, uint64_t now) noexcept;
  bool hedge(Attempt& a) noexcept;
  void send_probe(int p, uint64_t now) noexcept;
  static void on_probe(IoRequest& req, const Cqe& cqe) noexcept;
  /// Frees an attempt whose result nobody waits for (an abandoned twin).
  void drop_attempt(Attempt& a) noexcept;
  /// A hedged pair's completion: true when it was handled (the caller returns).
  bool settle_hedge(Attempt& a, NvmeStatus st) noexcept;
  /// Another path is usable and not itself silent past its deadline (check_deadline); `any`:
  /// another path is usable at all.
  bool other_path_usable(int p, uint64_t now, bool& any) noexcept;
  uint64_t dead_after_ns(const LanePath& lp) const noexcept;
  void orphan_inflight(LanePath& lp) noexcept;
  /// A draining path whose commands here are done: closes its pair and tells the control thread.
  void finish_drain(int p) noexcept;
  bool fill_command(Attempt& a, int p) noexcept;
  /// The paths as `ns` sees them from this lane (ANA state and presence are per namespace);
  /// nullptr: as the controllers are, whatever the namespace.
  void refresh_views(const VolumeNs* ns) noexcept;
  /// Completes a whole I/O to its caller (counted on its volume).
  static void deliver(VolumeIo& io, NvmeStatus st) noexcept;
  uint64_t deadline_ns(const LanePath& lp) const noexcept;
  /// `a`'s own deadline on `lp`: deadline_ns(lp) plus the time its transfer and those ahead of
  /// it take at the path's drain rate (transfer_allowance_ns).
  uint64_t deadline_ns(const LanePath& lp, const Attempt& a) const noexcept;
  Attempt* alloc_attempt() noexcept;
  void free_attempt(Attempt* a) noexcept;
  /// VolumeNs::held: add a write waiting for its fence; whether a new one overlaps any.
  static void hold_write(Attempt& a) noexcept;
  static bool overlaps_held(const Attempt& a) noexcept;
  void stamp_event(int p, int event, bool success, IoOp op) noexcept;
  uint32_t blocks_per_piece(const VolumeIo& io) const noexcept;
  uint32_t pieces_of(const VolumeIo& io) const noexcept;
  bool has_free(uint32_t n) const noexcept;

  SubsystemPaths& sub_;
  EngineReactor& er_;
  int index_;
  std::atomic<bool> stop_{false};
  bool started_ = false;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  MpscRing<VolumeIo*> ring_{4096};
  // One per path slot (kMaxPaths, never resized): slot i is made by the control thread before
  // it publishes the slot, so other threads read the published ones without a lock. The lane
  // itself walks the slots its views_ cover (add_path_slot grows them on its thread).
  std::vector<std::unique_ptr<LanePath>> paths_{kMaxPaths};
  std::vector<std::unique_ptr<QueuePair>> graveyard_;  // failed pairs draining their I/O
  std::vector<PathView> views_;
  SelectorState selector_state_;
  NodeArray<Attempt> attempts_;  // allocated on the lane's thread, after pinning
  Attempt* free_ = nullptr;
  VolumeIo* backlog_head_ = nullptr;
  VolumeIo* backlog_tail_ = nullptr;
  AttemptList waiting_;        // no usable path
  AttemptList fenced_;         // writes waiting for their old path's fence
  AttemptList overlapping_;    // new writes overlapping a held one: wait until it completes
  AttemptList delayed_;        // CRD delay or queue full
  AttemptList orphans_;        // in flight on a queue pair that was closed or replaced
  std::atomic<uint64_t> inflight_total_{0};
  std::atomic<uint64_t> enqueued_{0};  // any thread (fetch_add)
  std::atomic<uint64_t> dequeued_{0};  // the lane only
  // The last turn in which every usable path was silent, or the first after the lane was not
  // run for kLaneStallNs: no path's silence counts from before it.
  uint64_t all_silent_ns_ = 0;
  uint64_t turn_ns_ = 0;           // the clock at the start of the current (or last) turn
  uint64_t last_turn_ns_ = 0;      // g_lane_gap_for_test only
  uint64_t last_turn_cpu_ns_ = 0;
};

/// A subsystem over its paths: one controller per path, one lane per engine reactor, the
/// failover machine and its control loop, shared by every volume (namespace) open on it
/// (bind()/unbind()). The engine keeps one per sharing key (subsystem_key); the volumes hold it,
/// and the last one to close closes the controllers.
///
/// Threading: `host_` is set at construction and held until the object is destroyed (its threads
/// outlive every lane and timer). The path slots (`paths_`, kMaxPaths, never resized) are
/// published by `npaths_` (release): a slot below it is fully made (its SharedPath, and its
/// LanePath on every lane), so any thread may read the slots paths() returns; slots are added
/// under `paths_mu_` (add_path) and never freed. `opts_`, `max_transfer_`, `lanes_`,
/// `topology_`, `placement_` and `node_lanes_` are written by open() before any lane runs or
/// any volume is bound (`open_mu_`, whose release publishes them) and only read afterwards.
/// `bound_` and each path's ANA log copy (SharedPath::ana_log) are guarded by `ns_mu_`: a
/// refresh stores its log and takes the volumes to update in one critical section, and a bind
/// reads the copy and sets the state in one, so a volume being bound never keeps an older state
/// than the volumes already bound.
/// `machine_` and `timers_` belong to the control loop (the control plane's io_context thread);
/// the connect pool runs blocking work (connects, CCRs, admin reads) and reports back to that
/// loop by posting, never touching the machine itself. `timeline_` is guarded by
/// `timeline_mu_` (lanes stamp it once per failover). The counters are relaxed atomics:
/// statistics only.
class SubsystemPaths : public FailoverEnv {
 public:
  SubsystemPaths(std::shared_ptr<Host> host, const VolumeOptions& opts);
  ~SubsystemPaths();

  /// Connects the controllers, binds the first volume `vo` (returned in `first`) and starts the
  /// lanes. Errors: no path could be connected (the first path's error), those of bind().
  Result<void> open(const VolumeOptions& vo, std::shared_ptr<VolumeNs>& first);
  void shutdown();
  /// A volume on it: the first caller opens it (open()), later ones bind() to it; once opening
  /// failed every caller gets that error (failed_to_open()). Any thread.
  Result<std::shared_ptr<VolumeNs>> open_volume(const VolumeOptions& vo);
  /// Opened successfully: its paths, lanes and placement may be read (acquire). Any thread.
  bool ready() const noexcept { return ready_.load(std::memory_order_acquire); }
  bool failed_to_open() {
    std::lock_guard lock(open_mu_);
    return bool(open_error_);
  }
  /// A volume of namespace `vo.nsid` (on the first live path; matched by its identifiers on the
  /// others) on these controllers: identifies it on every live path (admin commands, no new
  /// connection). Errors: the namespace is not active (invalid_argument), a live path shows no
  /// namespace with its identifiers (namespace_mismatch), those of the admin commands.
  Result<std::shared_ptr<VolumeNs>> bind(const VolumeOptions& vo);
  /// The volume is gone (its I/O has completed): the control side stops tracking it.
  void unbind(const VolumeNs& ns);
  /// The volumes open on it now. Any thread.
  std::vector<std::shared_ptr<VolumeNs>> bound() const;
  /// The published path slots, removed ones included (SharedPath::state). Any thread.
  std::span<const std::unique_ptr<SharedPath>> paths() const noexcept {
    return {paths_.data(), npaths_.load(std::memory_order_acquire)};
  }
  /// Volume::add_path / remove_path (ARCHITECTURE.md, "Paths at run time"). Any thread but a
  /// lane's; remove_path blocks and so not the control thread either.
  Result<int> add_path(const TransportAddress& addr);
  Result<void> remove_path(const TransportAddress& addr);
  /// Control thread: starts removing path `path`; `done` runs (on the control thread) once it is
  /// removed. A path already being removed only gains the callback.
  void start_remove(int path, std::function<void()> done);
  /// A lane finished draining `path` (posts to the control thread).
  void lane_drained(int path);
  /// Persistent discovery (Engine::apply_discovery, under its apply_mu): `entries` are every
  /// watched discovery log's. The ports they list for this subsystem (usable_ports) that are not
  /// paths become paths; a path a log listed before and none lists now is removed.
  void apply_discovered(const std::vector<DiscoveryEntry>& entries);

  // Control-thread events (any thread may call; they post to the control context).
  /// False when `generation` is not the published one: stale, or not yet published (a queue pair
  /// that fails between its attach and publish_live; the lane reports again once it is).
  bool report_path_failure(int path, uint32_t generation, std::string cause, LossCause loss,
                           uint64_t detect_ns);
  void request_ana_refresh();
  /// Path `path`'s controller reported a Namespace Attribute Changed event: reads its Changed
  /// Namespace List and identifies those namespaces again (on the pool): a bound volume's
  /// namespace resized or removed, an unknown one added, each reported to the engine once.
  void request_namespace_refresh(int path);

  uint32_t attempts_per_io() const noexcept { return opts_.max_attempts; }
  uint64_t no_path_timeout_ns() const noexcept;
  Lane* lane_for_submit() noexcept;
  /// The lane for a submission from a thread that is not a lane: one on the caller's node
  /// (round-robin among them), else any (round-robin). Read-only tables after open.
  Lane* lane_for_caller() noexcept;
  /// Computes placement_ (before the lanes exist) and, once they do, the lanes per node.
  void plan_placement();
  void index_lanes();
  /// NUMA distance from lane `lane`'s reactor to a path on `path_node` (the plan's rule).
  int distance_to(size_t lane, int path_node) const noexcept;

  std::shared_ptr<Host> host_;  // first: destroyed last
  VolumeOptions opts_;          // the first volume's; the sharing key says what all agree on
  ControlPlane& cp_{*engine_of(*host_).cp};
  uint32_t max_transfer_ = 1u << 20;  // bytes one command may move on every path
  std::array<std::unique_ptr<SharedPath>, kMaxPaths> paths_;
  std::atomic<size_t> npaths_{0};
  std::mutex paths_mu_;  // add_path: one slot change at a time
  std::vector<std::unique_ptr<Lane>> lanes_;
  std::atomic<uint32_t> next_lane_{0};
  mutable std::mutex ns_mu_;
  std::vector<std::shared_ptr<VolumeNs>> bound_;  // the volumes open on it (ns_mu_)
  std::vector<std::shared_ptr<VolumeNs>> retired_;  // closed with I/O still in a lane (ns_mu_)
  std::mutex open_mu_;
  bool opened_ = false;             // open_mu_
  std::error_code open_error_;      // open_mu_
  std::atomic<bool> ready_{false};
  const uint32_t serial_;  // this process's subsystem number (nvmeof-paths groups volumes by it)
  // Written once by open() before any lane starts or any submit is accepted; read-only after.
  Topology topology_;
  Placement placement_;
  std::vector<std::vector<Lane*>> node_lanes_;  // indexed by node id
  uint64_t open_ns_ = 0;

  mutable std::mutex timeline_mu_;  // guards timeline_ (rare: once per failover per lane)
  std::deque<FailoverEvent> timeline_;  // the newest opts_.timeline_max events
  uint64_t timeline_dropped_ = 0;       // events let go from its front
  // Under timeline_mu_. Events are numbered from the volume's first (SharedPath::event, an
  // attempt's event): push_event appends one (letting the oldest go past the cap) and returns its
  // number; event_at finds one, nullptr once it has been let go.
  int push_event(FailoverEvent e);
  FailoverEvent* event_at(int number) noexcept;

  /// Volume::stats() of the volume `ns`: lane snapshots (posted to each lane) plus the shared
  /// counters. The path counters are the controllers': every volume's I/O on them. Any thread
  /// but a lane's. `all`, when given, gets every path's latency histogram merged in.
  VolumeStats collect_stats(const VolumeNs& ns, LatencyHistogram* all = nullptr) const;

 private:
  // FailoverEnv (control thread).
  uint64_t now_ns() override;
  void arm_timer(int path, uint64_t at_ns, uint64_t token) override;
  void close_lanes(int path) override;
  void fence_endpoint(int path) override;
  void start_ccr(int failed, int via, uint32_t generation) override;
  void publish_fenced(int path, uint32_t generation, FenceRule rule) override;
  void start_connect(int path, uint32_t generation) override;
  void publish_live(int path, uint32_t generation) override;
  void drain(int path) override;
  void removed(int path) override;
  /// Paths not removed (nor being removed): whether a CCR has another path to go through.
  size_t paths_in_use() const noexcept;

  void keep_timer(const std::shared_ptr<boost::asio::steady_timer>& t);
  void try_connect(int path, uint32_t generation);  // on the connect pool
  /// Connects path sp's controller and finds every bound volume's namespace behind it.
  Result<void> connect_path(SharedPath& sp, std::chrono::milliseconds timeout);
  /// Finds `ns` behind sp's controller `ctrl` (by NSID `first` when nonzero, else by `ns`'s
  /// identifiers) and reads its ANA state from `log` when given. Pool or opening thread.
  Result<void> bind_path(VolumeNs& ns, SharedPath& sp, PathEndpoint& ctrl, uint32_t first, const AnaLog* log);
  /// Prepares a queue pair of `path` for every lane on the calling thread (never a lane) and
  /// starts each on its lane, waiting up to `timeout` for each.
  Result<void> attach_all(int path, uint32_t generation, std::chrono::milliseconds timeout);
  void refresh_ana_now();
  void refresh_namespaces(int path);
  /// A controller's events are asked for only once its path is live (watch_controller): a
  /// namespace detached between its bind and then was told to nobody on it. Reads its active
  /// namespace list once and treats a bound NSID missing from it as refresh_namespaces does.
  /// Pool thread.
  void revalidate_namespaces(int path);
  /// `ns` (NSID `id`) is not on path `p` any more: gone from the volume once no path shows it
  /// (logged and reported once). Pool thread.
  void namespace_gone_on(VolumeNs& ns, size_t p, uint32_t id);
  void ana_poll();
  uint64_t anatt_ns_of(const SharedPath& sp) const noexcept;
  void watch_controller(int path);

  // The volume's one control loop is its control plane's io_context: admin queues, keep-alive,
  // events, the failover machine and its timers all run on that one thread.
  boost::asio::io_context& ctx_{engine_of(*host_).io()};
  std::vector<std::weak_ptr<boost::asio::steady_timer>> timers_;  // control thread: cancelled at shutdown
  std::unique_ptr<FailoverMachine> machine_;  // control thread only (built in open())
  // Blocking work (connects, CCRs, admin reads) goes to the engine's pool through
  // post_blocking(), which counts it: shutdown() waits for this volume's share to end.
  template <class F>
  void post_blocking(F&& fn) {
    pool_tasks_.fetch_add(1);
    boost::asio::post(pool_, [this, f = std::forward<F>(fn)]() mutable {
      f();
      pool_tasks_.fetch_sub(1);
    });
  }
  boost::asio::thread_pool& pool_{engine_of(*host_).pool};
  std::atomic<uint32_t> pool_tasks_{0};
  std::atomic<bool> ana_refresh_pending_{false};
  // The subsystem's namespaces as the engine has reported them (NSID -> size in blocks, 0 while
  // unknown): what refresh_namespaces compares against so that a change several controllers
  // report is reported once. Filled at open from the active list. Pool tasks, under known_mu_.
  std::mutex known_mu_;
  std::map<uint32_t, uint64_t> known_ns_;
  // The paths a discovery log has listed (their addresses), so that only those are removed when
  // no log lists them any more. Engine::apply_mu.
  std::vector<std::string> discovered_;
  std::atomic<bool> stopping_{false};
};

}  // namespace nvmeof::detail

namespace nvmeof::detail {

/// What a Volume is: its namespace (VolumeNs) on a SubsystemPaths it shares with the other
/// volumes of the subsystem, and its own observers.
///
/// Threading: everything is set by Volume::open before the volume is handed out, except
/// `accepting_` (release/acquire) and the observers (control thread once open).
class VolumeImpl {
 public:
  VolumeImpl(std::shared_ptr<SubsystemPaths> sub, std::shared_ptr<VolumeNs> ns, const VolumeOptions& opts);
  ~VolumeImpl();
  /// Stops taking I/O, waits for its own in flight (bounded by no_path_timeout), closes its
  /// observers and leaves the subsystem; the last volume to leave closes the controllers.
  void shutdown();
  VolumeStats collect_stats(LatencyHistogram* all = nullptr) const { return sub_->collect_stats(*ns_, all); }

  // -- observability (multipath/observers.hpp) --
  /// Opens the control socket and the metrics endpoint when asked for (start_volume_observers).
  Result<void> start_observers();
  /// Closes both; no request runs after it returns. Called first by shutdown().
  void stop_observers() { observers_.reset(); }
  std::string control_socket_path() const { return observers_ ? observers_->control_socket_path() : std::string(); }
  uint16_t metrics_port() const noexcept { return observers_ ? observers_->metrics_port() : 0; }

  std::shared_ptr<SubsystemPaths> sub_;
  std::shared_ptr<VolumeNs> ns_;
  VolumeOptions opts_;
  std::atomic<bool> accepting_{false};
  uint64_t open_ns_ = 0;
  uint32_t serial_ = 0;                  // this process's volume number
  std::unique_ptr<Observers> observers_;  // control thread only once open
  bool shut_ = false;
};

/// The key under which the engine shares a SubsystemPaths: everything of `vo` the controllers and
/// the failover machine depend on (subsystem, paths, host identity, keys, TLS, queue sizes,
/// keep-alive, timeouts, fencing, retries), not the volume's own (nsid, selector, observers).
std::string subsystem_key(const VolumeOptions& vo);

}  // namespace nvmeof::detail

namespace nvmeof {
struct NVMEOF_LOCAL Volume::Impl : detail::VolumeImpl {
  using detail::VolumeImpl::VolumeImpl;
};
}  // namespace nvmeof
