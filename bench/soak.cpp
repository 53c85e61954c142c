// nvmeof-soak: a verified mixed workload (nvmeof-bench's engine) over three paths of an embedded
// target, on one volume or on every namespace of several subsystems (--subsystems, --namespaces:
// one engine, one workload per volume, the faults hitting the ports every volume shares), while
// random faults hit random paths every 0.2-2 s (--fault-min-ms/--fault-max-ms):
// connection resets, partitions, ANA flips (inaccessible, change), slow paths, paths failing
// every command, and now and then all paths down at once and back. Outside those all-down windows
// at least one path the volume reports live and usable is never faulted. At the end every path is
// healed, the whole working set is read back and checked, and the report gives errors,
// mismatches, the longest read inside and outside the all-down windows (the goal figure is the
// one outside), a histogram of slow reads, the failovers of a path no fault was on (a healthy
// path failed), the process RSS (and the heap), open descriptors and threads over the run with
// the load average beside them.
// Every wait has a timeout; one that expires names what it waited for and lists what was still in
// flight. Run by bench/soak.sh; exits 1 on errors, mismatches or I/O that never finished.
#include <dirent.h>
#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <cstdarg>
#include <functional>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <unordered_map>

#include "bench/fault_target.hpp"
#include "bench/workload.hpp"
#include "core/log.hpp"
#include "multipath/io_trace.hpp"
#include <nlohmann/json.hpp>
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

// One numeric field of /proc/<pid>/status ("VmRSS:" in KiB, "Threads:").
uint64_t status_field(const char* field, const std::string& status = "/proc/self/status") {
  std::ifstream f(status);
  std::string line;
  const size_t len = std::strlen(field);
  while (std::getline(f, line))
    if (line.rfind(field, 0) == 0) return std::stoull(line.substr(len));
  return 0;
}

uint64_t rss_kib(const std::string& status = "/proc/self/status") { return status_field("VmRSS:", status); }
unsigned thread_count() { return static_cast<unsigned>(status_field("Threads:")); }

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
  unsigned threads = 0;  ///< the process's threads (the soak's own workers included)
  double load = 0;
};

