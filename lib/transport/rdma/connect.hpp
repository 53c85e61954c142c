// The user-space NVMe/RDMA transport as the rest of the library sees it: one factory that
// connects a queue pair (rdma_cm connect, then Fabrics Connect) and one call that starts it on
// its reactor. Verbs types stay out of this header, so the controller compiles the same with or
// without rdma-core; without it (meson picks unavailable.cpp) connect() returns
// Errc::unsupported.
//
// Threading: connect() on any thread (it blocks up to cfg.connect_timeout and never touches the
// reactor); start() and everything after it on the reactor's thread.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "fabric/connect.hpp"
#include "transport/queue_pair.hpp"
#include "reactor/reactor.hpp"
#include "transport/transport_limits.hpp"
#include "nvmeof/status.hpp"

namespace nvmeof::rdma {

/// Queue depth limit: SQSIZE is 16 bits and the target's receive queue is sized by it.
inline constexpr uint32_t kMaxQueueDepth = 1024;
/// Transfer cap when the controller reports no MDTS (nvmet-rdma reports 1 MiB).
inline constexpr uint32_t kDefaultMaxTransfer = 1u << 20;
/// A keyed SGL data block describes at most 2^24 - 1 bytes.
inline constexpr uint32_t kMaxKeyedLength = (1u << 24) - 1;
inline constexpr uint16_t kAdminCntlid = fabric::kAdminCntlid;
/// NVMe/RDMA's limits as the controller sees them (transport/transport_limits.hpp): the admin
/// queue takes no in-capsule data, and one command moves at most what a keyed SGL data block
/// describes, in whole pages of the staging pool.
inline constexpr TransportLimits kLimits{kMaxQueueDepth, 0, kDefaultMaxTransfer,
                                         kMaxKeyedLength & ~(4096u - 1)};

struct QpConfig {
  std::string traddr = "10.10.10.1";
  std::string trsvcid = "4420";
  uint16_t qid = 0;
  uint32_t depth = 32;             ///< 1..kMaxQueueDepth (the admin queue: at most 32 on nvmet)
  uint32_t kato_ms = 0;            ///< admin queue only
  uint16_t cntlid = kAdminCntlid;  ///< kAdminCntlid for the admin queue, else the admin's CNTLID
  std::string subnqn;
  std::string hostnqn;
  std::array<uint8_t, 16> hostid{};
  /// Bytes of write data sent inside the capsule (IOCCSZ * 16 - 64); I/O queues only (the
  /// admin queue of NVMe/RDMA takes no in-capsule data).
  uint32_t in_capsule_data = 0;
  uint32_t max_transfer = 0;  ///< MDTS in bytes; 0 means kDefaultMaxTransfer
  /// Registered staging memory for data (a power of two of 4 KiB pages is used, at least twice
  /// max_transfer). 0: depth x 128 KiB, capped at 64 MiB.
  uint32_t pool_bytes = 0;
  std::chrono::milliseconds connect_timeout{3000};
  /// The post-connect step (in-band authentication) on this queue, within connect_timeout; see
  /// fabric/connect.hpp. Empty: none, and a controller that requires authentication is refused.
  fabric::Authenticator authenticate;
  /// Runs at the end of the pair's destructor (e.g. returns its queue id to a pool).
  std::function<void()> on_destroy;
};

/// A connected pair (QpState::connecting) and what its Fabrics Connect settled.
struct Connected {
  std::unique_ptr<nvmeof::QueuePair> qp;
  uint16_t cntlid = 0;  ///< from the Connect response
  std::string label;    ///< "rdma 10.10.10.1:4420 qid 1", the prefix of its log lines
};

/// Resolves the address and route, creates the QP, CQ and registered memory on the device the
/// route leads to, connects with the NVMe-oF RDMA private data and runs Fabrics Connect, all
/// within cfg.connect_timeout. Errors: invalid_argument (depth, address, transfer size),
/// connection_refused (address or route not resolvable, no listener, the target rejected the
/// connection: the log line names its NVMe/RDMA reject status), timeout, protocol_error (bad
/// accept data or response), an nvme_category() status when the controller rejects Connect,
/// errno codes from verbs (ENOMEM when memory cannot be registered: check RLIMIT_MEMLOCK),
/// unsupported when the library was built without rdma-core. Each failure logs one line.
Result<Connected> connect(Reactor& reactor, const QpConfig& cfg);

/// Reactor thread: makes a pair from connect() live (registers its poller and its completion
/// and connection-event watchers).
void start(nvmeof::QueuePair& qp) noexcept;

}  // namespace nvmeof::rdma
