// metrics.hpp in a library built without metrics support (meson -Dmetrics=disabled, or
// prometheus-cpp absent with -Dmetrics=auto): an endpoint asked for fails the engine's or the
// volume's start with Errc::unsupported, and says why in the log.
#include "observe/metrics.hpp"
#include "core/log.hpp"

namespace nvmeof::detail {

namespace {

Result<std::unique_ptr<MetricsExporter>> unsupported(const std::string& listen) {
  log_warning("nvmeof: metrics_listen %s: built without metrics support (prometheus-cpp)\n", listen.c_str());
  return Errc::unsupported;
}

}  // namespace

struct MetricsExporter::Impl {};

MetricsExporter::MetricsExporter(std::unique_ptr<Impl> impl, uint16_t port) noexcept
    : impl_(std::move(impl)), port_(port) {}

MetricsExporter::~MetricsExporter() = default;

Result<std::unique_ptr<MetricsExporter>> serve_volume_metrics(const std::string& listen, std::string,
                                                              std::function<VolumeStats(LatencyHistogram&)>) {
  return unsupported(listen);
}

Result<std::unique_ptr<MetricsExporter>> serve_host_metrics(const std::string& listen, std::function<HostStats()>) {
  return unsupported(listen);
}

}  // namespace nvmeof::detail