Sample sample(double at_s) {
  const struct mallinfo2 mi = ::mallinfo2();
  return {at_s, rss_kib(), (mi.uordblks + mi.hblkhd) / 1024, (mi.arena + mi.hblkhd) / 1024, open_fds(),
          thread_count(), load_1min()};
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

// What the diagnostics at the end line the slowest I/Os up against: the faults the soak made
// and the library's log lines, with their times. Fixed rings, allocated before the first
// sample, so that keeping them does not show as RSS growth.
struct Note {
  uint64_t ns = 0;
  char text[152] = {};
};
class NoteRing {
 public:
  explicit NoteRing(size_t n) : notes_(n) {}
  void add(uint64_t ns, const char* fmt, ...) __attribute__((format(printf, 3, 4))) {
    std::lock_guard lock(mu_);
    Note& n = notes_[next_++ % notes_.size()];
    n.ns = ns;
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(n.text, sizeof n.text, fmt, ap);
    va_end(ap);
  }
  /// The notes from `from` to `to`, oldest first (those the ring still holds).
  std::vector<Note> between(uint64_t from, uint64_t to) const {
    std::lock_guard lock(mu_);
    std::vector<Note> out;
    const size_t n = std::min(next_, notes_.size());
    for (size_t i = next_ - n; i < next_; ++i) {
      const Note& x = notes_[i % notes_.size()];
      if (x.ns >= from && x.ns <= to) out.push_back(x);
    }
    return out;
  }

 private:
  mutable std::mutex mu_;
  std::vector<Note> notes_;
  size_t next_ = 0;
};

NoteRing g_faults(16384);
NoteRing g_library_log(16384);
NoteRing g_lane_gaps(8192);
void lane_gap(int lane, uint64_t from_ns, uint64_t to_ns, uint64_t cpu_ns);

void library_log_sink(int, const char* msg, void*) {
  std::fprintf(stderr, "%s\n", msg);  // soak.sh counts these
  g_library_log.add(monotonic_ns(), "%s", std::strncmp(msg, "nvmeof: ", 8) == 0 ? msg + 8 : msg);
}

// The history of every I/O while it is in flight (the library's step hook), and of the slowest
// ones outside the all-down windows and every failed one once they finish. The hook runs on the
// volume's one lane thread; the kept histories are read by the main thread at the end.
class IoTracer {
 public:
  struct Step {
    uint64_t ns = 0;
    detail::IoTraceEvent ev{};
    int16_t path = -1;
    uint16_t status = 0;
  };
  static constexpr size_t kSteps = 48;
  struct History {
    uint64_t start_ns = 0, end_ns = 0;
    IoOp op = IoOp::read;
    uint64_t lba = 0;
    uint16_t status = 0;
    uint32_t epoch = 0;
    uint32_t n = 0;  // steps seen (those past kSteps are not kept)
    std::array<Step, kSteps> steps{};
    uint64_t latency() const { return end_ns - start_ns; }
  };

  static IoTracer& instance() {
    static IoTracer t;
    return t;
  }
  void start(uint64_t threshold_ns) {
    threshold_ns_ = threshold_ns;
    live_.reserve(4096);
    slow_reads_.reserve(kKeep);  // up front: the kept histories must not show as RSS growth
    slow_writes_.reserve(kKeep);
    failed_.reserve(kKeep);
    detail::g_io_trace_for_test = &IoTracer::hook;
    detail::g_lane_gap_for_test = &lane_gap;
  }
  void stop() {
    detail::g_io_trace_for_test = nullptr;
    detail::g_lane_gap_for_test = nullptr;
  }
  /// The soak's all-down windows (same rule as the workload: inside when submitted in one, or
  /// one opened or closed since).
  void set_window(bool open) { epoch_.store(epoch_.load() + 1); (void)open; }
  void set_timed(bool on) { timed_.store(on); }

  std::vector<History> slowest(IoOp op) const {
    std::lock_guard lock(mu_);
    std::vector<History> v = op == IoOp::read ? slow_reads_ : slow_writes_;
    std::sort(v.begin(), v.end(), [](const History& a, const History& b) { return a.latency() > b.latency(); });
    return v;
  }
  std::vector<History> failed() const {
    std::lock_guard lock(mu_);
    return failed_;
  }
  uint64_t slow_outside(IoOp op) const { return op == IoOp::read ? n_slow_reads_ : n_slow_writes_; }
  /// What the slow reads outside the windows went through (the first class that applies).
  enum Kind : uint8_t { waited, orphaned, retried, hedged, one_attempt, kKinds };
  static constexpr const char* kKindNames[kKinds] = {"waited for a usable path", "path failed under it",
                                                     "retried after an error status", "hedged",
                                                     "one attempt, never hedged"};
  struct KindCount {
    uint64_t n = 0, max_ns = 0;
  };
  std::array<KindCount, kKinds> kinds() const {
    std::lock_guard lock(mu_);
    return kinds_;
  }

 private:
  static constexpr size_t kKeep = 256;
  static void hook(const VolumeIo& io, detail::IoTraceEvent ev, int path, uint16_t status) {
    instance().step(io, ev, path, status);
  }
  void step(const VolumeIo& io, detail::IoTraceEvent ev, int path, uint16_t status) {
    const uint64_t now = monotonic_ns();
    History& h = live_[&io];
    if (ev == detail::IoTraceEvent::launch) {
      h.start_ns = now;
      h.n = 0;
      h.op = io.op;
      h.lba = io.slba;
      h.epoch = epoch_.load(std::memory_order_relaxed);
    }
    if (h.n < kSteps) h.steps[h.n] = Step{now, ev, static_cast<int16_t>(path), status};
    ++h.n;
    if (ev != detail::IoTraceEvent::finish || !timed_.load(std::memory_order_relaxed)) return;
    h.end_ns = now;
    h.status = status;
    const uint32_t e = epoch_.load(std::memory_order_relaxed);
    const bool inside = (h.epoch & 1u) != 0 || e != h.epoch;
    if (status != 0) {
      std::lock_guard lock(mu_);
      if (failed_.size() < kKeep) failed_.push_back(h);
    }
    if (inside || h.latency() <= threshold_ns_ || (h.op != IoOp::read && h.op != IoOp::write)) return;
    std::lock_guard lock(mu_);
    auto& keep = h.op == IoOp::read ? slow_reads_ : slow_writes_;
    ++(h.op == IoOp::read ? n_slow_reads_ : n_slow_writes_);
    if (h.op == IoOp::read) {
      bool w = false, o = false, r = false, hd = false;
      for (uint32_t i = 0; i < h.n && i < kSteps; ++i) {
        w |= h.steps[i].ev == detail::IoTraceEvent::waiting;
        o |= h.steps[i].ev == detail::IoTraceEvent::orphaned;
        r |= h.steps[i].ev == detail::IoTraceEvent::complete && h.steps[i].status != 0;
        hd |= h.steps[i].ev == detail::IoTraceEvent::hedge;
      }
      KindCount& k = kinds_[w ? waited : o ? orphaned : r ? retried : hd ? hedged : one_attempt];
      ++k.n;
      k.max_ns = std::max(k.max_ns, h.latency());
    }
    if (keep.size() < kKeep) {
      keep.push_back(h);
      return;
    }
    auto least = std::min_element(keep.begin(), keep.end(),
                                  [](const History& a, const History& b) { return a.latency() < b.latency(); });
    if (least->latency() < h.latency()) *least = h;
  }

  uint64_t threshold_ns_ = 50'000'000;
  std::unordered_map<const VolumeIo*, History> live_;  // lane thread only
  std::atomic<uint32_t> epoch_{0};
  std::atomic<bool> timed_{false};
  mutable std::mutex mu_;
  std::vector<History> slow_reads_, slow_writes_, failed_;
  uint64_t n_slow_reads_ = 0, n_slow_writes_ = 0;
  std::array<KindCount, kKinds> kinds_{};
};

// The scheduler's own account of a thread (/proc/.../schedstat): nanoseconds on a CPU, and
// nanoseconds runnable but waiting for one.
struct SchedStat {
  uint64_t run_ns = 0, wait_ns = 0;
};
bool read_schedstat(const char* path, SchedStat& out) {
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[128];
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return false;
  buf[n] = 0;
  unsigned long long run = 0, wait = 0;
  if (std::sscanf(buf, "%llu %llu", &run, &wait) != 2) return false;
  out = {run, wait};
  return true;
}

// A thread of the soak's that asks to wake every millisecond and notes each wake-up more than
// 10 ms late: the machine did not run this process's threads then (a loaded box), which
// stalls the volume's lane as much. Every 5 ms it also reads the scheduler's statistics of
// every thread of this process and of the target's process (--target-process) and notes each
// thread that waited more than 5 ms in all for a CPU while runnable (an episode: consecutive
// samples in which it waited over a millisecond). The kernel accounts a wait when the thread
// gets a CPU, so one wait of 50 ms shows whole in the sample after it: a note's wait may exceed
// the span it names. Its notes go beside the slow I/Os.
class LagWatch {
 public:
  LagWatch() : notes_(8192), sched_notes_(16384) {}
  void set_target_pid(pid_t pid) { target_pid_ = pid; }
  void set_lane_tid(pid_t tid) { lane_tid_.store(tid, std::memory_order_relaxed); }
  void start() {
    tasks_.reserve(64);
    thread_ = std::thread([this] {
      uint64_t prev = monotonic_ns(), next_sched = prev;
      while (!stop_.load(std::memory_order_relaxed)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        const uint64_t now = monotonic_ns();
        const uint64_t late = now - prev > 1'000'000 ? now - prev - 1'000'000 : 0;
        if (late > 10'000'000) {
          notes_.add(prev, "the soak's threads did not run for %.1f ms", ms_of(late));
          ++count_;
          longest_ = std::max(longest_.load(), late);
        }
        prev = now;
        if (now >= next_sched) {
          next_sched = now + 5'000'000;
          sample_tasks(::getpid(), "host", now);
          if (target_pid_ > 0) sample_tasks(target_pid_, "target", now);
        }
      }
    });
  }
  void stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  ~LagWatch() { stop(); }
  const NoteRing& notes() const { return notes_; }
  const NoteRing& sched_notes() const { return sched_notes_; }
  uint64_t count() const { return count_.load(); }
  uint64_t longest_ns() const { return longest_.load(); }
  uint64_t waits(bool target) const { return waits_[target].load(); }
  uint64_t longest_wait_ns(bool target) const { return longest_wait_[target].load(); }

 private:
  struct Task {
    pid_t pid = 0, tid = 0;
    SchedStat last;
    uint64_t seen_ns = 0;
    uint64_t episode_from = 0, episode_wait = 0, episode_last = 0;
  };
  Task* task(pid_t pid, pid_t tid) {
    for (Task& t : tasks_)
      if (t.pid == pid && t.tid == tid) return &t;
    for (Task& t : tasks_)  // a slot of a thread gone
      if (t.tid == 0) {
        t = Task{};
        t.pid = pid;
        t.tid = tid;
        return &t;
      }
    if (tasks_.size() < tasks_.capacity()) {
      Task& t = tasks_.emplace_back();
      t.pid = pid;
      t.tid = tid;
      return &t;
    }
    return nullptr;
  }
  void close_episode(Task& t, const char* who) {
    if (t.episode_wait > 5'000'000) {
      const bool target = std::strcmp(who, "target") == 0;
      const bool lane = !target && t.tid == lane_tid_.load(std::memory_order_relaxed);
      sched_notes_.add(t.episode_from, "%s thread %d%s waited %.1f ms for a CPU over %.1f ms", who, t.tid,
                       lane ? " (the lane)" : "", ms_of(t.episode_wait), ms_of(t.episode_last - t.episode_from));
      ++waits_[target];
      longest_wait_[target] = std::max(longest_wait_[target].load(), t.episode_wait);
    }
    t.episode_from = t.episode_wait = 0;
  }
  void sample_tasks(pid_t pid, const char* who, uint64_t now) {
    char path[96];
    std::snprintf(path, sizeof path, "/proc/%d/task", pid);
    DIR* d = ::opendir(path);
    if (!d) return;
    while (const dirent* e = ::readdir(d)) {
      if (e->d_name[0] == '.') continue;
      const pid_t tid = std::atoi(e->d_name);
      std::snprintf(path, sizeof path, "/proc/%d/task/%d/schedstat", pid, tid);
      SchedStat st;
      if (!read_schedstat(path, st)) continue;
      Task* t = task(pid, tid);
      if (!t) continue;
      if (t->seen_ns) {
        const uint64_t waited = st.wait_ns - t->last.wait_ns;
        if (waited > 1'000'000) {
          if (!t->episode_from) t->episode_from = t->seen_ns;
          t->episode_wait += waited;
          t->episode_last = now;
        } else if (t->episode_from) {
          close_episode(*t, who);
        }
      }
      t->last = st;
      t->seen_ns = now;
    }
    ::closedir(d);
    for (Task& t : tasks_)  // threads that ended
      if (t.pid == pid && t.tid && t.seen_ns != now) {
        close_episode(t, who);
        t.tid = 0;
      }
  }

  NoteRing notes_, sched_notes_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> count_{0}, longest_{0};
  std::atomic<uint64_t> waits_[2]{}, longest_wait_[2]{};
  std::atomic<pid_t> lane_tid_{0};
  pid_t target_pid_ = -1;
  std::vector<Task> tasks_;  // the watch thread only
};
LagWatch g_lag;

// The lanes' turns more than 5 ms apart (g_lane_gap_for_test), on the lane's thread.
void lane_gap(int lane, uint64_t from_ns, uint64_t to_ns, uint64_t cpu_ns) {
  g_lag.set_lane_tid(::gettid());
  g_lane_gaps.add(from_ns, "lane %d did not turn for %.1f ms (its thread used %.1f ms of CPU meanwhile)", lane,
                  ms_of(to_ns - from_ns), ms_of(cpu_ns));
}

const char* to_string(detail::IoTraceEvent e) {
  switch (e) {
    case detail::IoTraceEvent::launch: return "launch";
    case detail::IoTraceEvent::issue: return "issue";
    case detail::IoTraceEvent::hedge: return "hedge";
    case detail::IoTraceEvent::complete: return "complete";
    case detail::IoTraceEvent::waiting: return "waiting";
    case detail::IoTraceEvent::fenced: return "fenced";
    case detail::IoTraceEvent::delayed: return "delayed";
    case detail::IoTraceEvent::orphaned: return "orphaned";
    case detail::IoTraceEvent::finish: return "finish";
  }
  return "?";
}

// One I/O's history, the faults from a second before it to its end, and the library's lines
// meanwhile; times in ms from its start.
void print_history(const IoTracer::History& h, uint64_t origin_ns) {
  auto rel = [&](uint64_t ns) { return (static_cast<double>(ns) - static_cast<double>(h.start_ns)) / 1e6; };
  std::printf("  %s LBA %llu, %.1f ms, at %.3f s, status 0x%04x:", h.op == IoOp::read ? "read" : "write",
              static_cast<unsigned long long>(h.lba), ms_of(h.latency()), static_cast<double>(h.start_ns - origin_ns) / 1e9,
              h.status);
  for (uint32_t i = 0; i < h.n && i < IoTracer::kSteps; ++i) {
    const IoTracer::Step& s = h.steps[i];
    std::printf(" [%+.1f %s", rel(s.ns), to_string(s.ev));
    if (s.path >= 0) std::printf(" p%d", s.path);
    if (s.status) std::printf(" 0x%04x", s.status);
    std::printf("]");
  }
  if (h.n > IoTracer::kSteps) std::printf(" ... %u steps in all", h.n);
  std::printf("\n");
  for (const Note& n : g_faults.between(h.start_ns > 1'000'000'000 ? h.start_ns - 1'000'000'000 : 0, h.end_ns))
    std::printf("      fault %+.1f: %s\n", rel(n.ns), n.text);
  for (const Note& n : g_library_log.between(h.start_ns > 100'000'000 ? h.start_ns - 100'000'000 : 0, h.end_ns))
    std::printf("      log   %+.1f: %s\n", rel(n.ns), n.text);
  for (const Note& n : g_lag.notes().between(h.start_ns > 100'000'000 ? h.start_ns - 100'000'000 : 0, h.end_ns))
    std::printf("      lag   %+.1f: %s\n", rel(n.ns), n.text);
  for (const Note& n : g_lag.sched_notes().between(h.start_ns > 100'000'000 ? h.start_ns - 100'000'000 : 0, h.end_ns))
    std::printf("      cpu   %+.1f: %s\n", rel(n.ns), n.text);
  for (const Note& n : g_lane_gaps.between(h.start_ns > 100'000'000 ? h.start_ns - 100'000'000 : 0, h.end_ns))
    std::printf("      lane  %+.1f: %s\n", rel(n.ns), n.text);
}

bool usable(const PathStats& p) {
  return p.state == PathState::live && (p.ana_state == AnaState::optimized || p.ana_state == AnaState::non_optimized);
}

// The soak's volumes (--subsystems x --namespaces, on one engine) and one workload on each, seen
// as one: the chaos, the waits and the report need the whole set. Main thread only.
class Fleet {
 public:
  void add(Volume& v, Workload& w) { items_.push_back({&v, &w}); }
  size_t size() const { return items_.size(); }
  Volume& volume(size_t i) const { return *items_[i].v; }

  void start(Phase p) { for (auto& i : items_) i.w->start(p); }
  void request_stop() noexcept { for (auto& i : items_) i.w->request_stop(); }
  void service() noexcept { for (auto& i : items_) i.w->service(); }
  unsigned active() const noexcept {
    unsigned n = 0;
    for (const auto& i : items_) n += i.w->active();
    return n;
  }
  bool wait_idle(std::chrono::milliseconds timeout) {
    bool ok = true;
    for (auto& i : items_) ok = i.w->wait_idle(timeout) && ok;
    return ok;
  }
  void set_window(bool open) noexcept { for (auto& i : items_) i.w->set_window(open); }
  void mark_fault(uint64_t ns) noexcept { for (auto& i : items_) i.w->mark_fault(ns); }
  void set_stall_threshold(uint64_t ns) noexcept { for (auto& i : items_) i.w->set_stall_threshold(ns); }
  void set_stall_bins(uint64_t origin_ns, uint64_t bin_ns, size_t bins) {
    for (auto& i : items_) i.w->set_stall_bins(origin_ns, bin_ns, bins);
  }
  std::vector<InFlight> in_flight() const {
    std::vector<InFlight> out;
    for (const auto& i : items_) {
      auto f = i.w->in_flight();
      out.insert(out.end(), f.begin(), f.end());
    }
    return out;
  }
  /// The fewest usable paths any volume has: a window closes only when every volume has one.
  unsigned usable_paths() const {
    unsigned n = ~0u;
    for (const auto& i : items_) n = std::min(n, static_cast<unsigned>(i.v->usable_paths()));
    return items_.empty() ? 0 : n;
  }
  /// Path p is live and ANA-accessible in every volume (the paths are listed in the same order).
  bool path_usable(size_t p) const {
    for (const auto& i : items_) {
      const VolumeStats st = i.v->stats();
      if (p >= st.paths.size() || !usable(st.paths[p])) return false;
    }
    return true;
  }
  bool all_usable() const {
    for (const auto& i : items_) {
      const VolumeStats st = i.v->stats();
      if (!std::all_of(st.paths.begin(), st.paths.end(), [](const PathStats& p) { return usable(p); })) return false;
    }
    return true;
  }
  /// Every workload's totals of `phase`, as one run's.
  PhaseTotals totals(Phase phase) const {
    PhaseTotals t;
    bool first = true;
    for (const auto& i : items_) {
      const PhaseTotals x = i.w->totals(phase);
      for (auto [to, from] : {std::pair{&t.read, &x.read}, std::pair{&t.write, &x.write}}) {
        to->ios += from->ios;
        to->bytes += from->bytes;
        to->latency.merge(from->latency);
      }
      for (size_t k = 0; k < 2; ++k) {
        t.read_window[k].merge(x.read_window[k]);
        t.write_window[k].merge(x.write_window[k]);
      }
      t.stalls_outside += x.stalls_outside;
      t.stall_examples.insert(t.stall_examples.end(), x.stall_examples.begin(), x.stall_examples.end());
      if (t.stall_bins.size() < x.stall_bins.size()) t.stall_bins.resize(x.stall_bins.size());
      for (size_t b = 0; b < x.stall_bins.size(); ++b) t.stall_bins[b] += x.stall_bins[b];
      t.errors += x.errors;
      t.mismatches += x.mismatches;
      t.verified_blocks += x.verified_blocks;
      t.start_ns = first ? x.start_ns : std::min(t.start_ns, x.start_ns);
      t.end_ns = std::max(t.end_ns, x.end_ns);
      t.max_latency_after_fault_ns = std::max(t.max_latency_after_fault_ns, x.max_latency_after_fault_ns);
      t.max_gap_after_fault_ns = std::max(t.max_gap_after_fault_ns, x.max_gap_after_fault_ns);
      for (const ErrorCount& e : x.error_counts) {
        auto same = std::find_if(t.error_counts.begin(), t.error_counts.end(), [&](const ErrorCount& c) {
          return c.status == e.status && c.submit_rc == e.submit_rc;
        });
        if (same == t.error_counts.end()) t.error_counts.push_back(e);
        else same->count += e.count;
      }
      t.mismatch_examples.insert(t.mismatch_examples.end(), x.mismatch_examples.begin(), x.mismatch_examples.end());
      first = false;
    }
    std::sort(t.stall_examples.begin(), t.stall_examples.end(),
              [](const Stall& a, const Stall& b) { return a.at_ns < b.at_ns; });
    return t;
  }

 private:
  struct Item {
    Volume* v;
    Workload* w;
  };
  std::vector<Item> items_;
};

// Picks and undoes the faults. Main thread only (the target's fault calls are thread-safe).
class ChaosDriver {
 public:
  ChaosDriver(FaultTarget& t, Fleet& w, size_t paths, uint64_t seed, int min_ms, int max_ms)
      : t_(t), w_(w), paths_(paths), rng_(seed), min_ms_(min_ms), max_ms_(max_ms), until_(paths, 0) {}

  void tick(uint64_t now) {
    // An all-down window lasts from the faults until a path is usable again after their heal.
    if (window_open_ && !all_down_ && w_.usable_paths() > 0) close_window(now);
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
        deliver(t_.inject(p, FaultKind::partition));
        fault_from_[p] = now;
      }
      const uint64_t back = now + ms(200, 1500);
      g_faults.add(now, "all paths partitioned for %.0f ms", ms_of(back - now));
      std::fill(until_.begin(), until_.end(), back);
      all_down_ = true;
      window_open_ = true;
      window_start_ns_ = now;
      w_.set_window(true);
      IoTracer::instance().set_window(true);
      ++counts_[static_cast<size_t>(Chaos::all_down)];
      next_ = std::max(next_, back + ms(min_ms_, std::max(min_ms_, max_ms_ / 2)));
      return;
    }
    std::vector<size_t> healthy;
    for (size_t p = 0; p < paths_; ++p)
      if (!until_[p] && w_.path_usable(p)) healthy.push_back(p);
    if (healthy.size() <= 1) return;  // keep the last path serving
    const size_t p = healthy[std::uniform_int_distribution<size_t>(0, healthy.size() - 1)(rng_)];
    const auto kind = static_cast<Chaos>(std::uniform_int_distribution<int>(0, 5)(rng_));
    ++counts_[static_cast<size_t>(kind)];
    uint32_t slow_us = 0;
    if (kind == Chaos::slow) slow_us = static_cast<uint32_t>(std::uniform_int_distribution<int>(2000, 30000)(rng_));
    const uint64_t until = now + ms(min_ms_, max_ms_);
    g_faults.add(now, "p%zu %s%s", p, kChaosNames[static_cast<size_t>(kind)],
                 kind == Chaos::reset ? "" : (" for " + std::to_string((until - now) / 1'000'000) + " ms" +
                                              (slow_us ? ", " + std::to_string(slow_us) + " us" : std::string()))
                                                 .c_str());
    fault_from_[p] = now;
    switch (kind) {
      case Chaos::reset:
        deliver(t_.inject(p, FaultKind::reset));  // acts once; the path counts as faulted until it is back
        until_[p] = now + 1;
        return;
      case Chaos::partition: deliver(t_.inject(p, FaultKind::partition)); break;
      case Chaos::ana_inaccessible: deliver(t_.set_ana_state(p, AnaState::inaccessible)); break;
      case Chaos::ana_change: deliver(t_.set_ana_state(p, AnaState::change)); break;
      case Chaos::slow: deliver(t_.set_latency(p, std::chrono::microseconds(slow_us))); break;
      case Chaos::fail_status: deliver(t_.fail_commands(p, status::kInternalError)); break;
      case Chaos::all_down: break;
    }
    until_[p] = until;
  }

  void heal_all(uint64_t now) {
    for (size_t p = 0; p < paths_; ++p) heal(p);
    all_down_ = false;
    if (window_open_) healed_ns_ = now;
  }
  /// After heal_all(): closes an open window once a path is usable (the caller waits for that).
  void settle(uint64_t now) {
    if (window_open_ && w_.usable_paths() > 0) close_window(now);
  }
  const std::array<uint64_t, kChaosKinds>& counts() const { return counts_; }
  uint64_t windows() const { return windows_; }
  bool window_open() const { return window_open_; }
  uint64_t window_total_ns() const { return window_total_ns_; }
  uint64_t window_longest_ns() const { return window_longest_ns_; }
  uint64_t recovery_longest_ns() const { return recovery_longest_ns_; }
  uint64_t undelivered() const { return undelivered_; }
  /// Whether path `p` had a fault of ours at `t`, or had one end less than `grace_ns` before it
  /// (a failure seen right after a heal belongs to the fault).
  bool faulted_at(size_t p, uint64_t t, uint64_t grace_ns) const {
    if (p >= paths_) return false;
    if (fault_from_[p] && t >= fault_from_[p]) return true;
    return std::any_of(spans_[p].begin(), spans_[p].end(),
                       [&](const auto& s) { return t >= s.first && t <= s.second + grace_ns; });
  }

 private:
  uint64_t ms(int lo, int hi) {
    return static_cast<uint64_t>(std::uniform_int_distribution<int>(lo, hi)(rng_)) * 1'000'000ull;
  }
  void heal(size_t p) {
    if (until_[p]) g_faults.add(monotonic_ns(), "p%zu healed", p);
    if (fault_from_[p]) spans_[p].push_back({fault_from_[p], monotonic_ns()});
    fault_from_[p] = 0;
    deliver(t_.clear_faults(p));
    deliver(t_.set_ana_state(p, AnaState::optimized));
    until_[p] = 0;
  }
  // A fault the target's control socket did not take (the external target): counted, the first
  // few said.
  void deliver(bool ok) {
    if (ok) return;
    if (++undelivered_ <= 5) std::fprintf(stderr, "nvmeof-soak: a fault was not delivered: %s\n", t_.error().c_str());
  }
  void close_window(uint64_t now) {
    window_open_ = false;
    w_.set_window(false);
    IoTracer::instance().set_window(false);
    g_faults.add(now, "window closed: a path is usable");
    ++windows_;
    const uint64_t len = now - window_start_ns_;
    window_total_ns_ += len;
    window_longest_ns_ = std::max(window_longest_ns_, len);
    if (healed_ns_ && now > healed_ns_) recovery_longest_ns_ = std::max(recovery_longest_ns_, now - healed_ns_);
    healed_ns_ = 0;
  }

  FaultTarget& t_;
  Fleet& w_;
  size_t paths_;
  std::mt19937_64 rng_;
  int min_ms_, max_ms_;
  std::vector<uint64_t> until_;  // per path: when its fault ends; 0: not faulted by us
  std::vector<uint64_t> fault_from_ = std::vector<uint64_t>(paths_, 0);  // per path: its fault's start, 0: none
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> spans_ =
      std::vector<std::vector<std::pair<uint64_t, uint64_t>>>(paths_);  // per path: faults over
  uint64_t next_ = 0;
  bool all_down_ = false;     // every path partitioned now
  bool window_open_ = false;  // from the all-down faults until a path is usable again
  uint64_t window_start_ns_ = 0, healed_ns_ = 0;
  uint64_t windows_ = 0, window_total_ns_ = 0, window_longest_ns_ = 0, recovery_longest_ns_ = 0;
  std::array<uint64_t, kChaosKinds> counts_{};
  uint64_t undelivered_ = 0;
};

