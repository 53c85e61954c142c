// Blocking block I/O on one queue pair, for examples, tools and tests: each call submits its
// commands (split at the pair's max_transfer(), up to a window of them in flight) and polls the
// pair's reactor until they completed. Not for the hot path: it allocates per call.
//
// Threading: the reactor's thread only (the calls poll that reactor).
#pragma once

#include <chrono>
#include <cstdint>
#include <span>

#include "nvmeof/command.hpp"
#include "transport/queue_pair.hpp"
#include "reactor/reactor.hpp"
#include "nvmeof/status.hpp"

namespace nvmeof {

class SyncIo {
 public:
  /// `block_size` is the namespace's logical block size; `timeout` bounds each call.
  SyncIo(QueuePair& qp, Reactor& reactor, uint32_t nsid, uint32_t block_size,
         std::chrono::milliseconds timeout = std::chrono::seconds(30)) noexcept
      : qp_(qp), reactor_(reactor), nsid_(nsid), block_size_(block_size), timeout_(timeout) {}

  /// Errors (all calls): the first non-success NVMe status (nvme_category(); a failed pair
  /// reports status::kHostPathError), Errc::not_connected when the pair is not live,
  /// Errc::invalid_argument for a zero length or a length the pair refuses, Errc::timeout when
  /// the commands did not complete within the timeout: the pair is then closed, which
  /// completes them, so no buffer is left in use when the call returns.
  Result<void> read(uint64_t slba, uint32_t nlb, void* buf);
  Result<void> write(uint64_t slba, uint32_t nlb, const void* buf);
  Result<void> write_zeroes(uint64_t slba, uint32_t nlb);
  Result<void> flush();
  /// Dataset Management over 1..256 ranges, e.g. kDsmDeallocate.
  Result<void> dsm(std::span<const DsmRange> ranges, uint32_t attributes);
  /// One command with `len` bytes of data at `data`; returns its completion entry (whatever its
  /// status) or the errors above other than the NVMe status.
  Result<Cqe> execute(const Sqe& cmd, void* data, uint32_t len);

  /// Commands kept in flight by read()/write() (default 32, bounded by the pair's depth).
  void set_window(uint32_t n) noexcept { window_ = n ? n : 1; }

 private:
  Result<void> rw(uint8_t opcode, uint64_t slba, uint32_t nlb, void* buf);

  QueuePair& qp_;
  Reactor& reactor_;
  uint32_t nsid_;
  uint32_t block_size_;
  std::chrono::milliseconds timeout_;
  uint32_t window_ = 32;
};

}  // namespace nvmeof
