// NUMA placement against Linux nvmet in the two-node testbed guest, run by numa_test.sh, which
// puts one nvmet port on an address of eth0 (node 0) and one on eth1 (node 1), reserves huge
// pages, and takes the node-1 port away when this program touches NUMA_READY.
//
// One Volume, two reactors, numa placement and selector, two TCP paths bound to eth0 and eth1:
//  * the plan puts reactor 0 on node 0 and reactor 1 on node 1, paths on the NICs' nodes;
//  * each reactor thread is pinned to its CPU, and memory it allocates lands on its node;
//  * every mapping the volume bound to a node (numa_maps "prefer:N") has its pages on node N;
//  * each reactor sends its I/O to its own node's path while both are optimized, and to the
//    other one once its own is gone; a non-reactor thread's I/O runs on its node's reactor.
// Environment: NQN, NUMA_ADDR0/NUMA_IF0 (node 0), NUMA_ADDR1/NUMA_IF1 (node 1), NUMA_READY.
#include <catch2/catch.hpp>

#include <sched.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>
#include <vector>

#include "core/node_memory.hpp"
#include "nvmeof/topology.hpp"
#include "nvmeof/volume.hpp"

using namespace nvmeof;
using namespace std::chrono_literals;

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

constexpr uint32_t kStampBlocks = 256;  // the verified region: LBA 0..255

// What a completion saw of the thread it ran on.
struct Seen {
  std::atomic<int> cpu{-1};
  std::atomic<int> allowed{-1};     // the only CPU in its affinity mask, -2 when several
  std::atomic<int> page_node{-100}; // where a buffer it allocated landed
  std::atomic<int> mem_node{-100};  // the thread's memory node
  std::atomic<bool> done{false};
};

void observe(VolumeIo& io, NvmeStatus) noexcept {
  auto* s = static_cast<Seen*>(io.user);
  s->cpu = sched_getcpu();
  cpu_set_t set;
  CPU_ZERO(&set);
  sched_getaffinity(0, sizeof set, &set);
  s->allowed = CPU_COUNT(&set) == 1 ? [&] {
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) return c;
    return -1;
  }() : -2;
  s->mem_node = detail::thread_memory_node();
  try {
    detail::NodeBuffer b(64 << 10, detail::thread_memory_node());
    const auto nodes = detail::page_nodes(b.data(), b.size());
    int n = nodes.empty() ? -1 : nodes[0];
    for (int x : nodes)
      if (x != n) n = -3;
    s->page_node = n;
  } catch (...) {
  }
  s->done.store(true, std::memory_order_release);
}

void wait_done(const Seen& s) {
  for (int i = 0; i < 3000 && !s.done.load(std::memory_order_acquire); ++i) std::this_thread::sleep_for(10ms);
  REQUIRE(s.done.load());
}

// A closed loop of `depth` verified reads of the stamped region, all submitted to one reactor.
struct Loop {
  struct Slot {
    VolumeIo io;
    Loop* loop = nullptr;
    uint32_t lba = 0;
    alignas(4096) uint8_t buf[4096];
  };
  Volume& vol;
  unsigned reactor;
  std::vector<std::unique_ptr<Slot>> slots;
  std::atomic<bool> stop{false};
  std::atomic<unsigned> active{0};
  std::atomic<uint64_t> ios{0}, errors{0}, mismatches{0};

  Loop(Volume& v, unsigned r, unsigned depth) : vol(v), reactor(r) {
    for (unsigned i = 0; i < depth; ++i) {
      auto s = std::make_unique<Slot>();
      s->loop = this;
      s->lba = i % kStampBlocks;
      slots.push_back(std::move(s));
    }
  }
  static void done(VolumeIo& io, NvmeStatus st) noexcept {
    auto* s = static_cast<Slot*>(io.user);
    Loop& l = *s->loop;
    if (!st.is_success()) l.errors.fetch_add(1);
    else if (std::memcmp(s->buf, &s->lba, sizeof s->lba) != 0) l.mismatches.fetch_add(1);
    l.ios.fetch_add(1, std::memory_order_relaxed);
    if (l.stop.load(std::memory_order_relaxed)) {
      l.active.fetch_sub(1);
      return;
    }
    s->lba = (s->lba + 7) % kStampBlocks;
    l.issue(*s);
  }
  void issue(Slot& s) noexcept {
    s.io = VolumeIo{};
    s.io.op = IoOp::read;
    s.io.slba = s.lba;
    s.io.nlb = 4096 / vol.block_size();
    s.io.buf = s.buf;
    s.io.done = &Loop::done;
    s.io.user = &s;
    if (vol.submit(s.io, reactor) != 0) active.fetch_sub(1);
  }
  void run(std::chrono::milliseconds d) {
    stop = false;
    for (auto& s : slots) {
      active.fetch_add(1);
      issue(*s);
    }
    std::this_thread::sleep_for(d);
    stop = true;
    for (int i = 0; i < 3000 && active.load() != 0; ++i) std::this_thread::sleep_for(10ms);
    REQUIRE(active.load() == 0);
  }
};

