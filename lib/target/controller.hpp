// One controller of the embedded target: the association a host builds with a Fabrics Connect on
// the admin queue, joined by its I/O queues. Holds the controller registers reached through
// Property Get/Set, the features the host set, and the I/O queue registry.
//
// Threading: identity fields are fixed at creation. The "admin state" fields are read and written
// only by the admin queue's connection thread (admin commands arrive only there).
// - last_command_ns: relaxed atomic; every queue of the association stamps it, the admin thread
//   compares it with the keep-alive timeout; a stale read delays the teardown by one poll round.
// - ciu/cirn: atomics written by the admin thread when CSTS.RDY is asserted, read by another
//   controller's admin thread validating a Cross-Controller Reset; a stale read only makes a CCR
//   that races a re-enable fail with Invalid Field, which a host answers by reading Identify.
// - teardown_ns/fenced: written once (0 -> value, false -> true) by whoever ends the controller
//   (its admin thread, or the thread of a CCR); read by I/O queue threads before they execute
//   and by the held-write thread. Acquire/release: a reader that sees them set also sees the
//   association closed; one that misses them by a moment is a queue still draining, which the
//   teardown waits for (wait_quiesced) before a CCR reports success.
// - mu_ guards the queue registry, the live queue count and the CCR log; cv_ signals the count.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "nvmeof/status.hpp"
#include "nvmeof/target.hpp"

namespace nvmeof::target {

class Subsystem;
class TcpConnection;

/// Asynchronous Event Configuration bit 11: ANA change notices (on by default so a host that
/// never sets the feature still hears about ANA changes).
inline constexpr uint32_t kAecAnaChange = 1u << 11;
/// Asynchronous Event Configuration bit 8: Namespace Attribute Notices; bit 31: Discovery Log
/// Page Change Notices (a discovery controller's).
inline constexpr uint32_t kAecNsAttr = 1u << 8;
inline constexpr uint32_t kAecDiscoveryChange = 1u << 31;
/// Completion DW0 of the events: notice (type 2), information 00h Namespace Attribute Changed
/// with log page 04h; information F0h Discovery Log Page Change with log page 70h.
inline constexpr uint32_t kNsAttrChangedEvent = 0x00040002;
inline constexpr uint32_t kDiscoveryChangeEvent = 0x0070f002;
/// Keep-alive granularity (Identify KAS = 1, in 100 ms units).
inline constexpr uint32_t kKasMs = 100;
/// Composite temperature over-threshold at reset: 343 K (70 C), as drives commonly ship.
inline constexpr uint16_t kDefaultTempOver = 343;

class Controller : public std::enable_shared_from_this<Controller> {
 public:
  Controller(Subsystem& subsys, uint16_t cntlid, size_t port, std::string hostnqn,
             const uint8_t (&hostid)[16]);

  Subsystem& subsystem() const noexcept { return subsys_; }
  uint16_t cntlid() const noexcept { return cntlid_; }
  /// Index of the port the admin queue connected through (its ANA group is port + 1).
  size_t port() const noexcept { return port_; }
  const std::string& hostnqn() const noexcept { return hostnqn_; }
  bool same_host(const std::string& hostnqn, const uint8_t (&hostid)[16]) const noexcept;

  // -- admin state (admin connection thread only) --
  /// Property Get. Errors: invalid field for an unknown property.
  NvmeStatus property_get(uint32_t offset, const TargetOptions& opts, uint64_t& value) const noexcept;
  /// Property Set (CC only; EN drives CSTS.RDY, SHN drives CSTS.SHST). Asserting CSTS.RDY
  /// bumps CIU (skipping 0) and draws a new CIRN.
  NvmeStatus property_set(uint32_t offset, uint64_t value) noexcept;
  /// Sets KATO rounded up to the keep-alive granularity (KAS, 100 ms).
  void set_kato(uint32_t ms) noexcept;
  uint32_t kato_ms = 0;             ///< 0: keep-alive disabled; a multiple of kKasMs
  uint32_t aec = kAecAnaChange;     ///< Asynchronous Event Configuration
  /// A notice of that kind was sent and the log page it names not read since (with RAE clear):
  /// no other is sent until it is (the base specification's masking of an event type).
  bool ns_notice_masked = false;
  bool disc_notice_masked = false;
  uint16_t io_queues_granted = 0;   ///< from Set Features Number of Queues (0: not set yet)
  uint32_t arbitration = 0;         ///< Arbitration (01h): round robin, no burst limit
  uint32_t power_management = 0;    ///< Power Management (02h): power state 0, the only one
  uint16_t temp_over = kDefaultTempOver;  ///< Temperature Threshold (04h), composite, over
  uint16_t temp_under = 0;          ///< Temperature Threshold (04h), composite, under
  uint32_t error_recovery = 0;      ///< Error Recovery (05h): TLER; DULBE is not supported
  /// Volatile Write Cache (06h) WCE. Written by the admin thread, read by I/O queue threads
  /// before each write: a stale read writes one command through (or not) as the host asked a
  /// moment before, which the host cannot tell from the command racing its Set Features.
  std::atomic<bool> write_cache{true};

