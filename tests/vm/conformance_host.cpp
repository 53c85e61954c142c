// Conformance of our user-space NVMe/TCP initiator against Linux nvmet-tcp, run inside the
// testbed guest by conformance_host.sh, which sets the ANA states and removes a port between
// (and during) the test cases it selects by tag:
//   [identify]  connect to both ports, Identify Controller and Namespace
//   [io]        verified write/read at 4 KiB..1 MiB (in-capsule, R2T, MDTS split), digests
//               off and on, QD 1 (SyncIo) and QD 128 (asynchronous, one reactor)
//   [ana]       the ANA log through each port against CONF_ANA1 / CONF_ANA2
//   [volume]    a Volume over both ports running a verified mixed workload for CONF_SECONDS,
//               touching CONF_READY once I/O runs (the script then removes port 2); with
//               CONF_EXPECT_LOSS=1 path 2 must have failed over meanwhile.
// Addresses and the NQN come from TCP1, TCP2 and NQN (exported by guest_lib.sh).
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <thread>
#include <vector>

#include "../common/block_stamp.hpp"
#include "../common/verified_workload.hpp"
#include "qp_checks.hpp"
#include "testbed_env.hpp"
#include "control/controller_access.hpp"
#include "core/identify.hpp"
#include "nvmeof/controller.hpp"
#include "reactor/sync_io.hpp"
#include "nvmeof/volume.hpp"

using namespace nvmeof;
using namespace std::chrono_literals;

namespace {

using test::env_or;
std::string nqn() { return test::testbed_nqn(); }

TransportAddress port_address(int port) {
  const std::string s = port == 1 ? env_or("TCP1", "127.0.0.1:4420") : env_or("TCP2", "127.0.0.2:4421");
  auto a = TransportAddress::parse(s);
  REQUIRE(a);
  return *a;
}

ConnectOptions options(Digest d = Digest::none) { return test::testbed_options(d); }

struct HostRig {
  std::unique_ptr<ControlPlane> cp = ControlPlane::create().value();
  std::unique_ptr<Reactor> reactor = Reactor::create().value();

  std::shared_ptr<Controller> connect(int port, Digest d = Digest::none) {
    auto c = Controller::connect(*cp, port_address(port), options(d));
    INFO("connect to port " << port << ": " << (c ? "ok" : c.error().message()));
    REQUIRE(c);
    return *c;
  }
};


const char* digest_name(Digest d) {
  switch (d) {
    case Digest::none: return "none";
    case Digest::header: return "header";
    case Digest::data: return "data";
    case Digest::both: return "header+data";
  }
  return "?";
}

// Disjoint LBA regions (in 4 KiB blocks of the 64 MiB namespace) so the cases never see each
// other's data; each digest setting gets its own half of the I/O region.
constexpr uint64_t kSyncRegion = 0;        // 2 x 1024 blocks
constexpr uint64_t kAsyncRegion = 2048;    // 2 x 2048 blocks
constexpr uint64_t kVolumeRegion = 8192;   // up to 4096 blocks

struct Outcome {
  int done = 0;
  int failures = 0;
  NvmeStatus first_error;
};

void count_done(IoRequest& r, const Cqe& c) noexcept {
  auto* o = static_cast<Outcome*>(r.user);
  ++o->done;
  if (!c.status().is_success()) {
    if (o->failures++ == 0) o->first_error = c.status();
  }
}

}  // namespace

