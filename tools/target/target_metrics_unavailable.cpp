// nvmeof-target --metrics-listen in a build without metrics support (meson -Dmetrics).
#include "target/target_metrics.hpp"

namespace nvmeof::tools {

Result<std::unique_ptr<detail::MetricsExporter>> start_target_metrics(Target&, const std::string&) {
  return Errc::unsupported;
}

}  // namespace nvmeof::tools
