// How big each queue of a path may be, from the limits of that path's own transport
// (transport/transport_limits.hpp) and what the controller reported: one pure function per queue
// kind, so that an RDMA path never gets NVMe/TCP's admin in-capsule size or transfer ceiling
// (and the other way round).
//
// Threading: pure functions.
#pragma once

#include <cstdint>

#include "nvmeof/controller.hpp"
#include "nvmeof/identify.hpp"
#include "transport/transport_limits.hpp"

namespace nvmeof::detail {

/// The limits of `t`'s transport: tcp::kLimits, rdma::kLimits or uring::kLimits.
const TransportLimits& transport_limits(Transport t) noexcept;

/// What a queue pair is asked for at connect.
struct QueueShape {
  uint32_t depth = 0;
  uint32_t in_capsule_data = 0;  ///< write bytes carried inside the capsule
  uint32_t max_transfer = 0;     ///< largest data length of one command
};

/// The admin queue, before Identify: `depth` as asked (the caller checked it against
/// l.max_queue_depth), the transport's admin in-capsule size, its default transfer limit.
QueueShape admin_queue_shape(const TransportLimits& l, uint32_t depth) noexcept;

/// An I/O queue of a controller that answered Identify with `info` and CAP.MQES + 1 = `mqes`:
/// `depth` capped by MQES and the transport, IOCCSZ's in-capsule size, MDTS capped by the
/// transport (its default when MDTS is 0).
QueueShape io_queue_shape(const TransportLimits& l, const ControllerInfo& info, uint32_t mqes,
                          uint32_t depth) noexcept;

/// The largest data length of one command on the admin queue once Identify is known: MDTS, but
/// never more than the admin queue was connected with (admin_queue_shape).
uint32_t admin_max_transfer(const TransportLimits& l, const ControllerInfo& info) noexcept;

}  // namespace nvmeof::detail
