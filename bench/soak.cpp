// nvmeof-soak: a verified mixed workload (nvmeof-bench's engine) over three paths of an embedded
// target while random faults hit random paths every 0.2-2 s: connection resets, partitions, ANA
// flips (inaccessible, change), slow paths, paths failing every command, and now and then all
// paths down at once and back. At the end every path is healed, the whole working set is read
// back and checked, and the report gives errors, mismatches, the longest read and the longest
// write, the longest completion gap, and the process RSS and open descriptors over the run.
// Run by bench/soak.sh; exits 1 on errors, mismatches or I/O that never finished.
#include <dirent.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <thread>

#include "bench/workload.hpp"
#include "nvmeof/target.hpp"
#include "nvmeof/volume.hpp"

using namespace nvmeof;
using namespace nvmeof::bench;

namespace {

constexpr char kNqn[] = "nqn.2024-01.io.nvmeof:soak";

enum class Chaos : uint8_t { reset, partition, ana_inaccessible, ana_change, slow, fail_status, all_down };
constexpr size_t kChaosKinds = 7;
constexpr const char* kChaosNames[kChaosKinds] = {"reset",        "partition", "ana_inaccessible",
                                                  "ana_change",   "slow",      "fail_status",
                                                  "all_down"};

uint64_t rss_kib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6));
  return 0;
}

unsigned open_fds() {
  unsigned n = 0;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (const dirent* e = ::readdir(d))
      if (e->d_name[0] != '.') ++n;
    ::closedir(d);
  }
  return n > 0 ? n - 1 : 0;  // the directory's own descriptor
}

struct Sample {
  double at_s = 0;
  uint64_t rss_kib = 0;
  unsigned fds = 0;
};

// Picks and undoes the faults. Main thread only (the target's fault calls are thread-safe).
class ChaosDriver {
 public:
  ChaosDriver(Target& t, size_t paths, uint64_t seed) : t_(t), paths_(paths), rng_(seed), until_(paths, 0) {}

  void tick(uint64_t now) {
    for (size_t p = 0; p < paths_; ++p)
      if (until_[p] && now >= until_[p]) heal(p);
    if (now < next_) return;
    next_ = now + ms(200, 2000);
    if (all_down_) return;  // its heal brings every path back first
    // One fault in ten takes every path down; the others hit a path that is still serving, so
    // that one path always stays up outside those windows.
    std::vector<size_t> healthy;
    for (size_t p = 0; p < paths_; ++p)
      if (!until_[p]) healthy.push_back(p);
    if (healthy.empty()) return;
    if (std::uniform_int_distribution<int>(0, 9)(rng_) == 0) {
      for (size_t p = 0; p < paths_; ++p) {
        heal(p);
        t_.inject(p, FaultKind::partition);
      }
      const uint64_t back = now + ms(200, 1500);
      std::fill(until_.begin(), until_.end(), back);
      all_down_ = true;
      ++counts_[static_cast<size_t>(Chaos::all_down)];
      next_ = std::max(next_, back + ms(200, 1000));
      return;
    }
    if (healthy.size() == 1) return;  // keep the last path serving
    const size_t p = healthy[std::uniform_int_distribution<size_t>(0, healthy.size() - 1)(rng_)];
    const auto kind = static_cast<Chaos>(std::uniform_int_distribution<int>(0, 5)(rng_));
    ++counts_[static_cast<size_t>(kind)];
    switch (kind) {
      case Chaos::reset: t_.inject(p, FaultKind::reset); return;  // acts once, nothing to undo
      case Chaos::partition: t_.inject(p, FaultKind::partition); break;
      case Chaos::ana_inaccessible: t_.set_ana_state(p, AnaState::inaccessible); break;
      case Chaos::ana_change: t_.set_ana_state(p, AnaState::change); break;
      case Chaos::slow:
        t_.set_latency(p, std::chrono::microseconds(std::uniform_int_distribution<int>(2000, 30000)(rng_)));
        break;
      case Chaos::fail_status: t_.fail_commands(p, status::kInternalError); break;
      case Chaos::all_down: break;
    }
    until_[p] = now + ms(200, 2000);
  }

  void heal_all() {
    for (size_t p = 0; p < paths_; ++p) heal(p);
  }
  const std::array<uint64_t, kChaosKinds>& counts() const { return counts_; }

 private:
  uint64_t ms(int lo, int hi) {
    return static_cast<uint64_t>(std::uniform_int_distribution<int>(lo, hi)(rng_)) * 1'000'000ull;
  }
  void heal(size_t p) {
    t_.clear_faults(p);
    t_.set_ana_state(p, AnaState::optimized);
    until_[p] = 0;
    all_down_ = std::any_of(until_.begin(), until_.end(), [](uint64_t u) { return u != 0; }) && all_down_;
  }

