// One controller of the embedded target: the association a host builds with a Fabrics Connect on
// the admin queue, joined by its I/O queues. Holds the controller registers reached through
// Property Get/Set, the features the host set, and the I/O queue registry.
//
// Threading: identity fields are fixed at creation. The "admin state" fields are read and written
// only by the admin queue's connection thread (admin commands arrive only there). The I/O queue
// registry is guarded by a mutex (I/O connects run on their own connection threads).
// last_command_ns is a relaxed atomic: every queue of the association stamps it, the admin
// thread compares it with the keep-alive timeout; a stale read delays the teardown by at most
// one poll round.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "nvmeof/status.hpp"
#include "nvmeof/target.hpp"

namespace nvmeof::target {

class Subsystem;
class TcpConnection;

/// Asynchronous Event Configuration bit 11: ANA change notices (on by default so a host that
/// never sets the feature still hears about ANA changes).
inline constexpr uint32_t kAecAnaChange = 1u << 11;

class Controller {
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
  /// Property Set (CC only; EN drives CSTS.RDY, SHN drives CSTS.SHST).
  NvmeStatus property_set(uint32_t offset, uint64_t value) noexcept;
  uint32_t kato_ms = 0;             ///< 0: keep-alive disabled
  uint32_t aec = kAecAnaChange;     ///< Asynchronous Event Configuration
  uint16_t io_queues_granted = 0;   ///< from Set Features Number of Queues (0: not set yet)

  // -- shared --
  void touch(uint64_t now_ns) noexcept { last_command_ns_.store(now_ns, std::memory_order_relaxed); }
  uint64_t last_command_ns() const noexcept {
    return last_command_ns_.load(std::memory_order_relaxed);
  }
  /// Registers I/O queue `qid`. Errors: connect-controller-busy when the qid is taken or the
  /// association is being torn down.
  NvmeStatus bind_io_queue(uint16_t qid, const std::shared_ptr<TcpConnection>& conn);
  void unbind_io_queue(uint16_t qid, const TcpConnection* conn);
  /// Ends the association: closes every I/O queue's connection and refuses new ones.
  void tear_down();

 private:
  Subsystem& subsys_;
  const uint16_t cntlid_;
  const size_t port_;
  const std::string hostnqn_;
  uint8_t hostid_[16];

  uint32_t cc_ = 0;
  uint32_t csts_ = 0;

  std::atomic<uint64_t> last_command_ns_{0};

  std::mutex mu_;  // guards io_ and torn_down_
  std::map<uint16_t, std::weak_ptr<TcpConnection>> io_;
  bool torn_down_ = false;
};

}  // namespace nvmeof::target
