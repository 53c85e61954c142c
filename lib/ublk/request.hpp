// How a ublk request becomes a volume I/O, and what its outcome reports back to the driver:
// pure functions, which each queue runs exactly (ARCHITECTURE.md, "ublk").
#pragma once

#include <linux/ublk_cmd.h>

#include <cstdint>

#include "nvmeof/command.hpp"
#include "nvmeof/status.hpp"
#include "nvmeof/volume.hpp"

namespace nvmeof::ublk {

/// Fills `io`'s op, slba, nlb and buf for the request `d` (sectors of 512 bytes) on a namespace
/// of `block_size`-byte blocks: read and write into `buf` (the tag's buffer, `max_io` bytes),
/// flush, discard as one deallocate range written into `range`, write zeroes. `ok_result` is what
/// the commit reports when the I/O succeeds: the bytes of a read or write, else 0. Returns 0, or
/// the -errno to commit at once: -EINVAL (not whole blocks, larger than `max_io`, no blocks),
/// -EOPNOTSUPP (an operation the device does not map).
int map_request(const ublksrv_io_desc& d, uint32_t block_size, uint32_t max_io, void* buf, DsmRange& range,
                VolumeIo& io, int32_t& ok_result) noexcept;

/// What COMMIT_AND_FETCH_REQ reports for an I/O of `op` that completed with `st`: `ok_result` on
/// success; -EOPNOTSUPP for a Write Zeroes or deallocate the namespace refuses for good (DNR),
/// so that the block layer stops sending it and writes zeroes itself; -EIO otherwise.
int32_t commit_result(IoOp op, NvmeStatus st, int32_t ok_result) noexcept;

}  // namespace nvmeof::ublk