TEST_CASE("identify controller and namespace through both nvmet ports", "[identify]") {
  HostRig host;
  uint16_t first_cntlid = 0;
  NamespaceId first_id;
  std::vector<std::shared_ptr<Controller>> ctrls;  // both connected at once
  for (int port = 1; port <= 2; ++port) {
    INFO("port " << port);
    auto ctrl = host.connect(port);
    ctrls.push_back(ctrl);
    const ControllerInfo& i = ctrl->info();
    std::printf("port %d: cntlid %u, model '%s', fw '%s', subnqn %s, mdts %u (%u bytes), "
                "ioccsz %u, io queues %u, anacap 0x%x, nanagrpid %u\n",
                port, i.cntlid, i.model.c_str(), i.firmware.c_str(), i.subnqn.c_str(), i.mdts,
                i.max_transfer, i.ioccsz_bytes, ctrl->io_queues(), i.anacap, i.nanagrpid);
    CHECK(i.subnqn == nqn());
    CHECK(i.cntlid != 0xffff);
    CHECK(ctrl->io_queues() >= 1);
    CHECK(i.nn >= 1);
    CHECK(i.anacap != 0);
    CHECK(i.nanagrpid >= 1);
    // nvmet-tcp reports MDTS 0 (no limit); the queue pair then takes its own 1 MiB limit.
    auto qp = create_io_queue(*ctrl, *host.reactor, 8);
    REQUIRE(qp);
    CHECK((*qp)->max_transfer() > 0);
    if (i.mdts != 0) CHECK((*qp)->max_transfer() <= i.max_transfer);
    // Two controllers of a dynamic nvmet subsystem connected at once have distinct ids.
    if (port == 1) first_cntlid = i.cntlid;
    else CHECK(i.cntlid != first_cntlid);

    auto list = ctrl->active_namespaces();
    REQUIRE(list);
    REQUIRE_FALSE(list->empty());
    CHECK(list->front() == 1);
    auto ns = ctrl->identify_namespace(1);
    REQUIRE(ns);
    std::printf("port %d: nsid 1: %llu blocks of %u bytes, anagrpid %u, ids %s\n", port,
                static_cast<unsigned long long>(ns->size_blocks), ns->block_size, ns->anagrpid,
                ns->id.to_string().c_str());
    CHECK(ns->block_size == 4096);
    CHECK(ns->size_blocks * ns->block_size == 64ull << 20);
    CHECK(ns->capacity_blocks == ns->size_blocks);
    CHECK(ns->anagrpid == 1);
    // nvmet generates a UUID for every namespace; its NGUID stays zero (absent) unless
    // configfs sets device_nguid, which the testbed does not.
    CHECK(ns->id.has_uuid);
    CHECK((ns->id.has_nguid || ns->id.has_uuid));
    if (port == 1) first_id = ns->id;
    else CHECK(ns->id.same_namespace_as(first_id));
    CHECK(ctrl->keep_alive());
    qp->reset();
  }
}

TEST_CASE("verified I/O at every size, digests off and on, QD 1 and QD 128", "[io]") {
  HostRig host;
  const Digest digests[] = {Digest::none, Digest::both};
  uint64_t seq = static_cast<uint64_t>(std::time(nullptr)) << 8;
  for (size_t di = 0; di < 2; ++di) {
    const Digest d = digests[di];
    INFO("digest " << digest_name(d));
    auto ctrl = host.connect(1, d);
    auto qpr = create_io_queue(*ctrl, *host.reactor, 256);
    REQUIRE(qpr);
    QueuePair& qp = **qpr;
    const uint32_t bs = 4096;

    // QD 1: 4 KiB and 16 KiB fit nvmet-tcp's in-capsule data (16 KiB by default), 64 KiB and
    // 1 MiB go through R2T, and max_transfer + 4 KiB is split in two commands (SyncIo splits at
    // max_transfer, 1 MiB when nvmet reports no MDTS, so that size exercises the split).
    {
      SyncIo io(qp, *host.reactor, 1, bs, 20s);
      io.set_window(1);
      const uint32_t split = std::min(qp.max_transfer(), 1u << 20) + 4096;
      test::write_read_each_size(io, bs, kSyncRegion + di * 1024, {4096, 16384, 65536, 1u << 20, split}, seq);
    }

    // QD 128 on one reactor: 4, 16 and 64 KiB interleaved on one socket, write then read.
    {
      constexpr uint32_t kQd = 128;
      const uint32_t blocks[] = {1, 4, 16};
      std::vector<IoRequest> reqs(kQd);
      std::vector<std::vector<uint8_t>> bufs(kQd);
      std::vector<uint64_t> lbas(kQd);
      const uint64_t wseq = ++seq;
      for (uint8_t op : {opcode::kWrite, opcode::kRead}) {
        INFO("QD128 " << (op == opcode::kWrite ? "writes" : "reads"));
        Outcome out;
        for (uint32_t i = 0; i < kQd; ++i) {
          const uint32_t nlb = blocks[i % 3];
          lbas[i] = kAsyncRegion + di * 2048 + i * 16ull;
          bufs[i].assign(size_t{nlb} * bs, 0);
          if (op == opcode::kWrite) test::fill_blocks(bufs[i].data(), bs, lbas[i], nlb, wseq);
          reqs[i] = IoRequest{};
          prep_rw(reqs[i].cmd, op, 1, lbas[i], nlb);
          reqs[i].data = bufs[i].data();
          reqs[i].data_len = nlb * bs;
          reqs[i].on_complete = &count_done;
          reqs[i].user = &out;
          REQUIRE(qp.submit(reqs[i]) == 0);
        }
        CHECK(qp.outstanding() == kQd);
        REQUIRE(host.reactor->run_until([&] { return out.done == int{kQd}; }, 60000ms));
        INFO("first error 0x" << std::hex << out.first_error.raw);
        CHECK(out.failures == 0);
      }
      uint32_t bad = 0;
      for (uint32_t i = 0; i < kQd; ++i)
        bad += test::count_mismatches(bufs[i].data(), bs, lbas[i], blocks[i % 3], wseq);
      CHECK(bad == 0);
      CHECK(qp.outstanding() == 0);
    }
    std::printf("I/O with digest %s: pass\n", digest_name(d));
    qpr->reset();
  }
}

