// nvmeof-bench's command line: fio-like flag names, parsed with CLI11 into plain data.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "nvmeof/controller.hpp"
#include "nvmeof/topology.hpp"
#include "nvmeof/volume.hpp"

namespace nvmeof::bench {

enum class RwMode : uint8_t { read, write, randread, randwrite, rw, randrw };
const char* to_string(RwMode m) noexcept;

/// A fault nvmeof-bench injects on one port (--fail-kind, or an entry of --fault-script).
enum class FaultArg : uint8_t {
  none,
  reset,             ///< connections reset (RST)
  blackhole,         ///< sockets stay open, nothing answers (the target still sees a close)
  partition,         ///< a pulled cable: nothing in or out, only keep-alive ends the controller
  ana_inaccessible,  ///< the port's ANA group becomes inaccessible
  ana_change,        ///< the group enters `change`, back to optimized 100 ms later
  slow,              ///< every command on the port is delayed by --slow-latency
  fail_status,       ///< every command on the port completes with Internal Error (retryable)
  refuse,            ///< new connections are closed at once (the live ones stay)
  restore,           ///< ends the port's faults and makes its ANA group optimized again
  // Changes of the volume's paths (not of the target): Volume::remove_path / add_path.
  remove_path,       ///< the path drains and is removed from the volume
  add_path,          ///< the path (removed, or one of --standby-paths) is added to the volume
};
const char* to_string(FaultArg f) noexcept;

/// One entry of the fault schedule (see bench/fault_script.hpp for its text form).
struct FaultStep {
  std::chrono::nanoseconds at{0};       ///< since the timed phase started
  FaultArg action = FaultArg::reset;    ///< never none
  unsigned path = 0;
  std::chrono::nanoseconds latency{0};  ///< slow: the delay per command
  std::string text;                     ///< the entry as written (for messages and reports)
};

struct BenchOptions {
  RwMode rw = RwMode::read;
  unsigned rwmixread = 50;              ///< percent of reads in rw / randrw
  uint32_t bs = 4096;                   ///< bytes per I/O
  unsigned iodepth = 32;
  std::chrono::nanoseconds runtime = std::chrono::seconds(5);
  uint64_t size = 0;                    ///< working set bytes; 0: the namespace, at most 1 GiB
  std::vector<std::string> targets;     ///< one per path
  std::string nqn = "nqn.2024-01.io.nvmeof:target";
  bool embedded = false;
  unsigned paths = 1;                   ///< embedded target ports
  /// The last this many paths are not opened with the volume: a fault script's add-path adds them.
  unsigned standby_paths = 0;
  SelectorKind selector = SelectorKind::service_time;
  Digest digest = Digest::none;
  unsigned reactors = 1;
  PollMode poll = PollMode::adaptive;   ///< how the reactors wait (--poll)
  PlacementMode placement = PlacementMode::numa;
  std::vector<int> cpus;                ///< reactor CPUs (--cpus); empty: the plan chooses
  int memory_node = -1;                 ///< every reactor's memory and the buffers on this node
  std::vector<std::string> host_ifaces; ///< per --target, the interface to bind to
  bool show_placement = false;
  std::chrono::nanoseconds io_deadline{0};  ///< per-command deadline; 0: the volume's default
  std::chrono::nanoseconds fence_bound{0};  ///< 0: the target's CQT, else the keep-alive timeout
  bool ccr = true;                      ///< Cross-Controller Reset (target and volume)
  uint32_t kato_ms = kKatoShortest;     ///< keep-alive timeout asked for
  bool verify = true;
  bool json = false;
  int fail_path = -1;
  std::chrono::nanoseconds fail_at = std::chrono::seconds(2);
  FaultArg fail_kind = FaultArg::reset;
  std::chrono::nanoseconds restore_after{0};  ///< 0: the fault stays
  std::chrono::nanoseconds slow_latency = std::chrono::milliseconds(50);
  uint64_t seed = 1;
  std::string fault_script;             ///< --fault-script as given (a list, or @FILE)
  /// The faults to inject, in order: --fault-script's entries, or --fail-path's fault (and its
  /// restore after --restore-after). Empty: none.
  std::vector<FaultStep> schedule;
  std::chrono::nanoseconds log_interval = std::chrono::seconds(1);
  std::string latency_log;              ///< --latency-log CSV path
  std::string plot;                     ///< --plot SVG path
  // Observability and external fault injection.
  std::string target_control;           ///< an external nvmeof-target's control socket
  std::string control_dir;              ///< VolumeOptions::control_socket
  std::string metrics_listen;           ///< VolumeOptions::metrics_listen
  std::string discover;                 ///< ADDR:PORT of a discovery controller (--discover)
  /// NVMe/TCP TLS: the host's PSK (ConnectOptions::tls_psk, --tls-psk), and with --embedded the
  /// secure channel of the target's ports (--tls: "none", "not-required", "required"; default
  /// required when a key is given).
  std::string tls_psk;
  std::string tls = "";
  /// The host NQN to connect as (ConnectOptions::hostnqn, --hostnqn; empty: derived), and the
  /// DH-HMAC-CHAP secrets (--dhchap-secret, --dhchap-ctrl-secret: the key or @FILE). With
  /// --embedded the target allows only this host and asks it to authenticate with them.
  std::string hostnqn;
  std::string dhchap_secret;
  std::string dhchap_ctrl_secret;
  bool progress = true;                 ///< the status line on a terminal (--no-progress)

  /// Whether --fail-path gave the single fault (--fault-script is parsed in main()).
  bool has_fault() const noexcept { return fail_path >= 0; }
  bool has_fault_script() const noexcept { return !fault_script.empty(); }
  bool has_faults() const noexcept { return !schedule.empty(); }
  /// The highest path index the schedule names; 0 without one.
  unsigned max_fault_path() const noexcept;
  /// Whether the run records per-interval figures.
  bool records_intervals() const noexcept { return !latency_log.empty() || !plot.empty(); }
  /// Whether the workload issues reads at all.
  bool reads() const noexcept;
  bool writes() const noexcept;
  bool random() const noexcept;
};

/// "4096", "4k", "1m", "1g" (binary multiples). nullopt when malformed or zero.
std::optional<uint64_t> parse_size(std::string_view s);
/// "5s", "500ms", "250us", "2" (seconds). nullopt when malformed.
std::optional<std::chrono::nanoseconds> parse_duration(std::string_view s);
/// "4k" style, the largest binary unit that divides `bytes`.
std::string format_size(uint64_t bytes);

/// Parses argv. Returns the options, or the process exit code (0 after --help, 2 on bad flags,
/// with the message already printed).
struct ParsedArgs {
  std::optional<BenchOptions> options;
  int exit_code = 0;
};
ParsedArgs parse_args(int argc, char** argv);

}  // namespace nvmeof::bench
