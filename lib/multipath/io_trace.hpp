// Diagnostics of single I/Os: a hook the lanes call at every step of an I/O, for tools that
// want the history of their slowest or failed I/Os (the soak), and the other hooks tests count
// the volume's events with. Not part of the public API.
#pragma once

#include <chrono>
#include <cstdint>
#include <system_error>

#include "nvmeof/volume.hpp"

namespace nvmeof::detail {

/// Diagnostics only (the soak's history of its slowest I/Os): what happened to one VolumeIo.
enum class IoTraceEvent : uint8_t {
  launch,     ///< accepted by the lane (path -1)
  issue,      ///< submitted on `path`
  hedge,      ///< a hedge of it submitted on `path`
  complete,   ///< an attempt on `path` completed with `status`
  waiting,    ///< no usable path: queued until one is (or no_path_timeout)
  fenced,     ///< a write waiting for its old controller's fence (`path`)
  delayed,    ///< retried on the same path after CRD, or its queue pair was full
  orphaned,   ///< in flight on `path` when its queue pair failed
  finish,     ///< handed back to the application with `status`
};
/// When set, called on the lane's thread for every step of every I/O (VolumeIo by address; an
/// abandoned hedge's steps are not reported, its I/O may be gone). Set before Volume::open,
/// cleared after it closes; one null test per step when unset.
inline void (*g_io_trace_for_test)(const VolumeIo& io, IoTraceEvent ev, int path, uint16_t status) = nullptr;
/// When set, called on a lane's thread when its turns were more than 5 ms apart while it had
/// work (the lane did not look at its paths from `from_ns` to `to_ns`), with the CPU time its
/// thread used meanwhile: little CPU means the thread was not run (or slept), much means a turn
/// itself took that long. Same rules as g_io_trace_for_test.
inline void (*g_lane_gap_for_test)(int lane, uint64_t from_ns, uint64_t to_ns, uint64_t cpu_ns) = nullptr;
/// When set, called on a lane's thread at the start of each of its turns: a test holds the lane
/// up there, as a loaded host would. Same rules as g_io_trace_for_test.
inline void (*g_lane_turn_for_test)(int lane) = nullptr;
/// The negative control of the lane-stall rule (kLaneStallNs in lane.cpp): while true, a lane
/// that was not run for a while counts that time as its paths' silence, as it once did.
inline bool g_no_stall_rule_for_test = false;
/// The negative control of reconnecting before the fence (FailoverMachine::Timing): while true
/// when a volume's subsystem is connected, its failed paths reconnect only once fenced.
inline bool g_no_early_reconnect_for_test = false;
/// The negative control of holding writes that overlap a write waiting for its fence (Lane):
/// while true, such writes go out at once.
inline bool g_no_overlap_hold_for_test = false;
/// When set, called on the thread in Volume::stats() each time it starts waiting for a lane that
/// has not answered yet, with the deadline of that wait: a stats() call that waits once for all
/// its held-up lanes reports the same deadline for each of them. Set and cleared while no
/// stats() call runs.
inline void (*g_snapshot_wait_for_test)(std::chrono::steady_clock::time_point deadline) = nullptr;
/// When set, called on the connect pool's thread around every reconnect attempt of a path (the
/// connect and the attach to every lane): with `done` false as it starts, then true as it ends,
/// with its error (none on success). Same rules as g_io_trace_for_test.
inline void (*g_reconnect_for_test)(int path, bool done, std::error_code error) = nullptr;

}  // namespace nvmeof::detail