TEST_CASE("the ANA log through each port matches what nvmet was set to", "[ana]") {
  HostRig host;
  for (int port = 1; port <= 2; ++port) {
    const std::string want = env_or(port == 1 ? "CONF_ANA1" : "CONF_ANA2", "optimized");
    INFO("port " << port << ", want " << want);
    auto expected = parse_ana_state(want);
    REQUIRE(expected);
    auto ctrl = host.connect(port);
    auto log = ctrl->ana_log();
    INFO("ana_log: " << (log ? "ok" : log.error().message()));
    REQUIRE(log);
    const AnaGroup* g = log->group(1);
    REQUIRE(g);
    std::printf("port %d: ANA chgcnt %llu, %zu groups, group 1 %s, nsids", port,
                static_cast<unsigned long long>(log->chgcnt), log->groups.size(),
                to_string(g->state));
    for (uint32_t n : g->nsids) std::printf(" %u", n);
    std::printf("\n");
    CHECK(g->state == *expected);
    CHECK(g->nsids == std::vector<uint32_t>{1});
  }
}

TEST_CASE("a Volume over both nvmet ports: verified mixed workload, port 2 may go away",
          "[volume]") {
  const int seconds = std::atoi(env_or("CONF_SECONDS", "8").c_str());
  const bool expect_loss = env_or("CONF_EXPECT_LOSS", "0") == "1";
  const std::string ready = env_or("CONF_READY", "");

  const auto v = test::open_testbed_volume({port_address(1), port_address(2)}, options());
  Volume& vol = *v;
  // 16 loops, each over its own 64 blocks from kVolumeRegion: stamped writes of 4 KiB to 64 KiB
  // (in-capsule and R2T) and verifying reads, resubmitted from the completions.
  constexpr uint32_t kSlots = 16, kSlotBlocks = 64;
  REQUIRE(vol.size_blocks() >= kVolumeRegion + kSlots * kSlotBlocks);
  for (int i = 0; i < 100 && vol.usable_paths() < 2; ++i) std::this_thread::sleep_for(50ms);
  CHECK(vol.usable_paths() == 2);

  test::VerifiedWorkload w(vol, kSlots, kSlotBlocks, kVolumeRegion, 16);
  w.start();
  std::this_thread::sleep_for(300ms);
  if (!ready.empty()) std::ofstream(ready) << "running\n";
  std::this_thread::sleep_for(std::chrono::seconds(seconds));
  REQUIRE(w.finish(60s));

  const VolumeStats st = test::check_two_path_run(vol, w, kSlots);
  if (expect_loss) {
    CHECK(st.paths[1].failovers >= 1);
    CHECK(st.paths[0].failovers == 0);
  }
}
