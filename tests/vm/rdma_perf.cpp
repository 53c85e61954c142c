// 4 KiB random reads through our user-space NVMe/RDMA queue pair, for rdma_fio_compare.sh.
//   rdma_perf <rdma://addr:port> <subnqn> <seconds> <qd>
// Prints "nvmeof rdma randread 4k qdN: <iops> IOPS". Exit 0, 1 on error, 77 when the library
// was built without RDMA.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "control/controller_access.hpp"
#include "nvmeof/controller.hpp"
#include "reactor/reactor.hpp"

using namespace nvmeof;

namespace {

struct Ctx {
  QueuePair* qp = nullptr;
  uint64_t rng = 88172645463325252ull;
  uint64_t blocks = 1;
  uint64_t done = 0;
  uint64_t errors = 0;
  bool stop = false;
};

struct Slot {
  IoRequest req;
  Ctx* ctx = nullptr;
};

uint64_t next(Ctx& c) {
  c.rng ^= c.rng << 13;
  c.rng ^= c.rng >> 7;
  c.rng ^= c.rng << 17;
  return c.rng % c.blocks;
}

void on_done(IoRequest& r, const Cqe& cqe) noexcept {
  Ctx& c = *static_cast<Slot*>(r.user)->ctx;
  ++c.done;
  if (!cqe.status().is_success()) ++c.errors;
  if (c.stop) return;
  prep_read(r.cmd, 1, next(c), 1);
  if (c.qp->submit(r) != 0) ++c.errors;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: rdma_perf <rdma://addr:port> <subnqn> <seconds> <qd>\n");
    return 2;
  }
  auto addr = TransportAddress::parse(argv[1]);
  if (!addr) {
    std::fprintf(stderr, "rdma_perf: bad address %s\n", argv[1]);
    return 2;
  }
  const int seconds = std::atoi(argv[3]);
  const int qd_arg = std::atoi(argv[4]);
  if (seconds <= 0 || qd_arg <= 0 || qd_arg > 1024) {
    std::fprintf(stderr, "rdma_perf: seconds must be positive and qd in 1..1024\n");
    return 2;
  }
  const uint32_t qd = static_cast<uint32_t>(qd_arg);
  auto cp_made = ControlPlane::create();
  if (!cp_made) {
    std::fprintf(stderr, "%s\n", cp_made.message().c_str());
    return 1;
  }
  ControlPlane& cp = **cp_made;
  auto reactor = Reactor::create();
  if (!reactor) return 1;
  ConnectOptions o;
  o.subnqn = argv[2];
  o.connect_timeout = std::chrono::seconds(10);
  o.admin_timeout = std::chrono::seconds(10);
  auto ctrl = Controller::connect(cp, *addr, o);
  if (!ctrl) {
    std::fprintf(stderr, "rdma_perf: connect: %s\n", ctrl.error().message().c_str());
    return ctrl.error() == Errc::unsupported ? 77 : 1;
  }
  auto ns = (*ctrl)->identify_namespace(1);
  if (!ns || ns->block_size != 4096) {
    std::fprintf(stderr, "rdma_perf: namespace 1 is missing or not 4 KiB formatted\n");
    return 1;
  }
  // SQSIZE is 0's based and must be at least 1: a queue of 2 with 1 in flight for QD 1.
  auto qp = create_io_queue(**ctrl, **reactor, std::max<uint32_t>(qd, 2));
  if (!qp) {
    std::fprintf(stderr, "rdma_perf: io queue: %s\n", qp.error().message().c_str());
    return 1;
  }
  Ctx ctx;
  ctx.qp = qp->get();
  ctx.blocks = ns->size_blocks;
  std::vector<Slot> slots(qd);
  std::vector<uint8_t> buf(size_t{qd} * 4096);
  for (uint32_t i = 0; i < qd; ++i) {
    Slot& s = slots[i];
    s.ctx = &ctx;
    s.req.data = buf.data() + size_t{i} * 4096;
    s.req.data_len = 4096;
    s.req.user = &s;
    s.req.on_complete = &on_done;
    prep_read(s.req.cmd, 1, next(ctx), 1);
    if (ctx.qp->submit(s.req) != 0) {
      std::fprintf(stderr, "rdma_perf: submit failed\n");
      return 1;
    }
  }
  const uint64_t t0 = Reactor::clock_ns();
  const uint64_t end = t0 + static_cast<uint64_t>(seconds) * 1000000000ull;
  while (Reactor::clock_ns() < end) (*reactor)->poll(std::chrono::milliseconds(1));
  const uint64_t done = ctx.done;
  const double secs = static_cast<double>(Reactor::clock_ns() - t0) / 1e9;
  ctx.stop = true;
  (*reactor)->run_until([&] { return ctx.qp->outstanding() == 0; }, std::chrono::seconds(10));
  if (ctx.errors) {
    std::fprintf(stderr, "rdma_perf: %llu errors\n", static_cast<unsigned long long>(ctx.errors));
    return 1;
  }
  std::printf("nvmeof rdma randread 4k qd%u: %.0f IOPS\n", qd, static_cast<double>(done) / secs);
  return 0;
}
