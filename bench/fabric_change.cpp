// How fast a running volume follows the fabric (a benchmark, not a test: it prints, asserts
// nothing on times): the embedded target, a volume over its port 0 with a read workload running
// and persistent discovery watching port 0; then, round after round, a port added to the target
// (time from Target::add_port to the first completed I/O on the new path: the discovery notice,
// the log read, the connect, the I/O) and removed again (time until the path is gone), beside
// the time a connect to a port takes alone. Also the longest read while the rounds ran, against
// the longest read over the same time with nothing changing: the stall a change costs the paths
// that stay.
//   build/bench/fabric_change [--rounds 20] [--qd 16]
#include <CLI/CLI.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "control/controller_access.hpp"
#include "nvmeof/host.hpp"
#include "nvmeof/target.hpp"
#include "nvmeof/volume.hpp"
#include "reactor/reactor.hpp"

using namespace nvmeof;
using namespace std::chrono_literals;

namespace {

using Clock = std::chrono::steady_clock;

double ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// Reads in a loop on every slot; records the longest one since the last take_longest().
class ReadLoop {
 public:
  ReadLoop(Volume& v, unsigned qd) : v_(v), slots_(qd) {
    for (size_t i = 0; i < slots_.size(); ++i) {
      auto& s = slots_[i];
      s.owner = this;
      s.buf.resize(v.block_size());
      s.io.op = IoOp::read;
      s.io.nlb = 1;
      s.io.slba = i * 7;
      s.io.buf = s.buf.data();
      s.io.user = &s;
      s.io.done = &ReadLoop::done;
    }
  }
  void start() {
    for (auto& s : slots_) submit(s);
  }
  void stop() {
    stop_.store(true);
    while (inflight_.load() != 0) std::this_thread::sleep_for(1ms);
  }
  uint64_t take_longest_ns() { return longest_ns_.exchange(0); }
  uint64_t errors() const { return errors_.load(); }

