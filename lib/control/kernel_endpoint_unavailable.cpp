// Without IORING_OP_URING_CMD in liburing there are no passthrough queue pairs, so no kernel
// paths in a volume.
#include "control/endpoint.hpp"

namespace nvmeof::detail {

Result<std::shared_ptr<PathEndpoint>> open_kernel_endpoint(const TransportAddress&) {
  return Errc::unsupported;
}

}  // namespace nvmeof::detail
