// An NVM subsystem of the embedded target (or the discovery subsystem): its namespaces, the
// hosts allowed to use it (with their keys), and the registry of its live controllers, which
// hands out dynamic controller ids.
// Threading: hosts are fixed after create(). The namespaces change at run time (attach, detach):
// each change publishes a new immutable table (an atomic pointer, release/acquire) and keeps the
// old one, and every NsStore, detached ones too, lives as long as the subsystem, so a connection
// thread that looked a namespace up (lock-free, per command) may finish its command on it. Changes
// are serialised by change_mu_. The controller registry is guarded by a mutex because admin and
// I/O queue connects arrive on different connection threads.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "nvmeof/status.hpp"
#include "nvmeof/target.hpp"
#include "target/ns_store.hpp"

namespace nvmeof::target {

class Controller;

enum class SubsystemKind : uint8_t { nvm, discovery };

class Subsystem {
 public:
  /// Opens every namespace. `any_host`: whether a host not in cfg.hosts may connect (the
  /// resolved HostAccess, see any_host_allowed). Errors: invalid_argument (duplicate nsid, empty
  /// nqn, a host entry with an empty, too long or duplicate NQN), NsStore errors.
  static Result<std::unique_ptr<Subsystem>> create(const TargetSubsystem& cfg, bool any_host);
  /// The discovery subsystem (kDiscoveryNqn), reachable on every port by any host.
  static std::unique_ptr<Subsystem> discovery();

  const std::string& nqn() const noexcept { return nqn_; }
  const std::string& serial() const noexcept { return serial_; }
  const std::string& model() const noexcept { return model_; }
  SubsystemKind kind() const noexcept { return kind_; }
  bool is_discovery() const noexcept { return kind_ == SubsystemKind::discovery; }

  /// Whether host `hostnqn` may connect (and see this subsystem in the discovery log).
  bool allows(std::string_view hostnqn) const noexcept;
  /// Whether any host may connect, listed or not.
  bool any_host() const noexcept { return any_host_; }
  /// The host entry of `hostnqn` (its keys), or nullptr when the subsystem lists none.
  const TargetHost* host(std::string_view hostnqn) const noexcept;
  /// The listed hosts, in the order given.
  const std::vector<TargetHost>& hosts() const noexcept { return hosts_; }

  /// The active namespace `nsid`, or nullptr.
  NsStore* ns(uint32_t nsid) const noexcept;
  /// The active namespaces, sorted by nsid (a table that stays valid as long as the subsystem).
  const std::vector<NsStore*>& namespaces() const noexcept { return table_.load(std::memory_order_acquire)->sorted; }
  /// The largest active nsid (Identify Controller NN).
  uint32_t max_nsid() const noexcept {
    const auto& t = namespaces();
    return t.empty() ? 0 : t.back()->nsid();
  }
  /// Attaches a namespace at run time. Errors: invalid_argument (its nsid is active already, or
  /// what NsStore::open refuses), NsStore errors.
  Result<void> attach(const TargetNamespace& cfg);
  /// Detaches namespace `nsid`: new commands get Invalid Namespace, those running finish.
  /// Errors: invalid_argument when it is not active.
  Result<void> detach(uint32_t nsid);
  /// The live controllers (for their asynchronous events).
  std::vector<std::shared_ptr<Controller>> controllers() const;

  /// Creates a controller with a fresh id (1..0xffef). nullptr when every id is in use.
  std::shared_ptr<Controller> create_controller(size_t port, const std::string& hostnqn,
                                                const uint8_t (&hostid)[16]);
  /// The live controller `cntlid`, or nullptr.
  std::shared_ptr<Controller> controller(uint16_t cntlid) const;
  /// Forgets controller `c` (its id is free again); a no-op when the id already names another.
  void remove_controller(const Controller* c);

 private:
  Subsystem() = default;

  std::string nqn_;
  std::string serial_;
  std::string model_;
  SubsystemKind kind_ = SubsystemKind::nvm;
  struct NsTable {
    std::vector<NsStore*> sorted;
  };
  void publish(std::vector<NsStore*> sorted);  // change_mu_ held (or create())
  std::atomic<const NsTable*> table_{nullptr};
  std::mutex change_mu_;
  std::vector<std::unique_ptr<NsStore>> stores_;  // every namespace ever attached (change_mu_)
  std::vector<std::unique_ptr<NsTable>> tables_;  // every table published (change_mu_)
  std::vector<TargetHost> hosts_;
  bool any_host_ = true;

  mutable std::mutex mu_;  // guards the two fields below
  std::map<uint16_t, std::weak_ptr<Controller>> ctrls_;
  uint16_t next_cntlid_ = 1;
};

}  // namespace nvmeof::target