 private:
  struct Slot {
    ReadLoop* owner = nullptr;
    VolumeIo io;
    std::vector<uint8_t> buf;
    uint64_t t0 = 0;
  };
  void submit(Slot& s) {
    s.t0 = Reactor::clock_ns();
    inflight_.fetch_add(1);
    if (v_.submit(s.io) != 0) {
      inflight_.fetch_sub(1);
      errors_.fetch_add(1);
    }
  }
  static void done(VolumeIo& io, NvmeStatus st) noexcept {
    auto& s = *static_cast<Slot*>(io.user);
    ReadLoop& l = *s.owner;
    const uint64_t took = Reactor::clock_ns() - s.t0;
    uint64_t seen = l.longest_ns_.load(std::memory_order_relaxed);
    while (took > seen && !l.longest_ns_.compare_exchange_weak(seen, took)) {
    }
    if (!st.is_success()) l.errors_.fetch_add(1);
    l.inflight_.fetch_sub(1);
    if (l.stop_.load()) return;
    s.io.slba = (s.io.slba + 97) % 4096;
    l.submit(s);
  }
  Volume& v_;
  std::vector<Slot> slots_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> inflight_{0}, longest_ns_{0}, errors_{0};
};

const PathStats* path_at(const VolumeStats& s, uint16_t port) {
  for (const auto& p : s.paths)
    if (p.trsvcid == std::to_string(port)) return &p;
  return nullptr;
}

template <class F>
bool wait_for(F&& f, std::chrono::milliseconds bound = 20s) {
  const auto until = Clock::now() + bound;
  while (!f()) {
    if (Clock::now() > until) return false;
    std::this_thread::sleep_for(200us);
  }
  return true;
}

void print_summary(const char* what, std::vector<double> v) {
  std::sort(v.begin(), v.end());
  std::printf("%-38s p50 %7.2f ms   max %7.2f ms   (%zu runs)\n", what, v[v.size() / 2], v.back(), v.size());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fabric_change: how fast a running volume follows ports added and removed at the target"};
  unsigned rounds = 20, qd = 16;
  app.add_option("--rounds", rounds, "ports added and removed")->check(CLI::Range(1u, 1000u));
  app.add_option("--qd", qd, "reads in flight")->check(CLI::Range(1u, 256u));
  CLI11_PARSE(app, argc, argv);

  TargetOptions to;
  to.ports.assign(1, TargetPort{});
  to.ports[0].trsvcid = "0";
  to.subsystems[0].namespaces[0].size_bytes = 16 << 20;
  auto target = Target::start(to);
  if (!target) {
    std::fprintf(stderr, "fabric_change: target: %s\n", target.message().c_str());
    return 1;
  }
  Target& t = **target;
  auto host = Host::create({});
  if (!host) return 1;
  VolumeOptions vo;
  TransportAddress a0;
  a0.trsvcid = std::to_string(t.port_number(0));
  vo.paths = {a0};
  vo.connect.subnqn = to.subsystems[0].nqn;
  auto vol = Volume::open(*host, vo);
  if (!vol) {
    std::fprintf(stderr, "fabric_change: volume: %s\n", vol.message().c_str());
    return 1;
  }
  Volume& v = **vol;
  if (!(*host)->add_discovery(a0)) return 1;
  ReadLoop loop(v, qd);
  loop.start();

  // The same length of time with nothing changing: the longest read then.
  std::this_thread::sleep_for(500ms);
  (void)loop.take_longest_ns();
  const auto calm0 = Clock::now();
  std::vector<double> to_first_io, to_gone;
  TargetPort np;
  np.trsvcid = "0";
  for (unsigned r = 0; r < rounds; ++r) {
    const auto t0 = Clock::now();
    auto added = t.add_port(np);
    if (!added) {
      std::fprintf(stderr, "fabric_change: add_port: %s\n", added.message().c_str());
      return 1;
    }
    const uint16_t port = t.port_number(*added);
    if (!wait_for([&] {
          const VolumeStats s = v.stats();
          const PathStats* p = path_at(s, port);
          return p && p->ios > 0;
        })) {
      std::fprintf(stderr, "fabric_change: round %u: the new port never carried I/O\n", r);
      return 1;
    }
    to_first_io.push_back(ms(Clock::now() - t0));
    const auto t1 = Clock::now();
    (void)t.remove_port(*added);
    if (!wait_for([&] { return path_at(v.stats(), port) == nullptr; })) {
      std::fprintf(stderr, "fabric_change: round %u: the removed port stayed a path\n", r);
      return 1;
    }
    to_gone.push_back(ms(Clock::now() - t1));
  }
  const auto changing = Clock::now() - calm0;
  const double longest_changing = static_cast<double>(loop.take_longest_ns()) / 1e6;
  std::this_thread::sleep_for(changing);
  const double longest_calm = static_cast<double>(loop.take_longest_ns()) / 1e6;
  loop.stop();

  std::vector<double> connect;
  auto cp = ControlPlane::create();
  if (!cp) return 1;
  for (unsigned r = 0; r < rounds; ++r) {
    ConnectOptions co;
    co.subnqn = to.subsystems[0].nqn;
    const auto t0 = Clock::now();
    auto c = Controller::connect(**cp, a0, co);
    connect.push_back(ms(Clock::now() - t0));
    if (c) (*c)->disconnect();
  }

  print_summary("port added -> first I/O on it", to_first_io);
  print_summary("port removed -> path gone", to_gone);
  print_summary("a connect alone", connect);
  std::printf("%-38s %.2f ms while ports came and went, %.2f ms over as long with nothing changing\n",
              "longest read on the staying path", longest_changing, longest_calm);
  std::printf("read errors: %llu\n", static_cast<unsigned long long>(loop.errors()));
  return loop.errors() == 0 ? 0 : 1;
}