  // -- shared --
  void touch(uint64_t now_ns) noexcept { last_command_ns_.store(now_ns, std::memory_order_relaxed); }
  uint64_t last_command_ns() const noexcept {
    return last_command_ns_.load(std::memory_order_relaxed);
  }
  uint8_t ciu() const noexcept { return ciu_.load(std::memory_order_acquire); }
  uint64_t cirn() const noexcept { return cirn_.load(std::memory_order_acquire); }

  /// Registers the admin queue's connection (once, at its Connect).
  void attach_admin(const std::shared_ptr<TcpConnection>& conn);
  /// The admin queue's connection while it lives (asynchronous events go there).
  std::shared_ptr<TcpConnection> admin_connection() const;
  /// Registers I/O queue `qid`. Errors: connect-controller-busy when the qid is taken or the
  /// association is being torn down.
  NvmeStatus bind_io_queue(uint16_t qid, const std::shared_ptr<TcpConnection>& conn);
  /// A queue's connection stopped for good (logically: it executes nothing more); `qid` 0 is
  /// the admin queue.
  void queue_stopped(uint16_t qid, const TcpConnection* conn);
  /// Ends the association: asks every queue's connection (admin included) to close and refuses
  /// new ones. Idempotent; returns true for the call that ended it.
  bool tear_down();
  /// Whether an I/O queue was ever bound (Number of Queues may be set only before).
  bool had_io_queues() const noexcept { return had_io_queues_.load(std::memory_order_acquire); }
  bool is_torn_down() const noexcept { return teardown_ns_.load(std::memory_order_acquire) != 0; }
  /// When tear_down ran (steady ns), 0 before.
  uint64_t teardown_ns() const noexcept { return teardown_ns_.load(std::memory_order_acquire); }
  /// A Cross-Controller Reset ends this controller: from now on nothing of it may execute, not
  /// even within CQT (held writes with QuiesceMode::honour are dropped).
  void fence() noexcept { fenced_.store(true, std::memory_order_release); }
  bool is_fenced() const noexcept { return fenced_.load(std::memory_order_acquire); }
  /// Waits until every queue that was attached has stopped, up to `deadline_ns` (steady).
  /// Returns whether they all did.
  bool wait_quiesced(uint64_t deadline_ns);

  // -- the Changed Namespace List (any thread) --
  /// Namespace `nsid` changed (attached, detached, resized) since the host last read the list.
  void note_ns_changed(uint32_t nsid);
  /// The list as log page 04h gives it: up to 1024 NSIDs, or 0xffffffff alone when more changed;
  /// emptied unless `retain` (RAE).
  std::vector<uint32_t> changed_ns(bool retain);

  // -- the CCR log of resets issued through this controller (any thread) --
  enum class CcrAdmission : uint8_t { admitted, in_progress, limit_exceeded, log_full };
  /// Whether a new CCR for `icid` may start: none in progress for it, fewer than `limit` in
  /// progress, room in the log.
  CcrAdmission admit_ccr(uint16_t icid, uint8_t limit) const;
  /// Adds an in-progress entry for a reset that goes on asynchronously.
  void add_ccr_entry(uint16_t icid, uint8_t ciu);
  /// The in-progress entry for `icid` ends with `ccrs` (ccr::kStatusSuccess or kStatusFailed).
  void finish_ccr_entry(uint16_t icid, uint8_t ccrs);
  /// The CCR log page; `remove_completed` (RMC) drops the completed entries that lie wholly in
  /// the `len` bytes from `offset` the host reads.
  std::vector<uint8_t> ccr_log(bool remove_completed, uint64_t offset, uint64_t len);

 private:
  Subsystem& subsys_;
  const uint16_t cntlid_;
  const size_t port_;
  const std::string hostnqn_;
  uint8_t hostid_[16];

  uint32_t cc_ = 0;
  uint32_t csts_ = 0;

  std::atomic<uint64_t> last_command_ns_{0};
  std::atomic<uint8_t> ciu_;
  std::atomic<uint64_t> cirn_;
  std::atomic<uint64_t> teardown_ns_{0};
  std::atomic<bool> fenced_{false};
  std::atomic<bool> had_io_queues_{false};

  struct CcrEntry {
    uint16_t icid;
    uint8_t ciu;
    uint8_t ccrs;
  };
  mutable std::mutex mu_;  // guards everything below
  std::condition_variable cv_;  // live_queues_ dropped
  std::weak_ptr<TcpConnection> admin_;
  std::map<uint16_t, std::weak_ptr<TcpConnection>> io_;
  uint32_t live_queues_ = 0;
  std::vector<CcrEntry> ccr_log_;
  std::vector<uint32_t> changed_ns_;  // sorted, at most kMaxChangedNs + 1 entries
  static constexpr size_t kMaxChangedNs = 1024;
};

}  // namespace nvmeof::target
