// A queue pair over one kernel NVMe path: io_uring passthrough (IORING_OP_URING_CMD with
// NVME_URING_CMD_IO) on the path's generic char device /dev/ngXnY. Any fabric the kernel host
// speaks (TCP, RDMA, FC, PCIe) becomes a path of ours this way.
//
// A passthrough ring needs IORING_SETUP_SQE128 | IORING_SETUP_CQE32. When the reactor's ring
// has them (ReactorOptions::big_entries), every pair of the reactor puts its commands on that
// one ring: the device sits in the reactor's file table, registered buffers in its buffer
// table, and each completion is dispatched to the command's slot like any other. Otherwise each
// pair owns a small ring of its own that the reactor drives: a poller submits every command
// queued during the turn in one system call and reaps the pair's CQEs, and a read of an eventfd
// registered on the pair's ring stays pending on the reactor's ring, so a reactor blocked in
// poll() wakes when a passthrough completion arrives. (A polled pair, IOPOLL, always has its
// own ring.)
//
// Completions: cqe->res >= 0 is the NVMe status (the 15-bit status field, passed through);
// big_cqe[0] holds DW0 (low half) and DW1. A negative res is a transport error (-errno): the
// command completes with status::kHostPathError and the pair fails. A host pathing status the
// kernel made up itself (SCT 3h, SC 70h/71h: the controller is not live) is passed through and
// also fails the pair, because every later command on that path would get the same answer.
//
// The kernel picks the hardware queue, so qid() is only the label given in QpConfig.
//
// Lifecycle: QueuePairLifecycle's state machine (transport/queue_pair_base.hpp), not
// QueuePairBase's slot table and drain: the kernel cannot cancel a passthrough command, so a
// failed pair's commands complete one by one as the kernel gives them back (each with
// status::kHostPathError), and what they use (the ring, the slots) outlives the pair when it is
// destroyed first.
//
// Kernel quirk: nvme-tcp may send a command on its socket from the submitting thread, without
// MSG_NOSIGNAL, so a connection that breaks raises SIGPIPE in the reactor's thread. open() sets
// SIGPIPE to SIG_IGN when it still has the default disposition (which would kill the process);
// a program that installed its own handler keeps it.
//
// Threading: open() on any thread when the pair gets its own ring, on the reactor's thread when
// it shares the reactor's (it registers the device with that ring); everything else on the
// reactor's thread. Completion callbacks
// and the listener run inline on that thread; they may submit() and close(), but must not
// destroy the pair.
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "transport/queue_pair_base.hpp"
#include "reactor/reactor.hpp"
#include "transport/transport_limits.hpp"

namespace nvmeof::uring {

inline constexpr uint32_t kMaxQueueDepth = 4096;
/// Transfer cap used when sysfs does not tell the path's limits.
inline constexpr uint32_t kDefaultMaxTransfer = 128u << 10;
/// Ceiling on the limit read from sysfs (fabrics without MDTS report hundreds of MiB; larger
/// commands only make the kernel pin and map more pages at once).
inline constexpr uint32_t kMaxTransferCap = 1u << 20;
/// Passthrough's limits as the rest of the library sees them (transport/transport_limits.hpp):
/// admin commands go to /dev/nvmeX, not on a queue pair of ours.
inline constexpr TransportLimits kLimits{kMaxQueueDepth, 0, kDefaultMaxTransfer, kMaxTransferCap};

struct QpConfig {
  std::string device;          ///< the path's generic char device, e.g. "/dev/ng0n1"
  uint32_t depth = 128;        ///< 1..kMaxQueueDepth commands outstanding
  uint16_t qid = 1;            ///< what qid() reports (the kernel chooses the real queue)
  /// Largest data length of one command; 0 reads the block queue limits from
  /// <sysfs_root>/block/nvmeXnY/queue (max_hw_sectors_kb, max_segments) capped at
  /// kMaxTransferCap, else kDefaultMaxTransfer.
  uint32_t max_transfer = 0;
  std::string sysfs_root = "/sys";
  /// Poll for completions (IORING_SETUP_IOPOLL) when the device has poll queues (the kernel
  /// controller was connected with nr_poll_queues > 0; <sysfs_root>/block/nvmeXnY/queue/io_poll
  /// is 1). The reactor then spins on the pair while commands are outstanding instead of
  /// sleeping. Ignored for devices without poll queues.
  /// Off by default: Linux 6.1's passthrough polling (nvme_ns_chr_uring_cmd_iopoll) can poll a
  /// bio that already completed; in the testbed (Debian's 6.1.0) the first polled command over
  /// nvme-tcp crashed the kernel with a general protection fault in bio_poll. Turn it on only
  /// on a kernel whose passthrough polling you trust.
  bool iopoll = false;
  /// Memory registered once with the ring (io_uring_register_buffers). A command whose buffer
  /// lies wholly inside one of them goes as IORING_URING_CMD_FIXED (no page pinning per I/O);
  /// others go as before. The regions must outlive the pair.
  std::vector<iovec> buffers;
};

/// The largest command data length for `device` (/dev/ngXnY), from the block queue limits of its
/// block twin nvmeXnY under <sysfs_root>/block (max_hw_sectors_kb, max_segments pages), capped at
/// kMaxTransferCap; kDefaultMaxTransfer when sysfs does not say.
uint32_t transfer_limit(const std::string& device, const std::string& sysfs_root);

class QueuePair final : public QueuePairLifecycle {
 public:
  /// Opens the device, reads its NSID (NVME_IOCTL_ID) and sets up the passthrough ring with the
  /// device as registered file 0. Returns the pair in QpState::connecting; call start() on the
  /// reactor's thread. Errors: Errc::invalid_argument (depth, empty device), errno codes from
  /// open (ENOENT, EACCES), ioctl (ENOTTY: not an NVMe namespace device) and io_uring set-up
  /// (EINVAL: the kernel lacks SQE128/CQE32, i.e. older than 5.19). Each failure logs one line
  /// to stderr.
  static Result<std::unique_ptr<QueuePair>> open(Reactor& reactor, const QpConfig& cfg);

