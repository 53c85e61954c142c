#include "ublk/request.hpp"

#include <errno.h>

namespace nvmeof::ublk {

int map_request(const ublksrv_io_desc& d, uint32_t block_size, uint32_t max_io, void* buf, DsmRange& range,
                VolumeIo& io, int32_t& ok_result) noexcept {
  const unsigned op = ublksrv_get_op(&d);
  ok_result = 0;
  io.buf = nullptr;
  if (op == UBLK_IO_OP_FLUSH) {
    io.op = IoOp::flush;
    io.slba = 0;
    io.nlb = 0;
    return 0;
  }
  const uint64_t offset = d.start_sector << 9;
  const uint64_t bytes = uint64_t{d.nr_sectors} << 9;
  // The device's logical block size is the namespace's, so the kernel sends whole blocks only.
  if (bytes == 0 || offset % block_size || bytes % block_size) return -EINVAL;
  io.slba = offset / block_size;
  io.nlb = static_cast<uint32_t>(bytes / block_size);
  switch (op) {
    case UBLK_IO_OP_READ:
    case UBLK_IO_OP_WRITE:
      if (bytes > max_io) return -EINVAL;
      io.op = op == UBLK_IO_OP_READ ? IoOp::read : IoOp::write;
      io.buf = buf;
      ok_result = static_cast<int32_t>(bytes);
      return 0;
    case UBLK_IO_OP_DISCARD:
      // The device's discard limits keep one request inside one range.
      range = DsmRange{0, io.nlb, io.slba};
      io.op = IoOp::dsm;
      io.slba = 0;
      io.nlb = 1;
      io.buf = &range;
      return 0;
    case UBLK_IO_OP_WRITE_ZEROES:
      io.op = IoOp::write_zeroes;
      return 0;
    default:
      return -EOPNOTSUPP;
  }
}

int32_t commit_result(IoOp op, NvmeStatus st, int32_t ok_result) noexcept {
  if (st.is_success()) return ok_result;
  const bool optional = op == IoOp::write_zeroes || op == IoOp::dsm;
  return optional && st.dnr() ? -EOPNOTSUPP : -EIO;
}

}  // namespace nvmeof::ublk
