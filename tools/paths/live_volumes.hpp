// nvmeof-paths' view of live user-space volumes: found as control sockets in a directory
// (VolumeOptions::control_socket, NVMEOF_CONTROL_DIR), read with {"op":"stats"}, and rendered
// next to the kernel's subsystems: text in the shape of `nvme list-subsys`, JSON with nvme-cli's
// key names (plus ours per path), and the `nvme top`-like table of --watch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "control/kernel_paths.hpp"

namespace nvmeof::paths {

struct LivePath {
  int index = 0;
  std::string transport, traddr, trsvcid, address;
  std::string state, ana_state;
  uint32_t ana_group = 0;
  uint32_t cntlid = 0;
  uint32_t outstanding = 0;
  uint64_t ios = 0, bytes = 0, reads = 0, writes = 0;
  double p50_us = 0, p99_us = 0;
  uint64_t errors = 0, retries = 0, failovers = 0, reconnects = 0;
  uint64_t keep_alives = 0;       ///< PathStats::keep_alives
  double keep_alives_per_s = 0;   ///< PathStats::keep_alives_per_s
  int numa_node = -1;
  uint32_t write_fence_ms = 0;   ///< PathStats::write_fence_ms
  std::string write_fence_rule;  ///< "" from a process that does not say
};

/// One volume (namespace). Volumes of one subsystem opened with the same paths and settings
/// share its controllers: the same `subsystem` number in the same process, the same path
/// counters (the controllers' own); -1 from a process that does not say.
struct LiveVolume {
  int pid = 0;
  uint32_t volume = 0;
  int64_t subsystem = -1;
  uint32_t nsid = 0;
  bool ns_removed = false;  ///< the controllers reported its namespace gone from every path
  std::string socket;
  std::string nqn;
  std::string selector;
  double uptime_s = 0;
  uint64_t completed = 0, failed = 0, waiting = 0;
  uint64_t failover_events = 0;
  std::string last_failover;  ///< "path 0: connection reset, fenced by ccr", "" when none
  std::vector<LivePath> paths;

  std::string name() const { return "nvmeof-" + std::to_string(pid) + "-" + std::to_string(volume); }
};

/// One stats reply (the JSON object a volume's socket answers) as a LiveVolume. false when the
/// reply is not one.
bool parse_live_volume(const nlohmann::json& reply, const std::string& socket, LiveVolume& out);

/// Every volume socket in `dir` (nvmeof-<pid>-<n>.sock), read now; `pid` > 0 keeps that process's
/// only. Sockets nobody answers (a process that died) are skipped; `errors` gets one line each
/// for those that answered badly.
std::vector<LiveVolume> read_live_volumes(const std::string& dir, int pid, std::vector<std::string>& errors);

/// Text in the shape of `nvme list-subsys`: the kernel's subsystems (as before), then each
/// subsystem our processes have open: one line, ` +- ` per controller (transport, address,
/// state, controller ID, then its counters, every volume's I/O on it), and the volumes
/// (namespaces) on those controllers with their own counters and ANA state per path. MiB/s is
/// the average since its oldest volume opened.
std::string render_text(const KernelTopology& kernel, const std::vector<LiveVolume>& live);

/// {"Subsystems":[...]} with nvme-cli's keys (Name, NQN, IOPolicy, Paths, Transport, Address,
/// State, ANAState) for kernel subsystems and live volumes alike, ours per live path (ios,
/// mib_per_s, latency_p50_us, latency_p99_us, errors, retries, failovers, reconnects,
/// numa_node, cntlid, ...); "Controllers", each of our controllers once with the volumes on it;
/// plus "subsystems", the kernel detail in the earlier snake_case shape.
nlohmann::ordered_json render_json(const KernelTopology& kernel, const std::vector<LiveVolume>& live);

/// The --watch screen: controller (path) health and performance, like `nvme top`, each
/// controller once. Rates are the change from `before` (the previous sample, matched by
/// subsystem and path) over `interval_s`; without a previous sample, the averages since open.
std::string render_top(const std::vector<LiveVolume>& now, const std::vector<LiveVolume>& before,
                       double interval_s);

/// The kernel topology as the earlier --json printed it (snake_case; used by render_json).
nlohmann::ordered_json kernel_json(const KernelTopology& topo);
/// The kernel part of render_text.
std::string kernel_text(const KernelTopology& topo);

}  // namespace nvmeof::paths
