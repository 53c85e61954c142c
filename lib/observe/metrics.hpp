// The library's Prometheus endpoints over HTTP (VolumeOptions::metrics_listen,
// HostOptions::metrics_listen): one endpoint each, its families built at each scrape from a
// snapshot, so nothing is counted on the I/O path for it. The library is built with them
// (metrics.cpp, prometheus-cpp's pull Exposer) or without (meson -Dmetrics=disabled:
// metrics_unavailable.cpp, where serving fails with Errc::unsupported); nothing in this header
// depends on prometheus-cpp. metrics_families.hpp has the families themselves.
//
// Threading: a snapshot function runs on the exposer's HTTP threads, one scrape at a time; it
// must be safe to call from there until the exporter is destroyed (the destructor waits for a
// scrape in progress).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/histogram.hpp"
#include "nvmeof/host.hpp"
#include "nvmeof/status.hpp"
#include "nvmeof/volume.hpp"

namespace nvmeof::detail {

class MetricsExporter {
 public:
  struct Impl;
  /// Made by the serve functions (here and in metrics_families.hpp).
  MetricsExporter(std::unique_ptr<Impl> impl, uint16_t port) noexcept;
  ~MetricsExporter();
  MetricsExporter(const MetricsExporter&) = delete;
  MetricsExporter& operator=(const MetricsExporter&) = delete;
  /// The bound TCP port.
  uint16_t port() const noexcept { return port_; }

 private:
  std::unique_ptr<Impl> impl_;
  uint16_t port_ = 0;
};

/// Listens on `listen` ("ADDR:PORT", port 0 picks one) and serves /metrics: the nvmeof_volume_*
/// and nvmeof_path_* families of what `snapshot` returns at each scrape (the volume's stats; it
/// adds every completion's latency to the histogram it is given), `volume` the volume label's
/// value. Errors: invalid_argument (not ADDR:PORT), EADDRINUSE (cannot bind), Errc::unsupported
/// (built without metrics support).
Result<std::unique_ptr<MetricsExporter>> serve_volume_metrics(const std::string& listen, std::string volume,
                                                              std::function<VolumeStats(LatencyHistogram&)> snapshot);

/// As serve_volume_metrics, for an engine: the nvmeof_host_* families of `snapshot()` and its
/// nvmeof_controller_* families, one sample per controller.
Result<std::unique_ptr<MetricsExporter>> serve_host_metrics(const std::string& listen,
                                                            std::function<HostStats()> snapshot);

}  // namespace nvmeof::detail
