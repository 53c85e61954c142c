// The embedded user-space NVMe/TCP target: the demo's peer, the tests' peer, and a small
// standalone server (tools/nvmeof-target). Several ports, subsystems with RAM- or file-backed
// namespaces, one ANA group per port, discovery, keep-alive, a Command Quiesce Time it honours,
// and per-port fault injection.
//
// Threading: the target runs its own threads. Every method here may be called from any thread
// while it runs; fault and ANA changes take effect for commands received after the call returns.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "nvmeof/identify.hpp"
#include "nvmeof/status.hpp"

namespace nvmeof {

struct TargetNamespace {
  uint32_t nsid = 1;
  uint64_t size_bytes = 64ull << 20;
  uint32_t block_size = 4096;   ///< 512 or 4096
  std::string file;             ///< empty: RAM-backed; else backed by this file (created if absent)
  Nguid nguid{};                ///< all zero: derived from subsystem NQN + nsid
};

struct TargetSubsystem {
  std::string nqn = "nqn.2024-01.io.nvmeof:target";
  std::vector<TargetNamespace> namespaces{TargetNamespace{}};
  std::string serial = "NVMEOF0001";
  std::string model = "nvmeof embedded target";
};

struct TargetPort {
  std::string traddr = "127.0.0.1";
  std::string trsvcid = "4420";  ///< "0": pick a free port (read it back with port_address())
  AnaState ana_state = AnaState::optimized;  ///< ANA group id = port index + 1
};

struct TargetOptions {
  std::vector<TargetPort> ports{TargetPort{}};
  std::vector<TargetSubsystem> subsystems{TargetSubsystem{}};
  uint32_t max_queue_depth = 1024;   ///< CAP.MQES + 1
  uint32_t max_io_queues = 64;
  uint32_t in_capsule_data = 8192;   ///< IOCCSZ = 64 + this
  uint32_t maxh2cdata = 131072;
  uint8_t mdts = 5;                  ///< 2^mdts * 4 KiB = 128 KiB
  uint16_t cqt_ms = 10;              ///< Command Quiesce Time reported and honoured
  uint8_t anatt_s = 2;
  bool log_connections = false;      ///< print connects/disconnects/errors to stderr
};

/// Fault injection, per port. Combine freely; `clear_faults` restores normal service.
enum class FaultKind : uint8_t {
  reset,        ///< close every connection on the port now (RST); new connects still accepted
  blackhole,    ///< stop answering and reading: sockets stay open, nothing comes back
  refuse,       ///< close new connections at once
};

/// Whether held writes respect the Command Quiesce Time after their connection dies.
enum class QuiesceMode : uint8_t { honour, ignore };

struct PortStats {
  uint64_t connections = 0;      ///< accepted since start
  uint64_t live_connections = 0;
  uint64_t commands = 0;
  uint64_t reads = 0;
  uint64_t writes = 0;
  uint64_t errors = 0;           ///< protocol errors seen (malformed PDUs, digests)
  uint64_t delayed_writes_executed = 0;  ///< writes executed after a delay (ghost-write tests)
};

class Target {
 public:
  /// Binds every port and starts serving. Errors: errno codes (EADDRINUSE, ...),
  /// invalid_argument for bad options.
  static Result<std::unique_ptr<Target>> start(const TargetOptions& opts);
  ~Target();  ///< stop()

  /// Stops accepting, closes every connection, joins the threads. Idempotent.
  void stop();
  /// The bound address of port `i` (the real port number when "0" was asked).
  std::string port_address(size_t i) const;  ///< "127.0.0.1:4420"
  uint16_t port_number(size_t i) const;

  /// Changes the ANA state of port `i`'s group and sends an ANA change notice (AER) to every
  /// controller that has one outstanding.
  void set_ana_state(size_t port, AnaState s);
  AnaState ana_state(size_t port) const;

  void inject(size_t port, FaultKind kind);
  /// Adds `latency` before each command on the port is answered (0 removes it).
  void set_latency(size_t port, std::chrono::microseconds latency);
  /// Commands on the port complete with `status` instead of executing (nullopt: stop).
  void fail_commands(size_t port, std::optional<NvmeStatus> status);
  /// The next writes received on the port are held for `delay` and then executed, even if their
  /// connection died meanwhile, unless the Command Quiesce Time has passed since the
  /// connection closed (the target honours CQT by never executing a held command later than
  /// CQT after its connection's teardown). QuiesceMode::ignore executes them whenever the delay
  /// ends: the misbehaving target a ghost-write test needs.
  void delay_writes(size_t port, std::chrono::milliseconds delay,
                    QuiesceMode mode = QuiesceMode::honour);
  void clear_faults(size_t port);

  PortStats stats(size_t port) const;

  /// Direct access to namespace contents (tests verify data through it).
  Result<void> read_ns(const std::string& nqn, uint32_t nsid, uint64_t offset, void* buf, size_t len);
  Result<void> write_ns(const std::string& nqn, uint32_t nsid, uint64_t offset, const void* buf,
                        size_t len);

  struct Impl;

 private:
  explicit Target(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace nvmeof
