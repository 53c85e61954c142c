// nvmeof-soak: a verified mixed workload (nvmeof-bench's engine) over three paths of an embedded
// target while random faults hit random paths every 0.2-2 s (--fault-min-ms/--fault-max-ms):
// connection resets, partitions, ANA flips (inaccessible, change), slow paths, paths failing
// every command, and now and then all paths down at once and back. Outside those all-down windows
// at least one path the volume reports live and usable is never faulted. At the end every path is
// healed, the whole working set is read back and checked, and the report gives errors,
// mismatches, the longest read inside and outside the all-down windows (the goal figure is the
// one outside), a histogram of slow reads, the process RSS (and the heap) and open descriptors
// over the run with the load average beside them.
// Every wait has a timeout; one that expires names what it waited for and lists what was still in
// flight. Run by bench/soak.sh; exits 1 on errors, mismatches or I/O that never finished.
#include <dirent.h>
#include <malloc.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
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

double load_1min() {
  std::ifstream f("/proc/loadavg");
  double l = 0;
  f >> l;
  return l;
}

struct Sample {
  double at_s = 0;
  uint64_t rss_kib = 0;
  uint64_t heap_kib = 0;   ///< malloc: bytes in use (all arenas and mmapped chunks)
  uint64_t arena_kib = 0;  ///< malloc: bytes it holds from the system
  unsigned fds = 0;
  double load = 0;
};

Sample sample(double at_s) {
  const struct mallinfo2 mi = ::mallinfo2();
  return {at_s, rss_kib(), (mi.uordblks + mi.hblkhd) / 1024, (mi.arena + mi.hblkhd) / 1024, open_fds(), load_1min()};
}

void dump_malloc_info(const std::string& path) {
  if (FILE* f = std::fopen(path.c_str(), "w")) {
    ::malloc_info(0, f);
    std::fclose(f);
  } else {
    std::fprintf(stderr, "nvmeof-soak: cannot write %s\n", path.c_str());
  }
}

double ms_of(uint64_t ns) { return static_cast<double>(ns) / 1e6; }

bool usable(const PathStats& p) {
  return p.state == PathState::live && (p.ana_state == AnaState::optimized || p.ana_state == AnaState::non_optimized);
}

// Picks and undoes the faults. Main thread only (the target's fault calls are thread-safe).
class ChaosDriver {
 public:
  ChaosDriver(Target& t, Volume& v, Workload& w, size_t paths, uint64_t seed, int min_ms, int max_ms)
      : t_(t), v_(v), w_(w), paths_(paths), rng_(seed), min_ms_(min_ms), max_ms_(max_ms), until_(paths, 0) {}

