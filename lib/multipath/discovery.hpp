// Persistent discovery (ARCHITECTURE.md, "Persistent discovery"): the engine keeps a connection
// to each discovery controller it is given, re-reads its log on every Discovery Log Page Change
// event and every reconnect, follows referrals, and applies what the logs list to the open
// subsystems: a new port becomes a path, a vanished one a removed path.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "nvmeof/controller.hpp"
#include "nvmeof/host.hpp"
#include "nvmeof/identify.hpp"

namespace nvmeof {
struct Engine;
}

namespace nvmeof::detail {

/// Of a discovery log's entries, the ports of subsystem `subnqn` a host with these connect
/// options may use: TCP entries (the transport the library speaks to fabric ports it is told
/// of), with a TLS key those that offer TLS 1.3 (TSAS SECTYPE), without one those that do not
/// require it (TREQ). `need_tls` and `no_tls` count the entries left out for either reason.
std::vector<TransportAddress> usable_ports(const std::vector<DiscoveryEntry>& entries, const std::string& subnqn,
                                           const ConnectOptions& co, size_t* need_tls = nullptr,
                                           size_t* no_tls = nullptr);

/// One discovery controller the engine keeps connected.
///
/// Threading: the connect and the log reads run on the engine's pool (counted in `tasks_`, which
/// stop() waits for); the reconnect timer on the control thread. `mu_` guards the controller
/// handle, the last log and the stats; the counters are atomics.
class DiscoveryWatcher : public std::enable_shared_from_this<DiscoveryWatcher> {
 public:
  /// `depth`: how many referrals led here (0: given by the application).
  DiscoveryWatcher(Engine& engine, TransportAddress addr, ConnectOptions co, int depth);
  /// Connects (on the pool) and keeps connecting with backoff until stop().
  void start();
  /// No more work: disconnects, waits for its pool task. Not on the pool or the control thread.
  void stop();
  const TransportAddress& address() const noexcept { return addr_; }
  int depth() const noexcept { return depth_; }
  const ConnectOptions& connect_options() const noexcept { return co_; }
  /// The entries of its last log read (empty before the first).
  std::vector<DiscoveryEntry> entries() const;
  HostDiscoveryStats stats() const;

 private:
  void connect_now();  // pool
  void read_log();     // pool
  void lost(const std::string& why);  // any thread: schedules a reconnect
  template <class F>
  void on_pool(F&& fn);

  Engine& engine_;
  const TransportAddress addr_;
  const ConnectOptions co_;
  const int depth_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> reconnect_armed_{false};
  std::atomic<uint32_t> tasks_{0};
  std::chrono::milliseconds backoff_{kMinBackoff};
  mutable std::mutex mu_;
  std::shared_ptr<Controller> ctrl_;          // mu_
  std::vector<DiscoveryEntry> entries_;       // mu_
  std::string last_error_;                    // mu_
  uint64_t genctr_ = 0;                       // mu_
  std::atomic<uint64_t> log_reads_{0};
  std::atomic<uint64_t> events_{0};
  std::atomic<uint64_t> reconnects_{0};
  std::atomic<bool> connected_{false};
  static constexpr std::chrono::milliseconds kMinBackoff{100};
  static constexpr std::chrono::milliseconds kMaxBackoff{5000};
};

/// Referrals are followed this many levels deep at most (a loop of referrals ends there, and
/// no address is watched twice).
inline constexpr int kMaxReferralDepth = 4;

}  // namespace nvmeof::detail
