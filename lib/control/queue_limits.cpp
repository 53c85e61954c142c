#include "control/queue_limits.hpp"

#include <algorithm>

#include "transport/rdma/connect.hpp"
#include "transport/tcp/queue_pair.hpp"
#include "transport/uring/queue_pair.hpp"

namespace nvmeof::detail {

const TransportLimits& transport_limits(Transport t) noexcept {
  switch (t) {
    case Transport::rdma: return rdma::kLimits;
    case Transport::passthrough: return uring::kLimits;
    case Transport::tcp: break;
  }
  return tcp::kLimits;
}

QueueShape admin_queue_shape(const TransportLimits& l, uint32_t depth) noexcept {
  return QueueShape{depth, l.admin_in_capsule_data, l.max_transfer(0)};
}

QueueShape io_queue_shape(const TransportLimits& l, const ControllerInfo& info, uint32_t mqes,
                          uint32_t depth) noexcept {
  return QueueShape{std::min({depth, mqes, l.max_queue_depth}), info.in_capsule_data(),
                    l.max_transfer(info.max_transfer)};
}

uint32_t admin_max_transfer(const TransportLimits& l, const ControllerInfo& info) noexcept {
  return std::min(l.max_transfer(info.max_transfer), admin_queue_shape(l, 0).max_transfer);
}

}  // namespace nvmeof::detail
