// nvmeof-bench's results and their two forms: text for people, JSON (snake_case keys, a shape
// that never changes with the mode: absent figures are null, arrays always arrays) for scripts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/options.hpp"
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
  FaultReport fault;
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

nlohmann::json to_json(const BenchReport& r);
std::string to_text(const BenchReport& r);

}  // namespace nvmeof::bench
