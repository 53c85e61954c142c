// Our user-space NVMe/RDMA initiator against Linux nvmet-rdma over soft-RoCE (rdma_rxe), run
// inside the testbed guest by rdma_host.sh, which takes the RDMA port away and gives it back
// during [volume]. Test cases by tag:
//   [connect]  connect, Identify Controller and Namespace, keep-alive across several KATO periods
//   [io]       verified write/read at QD 1 (4 KiB in-capsule, 16 KiB, 128 KiB, MDTS + 4 KiB
//              split in two commands) and QD 128 (4, 16 and 128 KiB interleaved)
//   [refused]  no listener on the port, and a wrong subsystem NQN: a clear error in bounded time
//   [volume]   a Volume over our RDMA path and our TCP path to the same subsystem running a
//              verified workload for CONF_SECONDS; touches CONF_READY once I/O runs. With
//              CONF_EXPECT_LOSS=1 the RDMA path must fail, reconnect and carry I/O again.
// Addresses and the NQN come from RDMA_ADDR, TCP1 and NQN (exported by guest_lib.sh).
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <fstream>
#include <thread>
#include <vector>

#include "../common/block_stamp.hpp"
#include "../common/verified_workload.hpp"
#include "qp_checks.hpp"
#include "testbed_env.hpp"
#include "control/controller_access.hpp"
#include "nvmeof/controller.hpp"
#include "reactor/sync_io.hpp"
#include "nvmeof/volume.hpp"

using namespace nvmeof;
using namespace std::chrono_literals;

namespace {

using test::env_or;
std::string nqn() { return test::testbed_nqn(); }

TransportAddress rdma_address() {
  auto a = TransportAddress::parse("rdma://" + env_or("RDMA_ADDR", "10.10.10.1:4420"));
  REQUIRE(a);
  return *a;
}

TransportAddress tcp_address() {
  auto a = TransportAddress::parse("tcp://" + env_or("TCP1", "127.0.0.1:4420"));
  REQUIRE(a);
  return *a;
}

ConnectOptions options() { return test::testbed_options(); }

struct HostRig {
  std::unique_ptr<ControlPlane> cp = ControlPlane::create().value();
  std::unique_ptr<Reactor> reactor = Reactor::create().value();

  std::shared_ptr<Controller> connect(ConnectOptions o = options()) {
    auto c = Controller::connect(*cp, rdma_address(), o);
    INFO("connect: " << (c ? "ok" : c.error().message()));
    REQUIRE(c);
    return *c;
  }
};


// Disjoint LBA regions in the 16384 blocks (4 KiB) of the 64 MiB namespace.
constexpr uint64_t kSyncRegion = 0;       // up to 1024 blocks
constexpr uint64_t kAsyncRegion = 2048;   // 128 x 32 blocks
constexpr uint64_t kVolumeRegion = 8192;  // 16 x 64 blocks

struct Outcome {
  int done = 0;
  int failures = 0;
  NvmeStatus first_error;
  std::deque<IoRequest*>* retry = nullptr;  // refused with -EAGAIN (staging memory busy)
  QueuePair* qp = nullptr;
};

void count_done(IoRequest& r, const Cqe& c) noexcept {
  auto* o = static_cast<Outcome*>(r.user);
  ++o->done;
  if (!c.status().is_success() && o->failures++ == 0) o->first_error = c.status();
  // A completion frees staging memory: resubmit what was refused for want of it.
  while (!o->retry->empty() && o->qp->submit(*o->retry->front()) == 0) o->retry->pop_front();
}

}  // namespace

