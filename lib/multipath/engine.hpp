// The engine's insides (nvmeof/host.hpp): its reactor threads, its control plane and its pool.
// See ARCHITECTURE.md, "The engine".
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/thread_pool.hpp>

#include <time.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "control/control_plane.hpp"
#include "control/controller_access.hpp"
#include "nvmeof/controller.hpp"
#include "nvmeof/host.hpp"
#include "nvmeof/topology.hpp"
#include "reactor/reactor.hpp"

namespace nvmeof::detail {

class Lane;

/// One reactor thread of the engine: its io_uring, its loop (by the engine's poll mode) and the
/// lanes of every volume placed on it, each a poller of its reactor.
///
/// Threading: `lanes_` and the reactor's owner-only calls belong to the reactor thread.
/// `spinning_` is written by that thread and read by submitters (Lane::enqueue): see there for
/// why a stale read never loses a wake-up. `stop_` is set once by stop().
class EngineReactor {
 public:
  EngineReactor(const HostOptions& opts, const ReactorPlacement& place);
  ~EngineReactor();
  /// Starts the thread (pinning, memory node, ring). Errors: the ring's creation error.
  Result<void> start();
  void stop();

  Reactor& reactor() noexcept { return *reactor_; }
  int index() const noexcept { return place_.index; }
  /// The node its memory goes on (the plan's, or HostOptions::memory_node).
  int memory_node() const noexcept;
  int node() const noexcept { return place_.node; }
  bool on_thread() const noexcept;
  bool spinning() const noexcept { return spinning_.load(std::memory_order_relaxed); }
  void wake() noexcept { reactor_->wake(); }
  /// Runs `fn` on the reactor thread at its next turn. Any thread; waits while the ring is full.
  void post(std::function<void()> fn);
  /// Runs `fn` on the reactor thread and waits for it (inline on that thread).
  void call(const std::function<void()>& fn);
  /// Reactor thread only: the lanes it polls.
  void add_lane(Lane* lane);
  void remove_lane(Lane* lane) noexcept;
  uint64_t cpu_ns() const noexcept;
  uint64_t wakeups() const noexcept { return reactor_->waits(); }
  /// HostOptions::caller_drive: the calling thread runs this reactor's turns, spinning, until
  /// `until()` is true or `deadline_ns` (Reactor::clock_ns) passes, while the reactor's thread
  /// is parked. False, having run no turn, when the engine does not allow it, another thread
  /// drives it now, the caller is a reactor thread, or the thread did not park by the deadline.
  /// The thread stays parked after the call (the caller's lease) and takes the reactor back once
  /// no call has ended for kDriveLeaseNs. ARCHITECTURE.md, "Caller-driven turns".
  bool drive(const std::function<bool()>& until, uint64_t deadline_ns);
  /// Turns run by callers (drive()) so far. Any thread (relaxed).
  uint64_t driven_turns() const noexcept { return driven_turns_.load(std::memory_order_relaxed); }
  /// Times the reactor's thread parked for a caller, and took the reactor back. Any thread.
  uint64_t parks() const noexcept { return parks_.load(std::memory_order_relaxed); }
  static constexpr uint64_t kDriveLeaseNs = 1'000'000;

 private:
  // drive_state_: kRun (the thread runs the loop), kParkAsked (a caller asked; the thread parks
  // at its next turn), kParked (nobody runs turns; a caller may take it without a system call),
  // kDriven (a caller runs turns). Written by CAS, except by the driving caller handing it back
  // (kDriven -> kParked, a release store); every hand-over is acquire/release, so
  // the reactor's state (ring, lanes, timers) is seen whole by whichever thread runs it next.
  enum : int { kRun = 0, kParkAsked = 1, kParked = 2, kDriven = 3 };
  void park();
  void run();
  void run_adaptive();
  uint64_t spin_budget_ns() const noexcept;
  bool quiescent() const noexcept;
  void place_thread() noexcept;