std::vector<uint64_t> path_ios(const Volume& v) {
  std::vector<uint64_t> n;
  for (const auto& p : v.stats().paths) n.push_back(p.ios);
  return n;
}

// I/Os per path of one reactor running alone for `d`.
std::vector<uint64_t> split_of(Volume& v, unsigned reactor, std::chrono::milliseconds d) {
  const auto before = path_ios(v);
  Loop l(v, reactor, 8);
  l.run(d);
  CHECK(l.errors.load() == 0);
  CHECK(l.mismatches.load() == 0);
  CHECK(l.ios.load() > 0);
  auto after = path_ios(v);
  for (size_t i = 0; i < after.size(); ++i) after[i] -= before[i];
  return after;
}

// numa_maps lines whose policy is prefer:N: pages per node, summed per preferred node.
std::map<int, std::map<int, long>> preferred_pages() {
  std::map<int, std::map<int, long>> out;
  std::ifstream f("/proc/self/numa_maps");
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream in(line);
    std::string addr, policy, word;
    in >> addr >> policy;
    if (policy.rfind("prefer:", 0) != 0) continue;
    const int want = std::atoi(policy.c_str() + 7);
    while (in >> word)
      if (word.size() > 2 && word[0] == 'N' && word.find('=') != std::string::npos)
        out[want][std::atoi(word.c_str() + 1)] += std::atol(word.c_str() + word.find('=') + 1);
  }
  return out;
}

}  // namespace