TEST_CASE("connect over RDMA, identify, keep-alive across KATO periods", "[connect]") {
  HostRig host;
  ConnectOptions o = options();
  o.kato_ms = 2000;
  auto ctrl = host.connect(o);
  const ControllerInfo& i = ctrl->info();
  std::printf("rdma: cntlid %u, model '%s', subnqn %s, mdts %u (%u bytes), ioccsz %u, io queues %u\n",
              i.cntlid, i.model.c_str(), i.subnqn.c_str(), i.mdts, i.max_transfer, i.ioccsz_bytes,
              ctrl->io_queues());
  CHECK(i.subnqn == nqn());
  CHECK(i.cntlid != 0xffff);
  CHECK(ctrl->io_queues() >= 1);
  auto list = ctrl->active_namespaces();
  REQUIRE(list);
  REQUIRE_FALSE(list->empty());
  auto ns = ctrl->identify_namespace(1);
  REQUIRE(ns);
  CHECK(ns->block_size == 4096);
  CHECK(ns->size_blocks * ns->block_size == 64ull << 20);
  auto qp = create_io_queue(*ctrl, *host.reactor, 8);
  INFO("create_io_queue: " << (qp ? "ok" : qp.error().message()));
  REQUIRE(qp);
  CHECK((*qp)->max_transfer() > 0);
  // Three KATO periods with an idle admin queue: only our keep-alives keep it alive.
  std::this_thread::sleep_for(6500ms);
  CHECK(ctrl->is_live());
  CHECK(ctrl->keep_alive());
  SyncIo io(**qp, *host.reactor, 1, 4096, 20s);
  std::vector<uint8_t> b(4096);
  CHECK(io.read(0, 1, b.data()));
  CHECK((*qp)->state() == QpState::live);
}

TEST_CASE("verified I/O over RDMA at QD 1 and QD 128, several sizes and a split", "[io]") {
  HostRig host;
  auto ctrl = host.connect();
  auto qpr = create_io_queue(*ctrl, *host.reactor, 128);
  INFO("create_io_queue: " << (qpr ? "ok" : qpr.error().message()));
  REQUIRE(qpr);
  QueuePair& qp = **qpr;
  const uint32_t bs = 4096;
  uint64_t seq = static_cast<uint64_t>(std::time(nullptr)) << 8;
  std::printf("rdma: io queue depth %u, max transfer %u, in-capsule %u\n", qp.depth(), qp.max_transfer(),
              ctrl->info().in_capsule_data());
  REQUIRE(qp.depth() >= 128);
  {
    SyncIo io(qp, *host.reactor, 1, bs, 20s);
    io.set_window(1);
    const uint32_t split = qp.max_transfer() + 4096;
    test::write_read_each_size(io, bs, kSyncRegion, {4096, 16384, 131072, split}, seq);
  }
  {
    constexpr uint32_t kQd = 128;
    const uint32_t blocks[] = {1, 4, 32};
    std::vector<IoRequest> reqs(kQd);
    std::vector<std::vector<uint8_t>> bufs(kQd);
    std::vector<uint64_t> lbas(kQd);
    const uint64_t wseq = ++seq;
    for (uint8_t op : {opcode::kWrite, opcode::kRead}) {
      INFO("QD128 " << (op == opcode::kWrite ? "writes" : "reads"));
      std::deque<IoRequest*> retry;
      Outcome out;
      out.retry = &retry;
      out.qp = &qp;
      for (uint32_t i = 0; i < kQd; ++i) {
        const uint32_t nlb = blocks[i % 3];
        lbas[i] = kAsyncRegion + i * 32ull;
        bufs[i].assign(size_t{nlb} * bs, 0);
        if (op == opcode::kWrite) test::fill_blocks(bufs[i].data(), bs, lbas[i], nlb, wseq);
        reqs[i] = IoRequest{};
        prep_rw(reqs[i].cmd, op, 1, lbas[i], nlb);
        reqs[i].data = bufs[i].data();
        reqs[i].data_len = nlb * bs;
        reqs[i].on_complete = &count_done;
        reqs[i].user = &out;
        const int rc = retry.empty() ? qp.submit(reqs[i]) : -EAGAIN;
        if (rc == -EAGAIN) retry.push_back(&reqs[i]);
        else REQUIRE(rc == 0);
      }
      std::printf("rdma: QD128 %s: %u in flight at once, %zu waited for staging memory\n",
                  op == opcode::kWrite ? "writes" : "reads", qp.outstanding(), retry.size());
      REQUIRE(host.reactor->run_until([&] { return out.done == int{kQd}; }, 60000ms));
      INFO("first error 0x" << std::hex << out.first_error.raw);
      CHECK(out.failures == 0);
    }
    uint32_t bad = 0;
    for (uint32_t i = 0; i < kQd; ++i) bad += test::count_mismatches(bufs[i].data(), bs, lbas[i], blocks[i % 3], wseq);
    CHECK(bad == 0);
    CHECK(qp.outstanding() == 0);
  }
  qpr->reset();
}