  HostOptions opts_;
  ReactorPlacement place_;
  std::thread thread_;
  std::unique_ptr<Reactor> reactor_;
  std::vector<Lane*> lanes_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> spinning_{false};
  std::atomic<int> drive_state_{kRun};
  std::atomic<uint64_t> drive_end_ns_{0};  // when the last drive() ended
  std::atomic<uint64_t> driven_turns_{0};
  std::atomic<uint64_t> parks_{0};
  std::mutex park_mu_;                      // the parked thread's timed wait only
  std::condition_variable park_cv_;
  clockid_t cpu_clock_{};
  std::atomic<bool> cpu_clock_ok_{false};
};

class SubsystemPaths;
class DiscoveryWatcher;

}  // namespace nvmeof::detail

namespace nvmeof {
namespace detail {
class Observers;
}

/// The engine: the Host that create() and shared() make (every Host is one; engine_of()).
/// Threading: everything is written by create() before the engine is handed out and only read
/// afterwards, except `volumes` and `subsystems_open` (relaxed counts for stats) and
/// `subsystems` (under `subsystems_mu`, any thread that opens a volume).
struct NVMEOF_LOCAL Engine final : Host {
  HostOptions opts;
  Topology topology;
  Placement placement;
  std::unique_ptr<ControlPlane> cp;  // its thread is the engine's control thread; set by make_engine
  boost::asio::io_context& io() noexcept { return ControllerAccess::impl(*cp).io; }
  // Blocking work of every volume: connects, CCRs, admin reads. More than one thread, so that a
  // reconnect hanging on a partitioned path does not delay the CCR that lets the writes of
  // another path move; with three, two such reconnects may hang at once. Were connects and CCRs
  // asynchronous on the control thread, no pool would be needed for them.
  boost::asio::thread_pool pool{kPoolThreads};
  std::vector<std::unique_ptr<detail::EngineReactor>> reactors;
  std::atomic<unsigned> volumes{0};
  std::atomic<unsigned> subsystems_open{0};  // SubsystemPaths alive (each one controller per path)
  // The subsystems volumes are open on, by their sharing key (subsystem_key): a second volume of
  // the same subsystem over the same paths and settings uses the same controllers and lanes.
  mutable std::mutex subsystems_mu;
  std::map<std::string, std::weak_ptr<detail::SubsystemPaths>> subsystems;
  // With the control thread the engine's threads are its reactors and four more, whatever the
  // volumes.
  static constexpr unsigned kPoolThreads = 3;
  std::unique_ptr<detail::Observers> observers;  // HostOptions::metrics_listen (multipath/observers.hpp)
  // Namespace changes (Host::take_namespace_events, on_namespace_event): appended by the pool
  // tasks that read a controller's Changed Namespace List, taken by any thread, under events_mu;
  // the callback is called outside the lock (a copy of it).
  std::mutex events_mu;
  std::deque<NamespaceEvent> ns_events;
  std::shared_ptr<std::function<void(const NamespaceEvent&)>> ns_callback;
  static constexpr size_t kMaxNamespaceEvents = 1024;
  void report(NamespaceEvent e);
  // Persistent discovery (multipath/discovery.hpp): the watched discovery controllers by
  // address (discovery_mu), and apply_discovery(), which a watcher calls after each log read
  // (serialised by apply_mu: it compares every log with every subsystem's paths).
  mutable std::mutex discovery_mu;
  std::map<std::string, std::shared_ptr<detail::DiscoveryWatcher>> discoveries;
  std::mutex apply_mu;
  void apply_discovery();
  /// Watches `addr` for a referral `depth` levels deep (nothing when already watched).
  void add_referral(const TransportAddress& addr, const ConnectOptions& co, int depth);
  void stop_discovery();

  Engine();  // out of line: Observers is complete only there
  ~Engine() override;
  /// The reactor the calling thread runs, or nullptr.
  detail::EngineReactor* current_reactor() const noexcept;
};

/// The engine behind a Host (every Host is one).
inline Engine& engine_of(Host& h) noexcept { return static_cast<Engine&>(h); }
inline const Engine& engine_of(const Host& h) noexcept { return static_cast<const Engine&>(h); }

}  // namespace nvmeof