TEST_CASE("numa placement against nvmet on two nodes", "[numa]") {
  auto topo = Topology::read();
  REQUIRE(topo);
  if (topo->nodes().size() < 2) {
    WARN("one NUMA node only: nothing to test");
    std::exit(77);
  }
  VolumeOptions vo;
  for (int i = 0; i < 2; ++i) {
    auto a = TransportAddress::parse(env(i == 0 ? "NUMA_ADDR0" : "NUMA_ADDR1"));
    REQUIRE(a);
    a->host_iface = env(i == 0 ? "NUMA_IF0" : "NUMA_IF1");
    vo.paths.push_back(*a);
  }
  vo.connect.subnqn = env("NQN");
  vo.connect.connect_timeout = 10s;
  vo.connect.admin_timeout = 10s;
  vo.reactors = 2;
  vo.selector = SelectorKind::numa;
  vo.placement = PlacementMode::numa;
  vo.no_path_timeout = 20s;
  vo.io_deadline = 2000ms;  // TCG: everything is slow; a failover here comes from the port loss
  auto opened = Volume::open(vo);
  REQUIRE(opened);
  Volume& vol = **opened;
  const Placement& plan = vol.placement();
  std::printf("%s", to_text(plan).c_str());

  {
    REQUIRE(plan.paths.size() == 2);
    CHECK(plan.paths[0].node == 0);
    CHECK(plan.paths[1].node == 1);
    REQUIRE(plan.reactors.size() == 2);
    CHECK(plan.reactors[0].node == 0);
    CHECK(plan.reactors[1].node == 1);
    CHECK(plan.reactors[0].distances[0] < plan.reactors[0].distances[1]);
    CHECK(plan.reactors[1].distances[1] < plan.reactors[1].distances[0]);
  }

  // Stamp the region the loops read.
  {
    std::vector<uint8_t> buf(4096);
    for (uint32_t lba = 0; lba < kStampBlocks; ++lba) {
      std::memcpy(buf.data(), &lba, sizeof lba);
      const NvmeStatus st = [&] {
        std::atomic<bool> done{false};
        NvmeStatus out{};
        struct Ctx {
          std::atomic<bool>* done;
          NvmeStatus* out;
        } ctx{&done, &out};
        VolumeIo io;
        io.op = IoOp::write;
        io.slba = lba;
        io.nlb = 4096 / vol.block_size();
        io.buf = buf.data();
        io.user = &ctx;
        io.done = [](VolumeIo& i, NvmeStatus s) noexcept {
          auto* c = static_cast<Ctx*>(i.user);
          *c->out = s;
          c->done->store(true, std::memory_order_release);
        };
        REQUIRE(vol.submit(io) == 0);
        while (!done.load(std::memory_order_acquire)) std::this_thread::sleep_for(1ms);
        return out;
      }();
      REQUIRE(st.is_success());
    }
  }

  // Each reactor thread: pinned to its CPU, its memory on its node.
  for (unsigned r = 0; r < 2; ++r) {
    Seen seen;
    VolumeIo io;
    io.op = IoOp::flush;
    io.done = &observe;
    io.user = &seen;
    REQUIRE(vol.submit(io, r) == 0);
    wait_done(seen);
    INFO("reactor " << r);
    CHECK(seen.allowed.load() == plan.reactors[r].cpu);
    CHECK(seen.cpu.load() == plan.reactors[r].cpu);
    CHECK(seen.mem_node.load() == plan.reactors[r].node);
    CHECK(seen.page_node.load() == plan.reactors[r].node);
  }
  // Every mapping bound to a node (request pools, queue-pair slots and staging buffers) sits
  // there: numa_maps counts its pages per node.
  {
    const auto pages = preferred_pages();
    for (int node = 0; node < 2; ++node) {
      INFO("mappings preferring node " << node);
      REQUIRE(pages.count(node) == 1);
      long here = 0, elsewhere = 0;
      for (const auto& [n, count] : pages.at(node)) (n == node ? here : elsewhere) += count;
      std::printf("numa_maps: prefer:%d -> %ld pages on node %d, %ld elsewhere\n", node, here, node, elsewhere);
      CHECK(here > 0);
      CHECK(elsewhere == 0);
    }
  }

  // A thread that is not a reactor: its I/O runs on its node's reactor. (Catch2 assertions stay
  // on this thread.)
  for (unsigned r = 0; r < 2; ++r) {
    Seen seen;
    int rc = -1;
    bool pinned = false;
    std::thread t([&] {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(plan.reactors[r].cpu, &set);
      pinned = sched_setaffinity(0, sizeof set, &set) == 0;
      VolumeIo io;
      io.op = IoOp::flush;
      io.done = &observe;
      io.user = &seen;
      rc = vol.submit(io);
      for (int i = 0; i < 3000 && !seen.done.load(std::memory_order_acquire); ++i)
        std::this_thread::sleep_for(10ms);
    });
    t.join();
    INFO("submitter pinned to cpu " << plan.reactors[r].cpu);
    REQUIRE(pinned);
    REQUIRE(rc == 0);
    REQUIRE(seen.done.load());
    CHECK(seen.cpu.load() == plan.reactors[r].cpu);
  }

  // Both optimized: each reactor keeps to its own node's path.
  for (unsigned r = 0; r < 2; ++r) {
    const auto split = split_of(vol, r, 1500ms);
    std::printf("both paths: reactor %u sent %llu I/Os to path 0, %llu to path 1\n", r,
                static_cast<unsigned long long>(split[0]), static_cast<unsigned long long>(split[1]));
    CHECK(split[r] > 0);
    CHECK(split[1 - r] == 0);
  }

  // The node-1 path goes away: reactor 1 turns to node 0's path; reactor 0 carries on.
  std::ofstream(env("NUMA_READY")) << "ready\n";
  for (int i = 0; i < 3000 && vol.usable_paths() != 1; ++i) std::this_thread::sleep_for(10ms);
  REQUIRE(vol.usable_paths() == 1);
  for (unsigned r : {1u, 0u}) {
    const auto split = split_of(vol, r, 1500ms);
    std::printf("node-1 path gone: reactor %u sent %llu I/Os to path 0, %llu to path 1\n", r,
                static_cast<unsigned long long>(split[0]), static_cast<unsigned long long>(split[1]));
    CHECK(split[0] > 0);
    CHECK(split[1] == 0);
  }
}
