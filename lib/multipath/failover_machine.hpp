// The failover state machine of a volume (ARCHITECTURE.md, "Failover"): path states, the fence rules
// that decide when writes whose outcome is unknown may move, Cross-Controller Reset, reconnect
// with backoff. A plain object driven by events; everything it wants done goes through
// FailoverEnv, so it is unit-tested against a fake environment and driven in production by the
// volume's control loop.
//
// The fence rules (NVMe TP4129, TP8028): a controller cut off from the host may go on executing
// what it received until its keep-alive timer expires, plus its Command Quiesce Time. A failed
// path's controller is proven unable to execute anything more, and the path "fenced", when
//   1. ccr: a Cross-Controller Reset through another live controller of the subsystem
//      completed (FailoverEnv::start_ccr, then on_ccr_done), or
//   2. peer_closed: the controller itself ended the association (its FIN, RST or termination
//      request reached us on the admin queue), and its quiesce time has passed since, or
//   3. time: the TP4129 hold has passed since the host detected the loss: 2 x KATO + CQT, or
//      3 x KATO + CQT when the controller's keep-alive timer is traffic based (TBKAS). Where the
//      controller reports no CQT, the configured bound stands in for it.
// Tearing our own socket down proves nothing (across a partition the controller never sees it).
//
// Reconnecting does not wait for the fence. Once our side of a failed controller is torn down
// and no CCR of it is in progress (what is left is a timer: the hold, or the quiesce time after
// the controller closed on us), the path connects again at once, with backoff while it cannot,
// and carries new I/O as a new generation. Only the old generation's writes whose outcome is
// unknown wait for its fence (the lanes hold writes overlapping them too). A newer generation's
// fence is published only after the older one's: fenced_through only grows, and a CCR of the new
// controller proves nothing of the old one.
//
// Threading: not thread safe; one owner (the volume's control thread) calls everything.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <system_error>
#include <vector>

#include "nvmeof/volume.hpp"

namespace nvmeof::detail {

enum class FenceRule : uint8_t { none, ccr, peer_closed, time, skipped };
const char* to_string(FenceRule r) noexcept;

/// Who ended a connection: the controller (its close reached us), or nobody we heard from.
enum class LossCause : uint8_t { peer_closed, local };
/// peer_closed for the errors a transport reports when the peer closed or reset the connection
/// or sent a termination request; local for everything else (deadlines, keep-alive timeouts,
/// our own close, protocol errors we detected).
LossCause classify_loss(std::error_code why) noexcept;

struct HoldTimes {
  uint64_t quiesce_ns = 0;  ///< CQT, or the bound standing in for it
  uint64_t hold_ns = 0;     ///< TP4129: (2 or 3) x KATO + quiesce
};
/// The fence times of a controller: `cqt_ms` 0 means not reported (`bound_ms` stands in; when
/// that is 0 too, the KATO does).
HoldTimes hold_times(uint32_t kato_ms, bool traffic_based_keep_alive, uint16_t cqt_ms,
                     uint32_t bound_ms) noexcept;

/// The failover budget: a failed path is left behind, reads and writes, within this (ms).
inline constexpr uint64_t kFailoverBudgetMs = 50;

/// How long after a controller is found dead its writes may wait for their fence (ARCHITECTURE.md,
/// "Failover"), known at connect: what the user is told before it bites.
enum class WriteFenceRule : uint8_t {
  unknown,  ///< not connected yet
  ccr,      ///< a cross-controller reset through another path: about the target's CQT
  cqt,      ///< no CCR: (2 or 3) x KATO + the CQT the controller reports
  kato,     ///< no CCR and no CQT reported: (2 or 3) x KATO + the bound standing in for CQT
  none,     ///< a kernel path: the kernel fences its own controller
};
const char* to_string(WriteFenceRule r) noexcept;
struct WriteFenceBound {
  WriteFenceRule rule = WriteFenceRule::unknown;
  uint64_t ms = 0;
};
/// `ccr`: a CCR can name this controller and another path's controller can send one (the
/// controllers of a subsystem alike: this one reports CCRL > 0, and there is another path).
WriteFenceBound write_fence_bound(const HoldTimes& t, bool ccr, bool cqt_reported) noexcept;
/// One line for the log when the bound exceeds the failover budget: why, in the user's terms.
std::string explain(const WriteFenceBound& b, uint32_t kato_ms, bool traffic_based_keep_alive, uint16_t cqt_ms);

/// What the machine asks of its owner. Every call returns at once; results come back as events.
class FailoverEnv {
 public:
  virtual uint64_t now_ns() = 0;
  /// Calls on_timer(path, token) at `at_ns` (or soon after).
  virtual void arm_timer(int path, uint64_t at_ns, uint64_t token) = 0;
  /// Every lane stops using the path's queue pairs (their commands complete as path errors).
  virtual void close_lanes(int path) = 0;
  /// Tears our side of the path's controller down (a kernel path: resets the controller). Not
  /// while a CCR of it is in progress: the controller must still exist for the CCR to name it.
  virtual void fence_endpoint(int path) = 0;
  /// Sends a Cross-Controller Reset of `failed`'s controller through `via`'s; its result comes
  /// back as on_ccr_done(failed, via, generation, ok).
  virtual void start_ccr(int failed, int via, uint32_t generation) = 0;
  /// Commands of `generation` on `path` can no longer execute anywhere: writes may move.
  virtual void publish_fenced(int path, uint32_t generation, FenceRule rule) = 0;
  /// Connects the path again, its queue pairs tagged `generation` (the machine's next: it owns
  /// the count); the result comes back as on_connect_done(path, ok).
  virtual void start_connect(int path, uint32_t generation) = 0;
  /// The path is live again with a new generation.
  virtual void publish_live(int path, uint32_t generation) = 0;
  /// A live path being removed: it takes no new I/O; once every lane has no command left on it,
  /// the owner calls drained(path).
  virtual void drain(int path) = 0;
  /// A path being removed is done: nothing of it can execute any more (its commands completed,
  /// or it was fenced, or never connected). The owner closes its controller.
  virtual void removed(int path) = 0;

