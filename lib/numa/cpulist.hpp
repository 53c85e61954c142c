// The sysfs CPU list format ("0-3,8,10-11"), read by the topology (nvmeof/topology.hpp) and by
// the tools' --cpus options. Internal: an application gives HostOptions::cpus as numbers.
//
// Threading: pure function.
#pragma once

#include <string_view>
#include <vector>

#include "nvmeof/status.hpp"

namespace nvmeof {

/// Parses a sysfs cpulist ("0-3,8,10-11"; empty means none), ascending without duplicates.
/// Errors: Errc::invalid_argument when malformed.
Result<std::vector<int>> parse_cpulist(std::string_view s);

}  // namespace nvmeof