// nvmeof-target in a process of its own (--target-process): the soak's RSS and descriptors are
// then the host library's alone. Its faults go through its control socket.
class ExternalTarget {
 public:
  ~ExternalTarget() { stop(); }
  /// Starts `binary` with `ports` ports on 127.0.0.1 and a control socket in a fresh directory,
  /// and reads the bound ports from its --json line. False with a message on stderr otherwise.
  bool start(const std::string& binary, unsigned ports, uint64_t size_mib, const char* nqn, unsigned subsystems,
             unsigned namespaces) {
    char dir[] = "/tmp/nvmeof-soak-XXXXXX";
    if (!::mkdtemp(dir)) {
      std::perror("nvmeof-soak: mkdtemp");
      return false;
    }
    dir_ = dir;
    control_ = dir_ + "/control.sock";
    std::vector<std::string> args{binary, "--json", "--poll", "sleep", "--nqn", nqn, "--size",
                                  std::to_string(size_mib) + "M", "--control", control_,
                                  "--subsystems", std::to_string(subsystems), "--namespaces",
                                  std::to_string(namespaces)};
    for (unsigned i = 0; i < ports; ++i) {
      args.push_back("--listen");
      args.push_back("127.0.0.1:0");
    }
    int out[2];
    if (::pipe2(out, O_CLOEXEC) != 0) {
      std::perror("nvmeof-soak: pipe");
      return false;
    }
    std::vector<char*> argv;  // made before fork: the child only calls async-signal-safe functions
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ < 0) {
      std::perror("nvmeof-soak: fork");
      return false;
    }
    if (pid_ == 0) {
      ::dup2(out[1], STDOUT_FILENO);
      ::execv(argv[0], argv.data());
      static constexpr char kMsg[] = "nvmeof-soak: cannot run the target (--target-binary)\n";
      (void)!::write(STDERR_FILENO, kMsg, sizeof kMsg - 1);
      ::_exit(127);
    }
    ::close(out[1]);
    // One JSON line, within 30 s (a loaded machine starts slowly).
    std::string line;
    const uint64_t give_up = monotonic_ns() + 30'000'000'000ull;
    while (line.find('\n') == std::string::npos) {
      const uint64_t now = monotonic_ns();
      pollfd pfd{out[0], POLLIN, 0};
      if (now >= give_up || ::poll(&pfd, 1, static_cast<int>((give_up - now) / 1'000'000)) <= 0) break;
      char buf[4096];
      const ssize_t n = ::read(out[0], buf, sizeof buf);
      if (n <= 0) break;
      line.append(buf, static_cast<size_t>(n));
    }
    ::close(out[0]);
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.contains("ports") || !j["ports"].is_array() || j["ports"].size() != ports) {
      std::fprintf(stderr, "nvmeof-soak: %s did not report its %u ports (it said: %s)\n", binary.c_str(), ports,
                   line.c_str());
      return false;
    }
    for (const auto& p : j["ports"]) addresses_.push_back(p.value("address", std::string()));
    return true;
  }
  void stop() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      int st = 0;
      const uint64_t give_up = monotonic_ns() + 10'000'000'000ull;
      while (::waitpid(pid_, &st, WNOHANG) == 0) {
        if (monotonic_ns() > give_up) {
          std::fprintf(stderr, "nvmeof-soak: the target did not end on SIGTERM; killing it\n");
          ::kill(pid_, SIGKILL);
          ::waitpid(pid_, &st, 0);
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      pid_ = -1;
    }
    if (!dir_.empty()) {
      ::unlink(control_.c_str());
      ::rmdir(dir_.c_str());
      dir_.clear();
    }
  }
  const std::string& control() const { return control_; }
  const std::string& address(size_t i) const { return addresses_[i]; }
  pid_t pid() const { return pid_; }
  uint64_t rss_kib() const { return pid_ > 0 ? ::rss_kib("/proc/" + std::to_string(pid_) + "/status") : 0; }

 private:
  pid_t pid_ = -1;
  std::string dir_, control_;
  std::vector<std::string> addresses_;
};

