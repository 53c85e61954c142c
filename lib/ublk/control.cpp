#include "ublk/control.hpp"

#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "ublk/uapi.hpp"

namespace nvmeof::ublk {

struct Control::Ring {
  io_uring ring{};
};

Result<std::unique_ptr<Control>> Control::open() {
  const int fd = ::open("/dev/ublk-control", O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT || err == ENXIO || err == ENODEV) return {Errc::unsupported, kNoDriver};
    return {errno_code(err), std::string("/dev/ublk-control: ") + std::strerror(err)};
  }
  std::unique_ptr<Control> c(new Control);
  c->fd_ = fd;
  c->ring_ = std::make_unique<Ring>();
  // Control commands carry a 32-byte payload: only a 128-byte entry holds it.
  if (int rc = io_uring_queue_init(4, &c->ring_->ring, IORING_SETUP_SQE128); rc < 0) {
    c->ring_.reset();
    return {errno_code(-rc), std::string("io_uring with 128-byte entries: ") + std::strerror(-rc)};
  }
  return c;
}

Control::~Control() {
  if (ring_) io_uring_queue_exit(&ring_->ring);
  if (fd_ >= 0) ::close(fd_);
}

Result<void> Control::command(uint32_t op, uint32_t dev_id, void* buf, uint16_t len, uint64_t data0) {
  io_uring* ring = &ring_->ring;
  io_uring_sqe* sqe = io_uring_get_sqe(ring);
  if (!sqe) return errno_code(EBUSY);
  std::memset(sqe, 0, 128);
  io_uring_prep_rw(IORING_OP_URING_CMD, sqe, fd_, nullptr, 0, 0);
  sqe->cmd_op = op;
  ublksrv_ctrl_cmd cmd{};
  cmd.dev_id = dev_id;
  cmd.queue_id = 0xffff;  // not a queue's command
  cmd.len = len;
  cmd.addr = reinterpret_cast<uintptr_t>(buf);
  cmd.data[0] = data0;
  std::memcpy(sqe->cmd, &cmd, sizeof cmd);
  int rc = io_uring_submit(ring);
  if (rc < 0) return errno_code(-rc);
  io_uring_cqe* cqe = nullptr;
  do rc = io_uring_wait_cqe(ring, &cqe);
  while (rc == -EINTR);
  if (rc < 0) return errno_code(-rc);
  const int res = cqe->res;
  io_uring_cqe_seen(ring, cqe);
  if (res < 0) return errno_code(-res);
  return {};
}

Result<void> Control::add(ublksrv_ctrl_dev_info& info) {
  return command(kAddDev, info.dev_id, &info, sizeof info, 0);
}

Result<void> Control::set_params(uint32_t dev_id, ublk_params& params) {
  params.len = sizeof params;
  return command(kSetParams, dev_id, &params, sizeof params, 0);
}

Result<void> Control::dev_info(uint32_t dev_id, ublksrv_ctrl_dev_info& info) {
  return command(kGetDevInfo, dev_id, &info, sizeof info, 0);
}

Result<void> Control::start(uint32_t dev_id, int server_pid) {
  return command(kStartDev, dev_id, nullptr, 0, static_cast<uint64_t>(server_pid));
}

Result<void> Control::stop(uint32_t dev_id) { return command(kStopDev, dev_id, nullptr, 0, 0); }

Result<void> Control::remove(uint32_t dev_id, Wait wait) {
  return command(wait == Wait::no ? kDelDevAsync : kDelDev, dev_id, nullptr, 0, 0);
}

Result<void> Control::start_recovery(uint32_t dev_id) {
  return command(kStartUserRecovery, dev_id, nullptr, 0, 0);
}

Result<void> Control::end_recovery(uint32_t dev_id, int server_pid) {
  return command(kEndUserRecovery, dev_id, nullptr, 0, static_cast<uint64_t>(server_pid));
}

}  // namespace nvmeof::ublk