TEST_CASE("a refused connect is a clear error within the timeout", "[refused]") {
  HostRig host;
  ConnectOptions o = options();
  o.connect_timeout = 5s;
  {
    // The RDMA port's address, a port nobody listens on.
    TransportAddress a = rdma_address();
    a.trsvcid = "4499";
    const auto t0 = std::chrono::steady_clock::now();
    auto c = Controller::connect(*host.cp, a, o);
    const auto took = std::chrono::steady_clock::now() - t0;
    REQUIRE_FALSE(c);
    std::printf("rdma: no listener: %s after %lld ms\n", c.error().message().c_str(),
                static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(took).count()));
    // Refused by the peer's CM, or given up by our own connect_timeout (Errc::timeout says the
    // timeout ended it, not a hang): how long either took is printed, not asserted.
    CHECK((c.error() == Errc::connection_refused || c.error() == Errc::timeout));
  }
  {
    o.subnqn = "nqn.2014-08.org.nvmexpress:no-such-subsystem";
    const auto t0 = std::chrono::steady_clock::now();
    auto c = Controller::connect(*host.cp, rdma_address(), o);
    const auto took = std::chrono::steady_clock::now() - t0;
    REQUIRE_FALSE(c);
    std::printf("rdma: wrong NQN: %s (%s) after %lld ms\n", c.error().message().c_str(),
                c.error().category().name(),
                static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(took).count()));
    CHECK(c.error().category() == nvme_category());  // the controller's refusal, not a timeout
  }
}

TEST_CASE("a Volume over an RDMA path and a TCP path: the RDMA port goes away and returns",
          "[volume]") {
  const int seconds = std::atoi(env_or("CONF_SECONDS", "14").c_str());
  const bool expect_loss = env_or("CONF_EXPECT_LOSS", "0") == "1";
  const std::string ready = env_or("CONF_READY", "");

  const auto v = test::open_testbed_volume({rdma_address(), tcp_address()}, options());
  Volume& vol = *v;
  for (int i = 0; i < 100 && vol.usable_paths() < 2; ++i) std::this_thread::sleep_for(50ms);
  CHECK(vol.usable_paths() == 2);

  // 16 loops, each over its own 64 blocks from kVolumeRegion: stamped writes of 4 KiB
  // (in-capsule on RDMA) to 64 KiB (keyed SGL) and verifying reads, resubmitted from the
  // completions.
  constexpr uint32_t kSlots = 16, kSlotBlocks = 64;
  test::VerifiedWorkload w(vol, kSlots, kSlotBlocks, kVolumeRegion, 16);
  w.start();
  std::this_thread::sleep_for(300ms);
  if (!ready.empty()) std::ofstream(ready) << "running\n";
  const auto run_until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);

  // Watch the RDMA path (index 0): its I/O count when it first reconnected after a failure.
  uint64_t ios_at_reconnect = 0;
  bool reconnected = false;
  while (std::chrono::steady_clock::now() < run_until) {
    std::this_thread::sleep_for(100ms);
    if (reconnected) continue;
    const VolumeStats st = vol.stats();
    if (st.paths[0].failovers >= 1 && st.paths[0].reconnects >= 1 && st.paths[0].state == PathState::live) {
      reconnected = true;
      ios_at_reconnect = st.paths[0].ios;
      std::printf("volume: rdma path reconnected with %llu I/Os done\n",
                  static_cast<unsigned long long>(ios_at_reconnect));
    }
  }
  REQUIRE(w.finish(60s));

  const VolumeStats st = test::check_two_path_run(vol, w, kSlots);
  if (expect_loss) {
    CHECK(st.paths[0].failovers >= 1);
    CHECK(st.paths[1].failovers == 0);
    CHECK(reconnected);
    // The returned RDMA path carried I/O again.
    CHECK(st.paths[0].ios > ios_at_reconnect);
  }
}
