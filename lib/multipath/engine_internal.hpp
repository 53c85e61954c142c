// How the library makes engines (nvmeof/host.hpp): a new one, or the process's shared one for
// a set of options.
#pragma once

#include <memory>
#include <vector>

#include "nvmeof/host.hpp"
#include "nvmeof/controller.hpp"
#include "nvmeof/topology.hpp"

namespace nvmeof::detail {

/// A new engine whose reactors are placed for `paths` (nodes carrying a path first). Errors as
/// Host::create; may throw std::system_error from the control plane's start.
Result<std::shared_ptr<Host>> make_engine(const HostOptions& opts, const std::vector<TransportAddress>& paths);
/// The shared engine for `opts` (Host::shared); a new one is placed for `paths`.
Result<std::shared_ptr<Host>> shared_engine(const HostOptions& opts, const std::vector<TransportAddress>& paths);

}  // namespace nvmeof::detail