  void tick(uint64_t now) {
    // An all-down window lasts from the faults until a path is usable again after their heal.
    if (window_open_ && !all_down_ && v_.usable_paths() > 0) close_window(now);
    for (size_t p = 0; p < paths_; ++p)
      if (until_[p] && now >= until_[p]) heal(p);
    if (all_down_ && std::none_of(until_.begin(), until_.end(), [](uint64_t u) { return u != 0; })) {
      all_down_ = false;
      healed_ns_ = now;
    }
    if (now < next_) return;
    next_ = now + ms(min_ms_, max_ms_);
    if (all_down_ || window_open_) return;  // nothing new until a path is back
    // One fault in ten takes every path down; the others hit a path that is still serving, and
    // never the last one that is: outside those windows one path always serves.
    if (std::uniform_int_distribution<int>(0, 9)(rng_) == 0) {
      for (size_t p = 0; p < paths_; ++p) {
        heal(p);
        t_.inject(p, FaultKind::partition);
      }
      const uint64_t back = now + ms(200, 1500);
      std::fill(until_.begin(), until_.end(), back);
      all_down_ = true;
      window_open_ = true;
      window_start_ns_ = now;
      w_.set_window(true);
      ++counts_[static_cast<size_t>(Chaos::all_down)];
      next_ = std::max(next_, back + ms(min_ms_, std::max(min_ms_, max_ms_ / 2)));
      return;
    }
    const VolumeStats st = v_.stats();
    std::vector<size_t> healthy;
    for (size_t p = 0; p < paths_; ++p)
      if (!until_[p] && p < st.paths.size() && usable(st.paths[p])) healthy.push_back(p);
    if (healthy.size() <= 1) return;  // keep the last path serving
    const size_t p = healthy[std::uniform_int_distribution<size_t>(0, healthy.size() - 1)(rng_)];
    const auto kind = static_cast<Chaos>(std::uniform_int_distribution<int>(0, 5)(rng_));
    ++counts_[static_cast<size_t>(kind)];
    switch (kind) {
      case Chaos::reset:
        t_.inject(p, FaultKind::reset);  // acts once; the path counts as faulted until it is back
        until_[p] = now + 1;
        return;
      case Chaos::partition: t_.inject(p, FaultKind::partition); break;
      case Chaos::ana_inaccessible: t_.set_ana_state(p, AnaState::inaccessible); break;
      case Chaos::ana_change: t_.set_ana_state(p, AnaState::change); break;
      case Chaos::slow:
        t_.set_latency(p, std::chrono::microseconds(std::uniform_int_distribution<int>(2000, 30000)(rng_)));
        break;
      case Chaos::fail_status: t_.fail_commands(p, status::kInternalError); break;
      case Chaos::all_down: break;
    }
    until_[p] = now + ms(min_ms_, max_ms_);
  }

  void heal_all(uint64_t now) {
    for (size_t p = 0; p < paths_; ++p) heal(p);
    all_down_ = false;
    if (window_open_) healed_ns_ = now;
  }
  /// After heal_all(): closes an open window once a path is usable (the caller waits for that).
  void settle(uint64_t now) {
    if (window_open_ && v_.usable_paths() > 0) close_window(now);
  }
  const std::array<uint64_t, kChaosKinds>& counts() const { return counts_; }
  uint64_t windows() const { return windows_; }
  uint64_t window_total_ns() const { return window_total_ns_; }
  uint64_t window_longest_ns() const { return window_longest_ns_; }
  uint64_t recovery_longest_ns() const { return recovery_longest_ns_; }

 private:
  uint64_t ms(int lo, int hi) {
    return static_cast<uint64_t>(std::uniform_int_distribution<int>(lo, hi)(rng_)) * 1'000'000ull;
  }
  void heal(size_t p) {
    t_.clear_faults(p);
    t_.set_ana_state(p, AnaState::optimized);
    until_[p] = 0;
  }
  void close_window(uint64_t now) {
    window_open_ = false;
    w_.set_window(false);
    ++windows_;
    const uint64_t len = now - window_start_ns_;
    window_total_ns_ += len;
    window_longest_ns_ = std::max(window_longest_ns_, len);
    if (healed_ns_ && now > healed_ns_) recovery_longest_ns_ = std::max(recovery_longest_ns_, now - healed_ns_);
    healed_ns_ = 0;
  }

  Target& t_;
  Volume& v_;
  Workload& w_;
  size_t paths_;
  std::mt19937_64 rng_;
  int min_ms_, max_ms_;
  std::vector<uint64_t> until_;  // per path: when its fault ends; 0: not faulted by us
  uint64_t next_ = 0;
  bool all_down_ = false;     // every path partitioned now
  bool window_open_ = false;  // from the all-down faults until a path is usable again
  uint64_t window_start_ns_ = 0, healed_ns_ = 0;
  uint64_t windows_ = 0, window_total_ns_ = 0, window_longest_ns_ = 0, recovery_longest_ns_ = 0;
  std::array<uint64_t, kChaosKinds> counts_{};
};

