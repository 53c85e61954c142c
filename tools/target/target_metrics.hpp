// nvmeof-target --metrics-listen: per-port counters and ANA state as Prometheus metrics
// (nvmeof_target_port_*; labels port, traddr, trsvcid, ana_group), read from Target::stats at
// each scrape.
#pragma once

#include <memory>
#include <string>

#include "observe/metrics.hpp"
#include "nvmeof/target.hpp"

namespace nvmeof::tools {

/// `t` must outlive the exporter. Errors as detail::serve_metrics; Errc::unsupported when built
/// without metrics support (target_metrics_unavailable.cpp).
Result<std::unique_ptr<detail::MetricsExporter>> start_target_metrics(Target& t, const std::string& listen);

}  // namespace nvmeof::tools