// The NQN of subsystem i of n, as nvmeof-target --subsystems names them.
std::string subsystem_nqn(unsigned i, unsigned n) {
  return n > 1 ? std::string(kNqn) + "-" + std::to_string(i + 1) : std::string(kNqn);
}

// nvmeof-target beside this binary's build directory: build/bench/nvmeof-soak ->
// build/tools/nvmeof-target.
std::string default_target_binary(const char* argv0) {
  std::string self = argv0;
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n > 0) self.assign(buf, static_cast<size_t>(n));
  const size_t slash = self.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : self.substr(0, slash);
  return dir + "/../tools/nvmeof-target";
}

void print_in_flight(const Fleet& work) {
  std::vector<InFlight> f = work.in_flight();
  std::sort(f.begin(), f.end(), [](const InFlight& a, const InFlight& b) { return a.age_ns > b.age_ns; });
  std::fprintf(stderr, "nvmeof-soak:   %zu I/Os in flight (workload count %u)\n", f.size(), work.active());
  for (size_t i = 0; i < f.size() && i < 16; ++i)
    std::fprintf(stderr, "nvmeof-soak:     slot %u %s LBA %llu+%u for %.1f ms%s\n", f[i].slot,
                 f[i].op == IoOp::read ? "read" : "write", static_cast<unsigned long long>(f[i].lba), f[i].nlb,
                 ms_of(f[i].age_ns), f[i].parked ? " (parked: ring full)" : "");
  for (size_t i = 0; i < work.size(); ++i) std::fprintf(stderr, "%s\n", to_text(work.volume(i).stats()).c_str());
}

