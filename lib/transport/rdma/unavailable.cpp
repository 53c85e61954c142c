// The RDMA transport when the library is built without rdma-core (meson picks this file).
#include <cstdio>

#include "transport/rdma/connect.hpp"
#include "core/log.hpp"

namespace nvmeof::rdma {

Result<Connected> connect(Reactor&, const QpConfig& cfg) {
  nvmeof::detail::log_warning("nvmeof: rdma %s:%s: built without rdma-core (libibverbs, librdmacm)\n",
               cfg.traddr.c_str(), cfg.trsvcid.c_str());
  return Errc::unsupported;
}

void start(nvmeof::QueuePair&) noexcept {}

}  // namespace nvmeof::rdma