 protected:
  ~FailoverEnv() = default;
};

/// What the machine knows of a path's controller, learnt at each connect.
struct PathFacts {
  HoldTimes times;
  bool can_reset_others = false;  ///< CCR can be sent through it (CCRL > 0)
  bool can_be_reset = false;      ///< it can be named by a CCR (a fabric controller)
  uint8_t ccrl = 0;               ///< CCRs it may have in progress at once
};

class FailoverMachine {
 public:
  struct Timing {
    std::chrono::milliseconds reconnect_min{10};
    std::chrono::milliseconds reconnect_max{1000};
    /// false: a failed path reconnects only once fenced (the negative control of the tests).
    bool reconnect_before_fence = true;
  };

  FailoverMachine(FailoverEnv& env, size_t npaths, Timing timing, FenceMode mode);

  /// The path connected at open (state live, generation 0).
  void opened(int path, const PathFacts& facts);
  /// The path could not be reached at open: it reconnects in the background.
  void unreachable_at_open(int path);

  /// A failure of `path` as seen at `detect_ns` on its queue pairs of `generation`. Ignored for
  /// an older generation or a path that is not live, except that a peer_closed report for a
  /// path already failed may bring its fence forward. Returns true when it started a failover.
  bool on_failure(int path, uint32_t generation, LossCause cause, uint64_t detect_ns);
  void on_ccr_done(int failed, int via, uint32_t generation, bool ok);
  void on_timer(int path, uint64_t token);
  void on_connect_done(int path, bool ok, const PathFacts& facts);

  /// A path added at run time: slot `path` is new (the next index) or a removed one taken again.
  /// It connects now (reconnecting with backoff while it cannot).
  void add_path(int path);
  /// Removes `path` (ARCHITECTURE.md, "Paths at run time"): a live one drains (FailoverEnv::drain,
  /// then drained()); a failed one waits for its fence as always, then is removed instead of
  /// reconnecting; one not connected is removed at once (a connect in progress is closed when it
  /// ends). Each path is removed once (FailoverEnv::removed).
  void remove_path(int path);
  /// Every lane has drained `path` (after FailoverEnv::drain).
  void drained(int path);
  bool retired(int path) const noexcept { return paths_[idx(path)].retired; }

  PathState state(int path) const noexcept { return paths_[idx(path)].state; }
  uint32_t generation(int path) const noexcept { return paths_[idx(path)].generation; }
  FenceRule fence_rule(int path) const noexcept { return paths_[idx(path)].rule; }
  std::chrono::milliseconds backoff(int path) const noexcept { return paths_[idx(path)].backoff; }
  /// CCRs in progress through `path`.
  uint32_t ccr_in_progress(int path) const noexcept { return paths_[idx(path)].ccr_out; }
  /// An older generation of `path` (reconnected before its fence) whose fence is still to come.
  bool awaiting_old_fence(int path) const noexcept { return paths_[idx(path)].unfenced; }

 private:
  enum class TimerKind : uint8_t { hold = 1, peer_quiesce = 2, reconnect = 3 };
  struct PathRec {
    PathState state = PathState::connecting;
    uint32_t generation = 0;
    PathFacts facts;
    FenceRule rule = FenceRule::none;
    uint64_t detect_ns = 0;
    uint64_t peer_fence_at = UINT64_MAX;  // earliest peer_closed fence armed
    std::vector<bool> ccr_tried;          // via paths tried for the current failure
    uint32_t ccr_out = 0;                 // CCRs in progress through this path
    bool torn_down = false;               // fence_endpoint called for the current failure
    std::chrono::milliseconds backoff{0};
    bool connecting = false;
    bool retired = false;                 // being removed, or removed
    bool gone = false;                    // removed (FailoverEnv::removed called)
    // Reconnected before its fence: generation `unfenced_gen` still waits for its timers.
    bool unfenced = false;
    uint32_t unfenced_gen = 0;
    // A newer generation fenced meanwhile, published once the older one is.
    bool deferred = false;
    uint32_t deferred_gen = 0;
    FenceRule deferred_rule = FenceRule::none;
  };

  static size_t idx(int p) noexcept { return static_cast<size_t>(p); }
  static uint64_t token(TimerKind k, uint32_t generation) noexcept {
    return (static_cast<uint64_t>(generation) << 8) | static_cast<uint64_t>(k);
  }
  void fence(int path, FenceRule rule);
  void tear_down(int path);
  bool try_ccr(int failed);
  void connect(int path);
  void reconnect_early(int path);
  void fence_old(int path, FenceRule rule);
  void finish_removal(int path);

  FailoverEnv& env_;
  Timing timing_;
  FenceMode mode_;
  std::vector<PathRec> paths_;
};

}  // namespace nvmeof::detail
