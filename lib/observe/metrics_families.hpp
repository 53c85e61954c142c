// The Prometheus families behind the endpoints of metrics.hpp, and the general endpoint that
// serves any families (nvmeof-target --metrics-listen builds its own). Only in builds with
// metrics support: this header needs prometheus-cpp.
#pragma once

#include <prometheus/metric_family.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "observe/metrics.hpp"

namespace nvmeof::detail {

using MetricsCollect = std::function<std::vector<prometheus::MetricFamily>()>;

/// Listens on `listen` ("ADDR:PORT", port 0 picks one) and serves /metrics, the families
/// `collect` builds at each scrape. Errors: invalid_argument (not ADDR:PORT), EADDRINUSE (cannot
/// bind).
Result<std::unique_ptr<MetricsExporter>> serve_metrics(const std::string& listen, MetricsCollect collect);

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
