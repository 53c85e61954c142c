// uring_qp_test: the io_uring passthrough queue pair against Linux nvmet, run in the testbed
// guest on the kernel host's per-path generic devices (/dev/ngXnY, multipath=N).
//
//   uring_qp_test data <ng> <ng>...          stamped writes through each path in turn, read back
//                                            and verified through every other path, QD 1 and 32,
//                                            4 KiB and 128 KiB commands; every path but the first
//                                            with registered buffers (IORING_URING_CMD_FIXED);
//                                            prints which pairs poll (IOPOLL)
//   uring_qp_test ana <nvmeX> <state>        ANA log page through admin passthrough
//                                            (NVME_URING_CMD_ADMIN) == <state>
//   uring_qp_test loss <ng> <seconds>        reads at QD 32 until the path dies (the caller
//                                            removes the nvmet port): every outstanding and every
//                                            new command must complete with an error in time
//   uring_qp_test randread <ng> <seconds> <qd>   4 KiB random reads; prints IOPS
// Exit 0 pass, 1 fail, 77 skip.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/identify.hpp"
#include "nvmeof/command.hpp"
#include "reactor/reactor.hpp"
#include "transport/uring/admin.hpp"
#include "transport/uring/queue_pair.hpp"

namespace {

using nvmeof::IoRequest;
using nvmeof::Reactor;
namespace uring = nvmeof::uring;
namespace fabric = nvmeof::fabric;

struct FreeDeleter {
  void operator()(void* p) const noexcept { std::free(p); }
};
using Buffer = std::unique_ptr<uint8_t, FreeDeleter>;

Buffer page_buffer(size_t len) {
  return Buffer(static_cast<uint8_t*>(std::aligned_alloc(4096, (len + 4095) & ~size_t{4095})));
}

int fail(const char* what) {
  std::fprintf(stderr, "FAIL: %s\n", what);
  return 1;
}

// /dev/ng0n1 -> /dev/nvme0
std::string ctrl_of(const std::string& ng) {
  const size_t slash = ng.find_last_of('/');
  std::string base = ng.substr(slash + 1);
  const size_t n = base.find('n', 2);
  return ng.substr(0, slash + 1) + "nvme" + base.substr(2, n - 2);
}

uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

// Every logical block carries its LBA and the write sequence, then bytes derived from both.
void stamp(uint8_t* p, uint64_t lba, uint32_t nlb, uint32_t lba_size, uint64_t seq) {
  for (uint32_t b = 0; b < nlb; ++b) {
    uint8_t* blk = p + static_cast<size_t>(b) * lba_size;
    const uint64_t hdr[2] = {lba + b, seq};
    std::memcpy(blk, hdr, sizeof hdr);
    uint64_t x = mix((lba + b) * 0x9e3779b97f4a7c15ull ^ seq);
    for (uint32_t i = sizeof hdr; i + 8 <= lba_size; i += 8) {
      x = mix(x + i);
      std::memcpy(blk + i, &x, 8);
    }
  }
}

// The namespace's block size and size in blocks, via Identify Namespace on the path's controller.
bool namespace_geometry(const std::string& ng, uint32_t nsid, uint32_t& lba_size, uint64_t& blocks) {
  auto admin = uring::AdminDevice::open(ctrl_of(ng));
  if (!admin) return false;
  auto ns = fabric::identify_namespace(*admin, nsid);
  if (!ns || ns->block_size == 0 || ns->block_size > 4096) return false;
  lba_size = ns->block_size;
  blocks = ns->size_blocks;
  return true;
}

struct Path {
  std::string device;
  std::unique_ptr<uring::QueuePair> qp;
};

struct Op {
  IoRequest req;
  int done = 0;
  uint16_t status = 0;
};

void on_done(IoRequest& r, const nvmeof::Cqe& cqe) noexcept {
  auto* op = static_cast<Op*>(r.user);
  op->done = 1;
  op->status = cqe.status().raw;
}

// Runs `count` commands of `nlb` blocks at queue depth `qd` over `qp`; command i covers LBAs
// base + i * nlb. Returns the number that failed, or -1 on a hang.
int run_batch(Reactor& reactor, uring::QueuePair& qp, uint8_t op, uint64_t base, uint32_t nlb,
              uint32_t lba_size, unsigned count, unsigned qd, uint8_t* data) {
  std::vector<Op> ops(count);
  unsigned next = 0, finished = 0, failed = 0, inflight = 0;
  const uint64_t deadline = Reactor::clock_ns() + 20'000'000'000ull;
  const uint32_t bytes = nlb * lba_size;
  while (finished < count) {
    while (next < count && inflight < qd) {
      Op& o = ops[next];
      if (op == nvmeof::opcode::kWrite) nvmeof::prep_write(o.req.cmd, qp.nsid(), base + next * nlb, nlb);
      else nvmeof::prep_read(o.req.cmd, qp.nsid(), base + next * nlb, nlb);
      o.req.data = data + static_cast<size_t>(next) * bytes;
      o.req.data_len = bytes;
      o.req.on_complete = &on_done;
      o.req.user = &o;
      const int r = qp.submit(o.req);
      if (r == -EAGAIN) break;
      if (r < 0) {
        std::fprintf(stderr, "submit: %s\n", std::strerror(-r));
        return -1;
      }
      ++next;
      ++inflight;
    }
    reactor.poll(std::chrono::milliseconds(5));
    // Completions arrive in any order.
    unsigned done_total = 0;
    for (unsigned i = 0; i < next; ++i) {
      if (ops[i].done == 1) {
        ops[i].done = 2;
        if (ops[i].status != 0) {
          std::fprintf(stderr, "command %u: status %s\n", i,
                       nvmeof::to_string(nvmeof::NvmeStatus{ops[i].status}).c_str());
          ++failed;
        }
      }
      done_total += ops[i].done != 0;
    }
    finished = done_total;
    inflight = next - done_total;
    if (Reactor::clock_ns() > deadline) return -1;
  }
  return static_cast<int>(failed);
}

int cmd_data(const std::vector<std::string>& devs) {
  if (devs.size() < 2) return fail("data needs two or more paths");
  // One ring per reactor: every pair's commands on the reactor's own (big-entry) ring. The loss
  // and randread modes keep the default reactor, so the pairs' own rings are covered too.
  nvmeof::ReactorOptions ro;
  ro.big_entries = true;
  auto reactor = Reactor::create(ro);
  if (!reactor) return fail("reactor");
  constexpr size_t kBufBytes = 32u << 17;
  Buffer wbuf = page_buffer(kBufBytes);
  Buffer rbuf = page_buffer(kBufBytes);
  std::vector<Path> paths;
  for (size_t i = 0; i < devs.size(); ++i) {
    const auto& d = devs[i];
    uring::QpConfig cfg;
    cfg.device = d;
    cfg.depth = 64;
    // The first path pins pages per command; the others use the two buffers registered once.
    if (i > 0) cfg.buffers = {{wbuf.get(), kBufBytes}, {rbuf.get(), kBufBytes}};
    auto qp = uring::QueuePair::open(**reactor, cfg);
    if (!qp) return fail(("open " + d).c_str());
    (*qp)->start();
    std::printf("path %s: nsid %u max_transfer %u polled %d registered buffers %zu shared ring %d\n",
                d.c_str(), (*qp)->nsid(), (*qp)->max_transfer(), (*qp)->polled() ? 1 : 0,
                cfg.buffers.size(), (*qp)->shared_ring() ? 1 : 0);
    if (!(*qp)->shared_ring()) return fail("the pair did not join the reactor's big-entry ring");
    paths.push_back({d, std::move(*qp)});
  }
  auto admin = uring::AdminDevice::open(ctrl_of(devs[0]));
  if (!admin) return fail("open admin device");
  auto ns = fabric::identify_namespace(*admin, paths[0].qp->nsid());
  if (!ns) return fail("identify namespace");
  const uint32_t lba_size = ns->block_size;
  std::printf("namespace: %llu blocks of %u bytes\n",
              static_cast<unsigned long long>(ns->size_blocks), lba_size);

  uint64_t seq = 1;
  for (unsigned qd : {1u, 32u}) {
    for (uint32_t size : {4096u, 128u << 10}) {
      for (size_t w = 0; w < paths.size(); ++w, ++seq) {
        const unsigned kCount = size == 4096 ? 64 : 32;
        const uint32_t nlb = size / lba_size;
        // A different region per round so a stale read of an earlier round cannot pass.
        const uint64_t base = (seq * 8192) % (ns->size_blocks - kCount * nlb);
        const size_t total = static_cast<size_t>(kCount) * size;
        for (unsigned i = 0; i < kCount; ++i)
          stamp(wbuf.get() + static_cast<size_t>(i) * size, base + i * nlb, nlb, lba_size, seq);
        int r = run_batch(**reactor, *paths[w].qp, nvmeof::opcode::kWrite, base, nlb, lba_size,
                          kCount, qd, wbuf.get());
        if (r != 0) return fail("write batch");
        for (size_t rd = 0; rd < paths.size(); ++rd) {
          if (rd == w) continue;
          std::memset(rbuf.get(), 0xa5, total);
          r = run_batch(**reactor, *paths[rd].qp, nvmeof::opcode::kRead, base, nlb, lba_size,
                        kCount, qd, rbuf.get());
          if (r != 0) return fail("read batch");
          if (std::memcmp(wbuf.get(), rbuf.get(), total) != 0) {
            std::fprintf(stderr, "data written via %s differs when read via %s (qd %u, %u B)\n",
                         paths[w].device.c_str(), paths[rd].device.c_str(), qd, size);
            return 1;
          }
        }
        std::printf("qd %2u %6u B x %u: written via %s, verified via the %zu others\n", qd, size,
                    kCount, paths[w].device.c_str(), paths.size() - 1);
      }
    }
  }
  for (size_t i = 0; i < paths.size(); ++i) {
    const uint64_t fixed = paths[i].qp->fixed_submissions();
    std::printf("path %s: %llu commands with registered buffers, still using them %d\n",
                paths[i].device.c_str(), static_cast<unsigned long long>(fixed),
                paths[i].qp->uses_registered_buffers() ? 1 : 0);
    if ((i > 0) != (fixed > 0)) return fail("registered buffers used where not registered, or not used");
  }
  paths.clear();
  std::printf("data: pass\n");
  return 0;
}

int cmd_ana(const std::string& ctrl, const std::string& want) {
  auto admin = uring::AdminDevice::open(ctrl);
  if (!admin) return fail(("open " + ctrl).c_str());
  auto id = fabric::identify_controller(*admin);
  if (!id) return fail("Identify Controller");
  auto log = fabric::ana_log(*admin, id->nn);
  if (!log) {
    std::fprintf(stderr, "ana log on %s: %s\n", ctrl.c_str(), log.error().message().c_str());
    return 1;
  }
  const auto expected = nvmeof::parse_ana_state(want);
  if (!expected) return fail("unknown ANA state name");
  for (const auto& g : log->groups) {
    std::printf("%s: ANA group %u %s (%zu namespaces)\n", ctrl.c_str(), g.grpid,
                nvmeof::to_string(g.state), g.nsids.size());
    if (g.grpid == 1 && g.state != *expected) {
      std::fprintf(stderr, "FAIL: %s reports %s, nvmet was set to %s\n", ctrl.c_str(),
                   nvmeof::to_string(g.state), want.c_str());
      return 1;
    }
  }
  if (!log->group(1)) return fail("no ANA group 1");
  std::printf("%s: admin commands via %s\n", ctrl.c_str(), admin->mechanism());
  // This kernel (6.1) has NVME_URING_CMD_ADMIN on /dev/nvmeX: the ioctl is only a fallback.
  if (std::strcmp(admin->mechanism(), "io_uring") != 0) return fail("admin commands did not go through io_uring");
  return 0;
}

struct LossListener : nvmeof::QueuePairListener {
  int failed = 0;
  void on_queue_failed(nvmeof::QueuePair&, std::error_code why) noexcept override {
    failed = 1;
    std::printf("loss: pair failed: %s\n", why.message().c_str());
  }
};

int cmd_loss(const std::string& dev, int seconds) {
  auto reactor = Reactor::create();
  if (!reactor) return fail("reactor");
  uring::QpConfig cfg;
  cfg.device = dev;
  cfg.depth = 32;
  auto qp = uring::QueuePair::open(**reactor, cfg);
  if (!qp) return fail("open");
  uint32_t lba_size = 0;
  uint64_t blocks = 0;
  if (!namespace_geometry(dev, (*qp)->nsid(), lba_size, blocks)) return fail("identify namespace");
  const uint32_t nlb = 4096 / lba_size;
  LossListener listener;
  (*qp)->set_listener(&listener);
  (*qp)->start();
  const unsigned kQd = 32;
  std::vector<Op> ops(kQd);
  Buffer buf = page_buffer(kQd * 4096);
  uint64_t ok = 0, errors = 0, n = 0;
  auto issue = [&](unsigned i) {
    Op& o = ops[i];
    o.done = 0;
    nvmeof::prep_read(o.req.cmd, (*qp)->nsid(), (n++ * nlb) % (blocks - nlb), nlb);
    o.req.data = buf.get() + i * 4096;
    o.req.data_len = 4096;
    o.req.on_complete = &on_done;
    o.req.user = &o;
    return (*qp)->submit(o.req);
  };
  std::vector<int> busy(kQd, 0);
  for (unsigned i = 0; i < kQd; ++i) busy[i] = issue(i) == 0;
  std::printf("loss: running QD %u reads on %s\n", kQd, dev.c_str());
  std::fflush(stdout);
  const uint64_t start = Reactor::clock_ns();
  const uint64_t deadline = start + static_cast<uint64_t>(seconds) * 1'000'000'000ull;
  uint64_t failed_at = 0;
  for (;;) {
    (*reactor)->poll(std::chrono::milliseconds(5));
    unsigned busy_count = 0;
    for (unsigned i = 0; i < kQd; ++i) {
      if (busy[i] && ops[i].done) {
        busy[i] = 0;
        if (ops[i].status == 0) ++ok;
        else ++errors;
        if (ops[i].status != 0 && errors == 1)
          std::printf("loss: first error %s after %llu good reads\n",
                      nvmeof::to_string(nvmeof::NvmeStatus{ops[i].status}).c_str(),
                      static_cast<unsigned long long>(ok));
        if (!listener.failed) busy[i] = issue(i) == 0;
      }
      busy_count += busy[i];
    }
    if (listener.failed && !failed_at) failed_at = Reactor::clock_ns();
    if (listener.failed && busy_count == 0) break;
    if (Reactor::clock_ns() > deadline) {
      std::fprintf(stderr, "FAIL: %u commands still outstanding after %d s (pair %s)\n",
                   busy_count, seconds, nvmeof::to_string((*qp)->state()));
      return 1;
    }
  }
  std::printf("loss: %llu good, %llu errors; pair %s; drained %.1f ms after the failure\n",
              static_cast<unsigned long long>(ok), static_cast<unsigned long long>(errors),
              nvmeof::to_string((*qp)->state()), (Reactor::clock_ns() - failed_at) / 1e6);
  if ((*qp)->submit(ops[0].req) != -ENOTCONN) return fail("a failed pair accepted a command");
  qp->reset();

  // A new pair on the dead path: its commands must fail too, not hang.
  auto again = uring::QueuePair::open(**reactor, cfg);
  if (!again) {
    std::printf("loss: reopening %s fails (%s): ok\n", dev.c_str(),
                again.error().message().c_str());
    return 0;
  }
  (*again)->start();
  Op o;
  nvmeof::prep_read(o.req.cmd, (*again)->nsid(), 0, nlb);
  o.req.data = buf.get();
  o.req.data_len = 4096;
  o.req.on_complete = &on_done;
  o.req.user = &o;
  if ((*again)->submit(o.req) != 0) return fail("submit on the new pair");
  const uint64_t t0 = Reactor::clock_ns();
  if (!(*reactor)->run_until([&] { return o.done != 0; }, std::chrono::milliseconds(seconds * 1000)))
    return fail("a new command on the dead path hung");
  std::printf("loss: new command on the dead path: %s after %.1f ms\n",
              nvmeof::to_string(nvmeof::NvmeStatus{o.status}).c_str(),
              (Reactor::clock_ns() - t0) / 1e6);
  if (o.status == 0) return fail("a read on a removed path succeeded");
  return 0;
}

int cmd_randread(const std::string& dev, int seconds, unsigned qd) {
  auto reactor = Reactor::create();
  if (!reactor) return fail("reactor");
  uring::QpConfig cfg;
  cfg.device = dev;
  cfg.depth = qd;
  auto qp = uring::QueuePair::open(**reactor, cfg);
  if (!qp) return fail("open");
  (*qp)->start();
  uint32_t lba_size = 0;
  uint64_t blocks = 0;
  if (!namespace_geometry(dev, (*qp)->nsid(), lba_size, blocks)) return fail("identify namespace");
  struct Ctx {
    uring::QueuePair* qp;
    uint64_t rng;
    uint32_t nlb = 1;
    uint64_t slots4k = 1;
    uint64_t done = 0;
    uint64_t errors = 0;
    int stop = 0;
  } ctx{qp->get(), 88172645463325252ull, 4096 / lba_size, blocks * lba_size / 4096};
  struct Slot {
    IoRequest req;
    Ctx* ctx;
  };
  std::vector<Slot> slots(qd);
  Buffer buf = page_buffer(static_cast<size_t>(qd) * 4096);
  auto issue = [](Slot& s) {
    Ctx& c = *s.ctx;
    c.rng ^= c.rng << 13;
    c.rng ^= c.rng >> 7;
    c.rng ^= c.rng << 17;
    nvmeof::prep_read(s.req.cmd, c.qp->nsid(), (c.rng % c.slots4k) * c.nlb, c.nlb);
    return c.qp->submit(s.req);
  };
  for (unsigned i = 0; i < qd; ++i) {
    Slot& s = slots[i];
    s.ctx = &ctx;
    s.req.data = buf.get() + static_cast<size_t>(i) * 4096;
    s.req.data_len = 4096;
    s.req.user = &s;
    s.req.on_complete = [](IoRequest& r, const nvmeof::Cqe& cqe) noexcept {
      auto* sl = static_cast<Slot*>(r.user);
      Ctx& c = *sl->ctx;
      ++c.done;
      if (!cqe.status().is_success()) ++c.errors;
      if (c.stop) return;
      c.rng ^= c.rng << 13;
      c.rng ^= c.rng >> 7;
      c.rng ^= c.rng << 17;
      nvmeof::prep_read(r.cmd, c.qp->nsid(), (c.rng % c.slots4k) * c.nlb, c.nlb);
      (void)c.qp->submit(r);
    };
    if (issue(s) != 0) return fail("submit");
  }
  const uint64_t t0 = Reactor::clock_ns();
  const uint64_t end = t0 + static_cast<uint64_t>(seconds) * 1'000'000'000ull;
  while (Reactor::clock_ns() < end) (*reactor)->poll(std::chrono::milliseconds(1));
  const double secs = static_cast<double>(Reactor::clock_ns() - t0) / 1e9;
  const uint64_t done = ctx.done;
  ctx.stop = 1;
  (*reactor)->run_until([&] { return (*qp)->outstanding() == 0; }, std::chrono::seconds(5));
  std::printf("randread %s qd %u: %.0f IOPS (%llu reads, %llu errors, %.1f s)\n", dev.c_str(), qd,
              static_cast<double>(done) / secs, static_cast<unsigned long long>(done),
              static_cast<unsigned long long>(ctx.errors), secs);
  return ctx.errors ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  // nvme-tcp may send on its socket from the submitting thread and a broken socket then
  // raises SIGPIPE in that thread; the queue pair ignores it too, but only once opened.
  std::signal(SIGPIPE, SIG_IGN);
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    std::fprintf(stderr, "usage: uring_qp_test data|ana|loss|randread ...\n");
    return 2;
  }
  const std::string& mode = args[0];
  if (mode == "data") return cmd_data({args.begin() + 1, args.end()});
  if (mode == "ana" && args.size() == 3) return cmd_ana(args[1], args[2]);
  if (mode == "loss" && args.size() == 3) return cmd_loss(args[1], std::atoi(args[2].c_str()));
  if (mode == "randread" && args.size() == 4)
    return cmd_randread(args[1], std::atoi(args[2].c_str()),
                        static_cast<unsigned>(std::atoi(args[3].c_str())));
  std::fprintf(stderr, "uring_qp_test: bad arguments\n");
  return 2;
}
