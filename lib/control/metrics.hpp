// Prometheus exposition over HTTP (prometheus-cpp's pull Exposer): one endpoint, families built
// at each scrape by a callback from snapshots, so nothing is counted on the I/O path for it.
// Used by VolumeOptions::metrics_listen and by nvmeof-target --metrics-listen.
//
// Threading: the callback runs on the exposer's HTTP threads, one scrape at a time; it must be
// safe to call from there until the exporter is destroyed (the destructor waits for a scrape
// in progress).
#pragma once

#include <prometheus/metric_family.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/histogram.hpp"
#include "nvmeof/host.hpp"
#include "nvmeof/status.hpp"
#include "nvmeof/volume.hpp"

namespace nvmeof::detail {

class MetricsExporter {
 public:
  using Collect = std::function<std::vector<prometheus::MetricFamily>()>;
  /// Listens on `listen` ("ADDR:PORT", port 0 picks one) and serves /metrics. Errors:
  /// invalid_argument (not ADDR:PORT), EADDRINUSE (cannot bind).
  static Result<std::unique_ptr<MetricsExporter>> start(const std::string& listen, Collect collect);
  ~MetricsExporter();
  /// The bound TCP port.
  uint16_t port() const noexcept { return port_; }

  struct Impl;

 private:
  MetricsExporter() = default;
  std::unique_ptr<Impl> impl_;
  uint16_t port_ = 0;
};

/// The nvmeof_volume_* and nvmeof_path_* families of one volume snapshot; `latency` holds every
/// completion's latency (the same snapshot), `volume` is the volume label's value.
std::vector<prometheus::MetricFamily> volume_families(const std::string& volume, const VolumeStats& s,
                                                      const LatencyHistogram& latency);

/// The nvmeof_host_* families of an engine snapshot and its nvmeof_controller_* families, one
/// sample per controller (labelled by subsystem NQN, path address and controller ID).
std::vector<prometheus::MetricFamily> host_families(const HostStats& s);

/// A family helper for callers that build their own (nvmeof-target).
prometheus::MetricFamily metric_family(const std::string& name, const std::string& help, prometheus::MetricType type);
/// A sample with `labels`, its value set as a counter or gauge by the family's type.
void add_sample(prometheus::MetricFamily& f, const std::map<std::string, std::string>& labels, double value);

}  // namespace nvmeof::detail
