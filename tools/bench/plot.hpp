// nvmeof-bench's --plot: a self-contained SVG of a run, written without any plotting library.
// Two panels over the same time axis: IOPS (total, and read and write when the run mixed them)
// and p99 latency (log scale, since a failover's stall is orders of magnitude above the rest);
// a labelled vertical marker for each fault, restore and failover; a legend.
//
// The SVG's structure is part of the interface (the tests read it): the total IOPS series is
// `<polyline id="iops" ...>` with one point per interval, p99 is `<polyline id="p99" ...>`
// (intervals without I/O are left out), and every marker is a `<g class="marker KIND">` with KIND
// one of fault, restore, failover.
//
// Threading: a pure function.
#pragma once

#include <string>
#include <vector>

namespace nvmeof::bench {

struct PlotPoint {
  double t_s = 0;         ///< the interval's end, since the timed phase started
  double read_iops = 0;
  double write_iops = 0;
  double p99_us = 0;      ///< 0: no I/O completed in the interval
};

struct PlotMarker {
  enum class Kind { fault, restore, failover };
  double t_s = 0;
  Kind kind = Kind::fault;
  std::string label;      ///< e.g. "reset path 0"
};

struct PlotData {
  std::string title;
  double duration_s = 0;  ///< the time axis' end (at least the last point's)
  std::vector<PlotPoint> points;
  std::vector<PlotMarker> markers;
};

const char* to_string(PlotMarker::Kind k) noexcept;
/// The SVG document (UTF-8, with the XML declaration).
std::string render_svg(const PlotData& data);

}  // namespace nvmeof::bench