// Polls `done` (calling `step` between polls) until it holds or `timeout` passes; on timeout says
// what it waited for and what is still in flight. Progress every 10 s while it waits.
bool wait_for(const char* what, std::chrono::seconds timeout, const Fleet& work,
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
      print_in_flight(work);
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
  CLI::App app{"nvmeof-soak: a verified mixed workload over three paths under random faults, on one volume or many"};
  double minutes = 1;
  unsigned paths = 3, iodepth = 32, rwmixread = 70;
  uint32_t bs = 4096;
  uint64_t seed = 1, size_mib = 64;
  int fault_min_ms = 200, fault_max_ms = 2000;
  unsigned stall_ms = 50;
  unsigned subsystems = 1, namespaces = 1;
  std::string malloc_info_path;
  bool target_process = false;
  std::string target_binary = default_target_binary(argv[0]);
  app.add_option("--minutes", minutes, "how long the faults run")->check(CLI::Range(0.05, 1440.0));
  app.add_option("--paths", paths, "ports of the embedded target")->check(CLI::Range(2u, 8u));
  app.add_option("--iodepth", iodepth, "I/Os in flight in all (split evenly over the volumes, at least one each)")
      ->check(CLI::Range(1u, 1024u));
  app.add_option("--subsystems", subsystems,
                 "subsystems of the target, each over every port; one engine opens every namespace of each")
      ->check(CLI::Range(1u, 8u));
  app.add_option("--namespaces", namespaces, "namespaces per subsystem, each a volume with its own workload")
      ->check(CLI::Range(1u, 16u));
  app.add_option("--bs", bs, "bytes per I/O, a multiple of 4096")->check(CLI::Range(4096u, 1u << 20));
  app.add_option("--rwmixread", rwmixread, "percent of reads")->check(CLI::Range(0u, 100u));
  app.add_option("--size-mib", size_mib, "working set of each volume (the size of each namespace)")->check(CLI::Range(1ull, 1024ull));
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
  app.add_flag("--target-process", target_process,
               "run the target as a separate nvmeof-target process (faults through its control socket), so that "
               "the RSS and descriptors measured are the host library's alone; default: the embedded target in "
               "this process");
  app.add_option("--target-binary", target_binary, "the nvmeof-target that --target-process runs")
      ->capture_default_str();
  std::string ccr = "on";
  app.add_option("--ccr", ccr,
                 "Cross-Controller Reset, the embedded target's and the host's: on, or off (writes of a failed path "
                 "wait for the TP4129 hold, and a path back within it reconnects before its fence)")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (ccr == "off" && target_process) {
    std::fprintf(stderr, "nvmeof-soak: --ccr off needs the embedded target (not --target-process)\n");
    return 2;
  }
  if (bs % 4096 != 0) {
    std::fprintf(stderr, "nvmeof-soak: --bs must be a multiple of 4096\n");
    return 2;
  }
  if (fault_min_ms > fault_max_ms) {
    std::fprintf(stderr, "nvmeof-soak: --fault-min-ms must not exceed --fault-max-ms\n");
    return 2;
  }

  const Sample at_launch = sample(0);
  detail::set_log_sink(&library_log_sink, nullptr);
  IoTracer::instance().start(uint64_t{stall_ms} * 1'000'000ull);
  std::unique_ptr<Target> embedded;
  ExternalTarget external;
  std::unique_ptr<FaultTarget> faults;
  std::vector<std::string> addresses;
  if (target_process) {
    if (!external.start(target_binary, paths, size_mib, kNqn, subsystems, namespaces)) return 1;
    std::string err;
    faults = remote_fault_target(external.control(), paths - 1, err);
    if (!faults) {
      std::fprintf(stderr, "nvmeof-soak: %s\n", err.c_str());
      return 1;
    }
    for (size_t i = 0; i < paths; ++i) addresses.push_back(external.address(i));
  } else {
    TargetOptions to;
    to.ports.assign(paths, TargetPort{"127.0.0.1", "0", AnaState::optimized});
    if (ccr == "off") to.ccr = CcrSupport::disabled;
    to.subsystems.resize(subsystems);
    for (unsigned i = 0; i < subsystems; ++i) {
      to.subsystems[i] = to.subsystems[0];
      to.subsystems[i].nqn = subsystem_nqn(i, subsystems);
      to.subsystems[i].namespaces.resize(namespaces, to.subsystems[0].namespaces[0]);
      for (unsigned n = 0; n < namespaces; ++n) {
        to.subsystems[i].namespaces[n].nsid = n + 1;
        to.subsystems[i].namespaces[n].size_bytes = size_mib << 20;
      }
    }
    auto target = Target::start(to);
    if (!target) {
      std::fprintf(stderr, "nvmeof-soak: cannot start the embedded target: %s\n", target.error().message().c_str());
      return 1;
    }
    embedded = std::move(*target);
    faults = local_fault_target(*embedded);
    for (size_t i = 0; i < paths; ++i) addresses.push_back(embedded->port_address(i));
  }
  // One engine for every volume: they share its reactor and, per subsystem, its controllers.
  auto host = Host::create();
  if (!host) {
    std::fprintf(stderr, "nvmeof-soak: cannot start the engine: %s\n", host.error().message().c_str());
    return 1;
  }
  const unsigned volumes = subsystems * namespaces;
  auto vols = std::make_unique<std::vector<std::unique_ptr<Volume>>>();
  for (unsigned i = 0; i < subsystems; ++i)
    for (unsigned n = 1; n <= namespaces; ++n) {
      VolumeOptions vo;
      for (size_t p = 0; p < paths; ++p) vo.paths.push_back(*TransportAddress::parse(addresses[p]));
      vo.connect.subnqn = subsystem_nqn(i, subsystems);
      vo.connect.kato_ms = kKatoShortest;
      vo.use_ccr = ccr == "on";
      vo.nsid = n;
      auto vol = Volume::open(*host, vo);
      if (!vol) {
        std::fprintf(stderr, "nvmeof-soak: cannot open namespace %u of %s: %s\n", n, vo.connect.subnqn.c_str(),
                     vol.error().message().c_str());
        return 1;
      }
      vols->push_back(std::move(*vol));
    }
  const Volume& v0 = *vols->front();

  WorkloadConfig cfg;
  cfg.rw = RwMode::randrw;
  cfg.rwmixread = rwmixread;
  cfg.block_size = v0.block_size();
  cfg.unit_blocks = bs / v0.block_size();
  cfg.units = (size_mib << 20) / bs;
  cfg.iodepth = std::max(1u, iodepth / volumes);
  cfg.verify = true;
  bool drained = true;
  uint64_t target_rss_start = 0;
  PhaseTotals prefill, timed, final_check;
  std::vector<Sample> samples;
  Sample trimmed;  // the end, after malloc_trim()
  constexpr uint64_t kSampleNs = 10'000'000'000ull;
  uint64_t windows = 0, window_total_ns = 0, window_longest_ns = 0, recovery_longest_ns = 0;
  // Failovers the volumes reported during the timed phase, and those of a path none of our faults
  // was on (nor had been within kHealGraceNs): a healthy path failed, on a loaded host or not.
  constexpr uint64_t kHealGraceNs = 1'000'000'000ull;
  uint64_t failovers_seen = 0;
  std::vector<std::string> healthy_failed;
  std::array<uint64_t, kChaosKinds> counts{};
  // Outlive the volumes: should a wait time out, I/O still in flight completes (with an error,
  // when its volume closes) into a live Workload, which then no longer resubmits.
  std::vector<std::unique_ptr<Workload>> work_owner;
  Fleet work;
  for (unsigned i = 0; i < volumes; ++i) {
    cfg.seed = seed + i;
    cfg.run_id = mix64(monotonic_ns() ^ cfg.seed);
    work_owner.push_back(std::make_unique<Workload>(*(*vols)[i], cfg));
    work.add(*(*vols)[i], *work_owner.back());
  }
  {
    work.set_stall_threshold(uint64_t{stall_ms} * 1'000'000ull);
    ChaosDriver chaos(*faults, work, paths, seed, fault_min_ms, fault_max_ms);
    auto service = [&work] { work.service(); };
    auto idle = [&work] { return work.active() == 0; };
    std::fprintf(stderr, "nvmeof-soak: prefilling %llu MiB\n", static_cast<unsigned long long>(size_mib));
    work.start(Phase::prefill);
    drained = wait_for("the prefill (every block written once, no faults)", std::chrono::seconds(300), work,
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
    target_rss_start = external.rss_kib();
    std::fprintf(stderr,
                 "nvmeof-soak: %.1f min of randrw (%u%% reads, %u B, QD %u) under faults every %d-%d ms on %u paths\n",
                 minutes, rwmixread, bs, iodepth, fault_min_ms, fault_max_ms, paths);
    if (drained) {
      work.set_stall_bins(t0, kSampleNs, static_cast<size_t>((end - t0) / kSampleNs) + 2);
      work.start(Phase::timed);
      IoTracer::instance().set_timed(true);
      g_lag.set_target_pid(external.pid());
      g_lag.start();
      work.mark_fault(t0);  // the longest completion gap over the whole run
      uint64_t next_sample = t0 + kSampleNs;
      bool warm_dumped = false;
      // A read outside the windows in flight for over a second: what the volume and the paths
      // looked like then (its history only tells what happened to the I/O). The first three.
      unsigned stall_dumps = 0;
      uint64_t next_stall_check = t0, stall_quiet_until = 0;
      // Every failover the volumes report, once: the first volume of each subsystem speaks for
      // its controllers, read at each sample, long before its kept events roll over.
      std::set<std::tuple<unsigned, int, uint64_t>> seen;
      auto gather = [&] {
        for (unsigned s = 0; s < subsystems; ++s) {
          const VolumeStats st = work.volume(s * namespaces).stats();
          for (const FailoverEvent& e : st.timeline) {
            if (e.detect_ns < t0 || !seen.insert({s, e.path, e.detect_ns}).second) continue;
            ++failovers_seen;
            if (chaos.faulted_at(static_cast<size_t>(e.path), e.detect_ns, kHealGraceNs)) continue;
            char line[256];
            std::snprintf(line, sizeof line, "subsystem %u path %d at %.3f s: %s", s + 1, e.path,
                          static_cast<double>(e.detect_ns - t0) / 1e9, e.cause.c_str());
            healthy_failed.emplace_back(line);
          }
        }
      };
      for (uint64_t now = t0; now < end; now = monotonic_ns()) {
        chaos.tick(now);
        work.service();
        if (stall_dumps < 3 && now >= next_stall_check && now >= stall_quiet_until && !chaos.window_open()) {
          next_stall_check = now + 100'000'000ull;
          uint64_t oldest = 0;
          for (const InFlight& f : work.in_flight())
            if (f.op == IoOp::read) oldest = std::max(oldest, f.age_ns);
          if (oldest > 1'000'000'000ull) {
            ++stall_dumps;
            stall_quiet_until = now + 10'000'000'000ull;
            std::fprintf(stderr, "nvmeof-soak: %.3f s: a read outside the windows has been in flight for %.0f ms\n",
                         static_cast<double>(now - t0) / 1e9, ms_of(oldest));
            print_in_flight(work);
          }
        }
        if (now >= next_sample) {
          gather();
          samples.push_back(sample(static_cast<double>(now - t0) / 1e9));
          const Sample& s = samples.back();
          if (!malloc_info_path.empty() && !warm_dumped && s.at_s >= std::min(300.0, minutes * 60.0 / 4)) {
            dump_malloc_info(malloc_info_path + ".warm");
            warm_dumped = true;
          }
          if (samples.size() % 6 == 1)  // once a minute
            std::fprintf(stderr, "nvmeof-soak: %.0f s: RSS %llu KiB, heap %llu KiB, %u fds, %u threads, load %.2f, "
                         "%u I/Os active\n",
                         s.at_s, static_cast<unsigned long long>(s.rss_kib), static_cast<unsigned long long>(s.heap_kib),
                         s.fds, s.threads, s.load, work.active());
          next_sample += kSampleNs;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      chaos.heal_all(monotonic_ns());
      IoTracer::instance().set_timed(false);
      g_lag.stop();
      work.request_stop();
      std::fprintf(stderr, "nvmeof-soak: faults healed; draining the timed phase\n");
      drained = wait_for("the timed phase's I/O to finish after the faults were healed", std::chrono::seconds(60),
                         work, idle, [&] { work.service(); chaos.settle(monotonic_ns()); }) &&
                work.wait_idle(std::chrono::milliseconds(0));
      timed = work.totals(Phase::timed);
      gather();
    }
    // Every path back before the last figures: their connections are part of the steady state.
    const bool all_live = wait_for("every path live again", std::chrono::seconds(30), work,
                                   [&work] { return work.all_usable(); }, [&] { chaos.settle(monotonic_ns()); });
    chaos.settle(monotonic_ns());
    if (!all_live) std::fprintf(stderr, "nvmeof-soak: reading back over the paths that are live\n");
    if (drained) {
      std::fprintf(stderr, "nvmeof-soak: reading back the whole working set\n");
      work.start(Phase::final_check);
      drained = wait_for("the final read-back of the working set", std::chrono::seconds(300), work, idle,
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
  std::vector<VolumeStats> stats;
  for (const auto& vol : *vols) stats.push_back(vol->stats());
  const HostStats host_stats = (*host)->stats();
  // Idle now: any command still outstanding on a path is one the library lost track of.
  uint64_t outstanding = 0;
  for (const VolumeStats& st : stats)
    for (const PathStats& p : st.paths) outstanding += p.outstanding;
  // Closing waits for the pieces still in flight inside the library (bounded by no_path_timeout):
  // with everything completed it takes milliseconds; seconds mean a piece that never finished.
  std::fprintf(stderr, "nvmeof-soak: closing the volumes\n");
  work.request_stop();
  const uint64_t close_t0 = monotonic_ns();
  vols.reset();
  const uint64_t close_ns = monotonic_ns() - close_t0;
  work_owner.clear();
  const bool close_ok = close_ns < 2'000'000'000ull && outstanding == 0;
  IoTracer::instance().stop();
  const uint64_t target_rss_end = external.rss_kib();
  if (embedded) embedded->stop();
  external.stop();

  const uint64_t errors = prefill.errors + timed.errors + final_check.errors;
  const uint64_t mismatches = prefill.mismatches + timed.mismatches + final_check.mismatches;
  std::printf("soak: %.1f min, %u paths, %u volumes (%u subsystems x %u namespaces) on one engine, randrw %u%% reads, "
              "%u B, QD %u per volume, seed %llu, faults every %d-%d ms\n",
              minutes, paths, volumes, subsystems, namespaces, rwmixread, bs, cfg.iodepth,
              static_cast<unsigned long long>(seed), fault_min_ms, fault_max_ms);
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
  std::printf("failovers seen: %llu; of a path with no fault of ours on it (a healthy path failed): %zu\n",
              static_cast<unsigned long long>(failovers_seen), healthy_failed.size());
  for (size_t i = 0; i < healthy_failed.size() && i < 10; ++i) std::printf("  %s\n", healthy_failed[i].c_str());
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
  // The histories: what each of the slowest I/Os went through, beside the faults and the log.
  {
    const IoTracer& tr = IoTracer::instance();
    const uint64_t origin = timed.start_ns;
    const auto failed_ios = tr.failed();
    if (!failed_ios.empty()) std::printf("failed I/Os (the first %zu):\n", failed_ios.size());
    for (size_t i = 0; i < failed_ios.size() && i < 4; ++i) print_history(failed_ios[i], origin);
    const auto reads = tr.slowest(IoOp::read);
    std::printf("slowest reads outside the windows (%llu over %u ms; the slowest of up to 16 episodes):\n",
                static_cast<unsigned long long>(tr.slow_outside(IoOp::read)), stall_ms);
    const auto kinds = tr.kinds();
    for (size_t k = 0; k < IoTracer::kKinds; ++k)
      if (kinds[k].n)
        std::printf("  %s: %llu, longest %.1f ms\n", IoTracer::kKindNames[k], static_cast<unsigned long long>(kinds[k].n),
                    ms_of(kinds[k].max_ns));
    std::printf("  the soak's threads were not run for over 10 ms %llu times, longest %.1f ms (the machine's load)\n",
                static_cast<unsigned long long>(g_lag.count()), ms_of(g_lag.longest_ns()));
    std::printf("  threads runnable but waiting for a CPU over 5 ms in an episode: host %llu times (longest %.1f ms), "
                "target %llu times (longest %.1f ms)\n",
                static_cast<unsigned long long>(g_lag.waits(false)), ms_of(g_lag.longest_wait_ns(false)),
                static_cast<unsigned long long>(g_lag.waits(true)), ms_of(g_lag.longest_wait_ns(true)));
    // One history per episode: I/Os that started within 5 ms of one already shown went through the same.
    auto print_distinct = [&](const std::vector<IoTracer::History>& v, size_t max) {
      std::vector<uint64_t> shown;
      for (const auto& h : v) {
        if (shown.size() >= max) break;
        if (std::any_of(shown.begin(), shown.end(), [&](uint64_t t) {
              return (h.start_ns > t ? h.start_ns - t : t - h.start_ns) < 5'000'000;
            }))
          continue;
        shown.push_back(h.start_ns);
        print_history(h, origin);
      }
    };
    print_distinct(reads, 16);
    const auto writes = tr.slowest(IoOp::write);
    std::printf("slowest writes outside the windows (%llu over %u ms; the slowest of up to 3 episodes):\n",
                static_cast<unsigned long long>(tr.slow_outside(IoOp::write)), stall_ms);
    print_distinct(writes, 3);
  }

  // RSS trend: after a warm-up (a quarter of the run, at most 5 min) against the end.
  uint64_t rss_min = ~0ull, rss_max = 0;
  unsigned fd_min = ~0u, fd_max = 0, th_min = ~0u, th_max = 0;
  for (const Sample& s : samples) {
    th_min = std::min(th_min, s.threads);
    th_max = std::max(th_max, s.threads);
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
  if (target_process)
    std::printf("the target runs in a process of its own (--target-process): the figures above are the host's; "
                "the target's RSS %llu KiB at the start, %llu at the end\n",
                static_cast<unsigned long long>(target_rss_start), static_cast<unsigned long long>(target_rss_end));
  else
    std::printf("the embedded target runs in this process: the figures above include it (--target-process "
                "measures the host alone)\n");
  std::printf("descriptors: launch %u, start %u, after warm-up %u, end %u (min %u, max %u)\n", at_launch.fds,
              samples.front().fds, warm->fds, last.fds, fd_min, fd_max);
  std::printf("threads (the process's, the soak's own included): launch %u, start %u, after warm-up %u, end %u "
              "(min %u, max %u)\n",
              at_launch.threads, samples.front().threads, warm->threads, last.threads, th_min, th_max);
  // Once a minute: what the machine's load and the process looked like, and the stalls then.
  std::printf("timeline (s, load 1 min, RSS KiB, heap KiB, fds, threads, stalls outside windows in the minute):\n");
  for (size_t i = 0; i < samples.size(); i += 6) {
    uint64_t n = 0;
    for (size_t b = i; b < i + 6 && b < timed.stall_bins.size(); ++b) n += timed.stall_bins[b];
    const Sample& s = samples[i];
    std::printf("  %6.0f %6.2f %8llu %8llu %4u %4u %6llu\n", s.at_s, s.load,
                static_cast<unsigned long long>(s.rss_kib), static_cast<unsigned long long>(s.heap_kib), s.fds,
                s.threads, static_cast<unsigned long long>(n));
  }
  std::printf("  %6.0f %6.2f %8llu %8llu %4u %4u (end)\n", last.at_s, last.load,
              static_cast<unsigned long long>(last.rss_kib), static_cast<unsigned long long>(last.heap_kib), last.fds,
              last.threads);
  for (size_t i = 0; i < stats.size(); ++i) {
    const VolumeStats& st = stats[i];
    std::printf("volume %zu: %zu failover events kept, %llu older let go; paths:", i, st.timeline.size(),
                static_cast<unsigned long long>(st.timeline_dropped));
    for (const PathStats& p : st.paths)
      std::printf(" [%d ios %llu failovers %llu reconnects %llu hedges %llu]", p.index,
                  static_cast<unsigned long long>(p.ios), static_cast<unsigned long long>(p.failovers),
                  static_cast<unsigned long long>(p.reconnects), static_cast<unsigned long long>(p.hedges));
    std::printf("\n");
  }
  std::printf("engine: %u reactors, %u threads, %u volumes, %u subsystems, %zu controllers:", host_stats.reactors,
              host_stats.threads, host_stats.volumes, host_stats.subsystems, host_stats.controllers.size());
  for (const HostControllerStats& c : host_stats.controllers)
    std::printf(" [%s %s: %u volumes, ios %llu, failovers %llu, reconnects %llu, keep-alives %llu]", c.subnqn.c_str(),
                c.address.c_str(), c.volumes, static_cast<unsigned long long>(c.ios),
                static_cast<unsigned long long>(c.failovers), static_cast<unsigned long long>(c.reconnects),
                static_cast<unsigned long long>(c.keep_alives));
  std::printf("\nclosing the volumes took %.1f ms, %llu commands outstanding on its paths when idle%s\n",
              ms_of(close_ns), static_cast<unsigned long long>(outstanding),
              close_ok ? "" : " (I/O the library never finished)");
  const bool failed = errors || mismatches || !drained || !close_ok;
  std::printf("result: %s\n", failed ? "FAILED" : "ok");
  return failed ? 1 : 0;
}