  Target& t_;
  size_t paths_;
  std::mt19937_64 rng_;
  std::vector<uint64_t> until_;  // per path: when its fault ends; 0: healthy
  uint64_t next_ = 0;
  bool all_down_ = false;
  std::array<uint64_t, kChaosKinds> counts_{};
};

double ms_of(uint64_t ns) { return static_cast<double>(ns) / 1e6; }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"nvmeof-soak: a verified mixed workload over three paths under random faults"};
  double minutes = 1;
  unsigned paths = 3, iodepth = 32, rwmixread = 70;
  uint32_t bs = 4096;
  uint64_t seed = 1, size_mib = 64;
  app.add_option("--minutes", minutes, "how long the faults run")->check(CLI::Range(0.05, 1440.0));
  app.add_option("--paths", paths, "ports of the embedded target")->check(CLI::Range(2u, 8u));
  app.add_option("--iodepth", iodepth, "I/Os in flight")->check(CLI::Range(1u, 1024u));
  app.add_option("--bs", bs, "bytes per I/O, a multiple of 4096")->check(CLI::Range(4096u, 1u << 20));
  app.add_option("--rwmixread", rwmixread, "percent of reads")->check(CLI::Range(0u, 100u));
  app.add_option("--size-mib", size_mib, "working set")->check(CLI::Range(1ull, 1024ull));
  app.add_option("--seed", seed, "seed of the fault schedule and the workload");
  CLI11_PARSE(app, argc, argv);
  if (bs % 4096 != 0) {
    std::fprintf(stderr, "nvmeof-soak: --bs must be a multiple of 4096\n");
    return 2;
  }

  const Sample at_launch{0, rss_kib(), open_fds()};
  TargetOptions to;
  to.ports.assign(paths, TargetPort{"127.0.0.1", "0", AnaState::optimized});
  to.subsystems[0].nqn = kNqn;
  to.subsystems[0].namespaces[0].size_bytes = size_mib << 20;
  auto target = Target::start(to);
  if (!target) {
    std::fprintf(stderr, "nvmeof-soak: cannot start the embedded target: %s\n", target.error().message().c_str());
    return 1;
  }
  VolumeOptions vo;
  for (size_t i = 0; i < paths; ++i) vo.paths.push_back(*TransportAddress::parse((*target)->port_address(i)));
  vo.connect.subnqn = kNqn;
  vo.connect.kato_ms = kKatoShortest;
  auto vol = Volume::open(vo);
  if (!vol) {
    std::fprintf(stderr, "nvmeof-soak: cannot open the volume: %s\n", vol.error().message().c_str());
    return 1;
  }
  Volume& v = **vol;

  WorkloadConfig cfg;
  cfg.rw = RwMode::randrw;
  cfg.rwmixread = rwmixread;
  cfg.block_size = v.block_size();
  cfg.unit_blocks = bs / v.block_size();
  cfg.units = (size_mib << 20) / bs;
  cfg.iodepth = iodepth;
  cfg.verify = true;
  cfg.seed = seed;
  cfg.run_id = mix64(monotonic_ns() ^ seed);
  bool drained = true;
  PhaseTotals prefill, timed, final_check;
  std::vector<Sample> samples;
  ChaosDriver chaos(**target, paths, seed);
  {
    Workload work(v, cfg);
    std::fprintf(stderr, "nvmeof-soak: prefilling %llu MiB\n", static_cast<unsigned long long>(size_mib));
    work.start(Phase::prefill);
    drained = work.wait_idle(std::chrono::minutes(10));
    prefill = work.totals(Phase::prefill);

    const uint64_t t0 = monotonic_ns();
    const uint64_t end = t0 + static_cast<uint64_t>(minutes * 60e9);
    samples.push_back({0, rss_kib(), open_fds()});
    std::fprintf(stderr, "nvmeof-soak: %.1f min of randrw (%u%% reads, %u B, QD %u) under faults on %u paths\n",
                 minutes, rwmixread, bs, iodepth, paths);
    if (drained) {
      work.start(Phase::timed);
      work.mark_fault(t0);  // the longest completion gap over the whole run
      uint64_t next_sample = t0 + 10'000'000'000ull;
      for (uint64_t now = t0; now < end; now = monotonic_ns()) {
        chaos.tick(now);
        work.service();
        if (now >= next_sample) {
          samples.push_back({static_cast<double>(now - t0) / 1e9, rss_kib(), open_fds()});
          next_sample += 10'000'000'000ull;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      chaos.heal_all();
      work.request_stop();
      const uint64_t give_up = monotonic_ns() + 60'000'000'000ull;
      while (work.active() != 0 && monotonic_ns() < give_up) {
        work.service();
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      drained = work.wait_idle(std::chrono::milliseconds(0));
      timed = work.totals(Phase::timed);
    }
    // Every path back before the last figures: their connections are part of the steady state.
    const uint64_t wait_paths = monotonic_ns() + 30'000'000'000ull;
    for (;;) {
      const VolumeStats st = v.stats();
      const bool all_live = std::all_of(st.paths.begin(), st.paths.end(),
                                        [](const PathStats& p) { return p.state == PathState::live; });
      if (all_live || monotonic_ns() > wait_paths) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (drained) {
      work.start(Phase::final_check);
      drained = work.wait_idle(std::chrono::minutes(10));
      final_check = work.totals(Phase::final_check);
    }
    samples.push_back({static_cast<double>(monotonic_ns() - t0) / 1e9, rss_kib(), open_fds()});
  }
  const VolumeStats st = v.stats();
  vol->reset();
  (*target)->stop();

  const uint64_t errors = prefill.errors + timed.errors + final_check.errors;
  const uint64_t mismatches = prefill.mismatches + timed.mismatches + final_check.mismatches;
  std::printf("soak: %.1f min, %u paths, randrw %u%% reads, %u B, QD %u, seed %llu\n", minutes, paths,
              rwmixread, bs, iodepth, static_cast<unsigned long long>(seed));
  std::printf("faults:");
  for (size_t k = 0; k < kChaosKinds; ++k)
    std::printf(" %s %llu", kChaosNames[k], static_cast<unsigned long long>(chaos.counts()[k]));
  std::printf("\n");
  const double secs = timed.seconds();
  std::printf("I/O: %llu reads, %llu writes (%.0f IOPS), %llu blocks verified during the run, %llu at the end\n",
              static_cast<unsigned long long>(timed.read.ios), static_cast<unsigned long long>(timed.write.ios),
              secs > 0 ? static_cast<double>(timed.read.ios + timed.write.ios) / secs : 0.0,
              static_cast<unsigned long long>(timed.verified_blocks),
              static_cast<unsigned long long>(final_check.verified_blocks));
  std::printf("errors: %llu, mismatches: %llu, drained: %s\n", static_cast<unsigned long long>(errors),
              static_cast<unsigned long long>(mismatches), drained ? "yes" : "NO");
  for (const ErrorCount& e : timed.error_counts)
    std::printf("  error status 0x%04x submit rc %d: %llu\n", e.status, e.submit_rc,
                static_cast<unsigned long long>(e.count));
  for (const Mismatch& m : timed.mismatch_examples)
    std::printf("  mismatch at LBA %llu\n", static_cast<unsigned long long>(m.lba));
  for (const Mismatch& m : final_check.mismatch_examples)
    std::printf("  mismatch at LBA %llu (final check)\n", static_cast<unsigned long long>(m.lba));
  std::printf("longest read %.1f ms (p99 %.2f ms), longest write %.1f ms (p99 %.2f ms), longest completion gap %.1f ms\n",
              ms_of(timed.read.latency.max()), ms_of(timed.read.latency.percentile(99)),
              ms_of(timed.write.latency.max()), ms_of(timed.write.latency.percentile(99)),
              ms_of(timed.max_gap_after_fault_ns));
  uint64_t rss_min = ~0ull, rss_max = 0;
  unsigned fd_min = ~0u, fd_max = 0;
  for (const Sample& s : samples) {
    rss_min = std::min(rss_min, s.rss_kib);
    rss_max = std::max(rss_max, s.rss_kib);
    fd_min = std::min(fd_min, s.fds);
    fd_max = std::max(fd_max, s.fds);
  }
  std::printf("RSS KiB: launch %llu, start %llu, end %llu (min %llu, max %llu over %zu samples)\n",
              static_cast<unsigned long long>(at_launch.rss_kib),
              static_cast<unsigned long long>(samples.front().rss_kib),
              static_cast<unsigned long long>(samples.back().rss_kib), static_cast<unsigned long long>(rss_min),
              static_cast<unsigned long long>(rss_max), samples.size());
  std::printf("descriptors: launch %u, start %u, end %u (min %u, max %u)\n", at_launch.fds, samples.front().fds,
              samples.back().fds, fd_min, fd_max);
  std::printf("paths:");
  for (const PathStats& p : st.paths)
    std::printf(" [%d ios %llu failovers %llu reconnects %llu]", p.index, static_cast<unsigned long long>(p.ios),
                static_cast<unsigned long long>(p.failovers), static_cast<unsigned long long>(p.reconnects));
  std::printf("\nresult: %s\n", errors || mismatches || !drained ? "FAILED" : "ok");
  return errors || mismatches || !drained ? 1 : 0;
}
