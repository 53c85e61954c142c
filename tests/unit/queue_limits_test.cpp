// Each path's queues are sized by the limits of that path's own transport.
#include <catch2/catch.hpp>

#include "control/queue_limits.hpp"
#include "transport/rdma/connect.hpp"
#include "transport/tcp/queue_pair.hpp"
#include "transport/uring/queue_pair.hpp"

using namespace nvmeof;
using detail::admin_max_transfer;
using detail::admin_queue_shape;
using detail::io_queue_shape;
using detail::transport_limits;

namespace {

ControllerInfo info_with(uint32_t mdts_bytes, uint32_t ioccsz_bytes) {
  ControllerInfo i;
  i.max_transfer = mdts_bytes;
  i.ioccsz_bytes = ioccsz_bytes;
  return i;
}

}  // namespace

TEST_CASE("transport_limits: each transport its own", "[queue_limits]") {
  CHECK(&transport_limits(Transport::tcp) == &tcp::kLimits);
  CHECK(&transport_limits(Transport::rdma) == &rdma::kLimits);
  CHECK(&transport_limits(Transport::passthrough) == &uring::kLimits);
  // Where they differ: NVMe/TCP's admin queue takes 8 KiB in the capsule, NVMe/RDMA's none; a
  // keyed SGL caps an RDMA command below 16 MiB; passthrough defaults to 128 KiB.
  CHECK(tcp::kLimits.admin_in_capsule_data == 8192);
  CHECK(rdma::kLimits.admin_in_capsule_data == 0);
  CHECK(rdma::kLimits.max_transfer_cap == (1u << 24) - 4096);
  CHECK(tcp::kLimits.max_transfer_cap == UINT32_MAX);
  CHECK(uring::kLimits.default_max_transfer == 128u << 10);
  CHECK(uring::kLimits.max_queue_depth == 4096);
}

TEST_CASE("admin queue: an RDMA path gets RDMA's limits, a TCP path TCP's", "[queue_limits]") {
  const auto tcp_admin = admin_queue_shape(transport_limits(Transport::tcp), 32);
  CHECK(tcp_admin.depth == 32);
  CHECK(tcp_admin.in_capsule_data == 8192);
  CHECK(tcp_admin.max_transfer == 1u << 20);
  const auto rdma_admin = admin_queue_shape(transport_limits(Transport::rdma), 32);
  CHECK(rdma_admin.depth == 32);
  CHECK(rdma_admin.in_capsule_data == 0);
  CHECK(rdma_admin.max_transfer == 1u << 20);
}

TEST_CASE("I/O queue: depth, in-capsule size and MDTS through the path's transport", "[queue_limits]") {
  const auto& tl = transport_limits(Transport::tcp);
  const auto& rl = transport_limits(Transport::rdma);
  const auto& ul = transport_limits(Transport::passthrough);
  // MDTS 0 (none reported): the transport's default.
  const ControllerInfo none = info_with(0, 64 + 8192);
  CHECK(io_queue_shape(tl, none, 4096, 128).max_transfer == 1u << 20);
  CHECK(io_queue_shape(rl, none, 4096, 128).max_transfer == 1u << 20);
  CHECK(io_queue_shape(ul, none, 4096, 128).max_transfer == 128u << 10);
  // MDTS 32 MiB: TCP takes it, RDMA stops at what a keyed SGL describes.
  const ControllerInfo big = info_with(32u << 20, 64 + 8192);
  CHECK(io_queue_shape(tl, big, 4096, 128).max_transfer == 32u << 20);
  CHECK(io_queue_shape(rl, big, 4096, 128).max_transfer == (1u << 24) - 4096);
  CHECK(io_queue_shape(ul, big, 4096, 128).max_transfer == 1u << 20);
  // A smaller MDTS wins everywhere.
  const ControllerInfo small = info_with(128u << 10, 64 + 4096);
  CHECK(io_queue_shape(tl, small, 4096, 128).max_transfer == 128u << 10);
  CHECK(io_queue_shape(rl, small, 4096, 128).max_transfer == 128u << 10);
  // The I/O queues' in-capsule size is the controller's IOCCSZ on either fabric.
  CHECK(io_queue_shape(tl, small, 4096, 128).in_capsule_data == 4096);
  CHECK(io_queue_shape(rl, small, 4096, 128).in_capsule_data == 4096);
  // Depth: what was asked, capped by MQES and by the transport.
  CHECK(io_queue_shape(tl, none, 4096, 128).depth == 128);
  CHECK(io_queue_shape(tl, none, 64, 128).depth == 64);
  CHECK(io_queue_shape(tl, none, 65536, 4096).depth == 1024);
  CHECK(io_queue_shape(rl, none, 65536, 4096).depth == 1024);
  CHECK(io_queue_shape(ul, none, 65536, 8192).depth == 4096);
}

TEST_CASE("admin_max_transfer: MDTS, never above what the admin queue was connected with",
          "[queue_limits]") {
  const auto& tl = transport_limits(Transport::tcp);
  const auto& rl = transport_limits(Transport::rdma);
  CHECK(admin_max_transfer(tl, info_with(0, 0)) == 1u << 20);
  CHECK(admin_max_transfer(rl, info_with(0, 0)) == 1u << 20);
  CHECK(admin_max_transfer(tl, info_with(64u << 10, 0)) == 64u << 10);
  CHECK(admin_max_transfer(rl, info_with(64u << 10, 0)) == 64u << 10);
  // The admin queue was connected before Identify, with the transport's default.
  CHECK(admin_max_transfer(tl, info_with(8u << 20, 0)) == 1u << 20);
  CHECK(admin_max_transfer(rl, info_with(8u << 20, 0)) == 1u << 20);
}
