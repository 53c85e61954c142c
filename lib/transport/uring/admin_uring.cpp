// NVME_URING_CMD_ADMIN on a ring made for the one command (admin.hpp).
#include <linux/nvme_ioctl.h>

#include <cerrno>
#include <cstddef>
#include <cstring>

#include "reactor/reactor.hpp"  // liburing
#include "transport/uring/admin.hpp"
#include "transport/uring/passthru_cmd.hpp"

namespace nvmeof::uring {

int run_admin_uring(int fd, const Sqe& cmd, void* data, uint32_t len, uint32_t timeout_ms,
                    uint32_t& dw0) noexcept {
  io_uring ring{};
  io_uring_params p{};
  p.flags = IORING_SETUP_SQE128 | IORING_SETUP_CQE32;
  // EINVAL: a kernel without big SQEs (older than 5.19): the ioctl does the job there.
  if (io_uring_queue_init_params(2, &ring, &p) < 0) return -ENOSYS;
  io_uring_sqe* sqe = io_uring_get_sqe(&ring);
  io_uring_prep_rw(IORING_OP_URING_CMD, sqe, fd, nullptr, 0, 0);
  sqe->cmd_op = NVME_URING_CMD_ADMIN;
  nvme_uring_cmd c{};
  fill_passthru(c, cmd, data, len, timeout_ms);
  uint8_t* area = reinterpret_cast<uint8_t*>(sqe) + offsetof(io_uring_sqe, cmd);
  std::memset(area, 0, 80);
  std::memcpy(area, &c, sizeof c);
  int r = io_uring_submit(&ring);
  if (r != 1) {
    io_uring_queue_exit(&ring);
    return r < 0 ? r : -EIO;
  }
  // Never give up while the kernel holds the buffer: its admin timeout bounds the wait.
  io_uring_cqe* cqe = nullptr;
  do {
    r = io_uring_wait_cqe(&ring, &cqe);
  } while (r == -EINTR);
  if (r < 0) {
    io_uring_queue_exit(&ring);
    return r;
  }
  const int res = cqe->res;
  dw0 = static_cast<uint32_t>(cqe->big_cqe[0]);
  io_uring_cqe_seen(&ring, cqe);
  io_uring_queue_exit(&ring);
  return res;
}

}  // namespace nvmeof::uring
