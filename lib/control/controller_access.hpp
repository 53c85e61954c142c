// The internal side of the public Controller and ControlPlane (nvmeof/controller.hpp): I/O queue
// pairs on a controller, and the control plane's io_context. For the multipath layer, tools and
// tests; not installed.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "nvmeof/controller.hpp"
#include "transport/queue_pair.hpp"
#include "reactor/reactor.hpp"

namespace nvmeof {

/// A queue pair connected off its reactor's thread (the blocking half of a connect), still to be
/// started there: the one form in which every transport and kind of path hands a new pair up.
struct PreparedQueue {
  /// Runs on the reactor's thread: starts the pair (a kernel path's pair is opened here) and
  /// returns it live. Errors: those of the transport.
  std::function<Result<std::unique_ptr<QueuePair>>()> start;
  /// Where the lane notes completed commands for the controller's traffic-based keep-alive;
  /// nullptr when it has none. Shared: a lane may hold it after the controller is gone.
  std::shared_ptr<std::atomic<uint64_t>> traffic;
  uint16_t cntlid = 0;  ///< the controller the Connect reached (fabric pairs)
  std::string label;    ///< the pair's name in log lines (fabric pairs)
};

/// Creates and connects one I/O queue pair of `ctrl` driven by `reactor` (set-up runs on the
/// calling thread, which should be that reactor's thread, and start() happens there). `depth` 0
/// means options().io_queue_depth. The pair's max_transfer() is MDTS (1 MiB when the
/// controller sets none). Its queue id returns to the pool when the pair is destroyed.
/// Errors: not_connected (admin queue down), queue_full (every granted queue id in use),
/// and those of the TCP set-up (connection_refused, timeout, an NVMe status, ...).
/// `recv_buffer` (TCP only; 0: the default 256 KiB) sizes the pair's receive buffer.
Result<std::unique_ptr<QueuePair>> create_io_queue(Controller& ctrl, Reactor& reactor,
                                                   uint32_t depth = 0, uint32_t recv_buffer = 0);

/// The blocking half of create_io_queue() on any thread (not the reactor's, which it would
/// stall for a whole connect): the pair's memory goes on `memory_node` (-1: the calling
/// thread's); `traffic` is the controller's traffic_clock(). Errors: those of create_io_queue().
Result<PreparedQueue> prepare_io_queue(Controller& ctrl, Reactor& reactor, uint32_t depth,
                                         int memory_node, uint32_t recv_buffer = 0);

/// The Changed Namespace List log of `ctrl` (fabric::changed_namespaces), read on the calling
/// thread (not the control thread, whose loop the read waits for).
Result<std::vector<uint32_t>> changed_namespaces(Controller& ctrl);

/// Where the lanes of a controller's I/O queues note that a command completed (traffic-based
/// keep-alive), or nullptr when the controller's keep-alive is not traffic based.
std::shared_ptr<std::atomic<uint64_t>> traffic_clock(Controller& ctrl) noexcept;



}  // namespace nvmeof
