// engine_scale: what a process pays per volume. Opens N volumes (N namespaces of one subsystem,
// or S subsystems of N namespaces, each volume over two paths) in one process against
// nvmeof-target running as a separate process, and reports per row: the host's threads, its
// TCP connections to the target, its RSS, the CPU it uses while every volume is open and idle,
// the commands the target receives meanwhile (keep-alives: nothing else runs), the IOPS and host
// CPU per I/O of 4 KiB random reads at a fixed total queue depth spread over the volumes, and
// how long opening a volume takes when its subsystem is already connected.
//
// Each row runs in a child process of its own (made by fork before any engine exists) against a
// fresh target, so that threads, descriptors and RSS are that row's alone; the parent bounds
// each row with --row-timeout and reports a row that fails or overruns instead of waiting.
// A row whose volumes cannot all be opened (e.g. the target refusing more connections) is
// measured with those that opened and says why it stopped. A benchmark: nothing is asserted.
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "multipath/option_text.hpp"
#include "nvmeof/nvmeof.h"
#include "nvmeof/volume.hpp"
#include "target/target_control.hpp"

using namespace nvmeof;
using Json = nlohmann::json;

namespace {

constexpr char kNqn[] = "nqn.2024-01.io.nvmeof:engine-scale";
constexpr unsigned kPaths = 2;
constexpr uint32_t kBlock = 4096;
// How often the main thread resubmits refused reads while the load runs: rarely needed, and its
// wake-ups count in the process's CPU per I/O.
constexpr auto kRetryEvery = std::chrono::milliseconds(10);

uint64_t now_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// Every thread of the process: the library's as well as ours (the main thread only sleeps).
uint64_t process_cpu_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

// -- what /proc says about this process ------------------------------------------------------

unsigned count_entries(const char* dir) {
  unsigned n = 0;
  if (DIR* d = ::opendir(dir)) {
    while (const dirent* e = ::readdir(d))
      if (e->d_name[0] != '.') ++n;
    ::closedir(d);
  }
  return n;
}

unsigned threads() { return count_entries("/proc/self/task"); }

unsigned socket_fds() {
  unsigned n = 0;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (const dirent* e = ::readdir(d)) {
      char link[64];
      const ssize_t len = ::readlinkat(::dirfd(d), e->d_name, link, sizeof link - 1);
      if (len > 0 && std::strncmp(link, "socket:", 7) == 0) ++n;
    }
    ::closedir(d);
  }
  return n;
}

uint64_t rss_kib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6));
  return 0;
}

// Established connections whose remote end is one of `ports` on this network namespace: only
// this process connects to the row's target, whose ports are fresh.
unsigned tcp_connections_to(const std::vector<uint16_t>& ports) {
  unsigned n = 0;
  for (const char* table : {"/proc/self/net/tcp", "/proc/self/net/tcp6"}) {
    std::ifstream f(table);
    std::string line;
    std::getline(f, line);  // the header
    while (std::getline(f, line)) {
      std::istringstream in(line);
      std::string slot, local, remote, state;
      in >> slot >> local >> remote >> state;
      const size_t colon = remote.rfind(':');
      if (state != "01" || colon == std::string::npos) continue;
      const auto port = static_cast<uint16_t>(std::stoul(remote.substr(colon + 1), nullptr, 16));
      if (std::find(ports.begin(), ports.end(), port) != ports.end()) ++n;
    }
  }
  return n;
}

// -- the target, a process of its own ---------------------------------------------------------

struct Shape {
  unsigned subsystems = 1;
  unsigned namespaces = 1;  // per subsystem
  unsigned volumes() const { return subsystems * namespaces; }
  std::string nqn(unsigned s) const { return subsystems == 1 ? kNqn : std::string(kNqn) + "-" + std::to_string(s + 1); }
  std::string label() const {
    return subsystems == 1 ? std::to_string(namespaces) + " ns"
                           : std::to_string(subsystems) + " subsys x " + std::to_string(namespaces) + " ns";
  }
};

class TargetProcess {
 public:
  TargetProcess() = default;
  TargetProcess(const TargetProcess&) = delete;
  TargetProcess& operator=(const TargetProcess&) = delete;
  ~TargetProcess() { stop(); }