void print_in_flight(const Workload& work, const Volume& v) {
  std::vector<InFlight> f = work.in_flight();
  std::sort(f.begin(), f.end(), [](const InFlight& a, const InFlight& b) { return a.age_ns > b.age_ns; });
  std::fprintf(stderr, "nvmeof-soak:   %zu I/Os in flight (workload count %u)\n", f.size(), work.active());
  for (size_t i = 0; i < f.size() && i < 16; ++i)
    std::fprintf(stderr, "nvmeof-soak:     slot %u %s LBA %llu+%u for %.1f ms%s\n", f[i].slot,
                 f[i].op == IoOp::read ? "read" : "write", static_cast<unsigned long long>(f[i].lba), f[i].nlb,
                 ms_of(f[i].age_ns), f[i].parked ? " (parked: ring full)" : "");
  std::fprintf(stderr, "%s\n", to_text(v.stats()).c_str());
}

// Polls `done` (calling `step` between polls) until it holds or `timeout` passes; on timeout says
// what it waited for and what is still in flight. Progress every 10 s while it waits.
bool wait_for(const char* what, std::chrono::seconds timeout, const Workload& work, const Volume& v,
              const std::function<bool()>& done, const std::function<void()>& step) {
  const uint64_t t0 = monotonic_ns();
  const uint64_t give_up = t0 + static_cast<uint64_t>(timeout.count()) * 1'000'000'000ull;
  uint64_t next_note = t0 + 10'000'000'000ull;
  for (;;) {
    if (done()) return true;
    const uint64_t now = monotonic_ns();
    if (now > give_up) {
      std::fprintf(stderr, "nvmeof-soak: timed out after %lld s waiting for %s\n",
                   static_cast<long long>(timeout.count()), what);
      print_in_flight(work, v);
      return false;
    }
    if (now > next_note) {
      std::fprintf(stderr, "nvmeof-soak: still waiting for %s after %.0f s: %u I/Os active\n", what,
                   static_cast<double>(now - t0) / 1e9, work.active());
      next_note += 10'000'000'000ull;
    }
    if (step) step();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void print_histogram(const char* name, const LatencyHistogram& h) {
  static constexpr uint64_t kMs[] = {10, 25, 50, 100, 250, 500, 1000, 2000};
  std::printf("  %s: %llu, max %.1f ms, p99 %.2f ms, p99.99 %.2f ms; over", name,
              static_cast<unsigned long long>(h.count()), ms_of(h.max()), ms_of(h.percentile(99)),
              ms_of(h.percentile(99.99)));
  for (uint64_t t : kMs)
    std::printf(" %llums:%llu", static_cast<unsigned long long>(t),
                static_cast<unsigned long long>(h.count() - h.count_at_most(t * 1'000'000ull)));
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"nvmeof-soak: a verified mixed workload over three paths under random faults"};
  double minutes = 1;
  unsigned paths = 3, iodepth = 32, rwmixread = 70;
  uint32_t bs = 4096;
  uint64_t seed = 1, size_mib = 64;
  int fault_min_ms = 200, fault_max_ms = 2000;
  unsigned stall_ms = 50;
  std::string malloc_info_path;
  app.add_option("--minutes", minutes, "how long the faults run")->check(CLI::Range(0.05, 1440.0));
  app.add_option("--paths", paths, "ports of the embedded target")->check(CLI::Range(2u, 8u));
  app.add_option("--iodepth", iodepth, "I/Os in flight")->check(CLI::Range(1u, 1024u));
  app.add_option("--bs", bs, "bytes per I/O, a multiple of 4096")->check(CLI::Range(4096u, 1u << 20));
  app.add_option("--rwmixread", rwmixread, "percent of reads")->check(CLI::Range(0u, 100u));
  app.add_option("--size-mib", size_mib, "working set")->check(CLI::Range(1ull, 1024ull));
  app.add_option("--seed", seed, "seed of the fault schedule and the workload");
  app.add_option("--fault-min-ms", fault_min_ms, "shortest gap between faults, and shortest fault")
      ->check(CLI::Range(5, 60000));
  app.add_option("--fault-max-ms", fault_max_ms, "longest gap between faults, and longest fault")
      ->check(CLI::Range(5, 60000));
  app.add_option("--stall-ms", stall_ms, "an I/O outside the all-down windows slower than this is a stall")
      ->check(CLI::Range(1u, 60000u));
  app.add_option("--malloc-info", malloc_info_path,
                 "write glibc's malloc_info (every arena's sizes and free chunks) after the warm-up and at the end "
                 "to PATH.warm and PATH.end");
  CLI11_PARSE(app, argc, argv);
  if (bs % 4096 != 0) {
    std::fprintf(stderr, "nvmeof-soak: --bs must be a multiple of 4096\n");
    return 2;
  }
  if (fault_min_ms > fault_max_ms) {
    std::fprintf(stderr, "nvmeof-soak: --fault-min-ms must not exceed --fault-max-ms\n");
    return 2;
  }

  const Sample at_launch = sample(0);
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
  Sample trimmed;  // the end, after malloc_trim()
  constexpr uint64_t kSampleNs = 10'000'000'000ull;
  uint64_t windows = 0, window_total_ns = 0, window_longest_ns = 0, recovery_longest_ns = 0;
  std::array<uint64_t, kChaosKinds> counts{};
  // Outlives the volume: should a wait time out, I/O still in flight completes (with an error,
  // when the volume closes) into a live Workload, which then no longer resubmits.
  auto work_owner = std::make_unique<Workload>(v, cfg);
  {
    Workload& work = *work_owner;
    work.set_stall_threshold(uint64_t{stall_ms} * 1'000'000ull);
    ChaosDriver chaos(**target, v, work, paths, seed, fault_min_ms, fault_max_ms);
    auto service = [&work] { work.service(); };
    auto idle = [&work] { return work.active() == 0; };
    std::fprintf(stderr, "nvmeof-soak: prefilling %llu MiB\n", static_cast<unsigned long long>(size_mib));
    work.start(Phase::prefill);
    drained = wait_for("the prefill (every block written once, no faults)", std::chrono::seconds(300), work, v,
                       idle, service) &&
              work.wait_idle(std::chrono::milliseconds(0));
    prefill = work.totals(Phase::prefill);

    // What the allocator holds but does not use (free chunks in its arenas) is handed back before
    // the first sample and measured again at the end: RSS that malloc_trim() returns is
    // fragmentation, not memory in use.
    ::malloc_trim(0);
    const uint64_t t0 = monotonic_ns();
    const uint64_t end = t0 + static_cast<uint64_t>(minutes * 60e9);
    samples.push_back(sample(0));
    std::fprintf(stderr,
                 "nvmeof-soak: %.1f min of randrw (%u%% reads, %u B, QD %u) under faults every %d-%d ms on %u paths\n",
                 minutes, rwmixread, bs, iodepth, fault_min_ms, fault_max_ms, paths);
    if (drained) {
      work.set_stall_bins(t0, kSampleNs, static_cast<size_t>((end - t0) / kSampleNs) + 2);
      work.start(Phase::timed);
      work.mark_fault(t0);  // the longest completion gap over the whole run
      uint64_t next_sample = t0 + kSampleNs;
      bool warm_dumped = false;
      for (uint64_t now = t0; now < end; now = monotonic_ns()) {
        chaos.tick(now);
        work.service();
        if (now >= next_sample) {
          samples.push_back(sample(static_cast<double>(now - t0) / 1e9));
          const Sample& s = samples.back();
          if (!malloc_info_path.empty() && !warm_dumped && s.at_s >= std::min(300.0, minutes * 60.0 / 4)) {
            dump_malloc_info(malloc_info_path + ".warm");
            warm_dumped = true;
          }
          if (samples.size() % 6 == 1)  // once a minute
            std::fprintf(stderr, "nvmeof-soak: %.0f s: RSS %llu KiB, heap %llu KiB, %u fds, load %.2f, %u I/Os active\n",
                         s.at_s, static_cast<unsigned long long>(s.rss_kib), static_cast<unsigned long long>(s.heap_kib),
                         s.fds, s.load, work.active());
          next_sample += kSampleNs;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      chaos.heal_all(monotonic_ns());
      work.request_stop();
      std::fprintf(stderr, "nvmeof-soak: faults healed; draining the timed phase\n");
      drained = wait_for("the timed phase's I/O to finish after the faults were healed", std::chrono::seconds(60),
                         work, v, idle, [&] { work.service(); chaos.settle(monotonic_ns()); }) &&
                work.wait_idle(std::chrono::milliseconds(0));
      timed = work.totals(Phase::timed);
    }
    // Every path back before the last figures: their connections are part of the steady state.
    const bool all_live = wait_for("every path live again", std::chrono::seconds(30), work, v, [&v] {
      const VolumeStats st = v.stats();
      return std::all_of(st.paths.begin(), st.paths.end(), [](const PathStats& p) { return usable(p); });
    }, [&] { chaos.settle(monotonic_ns()); });
    chaos.settle(monotonic_ns());
    if (!all_live) std::fprintf(stderr, "nvmeof-soak: reading back over the paths that are live\n");
    if (drained) {
      std::fprintf(stderr, "nvmeof-soak: reading back the whole working set\n");
      work.start(Phase::final_check);
      drained = wait_for("the final read-back of the working set", std::chrono::seconds(300), work, v, idle,
                         service) &&
                work.wait_idle(std::chrono::milliseconds(0));
      final_check = work.totals(Phase::final_check);
    }
    samples.push_back(sample(static_cast<double>(monotonic_ns() - t0) / 1e9));
    if (!malloc_info_path.empty()) dump_malloc_info(malloc_info_path + ".end");
    ::malloc_trim(0);
    trimmed = sample(samples.back().at_s);
    windows = chaos.windows();
    window_total_ns = chaos.window_total_ns();
    window_longest_ns = chaos.window_longest_ns();
    recovery_longest_ns = chaos.recovery_longest_ns();
    counts = chaos.counts();
  }
  const VolumeStats st = v.stats();
  // Idle now: any command still outstanding on a path is one the library lost track of.
  uint64_t outstanding = 0;
  for (const PathStats& p : st.paths) outstanding += p.outstanding;
  // Closing waits for the pieces still in flight inside the library (bounded by no_path_timeout):
  // with everything completed it takes milliseconds; seconds mean a piece that never finished.
  std::fprintf(stderr, "nvmeof-soak: closing the volume\n");
  work_owner->request_stop();
  const uint64_t close_t0 = monotonic_ns();
  vol->reset();
  const uint64_t close_ns = monotonic_ns() - close_t0;
  work_owner.reset();
  const bool close_ok = close_ns < 2'000'000'000ull && outstanding == 0;
  (*target)->stop();

  const uint64_t errors = prefill.errors + timed.errors + final_check.errors;
  const uint64_t mismatches = prefill.mismatches + timed.mismatches + final_check.mismatches;
  std::printf("soak: %.1f min, %u paths, randrw %u%% reads, %u B, QD %u, seed %llu, faults every %d-%d ms\n", minutes,
              paths, rwmixread, bs, iodepth, static_cast<unsigned long long>(seed), fault_min_ms, fault_max_ms);
  std::printf("faults:");
  for (size_t k = 0; k < kChaosKinds; ++k)
    std::printf(" %s %llu", kChaosNames[k], static_cast<unsigned long long>(counts[k]));
  std::printf("\n");
  const double secs = timed.seconds();
  std::printf("I/O: %llu reads, %llu writes (%.0f IOPS), %llu blocks verified during the run, %llu at the end\n",
              static_cast<unsigned long long>(timed.read.ios), static_cast<unsigned long long>(timed.write.ios),
              secs > 0 ? static_cast<double>(timed.read.ios + timed.write.ios) / secs : 0.0,
              static_cast<unsigned long long>(timed.verified_blocks),
              static_cast<unsigned long long>(final_check.verified_blocks));
  std::printf("errors: %llu, mismatches: %llu, drained: %s\n", static_cast<unsigned long long>(errors),
              static_cast<unsigned long long>(mismatches), drained ? "yes" : "NO");
  for (const PhaseTotals* t : {&prefill, &timed, &final_check})
    for (const ErrorCount& e : t->error_counts)
      std::printf("  error status 0x%04x submit rc %d: %llu\n", e.status, e.submit_rc,
                  static_cast<unsigned long long>(e.count));
  for (const Mismatch& m : timed.mismatch_examples)
    std::printf("  mismatch at LBA %llu\n", static_cast<unsigned long long>(m.lba));
  for (const Mismatch& m : final_check.mismatch_examples)
    std::printf("  mismatch at LBA %llu (final check)\n", static_cast<unsigned long long>(m.lba));
  std::printf("all-paths-down windows: %llu, %.1f s in all (%.1f%% of the run), longest %.0f ms, "
              "longest from heal to a usable path %.0f ms\n",
              static_cast<unsigned long long>(windows), ms_of(window_total_ns) / 1e3,
              secs > 0 ? ms_of(window_total_ns) / 10.0 / secs : 0.0, ms_of(window_longest_ns),
              ms_of(recovery_longest_ns));
  std::printf("longest read outside the windows %.1f ms (goal: at most %u ms), inside %.1f ms; "
              "longest write outside %.1f ms, inside %.1f ms; longest completion gap %.1f ms\n",
              ms_of(timed.read_window[0].max()), stall_ms, ms_of(timed.read_window[1].max()),
              ms_of(timed.write_window[0].max()), ms_of(timed.write_window[1].max()),
              ms_of(timed.max_gap_after_fault_ns));
  std::printf("latency histograms (timed phase):\n");
  print_histogram("reads outside the windows", timed.read_window[0]);
  print_histogram("reads inside the windows ", timed.read_window[1]);
  print_histogram("writes outside the windows", timed.write_window[0]);
  print_histogram("writes inside the windows ", timed.write_window[1]);
  std::printf("I/Os outside the windows over %u ms: %llu", stall_ms,
              static_cast<unsigned long long>(timed.stalls_outside));
  for (size_t i = 0; i < timed.stall_examples.size() && i < 12; ++i) {
    const Stall& s = timed.stall_examples[i];
    std::printf("%s %s %.1f ms at %.1f s", i == 0 ? "; e.g." : ",", s.op == IoOp::read ? "read" : "write",
                ms_of(s.latency_ns), static_cast<double>(s.at_ns - timed.start_ns) / 1e9);
  }
  std::printf("\n");

  // RSS trend: after a warm-up (a quarter of the run, at most 5 min) against the end.
  uint64_t rss_min = ~0ull, rss_max = 0;
  unsigned fd_min = ~0u, fd_max = 0;
  for (const Sample& s : samples) {
    rss_min = std::min(rss_min, s.rss_kib);
    rss_max = std::max(rss_max, s.rss_kib);
    fd_min = std::min(fd_min, s.fds);
    fd_max = std::max(fd_max, s.fds);
  }
  const double warm_s = std::min(300.0, minutes * 60.0 / 4);
  const Sample* warm = &samples.back();
  for (const Sample& s : samples)
    if (s.at_s >= warm_s) {
      warm = &s;
      break;
    }
  const Sample& last = samples.back();
  const double span_min = (last.at_s - warm->at_s) / 60.0;
  auto per_min = [&](uint64_t a, uint64_t b) {
    return span_min > 0 ? (static_cast<double>(b) - static_cast<double>(a)) / span_min : 0.0;
  };
  std::printf("RSS KiB: launch %llu, start %llu, after warm-up (%.0f s) %llu, end %llu (min %llu, max %llu over %zu "
              "samples); %+.1f KiB/min since warm-up\n",
              static_cast<unsigned long long>(at_launch.rss_kib),
              static_cast<unsigned long long>(samples.front().rss_kib), warm->at_s,
              static_cast<unsigned long long>(warm->rss_kib), static_cast<unsigned long long>(last.rss_kib),
              static_cast<unsigned long long>(rss_min), static_cast<unsigned long long>(rss_max), samples.size(),
              per_min(warm->rss_kib, last.rss_kib));
  std::printf("heap KiB (malloc, in use / held): start %llu / %llu, after warm-up %llu / %llu, end %llu / %llu; "
              "in use %+.1f KiB/min since warm-up\n",
              static_cast<unsigned long long>(samples.front().heap_kib),
              static_cast<unsigned long long>(samples.front().arena_kib), static_cast<unsigned long long>(warm->heap_kib),
              static_cast<unsigned long long>(warm->arena_kib), static_cast<unsigned long long>(last.heap_kib),
              static_cast<unsigned long long>(last.arena_kib), per_min(warm->heap_kib, last.heap_kib));
  std::printf("after malloc_trim at the end: RSS %llu KiB (%+lld against the start), heap held %llu KiB, in use %llu KiB\n",
              static_cast<unsigned long long>(trimmed.rss_kib),
              static_cast<long long>(trimmed.rss_kib) - static_cast<long long>(samples.front().rss_kib),
              static_cast<unsigned long long>(trimmed.arena_kib), static_cast<unsigned long long>(trimmed.heap_kib));
  std::printf("descriptors: launch %u, start %u, after warm-up %u, end %u (min %u, max %u)\n", at_launch.fds,
              samples.front().fds, warm->fds, last.fds, fd_min, fd_max);
  // Once a minute: what the machine's load and the process looked like, and the stalls then.
  std::printf("timeline (s, load 1 min, RSS KiB, heap KiB, fds, stalls outside windows in the minute):\n");
  for (size_t i = 0; i < samples.size(); i += 6) {
    uint64_t n = 0;
    for (size_t b = i; b < i + 6 && b < timed.stall_bins.size(); ++b) n += timed.stall_bins[b];
    const Sample& s = samples[i];
    std::printf("  %6.0f %6.2f %8llu %8llu %4u %6llu\n", s.at_s, s.load, static_cast<unsigned long long>(s.rss_kib),
                static_cast<unsigned long long>(s.heap_kib), s.fds, static_cast<unsigned long long>(n));
  }
  std::printf("  %6.0f %6.2f %8llu %8llu %4u (end)\n", last.at_s, last.load,
              static_cast<unsigned long long>(last.rss_kib), static_cast<unsigned long long>(last.heap_kib), last.fds);
  std::printf("failover timeline: %zu events kept by the volume, %llu older ones let go\n", st.timeline.size(),
              static_cast<unsigned long long>(st.timeline_dropped));
  std::printf("paths:");
  for (const PathStats& p : st.paths)
    std::printf(" [%d ios %llu failovers %llu reconnects %llu hedges %llu]", p.index,
                static_cast<unsigned long long>(p.ios), static_cast<unsigned long long>(p.failovers),
                static_cast<unsigned long long>(p.reconnects), static_cast<unsigned long long>(p.hedges));
  std::printf("\nclosing the volume took %.1f ms, %llu commands outstanding on its paths when idle%s\n",
              ms_of(close_ns), static_cast<unsigned long long>(outstanding),
              close_ok ? "" : " (I/O the library never finished)");
  const bool failed = errors || mismatches || !drained || !close_ok;
  std::printf("result: %s\n", failed ? "FAILED" : "ok");
  return failed ? 1 : 0;
}
