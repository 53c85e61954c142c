// One listening port of the embedded target: its socket and acceptor thread, the connections it
// accepted (one thread each), its ANA state (ANA group = index + 1), fault injection and counters.
//
// Threading: the ANA state, faults and counters are atomics, written by the Target's public
// methods and read by connection threads per command; a stale read only means a change applies
// from the next command. The drop_commands budget is taken by compare-and-swap, so connection
// threads racing for it drop exactly that many commands between them. The connection list is
// guarded by a mutex (acceptor adds, the owner reaps, fault injection and stats() walk it);
// each connection counts its own loop passes and wake-ups (a shared counter would be a cache
// line every spinning thread writes), summed by stats().
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "nvmeof/identify.hpp"
#include "nvmeof/status.hpp"
#include "nvmeof/target.hpp"

namespace nvmeof::target {

class TcpConnection;
struct TargetCore;

/// Closes a socket with a TCP RST (SO_LINGER 0) instead of an orderly FIN.
void abort_socket(int fd) noexcept;

class Port {
 public:
  Port(TargetCore& core, size_t index, const TargetPort& cfg);
  ~Port();  ///< stop()
  Port(const Port&) = delete;
  Port& operator=(const Port&) = delete;

  /// Binds and listens. Errors: errno codes (EADDRINUSE, EADDRNOTAVAIL, ...), invalid_argument
  /// for an address or service that does not parse.
  Result<void> listen();
  /// Starts the acceptor thread.
  void start();
  /// Stops accepting, closes every connection and joins every thread. Idempotent.
  void stop();
  /// stop() was called: the port is gone (Target::remove_port, or the target stopping).
  bool stopped() const noexcept { return stopping_.load(std::memory_order_acquire); }

  size_t index() const noexcept { return index_; }
  /// The port's options as given to Target::start (never changes).
  const TargetPort& config() const noexcept { return cfg_; }
  const std::string& traddr() const noexcept { return traddr_; }
  uint16_t number() const noexcept { return number_; }
  uint8_t adrfam() const noexcept { return adrfam_; }  ///< 1 IPv4, 2 IPv6
  /// "127.0.0.1:4420" or "[::1]:4420".
  std::string address() const;
  bool is_wildcard() const noexcept { return wildcard_; }

  AnaState ana_state() const noexcept {
    return static_cast<AnaState>(ana_state_.load(std::memory_order_acquire));
  }
  uint64_t ana_chgcnt() const noexcept { return ana_chgcnt_.load(std::memory_order_acquire); }
  /// Returns false when the state did not change.
  bool set_ana_state(AnaState s) noexcept;

  // -- faults --
  bool blackholed() const noexcept { return blackhole_.load(std::memory_order_acquire); }
  bool partitioned() const noexcept { return partition_.load(std::memory_order_acquire); }
  bool refusing() const noexcept { return refuse_.load(std::memory_order_acquire); }
  uint64_t latency_ns() const noexcept { return latency_ns_.load(std::memory_order_relaxed); }
  /// The slow-link fault: bytes per second each I/O queue moves at most (0: no limit).
  uint64_t bandwidth() const noexcept { return bandwidth_.load(std::memory_order_relaxed); }
  void set_bandwidth(uint64_t bytes_per_second) noexcept {
    bandwidth_.store(bytes_per_second, std::memory_order_relaxed);
  }
  /// The status every I/O command completes with, when failing.
  std::optional<NvmeStatus> failing() const noexcept;
  /// The hold time for writes (0: none) and how held writes treat CQT.
  uint64_t write_delay_ns() const noexcept { return write_delay_ns_.load(std::memory_order_relaxed); }
  QuiesceMode write_delay_mode() const noexcept {
    return static_cast<QuiesceMode>(write_delay_mode_.load(std::memory_order_relaxed));
  }
  void set_blackhole(bool on) noexcept;
  void set_partition(bool on) noexcept;
  void set_drop_commands(uint32_t count) noexcept { drop_budget_.store(count, std::memory_order_release); }
  /// True (and one fewer left) when drop_commands still has a command to swallow.
  bool take_drop() noexcept;
  void set_refuse(bool on) noexcept { refuse_.store(on, std::memory_order_release); }
  void set_latency(std::chrono::microseconds l) noexcept;
  void set_failing(std::optional<NvmeStatus> s) noexcept;
  void set_write_delay(std::chrono::milliseconds d, QuiesceMode m) noexcept;
  /// Closes every connection now with a TCP RST.
  void reset_connections();
  /// Wakes every connection thread so it re-reads the port state (ANA, blackhole, partition).
  void wake_connections();

  // -- counters (relaxed atomics: statistics only) --
  struct Counters {
    std::atomic<uint64_t> connections{0};
    std::atomic<uint64_t> live_connections{0};
    std::atomic<uint64_t> commands{0};
    std::atomic<uint64_t> reads{0};
    std::atomic<uint64_t> writes{0};
    std::atomic<uint64_t> errors{0};
    std::atomic<uint64_t> delayed_executed{0};
    std::atomic<uint64_t> delayed_dropped{0};
    std::atomic<uint64_t> writes_dropped_after_teardown{0};
    std::atomic<uint64_t> commands_dropped{0};
    std::atomic<uint64_t> ccr_received{0};
    std::atomic<uint64_t> ccr_completed{0};
    std::atomic<uint64_t> keep_alive_expiries{0};
    std::atomic<uint64_t> keep_alive_commands{0};
    std::atomic<uint64_t> max_output_backlog{0};
    std::atomic<uint64_t> authentications{0};
    std::atomic<uint64_t> auth_failures{0};
    std::atomic<uint64_t> tls_sessions{0};
    std::atomic<uint64_t> tls_failures{0};
    std::atomic<uint64_t> tls_plaintext_refused{0};
    std::atomic<uint64_t> io_queues_without_sq_flow_control{0};
    std::atomic<uint64_t> admin_queues_without_sq_flow_control{0};
  };
  Counters& counters() noexcept { return counters_; }
  PortStats stats() const noexcept;

 private:
  struct Conn {
    std::shared_ptr<TcpConnection> conn;
    std::thread thread;
  };
  void accept_loop() noexcept;
  void reap_finished();

  TargetCore& core_;
  const size_t index_;
  const TargetPort cfg_;
  std::string traddr_;
  uint16_t number_ = 0;
  uint8_t adrfam_ = 1;
  bool wildcard_ = false;
  int listen_fd_ = -1;
  int wake_fd_ = -1;
  std::thread acceptor_;
  std::atomic<bool> stopping_{false};

  std::atomic<uint8_t> ana_state_;
  std::atomic<uint64_t> ana_chgcnt_{0};
  std::atomic<bool> blackhole_{false};
  std::atomic<bool> partition_{false};
  std::atomic<uint32_t> drop_budget_{0};
  std::atomic<bool> refuse_{false};
  std::atomic<uint64_t> latency_ns_{0};
  std::atomic<uint64_t> bandwidth_{0};
  std::atomic<int32_t> fail_status_{-1};  // -1: not failing, else NvmeStatus::raw
  std::atomic<uint64_t> write_delay_ns_{0};
  std::atomic<uint8_t> write_delay_mode_{0};
  Counters counters_;

  mutable std::mutex mu_;  // guards conns_ and the retired counts
  std::vector<Conn> conns_;
  // The loop counts of connections already joined (stats() adds the live ones' own).
  uint64_t retired_passes_ = 0;
  uint64_t retired_wakeups_ = 0;
};

}  // namespace nvmeof::target