  /// Closes the pair and, on the reactor thread, polls the reactor until every passthrough
  /// command has completed (the kernel cannot cancel them; its I/O timeout bounds them). Past
  /// 2 s the ring is orphaned: it stays alive, with the buffers it references, until its last
  /// completion arrives, and its requests' callbacks no longer run.
  ~QueuePair() override;

  /// Reactor thread: registers the poller and the completion wake-up; state becomes live.
  void start() noexcept;

  /// Queues `req` on the passthrough ring (sent at the end of the reactor turn). The command is
  /// taken as is from req.cmd (opcode, nsid, CDW2-3, CDW10-15); data and data_len give the
  /// buffer. Returns 0, -ENOTCONN (not live), -EINVAL (data_len > max_transfer(), a buffer on a
  /// command that moves no data, or no buffer), -EAGAIN (depth commands outstanding).
  int submit(IoRequest& req) noexcept override;
  // close(), state(), error(), label(): QueuePairLifecycle. After close(), commands still in
  // the kernel complete later, each with status::kHostPathError.
  uint16_t qid() const noexcept override { return cfg_.qid; }
  uint32_t depth() const noexcept override { return cfg_.depth; }
  uint32_t outstanding() const noexcept override;
  uint32_t max_transfer() const noexcept override { return max_transfer_; }

  /// True when the pair's commands go on its reactor's own ring (the reactor was made with
  /// ReactorOptions::big_entries): one ring per reactor. Otherwise the pair keeps a small ring
  /// of its own that the reactor drives.
  bool shared_ring() const noexcept;
  /// True when the pair polls for completions (IOPOLL).
  bool polled() const noexcept { return polled_; }
  /// Commands sent with a registered buffer (IORING_URING_CMD_FIXED) since the pair opened.
  uint64_t fixed_submissions() const noexcept { return fixed_submissions_; }
  /// False once the kernel refused a registered buffer on this path (EINVAL: nvme-rdma in
  /// Linux 6.1); the pair then sends every command the ordinary way.
  bool uses_registered_buffers() const noexcept { return use_fixed_ && !cfg_.buffers.empty(); }
  /// The namespace ID the kernel reports for the device.
  uint32_t nsid() const noexcept { return nsid_; }

  QueuePair(const QueuePair&) = delete;
  QueuePair& operator=(const QueuePair&) = delete;

 private:
  struct Core;

  QueuePair(Reactor& reactor, const QpConfig& cfg, Core* core, uint32_t nsid,
            uint32_t max_transfer);

  static int poll_fn(void* self) noexcept;
  int turn() noexcept;
  int reap() noexcept;
  /// Fills the command; true when it uses a registered buffer. The caller sets user_data.
  bool prep_sqe(io_uring_sqe* sqe, IoRequest& req, bool allow_fixed) noexcept;
  static void on_shared_cqe(IoHandler* h, const io_uring_cqe& cqe) noexcept;
  void on_completion(IoRequest& req, int res, uint64_t result) noexcept;
  // QueuePairLifecycle's hooks: commands queued but not yet sent become NOPs; closed once the
  // kernel gave back every command.
  void stop_transport() noexcept override;
  void settle() noexcept override;

  Reactor& reactor_;
  QpConfig cfg_;
  uint32_t nsid_ = 0;
  uint32_t max_transfer_ = 0;
  uint16_t next_cid_ = 0;
  bool polled_ = false;
  bool use_fixed_ = true;
  uint64_t fixed_submissions_ = 0;
  bool poller_added_ = false;
  Core* core_ = nullptr;  // outlives the pair while the kernel still holds commands
};

}  // namespace nvmeof::uring
