// nvmeof-bench's status line while the timed phase runs: once a second on a terminal (stderr),
// like fio's: elapsed/total, IOPS and MiB/s per direction over the last second, the highest p99
// of any path since the volume opened, each path's share of the last second's I/O, usable paths.
// Everything comes from Volume::stats() snapshots. Main thread only.
#pragma once

#include <cstdint>
#include <string>

#include "nvmeof/volume.hpp"

namespace nvmeof::bench {

class ProgressLine {
 public:
  /// Enabled when `wanted` and stderr is a terminal.
  ProgressLine(bool wanted, uint64_t total_ns);
  bool enabled() const noexcept { return enabled_; }
  /// Redraws the line when a second has passed since the last one.
  void tick(uint64_t now_ns, uint64_t start_ns, Volume& vol);
  /// Ends the line (a newline) if one was drawn.
  void finish();
  /// The line for two snapshots `dt_s` apart (exposed for tests).
  static std::string render(double elapsed_s, double total_s, const VolumeStats& before, const VolumeStats& now,
                            double dt_s, unsigned usable);

 private:
  bool enabled_ = false;
  bool drawn_ = false;
  uint64_t total_ns_ = 0;
  uint64_t last_ns_ = 0;
  VolumeStats last_;
};

}  // namespace nvmeof::bench