  /// Starts `binary` with two ports on 127.0.0.1, the shape's subsystems and namespaces and a
  /// control socket, and reads its ports from the --json line (within 30 s). Empty on success,
  /// else why not.
  std::string start(const std::string& binary, const Shape& shape, const std::string& ns_size,
                    const std::string& poll) {
    char dir[] = "/tmp/nvmeof-engine-scale-XXXXXX";
    if (!::mkdtemp(dir)) return std::string("mkdtemp: ") + std::strerror(errno);
    dir_ = dir;
    control_ = dir_ + "/control.sock";
    std::vector<std::string> args{binary, "--json", "--poll", poll, "--nqn", kNqn, "--size", ns_size,
                                  "--subsystems", std::to_string(shape.subsystems), "--namespaces",
                                  std::to_string(shape.namespaces), "--control", control_};
    for (unsigned i = 0; i < kPaths; ++i) {
      args.push_back("--listen");
      args.push_back("127.0.0.1:0");
    }
    int out[2];
    if (::pipe2(out, O_CLOEXEC) != 0) return std::string("pipe: ") + std::strerror(errno);
    std::vector<char*> argv;  // made before fork: the child only calls async-signal-safe functions
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ < 0) return std::string("fork: ") + std::strerror(errno);
    if (pid_ == 0) {
      ::dup2(out[1], STDOUT_FILENO);
      ::execv(argv[0], argv.data());
      static constexpr char kMsg[] = "engine_scale: cannot run the target (--target)\n";
      (void)!::write(STDERR_FILENO, kMsg, sizeof kMsg - 1);
      ::_exit(127);
    }
    ::close(out[1]);
    std::string line;
    const uint64_t give_up = now_ns() + 30'000'000'000ull;
    while (line.find('\n') == std::string::npos) {
      const uint64_t now = now_ns();
      pollfd pfd{out[0], POLLIN, 0};
      if (now >= give_up || ::poll(&pfd, 1, static_cast<int>((give_up - now) / 1'000'000)) <= 0) break;
      char buf[65536];
      const ssize_t n = ::read(out[0], buf, sizeof buf);
      if (n <= 0) break;
      line.append(buf, static_cast<size_t>(n));
    }
    ::close(out[0]);
    const Json j = Json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.contains("ports") || j["ports"].size() != kPaths)
      return binary + " did not report its ports (an nvmeof-target with --subsystems and "
             "--namespaces is needed)";
    for (const auto& p : j["ports"]) ports_.push_back(static_cast<uint16_t>(std::stoul(p.value("trsvcid", "0"))));
    return {};
  }

  void stop() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      int st = 0;
      const uint64_t give_up = now_ns() + 10'000'000'000ull;
      while (::waitpid(pid_, &st, WNOHANG) == 0) {
        if (now_ns() > give_up) {
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

  const std::vector<uint16_t>& ports() const { return ports_; }

  /// The target's counter `key` (PortStats, snake_case) summed over its ports since it started;
  /// nullopt when it does not answer.
  std::optional<uint64_t> counter(const char* key) const {
    std::string answer, error;
    if (!tools::target_control_call(control_, R"({"op":"stats"})", answer, error)) return std::nullopt;
    const Json j = Json::parse(answer, nullptr, false);
    if (j.is_discarded() || !j.contains("ports")) return std::nullopt;
    uint64_t n = 0;
    for (const auto& p : j["ports"]) n += p.value(key, uint64_t{0});
    return n;
  }

 private:
  pid_t pid_ = -1;
  std::string dir_, control_;
  std::vector<uint16_t> ports_;
};

// -- the load: a fixed number of reads in flight, spread over the volumes ----------------------

class Load;

// One I/O in flight at a time. Its k-th read goes to volume (index + depth x k) mod N, so the
// total depth covers every volume evenly when N exceeds it, and each volume keeps the same
// slots when N divides it. Written by whichever reactor thread completes the slot's read (one
// at a time: the next read is issued from that completion); the counters are read by the main
// thread (relaxed: a sample a moment stale is fine).
struct alignas(64) Slot {
  VolumeIo io;
  Load* load = nullptr;
  unsigned index = 0;
  uint64_t k = 0;
  uint64_t rng = 0;
  void* buf = nullptr;
  std::atomic<uint64_t> done{0};
  std::atomic<uint64_t> errors{0};
  std::atomic<bool> in_flight{false};
  std::atomic<bool> parked{false};  // its submit was refused (ring full): the main thread retries
};

class Load {
 public:
  Load(const std::vector<std::unique_ptr<Volume>>& vols, unsigned depth) : vols_(vols), slots_(depth) {
    for (unsigned i = 0; i < depth; ++i) {
      Slot& s = slots_[i];
      s.load = this;
      s.index = i;
      s.rng = 0x9e3779b97f4a7c15ull * (i + 1);
      s.buf = std::aligned_alloc(kBlock, kBlock);
    }
  }
  Load(const Load&) = delete;
  Load& operator=(const Load&) = delete;
  ~Load() {
    for (Slot& s : slots_) std::free(s.buf);
  }

  void start() {
    for (Slot& s : slots_) issue(s);
  }
  /// Resubmits reads whose submit was refused; the main thread calls it while the load runs.
  void retry_parked() {
    for (Slot& s : slots_)
      if (s.parked.exchange(false)) issue(s);
  }
  uint64_t completed() const {
    uint64_t n = 0;
    for (const Slot& s : slots_) n += s.done.load(std::memory_order_relaxed);
    return n;
  }
  uint64_t errors() const {
    uint64_t n = 0;
    for (const Slot& s : slots_) n += s.errors.load(std::memory_order_relaxed);
    return n;
  }
  /// Stops issuing and waits for the reads in flight, at most `limit_ns`; the number still in
  /// flight then (their slots must then outlive the volumes: the caller leaks them).
  unsigned drain(uint64_t limit_ns) {
    stopping_.store(true);
    const uint64_t give_up = now_ns() + limit_ns;
    for (;;) {
      unsigned left = 0;
      for (const Slot& s : slots_) left += s.in_flight.load() ? 1 : 0;
      if (left == 0 || now_ns() > give_up) return left;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

 private:
  void issue(Slot& s) noexcept {
    if (stopping_.load(std::memory_order_relaxed)) {
      s.in_flight.store(false);
      return;
    }
    Volume& v = *vols_[(s.index + slots_.size() * s.k++) % vols_.size()];
    s.rng ^= s.rng << 13;
    s.rng ^= s.rng >> 7;
    s.rng ^= s.rng << 17;
    s.io = VolumeIo{};
    s.io.op = IoOp::read;
    s.io.slba = s.rng % v.size_blocks();
    s.io.nlb = 1;
    s.io.buf = s.buf;
    s.io.user = &s;
    s.io.done = &Load::on_done;
    s.in_flight.store(true);
    if (v.submit(s.io) != 0) {
      s.in_flight.store(false);
      s.parked.store(true);
    }
  }
  static void on_done(VolumeIo& io, NvmeStatus st) noexcept {
    Slot& s = *static_cast<Slot*>(io.user);
    (st.is_success() ? s.done : s.errors).fetch_add(1, std::memory_order_relaxed);
    s.load->issue(s);
  }

  const std::vector<std::unique_ptr<Volume>>& vols_;
  std::vector<Slot> slots_;
  std::atomic<bool> stopping_{false};
};

// -- one row ----------------------------------------------------------------------------------

struct Config {
  std::string target;
  std::string target_poll = "sleep";
  std::string ns_size = "16M";
  double seconds = 3;
  double idle_seconds = 3;
  unsigned depth = 64;
  unsigned reactors = 1;
  uint32_t kato_ms = 0;  // 0: the library's default (the shortest the controller allows)
  std::string poll = "adaptive";
  double row_timeout = 300;
};

std::atomic<unsigned> g_log_lines{0};

void log_sink(int, const char* msg, void*) {
  // The first few say what went wrong; a row that fails does so hundreds of times alike.
  if (g_log_lines.fetch_add(1) < 5) std::fprintf(stderr, "engine_scale: library: %s\n", msg);
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// Runs in the row's child process: opens, idles, loads, closes, and returns the figures.
Json measure(const Shape& shape, const Config& cfg, const TargetProcess& target) {
  Json row{{"label", shape.label()},       {"subsystems", shape.subsystems},
           {"namespaces", shape.namespaces}, {"volumes_requested", shape.volumes()},
           {"threads_before", threads()},  {"rss_before_kib", rss_kib()}};
  const auto poll = parse_poll_mode(cfg.poll);
  VolumeOptions vo;
  for (const uint16_t p : target.ports()) {
    TransportAddress a;
    a.traddr = "127.0.0.1";
    a.trsvcid = std::to_string(p);
    vo.paths.push_back(a);
  }
  vo.reactors = cfg.reactors;
  vo.poll = poll ? *poll : PollMode::adaptive;
  vo.no_path_timeout = std::chrono::seconds(5);  // bounds a close that finds a path gone
  if (cfg.kato_ms) vo.connect.kato_ms = cfg.kato_ms;

  // On the heap: a row whose reads never all complete leaves its volumes open (see below).
  auto* owned = new std::vector<std::unique_ptr<Volume>>;
  auto& vols = *owned;
  std::vector<double> open_ms, open_new_subsystem_ms;
  std::string stopped;
  // Subsystem after subsystem: every volume but the first of its subsystem opens a namespace of
  // a subsystem the process is already connected to.
  const uint64_t open_start = now_ns();
  for (unsigned s = 0; s < shape.subsystems && stopped.empty(); ++s)
    for (unsigned n = 1; n <= shape.namespaces; ++n) {
      vo.connect.subnqn = shape.nqn(s);
      vo.nsid = n;
      const uint64_t t0 = now_ns();
      auto v = Volume::open(vo);
      const double ms = static_cast<double>(now_ns() - t0) / 1e6;
      if (!v) {
        stopped = "volume " + std::to_string(vols.size() + 1) + " (" + vo.connect.subnqn + " nsid " +
                  std::to_string(n) + ") did not open: " + v.error().message();
        break;
      }
      if (vols.empty()) row["open_first_ms"] = ms;
      else (n == 1 ? open_new_subsystem_ms : open_ms).push_back(ms);
      vols.push_back(std::move(*v));
    }
  row["open_total_s"] = static_cast<double>(now_ns() - open_start) / 1e9;
  row["volumes"] = vols.size();
  if (!stopped.empty()) row["stopped"] = stopped;
  if (vols.empty()) {
    delete owned;
    return row;
  }
  if (!open_ms.empty()) {
    row["open_median_ms"] = median(open_ms);
    row["open_max_ms"] = *std::max_element(open_ms.begin(), open_ms.end());
  }
  if (!open_new_subsystem_ms.empty()) row["open_new_subsystem_median_ms"] = median(open_new_subsystem_ms);

  // Every path up (a path can still be connecting), bounded.
  const uint64_t up_by = now_ns() + 10'000'000'000ull;
  auto usable = [&] {
    unsigned u = 0;
    for (const auto& v : vols) u += v->usable_paths();
    return u;
  };
  while (usable() < vols.size() * kPaths && now_ns() < up_by) sleep_s(0.05);
  row["paths_usable"] = usable();

  // Idle: everything open, nothing submitted.
  sleep_s(1);
  const auto cmd0 = target.counter("commands");
  const uint64_t cpu0 = process_cpu_ns(), t0 = now_ns();
  sleep_s(cfg.idle_seconds);
  const uint64_t cpu1 = process_cpu_ns(), t1 = now_ns();
  const auto cmd1 = target.counter("commands");
  const double idle_s = static_cast<double>(t1 - t0) / 1e9;
  row["threads"] = threads();
  row["socket_fds"] = socket_fds();
  row["tcp_connections"] = tcp_connections_to(target.ports());
  row["rss_kib"] = rss_kib();
  row["idle_cpu_pct"] = 100.0 * static_cast<double>(cpu1 - cpu0) / static_cast<double>(t1 - t0);
  if (cmd0 && cmd1) row["idle_target_commands_per_s"] = static_cast<double>(*cmd1 - *cmd0) / idle_s;

  // Load: a fixed total depth over the volumes; a short warm-up, then the measured window.
  Load* load = new Load(vols, cfg.depth);
  load->start();
  const uint64_t warm_until = now_ns() + static_cast<uint64_t>(std::min(1.0, cfg.seconds / 4) * 1e9);
  while (now_ns() < warm_until) {
    load->retry_parked();
    std::this_thread::sleep_for(kRetryEvery);
  }
  const uint64_t io0 = load->completed(), c0 = process_cpu_ns(), w0 = now_ns();
  const uint64_t window_end = w0 + static_cast<uint64_t>(cfg.seconds * 1e9);
  while (now_ns() < window_end) {
    load->retry_parked();
    std::this_thread::sleep_for(kRetryEvery);
  }
  const uint64_t io1 = load->completed(), c1 = process_cpu_ns(), w1 = now_ns();
  const unsigned stuck = load->drain(10'000'000'000ull);
  const uint64_t ios = io1 - io0;
  row["iops"] = static_cast<double>(ios) / (static_cast<double>(w1 - w0) / 1e9);
  row["cpu_us_per_io"] = ios ? static_cast<double>(c1 - c0) / 1e3 / static_cast<double>(ios) : 0.0;
  row["io_errors"] = load->errors();

  uint64_t failovers = 0;
  for (const auto& v : vols)
    for (const auto& p : v->stats().paths) failovers += p.failovers;
  row["path_failures"] = failovers;
  // Why paths failed, from the target's side: controllers it ended for want of a keep-alive, and
  // connections it accepted beyond the ones the volumes opened with (reconnects).
  if (auto n = target.counter("keep_alive_expiries")) row["target_keep_alive_expiries"] = *n;
  if (auto n = target.counter("connections")) row["target_connections_accepted"] = *n;
  row["library_log_lines"] = g_log_lines.load();
  if (stuck) {
    // Their slots may still be written: keep them and the volumes; the process ends here anyway.
    row["stopped"] = std::to_string(stuck) + " reads did not complete within 10 s of the end";
    return row;
  }
  delete load;
  const uint64_t close0 = now_ns();
  while (!vols.empty()) vols.pop_back();
  delete owned;
  row["close_total_s"] = static_cast<double>(now_ns() - close0) / 1e9;
  return row;
}

// Runs one row in a child process and returns what it reported, or why it reported nothing.
Json run_row(const Shape& shape, const Config& cfg) {
  Json failed{{"label", shape.label()},  {"subsystems", shape.subsystems}, {"namespaces", shape.namespaces},
              {"volumes_requested", shape.volumes()}, {"volumes", 0}};
  TargetProcess target;
  if (auto why = target.start(cfg.target, shape, cfg.ns_size, cfg.target_poll); !why.empty()) {
    failed["stopped"] = "target: " + why;
    return failed;
  }
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) {
    failed["stopped"] = std::string("pipe: ") + std::strerror(errno);
    return failed;
  }
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    failed["stopped"] = std::string("fork: ") + std::strerror(errno);
    return failed;
  }
  if (pid == 0) {
    ::close(out[0]);
    nvmeof_set_log_callback(&log_sink, nullptr);
    const std::string line = measure(shape, cfg, target).dump() + "\n";
    (void)!::write(out[1], line.data(), line.size());
    // Not exit(): the copy of the parent's TargetProcess would stop the target.
    ::_exit(0);
  }
  ::close(out[1]);
  std::string text;
  const uint64_t give_up = now_ns() + static_cast<uint64_t>(cfg.row_timeout * 1e9);
  bool timed_out = false;
  for (;;) {
    const uint64_t now = now_ns();
    if (now >= give_up) {
      timed_out = true;
      break;
    }
    pollfd pfd{out[0], POLLIN, 0};
    const int r = ::poll(&pfd, 1, static_cast<int>(std::min<uint64_t>((give_up - now) / 1'000'000, 1000)));
    if (r < 0 && errno != EINTR) break;
    if (r <= 0) continue;
    char buf[4096];
    const ssize_t n = ::read(out[0], buf, sizeof buf);
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(out[0]);
  if (timed_out) ::kill(pid, SIGKILL);
  int st = 0;
  ::waitpid(pid, &st, 0);
  target.stop();
  const Json j = Json::parse(text, nullptr, false);
  if (!j.is_discarded() && j.is_object()) return j;
  if (timed_out)
    failed["stopped"] = "no result within --row-timeout " + std::to_string(static_cast<int>(cfg.row_timeout)) + " s (killed)";
  else if (WIFSIGNALED(st))
    failed["stopped"] = std::string("the row's process died: ") + strsignal(WTERMSIG(st));
  else
    failed["stopped"] = "the row's process exited with " + std::to_string(WEXITSTATUS(st)) + " and no result";
  return failed;
}

// -- the report -------------------------------------------------------------------------------

std::string fixed(const Json& row, const char* key, int decimals, double scale = 1) {
  if (!row.contains(key)) return "-";
  char b[32];
  std::snprintf(b, sizeof b, "%.*f", decimals, row[key].get<double>() * scale);
  return b;
}

void print_table(const Json& rows, const Config& cfg) {
  const std::string kato = cfg.kato_ms ? std::to_string(cfg.kato_ms) + " ms" : "the shortest (100 ms)";
  std::printf("engine_scale: %u paths per volume, %u reactor(s), %s poll, KATO %s; idle %.0f s; 4 KiB random "
              "reads at QD %u in total for %.0f s; nvmeof-target (%s poll) in its own process\n",
              kPaths, cfg.reactors, cfg.poll.c_str(), kato.c_str(), cfg.idle_seconds, cfg.depth, cfg.seconds,
              cfg.target_poll.c_str());
  std::printf("%-18s %7s %7s %5s %8s %9s %9s %10s %8s %9s %8s %8s %8s %6s %6s\n", "row", "volumes", "threads",
              "tcp", "RSS MiB", "KiB/vol", "idle CPU%", "tgt cmd/s", "IOPS", "CPU us/IO", "open 1st",
              "open med", "open max", "fails", "ka exp");
  for (const auto& r : rows) {
    const unsigned vols = r.value("volumes", 0u);
    std::string kib_per_vol = "-";
    if (vols && r.contains("rss_kib")) {
      char b[32];
      std::snprintf(b, sizeof b, "%.0f",
                    (r["rss_kib"].get<double>() - r["rss_before_kib"].get<double>()) / vols);
      kib_per_vol = b;
    }
    auto count = [&](const char* key) { return r.contains(key) ? std::to_string(r[key].get<uint64_t>()) : std::string("-"); };
    std::printf("%-18s %7s %7s %5s %8s %9s %9s %10s %8s %9s %8s %8s %8s %6s %6s\n", r["label"].get<std::string>().c_str(),
                (std::to_string(vols) + (vols < r["volumes_requested"].get<unsigned>() ? "!" : "")).c_str(),
                count("threads").c_str(), count("tcp_connections").c_str(), fixed(r, "rss_kib", 1, 1.0 / 1024).c_str(),
                kib_per_vol.c_str(), fixed(r, "idle_cpu_pct", 2).c_str(),
                fixed(r, "idle_target_commands_per_s", 0).c_str(), fixed(r, "iops", 0).c_str(),
                fixed(r, "cpu_us_per_io", 2).c_str(), fixed(r, "open_first_ms", 1).c_str(),
                fixed(r, "open_median_ms", 2).c_str(), fixed(r, "open_max_ms", 1).c_str(),
                count("path_failures").c_str(), count("target_keep_alive_expiries").c_str());
  }
  bool notes = false;
  for (const auto& r : rows)
    if (r.contains("stopped")) {
      if (!notes) std::printf("\n");
      notes = true;
      const unsigned vols = r.value("volumes", 0u);
      if (vols == 0)
        std::printf("%s: no figures: %s\n", r["label"].get<std::string>().c_str(), r["stopped"].get<std::string>().c_str());
      else
        std::printf("%s: %s %u of %u volumes: %s\n", r["label"].get<std::string>().c_str(),
                    vols < r["volumes_requested"].get<unsigned>() ? "capped at" : "measured with", vols,
                    r["volumes_requested"].get<unsigned>(), r["stopped"].get<std::string>().c_str());
    }
  std::printf("\nthreads, tcp (connections to the target), RSS: with every volume open; KiB/vol: RSS growth "
              "per volume; idle CPU%%: the process's CPU over the idle window, in %% of one core; tgt cmd/s: "
              "commands the target counted meanwhile (keep-alives); CPU us/IO: the process's CPU time per "
              "completed read; open: ms, 1st the first volume, med/max those whose subsystem was already "
              "connected; fails: path failures seen by the volumes; ka exp: controllers the target ended for want "
              "of a keep-alive\n");
}

// nvmeof-target beside this binary's build directory: build/bench/engine_scale ->
// build/tools/nvmeof-target.
std::string default_target_binary() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  const std::string self = n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
  const size_t slash = self.rfind('/');
  return (slash == std::string::npos ? std::string(".") : self.substr(0, slash)) + "/../tools/nvmeof-target";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"engine_scale: host threads, TCP connections, RSS, idle CPU, keep-alive traffic, IOPS and "
               "CPU per I/O at a fixed total queue depth, and open time per volume, as the number of "
               "volumes (namespaces x 2 paths) in one process grows; nvmeof-target runs as a separate "
               "process, a fresh one per row, and each row runs in a child process of its own."};
  Config cfg;
  cfg.target = default_target_binary();
  std::vector<unsigned> volumes{1, 4, 16, 64, 256};
  std::string grid = "8x8";
  bool json = false;
  app.add_option("--volumes", volumes, "rows of N namespaces of one subsystem (comma-separated)")
      ->delimiter(',')
      ->check(CLI::Range(1u, 1024u))
      ->capture_default_str();
  app.add_option("--grid", grid, "one more row of SxN: S subsystems of N namespaces each; \"none\": no such row")
      ->capture_default_str();
  app.add_option("--seconds", cfg.seconds, "the measured I/O window of each row, s")
      ->check(CLI::Range(0.2, 600.0))
      ->capture_default_str();
  app.add_option("--idle-seconds", cfg.idle_seconds, "the idle window of each row, s")
      ->check(CLI::Range(0.2, 600.0))
      ->capture_default_str();
  app.add_option("--depth", cfg.depth, "reads in flight in total, spread over the volumes")
      ->check(CLI::Range(1u, 4096u))
      ->capture_default_str();
  app.add_option("--reactors", cfg.reactors, "VolumeOptions::reactors")->check(CLI::Range(1u, 64u))->capture_default_str();
  app.add_option("--kato-ms", cfg.kato_ms, "keep-alive timeout asked for, ms (0: the library's default, the "
                 "shortest the target allows: 100 ms)")
      ->capture_default_str();
  app.add_option("--poll", cfg.poll, "the host's poll mode")
      ->check(CLI::IsMember({"busy", "adaptive", "sleep"}))
      ->capture_default_str();
  app.add_option("--target", cfg.target, "the nvmeof-target binary (needs --subsystems and --namespaces)")
      ->capture_default_str();
  app.add_option("--target-poll", cfg.target_poll, "the target's --poll")
      ->check(CLI::IsMember({"busy", "adaptive", "sleep"}))
      ->capture_default_str();
  app.add_option("--ns-size", cfg.ns_size, "the target's --size (per namespace)")->capture_default_str();
  app.add_option("--row-timeout", cfg.row_timeout, "a row that has not reported after this long is killed, s")
      ->check(CLI::Range(10.0, 7200.0))
      ->capture_default_str();
  app.add_flag("--json", json, "print the rows as JSON instead of a table");
  CLI11_PARSE(app, argc, argv);

  std::vector<Shape> shapes;
  for (const unsigned n : volumes) shapes.push_back(Shape{1, n});
  if (grid != "none" && !grid.empty()) {
    unsigned s = 0, n = 0;
    char tail = 0;
    if (std::sscanf(grid.c_str(), "%ux%u%c", &s, &n, &tail) != 2 || s < 1 || s > 256 || n < 1 || n > 1024) {
      std::fprintf(stderr, "engine_scale: --grid %s: expected SxN (S 1..256, N 1..1024) or none\n", grid.c_str());
      return 2;
    }
    shapes.push_back(Shape{s, n});
  }
  // Hundreds of sockets on each side: the target inherits the raised limit.
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    (void)::setrlimit(RLIMIT_NOFILE, &rl);
  }
  ::signal(SIGPIPE, SIG_IGN);

  Json rows = Json::array();
  bool any = false;
  for (const Shape& shape : shapes) {
    std::fprintf(stderr, "engine_scale: %s (%u volumes)...\n", shape.label().c_str(), shape.volumes());
    Json r = run_row(shape, cfg);
    if (r.value("volumes", 0u) > 0) any = true;
    if (r.contains("stopped"))
      std::fprintf(stderr, "engine_scale: %s: %s\n", shape.label().c_str(), r["stopped"].get<std::string>().c_str());
    rows.push_back(std::move(r));
  }
  if (json) {
    const Json out{{"paths_per_volume", kPaths}, {"reactors", cfg.reactors},     {"poll", cfg.poll},
                   {"kato_ms", cfg.kato_ms},
                   {"target_poll", cfg.target_poll}, {"depth", cfg.depth},      {"seconds", cfg.seconds},
                   {"idle_seconds", cfg.idle_seconds}, {"ns_size", cfg.ns_size}, {"rows", rows}};
    std::cout << out.dump(2) << std::endl;
  } else {
    print_table(rows, cfg);
  }
  return any ? 0 : 1;
}
