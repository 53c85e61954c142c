// nvmeof-target's control socket: the requests `nvmeof-target ctl` sends and the answers the
// target gives, one JSON object per line (lib/observe/control_socket.hpp carries them).
//
//   {"op":"ana","port":0,"state":"inaccessible"}
//   {"op":"fault","port":0,"kind":"reset"|"blackhole"|"partition"|"refuse"}
//   {"op":"latency","port":0,"latency_us":5000}            (0 removes it)
//   {"op":"fail-status","port":0,"sct":0,"sc":6}            (SCT 0..7, SC 0..255, never 0/0)
//   {"op":"clear","port":0}                                  (faults only; ANA state stays)
//   {"op":"stats"}
//   {"op":"add-port","address":"127.0.0.1:0"}                -> "port" (index), "address"
//   {"op":"remove-port","port":2}
//   {"op":"attach-ns","nqn":NQN,"nsid":3,"size":BYTES[,"block_size":4096][,"file":PATH]}
//   {"op":"detach-ns","nqn":NQN,"nsid":3}
//   {"op":"resize-ns","nqn":NQN,"nsid":3,"size":BYTES}
// Every answer has "ok"; a failed one has "error" (a sentence naming what was wrong); stats adds
// "ports" (index, address, removed, ana_state and the PortStats counters, snake_case).
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "nvmeof/status.hpp"
#include "nvmeof/target.hpp"

namespace nvmeof::tools {

/// Carries out one request line against `t` and returns the answer. Any thread (Target's
/// methods are).
std::string answer_target_request(Target& t, std::string_view line);

/// Builds the request line of `nvmeof-target ctl PATH WORDS...` (WORDS without PATH). On bad
/// words returns false with `error` set (a sentence for the user).
bool ctl_request_from_words(const std::vector<std::string>& words, std::string& request,
                            std::string& error);

/// "5ms", "250us", "1s", "0": a latency. false when malformed or negative.
bool parse_latency(std::string_view s, std::chrono::microseconds& out);

/// Sends one request to the target's control socket at `path`. Returns the answer line, or an
/// error sentence in `error` (no such socket, nobody listening, timeout, the target said no).
bool target_control_call(const std::string& path, const std::string& request, std::string& answer,
                         std::string& error);

/// `nvmeof-target ctl PATH WORDS...` (argv after "ctl"): prints the answer (stats as indented
/// JSON) and returns 0, or prints the error and returns 1 (2 for bad words).
int run_ctl(int argc, char** argv);

}  // namespace nvmeof::tools
