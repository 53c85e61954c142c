// ublk requests as volume I/O (lib/ublk/request.*): what each operation becomes, what is refused,
// and what the commit reports.
#include <catch2/catch.hpp>

#include <errno.h>

#include "ublk/request.hpp"

using namespace nvmeof;
using namespace nvmeof::ublk;

namespace {

ublksrv_io_desc desc(unsigned op, uint64_t sector, uint32_t sectors, unsigned flags = 0) {
  ublksrv_io_desc d{};
  d.op_flags = op | (flags << 8);
  d.start_sector = sector;
  d.nr_sectors = sectors;
  return d;
}

struct Mapped {
  VolumeIo io;
  DsmRange range{};
  int32_t ok = -1;
  int rc = 1;
};

Mapped map(const ublksrv_io_desc& d, uint32_t bs = 4096, uint32_t max_io = 128u << 10) {
  static unsigned char buf[1];
  Mapped m;
  m.rc = map_request(d, bs, max_io, buf, m.range, m.io, m.ok);
  return m;
}

}  // namespace

TEST_CASE("a read and a write become blocks of the namespace in the tag's buffer", "[ublk]") {
  auto r = map(desc(UBLK_IO_OP_READ, 16, 64));  // 8 KiB in, 32 KiB long, 4 KiB blocks
  REQUIRE(r.rc == 0);
  CHECK(r.io.op == IoOp::read);
  CHECK(r.io.slba == 2);
  CHECK(r.io.nlb == 8);
  CHECK(r.io.buf != nullptr);
  CHECK(r.ok == 32768);
  auto w = map(desc(UBLK_IO_OP_WRITE, 3, 1, UBLK_IO_F_FUA >> 8), 512);
  REQUIRE(w.rc == 0);
  CHECK(w.io.op == IoOp::write);
  CHECK(w.io.slba == 3);
  CHECK(w.io.nlb == 1);
  CHECK(w.ok == 512);
}

TEST_CASE("flush, discard and write zeroes", "[ublk]") {
  auto f = map(desc(UBLK_IO_OP_FLUSH, 0, 0));
  REQUIRE(f.rc == 0);
  CHECK(f.io.op == IoOp::flush);
  CHECK(f.ok == 0);
  auto d = map(desc(UBLK_IO_OP_DISCARD, 8, 2048));  // 1 MiB at 4 KiB
  REQUIRE(d.rc == 0);
  CHECK(d.io.op == IoOp::dsm);
  CHECK(d.io.nlb == 1);  // one range
  CHECK(d.io.buf == &d.range);
  CHECK(d.range.slba == 1);
  CHECK(d.range.nlb == 256);
  CHECK(d.ok == 0);
  auto z = map(desc(UBLK_IO_OP_WRITE_ZEROES, 0, 1u << 21));  // 1 GiB: no buffer, no max_io bound
  REQUIRE(z.rc == 0);
  CHECK(z.io.op == IoOp::write_zeroes);
  CHECK(z.io.nlb == 262144);
  CHECK(z.io.buf == nullptr);
}

TEST_CASE("requests the device cannot carry are refused", "[ublk]") {
  CHECK(map(desc(UBLK_IO_OP_READ, 1, 8)).rc == -EINVAL);      // not on a 4 KiB block
  CHECK(map(desc(UBLK_IO_OP_WRITE, 0, 7)).rc == -EINVAL);     // not whole blocks
  CHECK(map(desc(UBLK_IO_OP_READ, 0, 512)).rc == -EINVAL);    // 256 KiB above max_io
  CHECK(map(desc(UBLK_IO_OP_READ, 0, 256)).rc == 0);          // exactly max_io
  CHECK(map(desc(UBLK_IO_OP_WRITE_SAME, 0, 8)).rc == -EOPNOTSUPP);
}

TEST_CASE("what the commit reports", "[ublk]") {
  const auto internal = NvmeStatus::make(Sct::generic, 0x06, true);
  const auto path_error = NvmeStatus::make(Sct::path, 0x71);
  CHECK(commit_result(IoOp::read, status::kSuccess, 4096) == 4096);
  CHECK(commit_result(IoOp::flush, status::kSuccess, 0) == 0);
  CHECK(commit_result(IoOp::read, internal, 4096) == -EIO);
  CHECK(commit_result(IoOp::write, internal, 4096) == -EIO);
  CHECK(commit_result(IoOp::write_zeroes, internal, 0) == -EOPNOTSUPP);
  CHECK(commit_result(IoOp::dsm, internal, 0) == -EOPNOTSUPP);
  CHECK(commit_result(IoOp::write_zeroes, path_error, 0) == -EIO);  // may succeed later: not "unsupported"
}
