// nvmeof-bench's results and their two forms: text for people, JSON (snake_case keys, a shape
// that never changes with the mode: absent figures are null, arrays always arrays) for scripts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/fault_script.hpp"
#include "bench/intervals.hpp"
#include "bench/options.hpp"
#include "bench/plot.hpp"
#include "bench/workload.hpp"
#include "nvmeof/volume.hpp"

namespace nvmeof::bench {

struct PathReport {
  PathStats stats;                 ///< at the end of the timed phase
  uint64_t ios_timed = 0;          ///< I/Os of the timed phase on this path
  uint64_t ios_before_fault = 0;   ///< timed phase, before the injection
  uint64_t ios_after_fault = 0;    ///< from the injection to the end
};

struct FaultReport {
  bool injected = false;
  int path = -1;
  FaultArg kind = FaultArg::none;
  /// CLOCK_MONOTONIC of the injection (of the timed phase's start when nothing was injected):
  /// the origin of the timeline's *_ms fields.
  uint64_t inject_ns = 0;
  double at_ms = 0;                ///< since the timed phase started
  double restored_after_ms = -1;   ///< since the injection; -1: not restored
  std::vector<FailoverEvent> timeline;  ///< failovers seen during the timed phase
};

/// One entry of the fault schedule as it ran.
struct AppliedStep {
  FaultStep step;
  bool applied = false;
  uint64_t applied_ns = 0;         ///< CLOCK_MONOTONIC
  bool delivered = true;
  std::string error;               ///< why it was not delivered
};

/// A fault of the schedule and what followed it (computed from the report by fault_summaries()).
struct FaultSummary {
  size_t index = 0;                ///< among the faults (restores not counted)
  const AppliedStep* applied = nullptr;
  double at_ms = -1;               ///< since the timed phase started; -1: never applied
  double restored_at_ms = -1;      ///< the first restore of its path after it; -1: none
  double window_end_ms = -1;       ///< the next fault's injection, or the end of the timed phase
  const FailoverEvent* failover = nullptr;  ///< the first failover of its path it caused
  std::string reason;              ///< without a failover: why not
  WindowTotals window;             ///< from its injection to the next fault's
};

/// A fault, restore or failover step, for the latency log and the plot.
struct RunEvent {
  double t_s = 0;                  ///< since the timed phase started
  std::string kind;                ///< fault, restore, path_failed, io_moved, reconnected
  int path = -1;
  std::string detail;
};

struct BenchReport {
  BenchOptions options;
  std::vector<std::string> addresses;
  uint32_t block_size = 0;
  uint64_t namespace_blocks = 0;
  uint64_t working_set_bytes = 0;
  uint64_t run_id = 0;
  bool prefilled = false;
  bool final_checked = false;
  PhaseTotals prefill, timed, final_check;
  std::vector<PathReport> paths;
  FaultReport fault;               ///< the first fault (the shape before --fault-script)
  std::vector<AppliedStep> steps;  ///< the whole schedule (--fault-script, or the --fail-path sugar)
  uint64_t timed_start_ns = 0;     ///< CLOCK_MONOTONIC
  uint64_t timed_end_ns = 0;       ///< the end of the timed loop (before the drain)
  std::vector<IntervalRow> intervals;  ///< with --latency-log / --plot
  uint64_t reactor_cpu_ns = 0;     ///< reactor threads' CPU time during the timed phase
  std::string volume_json;         ///< the volume's own stats at the end
  std::string placement_json;      ///< the volume's placement plan
  bool drained = true;             ///< false: I/O still in flight when the bench gave up waiting

  uint64_t errors() const noexcept { return prefill.errors + timed.errors + final_check.errors; }
  uint64_t mismatches() const noexcept {
    return prefill.mismatches + timed.mismatches + final_check.mismatches;
  }
  /// 0: clean run; 1: errors, mismatches or I/O that never finished.
  int exit_code() const noexcept { return errors() || mismatches() || !drained ? 1 : 0; }
};

std::vector<FaultSummary> fault_summaries(const BenchReport& r);
/// Faults, restores and each failover's detection, I/O moved and reconnection, in time order.
std::vector<RunEvent> run_events(const BenchReport& r);
/// The --latency-log file: a header, then interval and event rows in time order (see --help).
std::string latency_csv(const BenchReport& r);
PlotData plot_data(const BenchReport& r);

nlohmann::json to_json(const BenchReport& r);
std::string to_text(const BenchReport& r);

}  // namespace nvmeof::bench
