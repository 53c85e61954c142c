// nvmeof-bench's fault schedule (--fault-script): several faults, and their ends, in one run.
//
// Text form: entries `TIME:ACTION:PATH` separated by commas or newlines; `#` starts a comment that
// runs to the end of the line; blanks around an entry are ignored. `@FILE` reads the entries from
// FILE. TIME is from the start of the timed phase, with a unit: `2s`, `1.5s`, `250ms`, `800us`.
// ACTION is a FaultArg word (reset, blackhole, partition, refuse, ana-inaccessible, ana-change,
// slow, fail-status; `slow=20ms` sets the delay, `latency` is slow's other name) or `restore`
// (alias `clear`): the port's faults end and its ANA group is optimized again; or a change of the
// volume's paths: `remove-path` and `add-path`. PATH is the port (path) index.
//
// Rules (each broken one is an error naming the entry): times never go back (entries are applied in
// the order written, equal times in that order; nvmeof-bench delays the later entries by the
// lateness of an earlier one, so their spacing holds), every time is inside --runtime, PATH is below
// the number of paths (when known), a restore follows a fault on its path, remove-path takes a
// path in the volume and add-path one outside it (removed, or standby), the script has at
// least one fault and at most kMaxFaultSteps entries.
//
// Threading: pure functions (load_fault_script reads a file).
#pragma once

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "bench/options.hpp"

namespace nvmeof::bench {

inline constexpr size_t kMaxFaultSteps = 256;

struct FaultScriptLimits {
  unsigned paths = 0;                   ///< 0: not known yet (--discover), PATH is checked later
  unsigned standby = 0;                 ///< the last this many paths start outside the volume
  std::chrono::nanoseconds runtime{0};  ///< 0: no bound on TIME
  std::chrono::nanoseconds slow_latency = std::chrono::milliseconds(50);  ///< `slow` without `=`
};

/// Parses the entries in `text`. nullopt with `error` set (one line, naming the entry by its number
/// and, for a file, `FILE:LINE`) when any rule is broken. `source` names the text in messages.
std::optional<std::vector<FaultStep>> parse_fault_script(std::string_view text, const FaultScriptLimits& limits,
                                                         std::string& error, const std::string& source = "");
/// `@FILE`: the file's entries; otherwise `spec` itself. nullopt with `error` set.
std::optional<std::vector<FaultStep>> load_fault_script(const std::string& spec, const FaultScriptLimits& limits,
                                                        std::string& error);
/// "1.5s", "250ms", "800us", "2s": nullopt without a unit, when negative or malformed.
std::optional<std::chrono::nanoseconds> parse_script_time(std::string_view s);

}  // namespace nvmeof::bench
