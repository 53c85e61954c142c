// The host side of an NVMe/RDMA queue pair (NVMe over Fabrics RDMA transport binding).
//
// Commands go as a SEND of the 64-byte capsule; responses (16-byte completion entries) arrive
// in RECV buffers posted ahead, one per queue slot; the target moves data with RDMA READ and
// WRITE into one memory region the pair registered at set-up. Memory the caller passes in is
// never registered: registering it per command would cost a system call and a page pinning per
// I/O, so data is copied through a staging pool carved out of the registered region (a buddy
// allocator, no allocation per I/O) and described by a keyed SGL data block (type 4h, subtype
// 0h: the key stays valid for the pair's life, so there is nothing to invalidate). Writes that
// fit the controller's in-capsule size (I/O queues only) travel inside the SEND after the
// capsule (SGL data block, offset subtype).
//
// The reactor drives the pair: a poller reaps the completion queue (ibv_poll_cq) and posts the
// SENDs queued since the last turn in one chain. When a turn finds nothing while commands are
// in flight, the CQ is armed (ibv_req_notify_cq) and an IORING_OP_POLL_ADD on its completion
// channel wakes a reactor that went to sleep in io_uring. The rdma_cm event channel of the
// connection is watched the same way on the reactor, so a DISCONNECTED or DEVICE_REMOVAL event
// fails the pair within one reactor turn, without a thread of its own.
//
// Failure: any completion with a bad status, a malformed response, or a connection event fails
// the pair at once: rdma_disconnect and a move of the QP to the error state, which flushes
// every posted work request. Outstanding commands complete with status::kHostPathError only
// when every posted SEND and RECV has come back (flushed): the target can no longer write into
// or read from a staging buffer, so none is reused before. The destructor bounds that wait and
// destroys the QP before it frees the memory in any case.
//
// Threading: connect() on any thread; everything else on the reactor's thread. Completion
// callbacks and the listener run inline on that thread; they may submit() and close(), but must
// not destroy the pair.
#pragma once

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "core/node_memory.hpp"
#include "transport/queue_pair.hpp"
#include "transport/queue_pair_base.hpp"
#include "reactor/reactor.hpp"
#include "transport/rdma/buddy_pool.hpp"
#include "transport/rdma/connect.hpp"

namespace nvmeof::rdma {

inline constexpr uint32_t kPageSize = 4096;
inline constexpr uint32_t kCapsuleLen = 64;
inline constexpr uint32_t kResponseLen = 16;

/// Where the pieces of the registered region lie.
struct Layout {
  uint32_t depth = 0;
  uint32_t in_capsule = 0;  ///< write bytes carried after the capsule
  uint32_t max_transfer = 0;
  uint32_t cmd_stride = 0;  ///< capsule + in-capsule data, rounded to 64 bytes
  size_t cmd_off = 0;
  size_t recv_off = 0;
  size_t pool_off = 0;      ///< page aligned
  uint32_t pool_order = 0;  ///< the pool has 2^pool_order pages
  size_t total = 0;

  static Layout make(const QpConfig& cfg) noexcept;
};

/// Verbs and rdma_cm objects of one connection, released in dependency order.
struct Resources {
  rdma_event_channel* cm_channel = nullptr;
  rdma_cm_id* id = nullptr;
  ibv_pd* pd = nullptr;
  ibv_comp_channel* comp = nullptr;
  ibv_cq* cq = nullptr;
  ibv_mr* mr = nullptr;
  /// The registered region, on the creating thread's memory node (a lane's reactor node).
  nvmeof::detail::NodeBuffer region_mem;
  uint8_t* region = nullptr;
  size_t region_len = 0;
  unsigned unacked_cq_events = 0;

