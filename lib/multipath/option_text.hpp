// The names of the engine's and the volume's option values read back into the values (the
// inverse of their to_string()): for the control socket's requests and the tools' and
// benchmarks' command lines. Internal: an application sets the enums themselves.
//
// Threading: pure functions.
#pragma once

#include <string_view>

#include "nvmeof/host.hpp"
#include "nvmeof/status.hpp"
#include "nvmeof/volume.hpp"

namespace nvmeof {

/// "round-robin", "queue-depth", "numa", "service-time" (or with '_' for '-').
/// Errc::invalid_argument otherwise.
Result<SelectorKind> parse_selector(std::string_view s);

/// "busy", "adaptive", "sleep". Errc::invalid_argument otherwise.
Result<PollMode> parse_poll_mode(std::string_view s);

}  // namespace nvmeof
