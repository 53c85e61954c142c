// What every part of the embedded target shares: the options, subsystems, ports, the held
// write queue and the Cross-Controller Reset worker. Owned by Target::Impl; connections and controllers reach it by reference.
// Threading: everything here is fixed between start() and stop() except the atomics and the
// objects' own synchronized state.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "nvmeof/target.hpp"
#include "target/cross_controller_reset.hpp"
#include "target/held_writes.hpp"
#include "target/identify_data.hpp"
#include "target/port.hpp"
#include "target/subsystem.hpp"

namespace nvmeof::target {

/// The target's ports: fixed slots published by a count, so ports added at run time
/// (Target::add_port) never move what connection threads and the discovery log read. A removed
/// port keeps its slot (its index, stats and ANA group stay; Port::stopped()).
/// Threading: push() by the owner under Target's change mutex; readers take size() (acquire) and
/// read the slots below it.
class PortTable {
 public:
  static constexpr size_t kMax = 1024;
  size_t size() const noexcept { return n_.load(std::memory_order_acquire); }
  bool empty() const noexcept { return size() == 0; }
  Port* operator[](size_t i) const noexcept { return slots_[i].get(); }
  const std::unique_ptr<Port>* begin() const noexcept { return slots_.data(); }
  const std::unique_ptr<Port>* end() const noexcept { return slots_.data() + size(); }
  /// Publishes `p` as port size(). False when every slot is used.
  bool push(std::unique_ptr<Port> p) noexcept {
    const size_t n = size();
    if (n == kMax) return false;
    slots_[n] = std::move(p);
    n_.store(n + 1, std::memory_order_release);
    return true;
  }

 private:
  std::array<std::unique_ptr<Port>, kMax> slots_;
  std::atomic<size_t> n_{0};
};

struct TargetCore {
  TargetOptions opts;
  std::vector<std::unique_ptr<Subsystem>> subsystems;
  std::unique_ptr<Subsystem> discovery;
  PortTable ports;
  HeldWrites held;
  CcrWorker ccr{*this};
  /// Bumped on every ANA state change of any port (ANA log CHGCNT).
  std::atomic<uint64_t> ana_chgcnt{0};
  std::atomic<uint64_t> next_conn_id{1};
  /// The discovery log's generation counter: bumped when a port comes or goes.
  std::atomic<uint64_t> discovery_genctr{1};

  /// The subsystem named `nqn` (the discovery subsystem included), or nullptr.
  Subsystem* subsystem(std::string_view nqn) const noexcept;
  /// Every port's ANA group as the log reports it, index = port.
  std::vector<AnaGroupView> ana_groups() const;
  /// Every port x NVM subsystem that host `hostnqn` may use (Subsystem::allows). A wildcard
  /// port reports `local_addr` (the address the asking host reached us at) instead of
  /// 0.0.0.0 / ::, which no host could connect to.
  std::vector<DiscoveryRecord> discovery_records(const std::string& local_addr,
                                                 std::string_view hostnqn) const;
  /// Largest transfer of one command in bytes (MDTS, or 256 MiB when MDTS is 0).
  uint32_t max_transfer() const noexcept;
};

}  // namespace nvmeof::target