  Resources() = default;
  Resources(const Resources&) = delete;
  Resources& operator=(const Resources&) = delete;
  ~Resources();
  /// Destroys the QP: from then on the device touches none of the pair's memory.
  void destroy_qp() noexcept;
};

namespace detail {
using Clock = std::chrono::steady_clock;
/// rdma_cm set-up up to a route, then the PD, CQ, QP and registered region.
Result<void> resolve_and_create(Resources& r, const QpConfig& cfg, const Layout& l,
                                Clock::time_point deadline, const std::string& label);
/// rdma_connect with the NVMe-oF private data; waits for ESTABLISHED and checks the accept
/// data. Returns the controller's receive queue size (CRQSIZE).
Result<uint16_t> establish(Resources& r, const QpConfig& cfg, Clock::time_point deadline,
                           const std::string& label);
std::string make_label(const QpConfig& cfg);
}  // namespace detail

/// One command slot, indexed by CID (QueueSlot::req while outstanding). A slot completes only
/// when both its response arrived and its SEND came back: until then the device may still read
/// the capsule. Complete here because QueuePairBase's members use it.
struct CommandSlot : QueueSlot {
  enum class Dir : uint8_t { none, to_controller, from_controller };

  bool answered = false;
  bool send_posted = false;  // handed to the device, its completion not yet reaped
  Dir dir = Dir::none;
  uint32_t page = BuddyPool::kNone;  // staging block, or kNone
  uint32_t pages = 0;
  Cqe cqe{};
  ibv_send_wr wr{};
  ibv_sge sge{};
};

class QueuePair final : public QueuePairBase<CommandSlot> {
 public:
  /// See rdma::connect().
  static Result<Connected> connect(Reactor& reactor, const QpConfig& cfg);
  /// Closes the pair and waits (bounded to 2 s, polling the reactor once started) until the
  /// flushed work requests are back; then destroys the QP and completes whatever is left.
  ~QueuePair() override;

  void start() noexcept;

  int submit(IoRequest& req) noexcept override;
  // close(), state(), error(), depth(), outstanding(), label(): QueuePairBase.
  uint16_t qid() const noexcept override { return cfg_.qid; }
  uint32_t max_transfer() const noexcept override { return layout_.max_transfer; }

  QueuePair(const QueuePair&) = delete;
  QueuePair& operator=(const QueuePair&) = delete;

 private:
  using Slot = CommandSlot;
  struct Watch;

  QueuePair(Reactor& reactor, const QpConfig& cfg, const Layout& l,
            std::unique_ptr<Resources> res, std::string label);

  static int poll_fn(void* self) noexcept;
  int turn() noexcept;
  int reap() noexcept;
  int post_sends() noexcept;
  bool post_recv(uint32_t index) noexcept;
  int queue_command(IoRequest& req) noexcept;
  void on_response(uint32_t index, uint32_t len) noexcept;
  void maybe_finish(uint16_t cid) noexcept;
  void release(uint16_t cid, const Cqe& cqe) noexcept;
  // QueuePairBase's hooks: disconnect and move the QP to the error state (the device flushes
  // every posted request); quiet once every SEND and RECV is back; a drained slot gives its
  // staging memory back.
  void stop_transport() noexcept override;
  bool transport_quiet() const noexcept override { return drained(); }
  void retire_slot(uint16_t cid) noexcept override;
  void arm_cq() noexcept;
  void arm_watches() noexcept;
  void on_cq_event() noexcept;
  void on_cm_event() noexcept;
  void teardown() noexcept;
  /// One command before start() (Fabrics Connect, authentication), its completion reaped here.
  Result<Cqe> execute_setup(const Sqe& cmd, std::span<const uint8_t> out, std::span<uint8_t> in,
                            detail::Clock::time_point deadline);
  bool drained() const noexcept { return posted_sends_ == 0 && posted_recvs_ == 0; }
  uint8_t* cmd_buf(uint32_t cid) const noexcept;

  Reactor& reactor_;
  QpConfig cfg_;
  Layout layout_;
  std::unique_ptr<Resources> res_;
  uint32_t posted_sends_ = 0;
  uint32_t posted_recvs_ = 0;
  bool started_ = false;
  bool cq_notify_armed_ = false;
  bool torn_down_ = false;

  ibv_send_wr* pend_head_ = nullptr;  // SENDs queued this turn, chained for one post
  ibv_send_wr* pend_tail_ = nullptr;
  std::unique_ptr<ibv_recv_wr[]> recv_wr_;
  std::unique_ptr<ibv_sge[]> recv_sge_;
  BuddyPool pool_;
  Watch* watch_ = nullptr;  // outlives the pair while an io_uring poll still names it
};

}  // namespace nvmeof::rdma
