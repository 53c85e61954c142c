// nvmeof-bench: an fio-like load generator over an nvmeof::Volume, against remote targets or an
// embedded one, with every block verified and faults injected on a schedule (the embedded target,
// or an external one's control socket), per-interval figures in a CSV and an SVG plot.
//
// Verification: when the workload reads, the working set is prefilled first (every block
// stamped), so every read of the timed phase is checked; after the timed phase a final pass reads
// the whole working set back and checks each block against the last acknowledged write (this also
// catches a stale write that landed late). Blocks never acknowledged are not checked.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string_view>
#include <thread>
#include <tuple>

#include "bench/fault_target.hpp"
#include "bench/intervals.hpp"
#include "bench/options.hpp"
#include "bench/progress.hpp"
#include "bench/report.hpp"
#include "bench/workload.hpp"
#include "core/key_text.hpp"
#include "nvmeof/target.hpp"
#include "nvmeof/volume.hpp"

using namespace nvmeof;
using namespace nvmeof::bench;

namespace {

constexpr uint64_t kEmbeddedNamespaceBytes = 256ull << 20;
constexpr uint64_t kDefaultWorkingSetCap = 1ull << 30;
constexpr auto kAnaChangeHold = std::chrono::milliseconds(100);
constexpr auto kSweepTimeout = std::chrono::minutes(10);
// How often the main thread looks at a run with no faults and no latency log (service() is
// woken at once by a parked slot; the progress line redraws far less often).
constexpr uint64_t kQuietTickNs = 50'000'000;

uint64_t to_ns(std::chrono::nanoseconds d) { return static_cast<uint64_t>(d.count()); }

bool env_is(const char* name, std::string_view value) {
  const char* v = std::getenv(name);
  return v != nullptr && value == v;
}

// Switches that compare two set-ups of the library (tests/vm/ktls_test.sh and the benchmark
// scripts set them); the library itself takes them only as options.
void apply_environment(VolumeOptions& vo) {
  if (env_is("NVMEOF_KTLS", "0")) vo.connect.tls_kernel = false;
  if (env_is("NVMEOF_SINGLE_ISSUER", "0")) vo.single_issuer = false;
  if (env_is("NVMEOF_SPIN_SOCKETS", "ring")) vo.spin_sockets = false;
}

void print_error(const char* what, const std::error_code& ec) {
  std::fprintf(stderr, "nvmeof-bench: %s: %s\n", what, ec.message().c_str());
}

Result<std::unique_ptr<Target>> start_target(const BenchOptions& o) {
  TargetPort port;
  port.trsvcid = "0";
  const std::string tls = o.tls.empty() ? (o.tls_psk.empty() ? "none" : "required") : o.tls;
  port.tls = tls == "required" ? PortTls::required : tls == "not-required" ? PortTls::not_required : PortTls::none;
  if (port.tls != PortTls::none) {
    // The target takes the key's text; @FILE is read here as the host reads it.
    auto key = detail::read_key_text(o.tls_psk);
    if (!key) {
      std::fprintf(stderr, "nvmeof-bench: --tls-psk: cannot read the key file %s\n", o.tls_psk.c_str() + 1);
      return key.error();
    }
    port.tls_psk = std::move(*key);
  }
  TargetSubsystem sub;
  sub.nqn = o.nqn;
  sub.namespaces[0].size_bytes = kEmbeddedNamespaceBytes;
  if (!o.hostnqn.empty()) {
    // Only this host, with its keys (the target takes their text; @FILE is read here).
    TargetHost h;
    h.nqn = o.hostnqn;
    for (auto [arg, name, out] : {std::tuple{&o.dhchap_secret, "--dhchap-secret", &h.dhchap_key},
                                  std::tuple{&o.dhchap_ctrl_secret, "--dhchap-ctrl-secret", &h.dhchap_ctrl_key}}) {
      if (arg->empty()) continue;
      auto key = detail::read_key_text(*arg);
      if (!key) {
        std::fprintf(stderr, "nvmeof-bench: %s: cannot read the key file %s\n", name, arg->c_str() + 1);
        return key.error();
      }
      *out = std::move(*key);
    }
    sub.hosts.push_back(std::move(h));
    sub.access = HostAccess::allow_list;
  }
  TargetOptions t;
  t.ports.assign(o.paths, port);
  t.subsystems = {sub};
  t.ccr = o.ccr ? CcrSupport::enabled : CcrSupport::disabled;
  return Target::start(t);
}

// Applies the fault schedule (--fault-script, or --fail-path's one fault) on time: each entry
// once its time since the timed phase's start (plus the lateness of the entries before it) has
// come, in order; an ana-change is flipped back to optimized 100 ms later (unless another entry on
// its path came first). Main thread only.
class FaultDriver {
 public:
  /// `paths`: every path the script may name (the standby ones too), by index.
  FaultDriver(FaultTarget* target, std::vector<TransportAddress> paths) : target_(target), paths_(std::move(paths)) {}

  void tick(uint64_t now, uint64_t timed_start, Workload& w, Volume& vol, BenchReport& r) {
    if (target_ == nullptr) return;
    // An entry applied late (a loaded machine) delays the later ones as much: the spacing the
    // script asks for (a restore 300 ms after its fault) is kept.
    while (next_ < r.steps.size() && now >= timed_start + to_ns(r.steps[next_].step.at) + lag_ns_) {
      AppliedStep& a = r.steps[next_++];
      apply(a, timed_start, w, vol, r);
      const uint64_t due = timed_start + to_ns(a.step.at) + lag_ns_;
      if (a.applied_ns > due) lag_ns_ += a.applied_ns - due;
    }
    for (auto it = flips_.begin(); it != flips_.end();) {
      if (now < it->second) {
        ++it;
        continue;
      }
      std::string err;
      deliver(target_->set_ana_state(it->first, AnaState::optimized), err);
      it = flips_.erase(it);
    }
  }

  /// The path statistics taken just before the first fault.
  const VolumeStats& snapshot() const noexcept { return snapshot_; }

 private:
  void apply(AppliedStep& a, uint64_t timed_start, Workload& w, Volume& vol, BenchReport& r) {
    const size_t port = a.step.path;
    std::erase_if(flips_, [&](const auto& f) { return f.first == port; });
    if (a.step.action == FaultArg::restore) {
      a.applied_ns = monotonic_ns();
      a.applied = true;
      const bool cleared = deliver(target_->clear_faults(port), a.error);
      const bool optimized = deliver(target_->set_ana_state(port, AnaState::optimized), a.error);
      a.delivered = cleared && optimized;
      if (r.fault.injected && static_cast<int>(port) == r.fault.path && r.fault.restored_after_ms < 0)
        r.fault.restored_after_ms = static_cast<double>(a.applied_ns - r.fault.inject_ns) / 1e6;
      return;
    }
    const bool first = !r.fault.injected;
    if (first) snapshot_ = vol.stats();
    a.applied_ns = monotonic_ns();
    a.applied = true;
    w.mark_fault(a.applied_ns);
    a.delivered = inject(a, port, vol);
    if (first) {
      r.fault.injected = true;
      r.fault.path = static_cast<int>(port);
      r.fault.kind = a.step.action;
      r.fault.inject_ns = a.applied_ns;
      r.fault.at_ms = static_cast<double>(a.applied_ns - timed_start) / 1e6;
    }
    if (a.step.action == FaultArg::ana_change) flips_.emplace_back(port, a.applied_ns + to_ns(kAnaChangeHold));
  }

  bool inject(AppliedStep& a, size_t port, Volume& vol) {
    switch (a.step.action) {
      case FaultArg::remove_path:
      case FaultArg::add_path: {
        if (port >= paths_.size()) {
          a.error = "no path " + std::to_string(port);
          return false;
        }
        // remove_path returns once the path is gone (its commands drained, or fenced if it failed
        // meanwhile): a late step delays the later ones by as much (tick()).
        const auto r = a.step.action == FaultArg::add_path ? vol.add_path(paths_[port]).failure()
                                                           : vol.remove_path(paths_[port]).failure();
        if (!r.ec) return true;
        a.error = r.message();
        std::fprintf(stderr, "nvmeof-bench: %s of path %zu: %s\n", to_string(a.step.action), port, a.error.c_str());
        return false;
      }
      case FaultArg::none: case FaultArg::restore: return true;
      case FaultArg::reset: return deliver(target_->inject(port, FaultKind::reset), a.error);
      case FaultArg::blackhole: return deliver(target_->inject(port, FaultKind::blackhole), a.error);
      case FaultArg::partition: return deliver(target_->inject(port, FaultKind::partition), a.error);
      case FaultArg::refuse: return deliver(target_->inject(port, FaultKind::refuse), a.error);
      case FaultArg::ana_inaccessible: return deliver(target_->set_ana_state(port, AnaState::inaccessible), a.error);
      case FaultArg::ana_change: return deliver(target_->set_ana_state(port, AnaState::change), a.error);
      case FaultArg::slow:
        return deliver(target_->set_latency(port, std::chrono::duration_cast<std::chrono::microseconds>(a.step.latency)),
                       a.error);
      case FaultArg::fail_status: return deliver(target_->fail_commands(port, status::kInternalError), a.error);
    }
    return true;
  }
  // An external target may refuse or be gone: say so, the run goes on (its report shows it).
  bool deliver(bool ok, std::string& error) {
    if (ok) return true;
    error = target_->error();
    std::fprintf(stderr, "nvmeof-bench: fault not delivered: %s\n", error.c_str());
    return false;
  }

  FaultTarget* target_;
  std::vector<TransportAddress> paths_;
  VolumeStats snapshot_;
  size_t next_ = 0;
  uint64_t lag_ns_ = 0;
  std::vector<std::pair<size_t, uint64_t>> flips_;  ///< (port, when) of pending ana-change ends
};

bool write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();
  if (out) return true;
  std::fprintf(stderr, "nvmeof-bench: cannot write %s\n", path.c_str());
  return false;
}

uint64_t path_ios(const VolumeStats& s, int index) {
  for (const PathStats& p : s.paths)
    if (p.index == index) return p.ios;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  ParsedArgs parsed = parse_args(argc, argv);
  if (!parsed.options) return parsed.exit_code;
  const BenchOptions o = *parsed.options;
  auto say = [&](const std::string& msg) {
    if (!o.json) std::fprintf(stderr, "nvmeof-bench: %s\n", msg.c_str());
  };

  BenchReport report;
  report.options = o;
  for (const FaultStep& s : o.schedule) report.steps.push_back({s, false, 0, true, {}});

  std::unique_ptr<Target> target;
  if (o.embedded) {
    auto t = start_target(o);
    if (!t) {
      print_error("cannot start the embedded target", t.error());
      return 1;
    }
    target = std::move(*t);
    for (size_t i = 0; i < o.paths; ++i) report.addresses.push_back(target->port_address(i));
  } else {
    report.addresses = o.targets;
  }
  std::unique_ptr<FaultTarget> fault_target;
  if (target) {
    fault_target = local_fault_target(*target);
  } else if (!o.target_control.empty()) {
    std::string err;
    fault_target = remote_fault_target(o.target_control, o.max_fault_path(), err);
    if (!fault_target) {
      std::fprintf(stderr, "nvmeof-bench: %s\n", err.c_str());
      return 1;
    }
  }

  VolumeOptions vo;
  for (const std::string& a : report.addresses) {
    auto addr = TransportAddress::parse(a);
    if (!addr) {
      std::fprintf(stderr, "nvmeof-bench: --target %s: %s\n", a.c_str(), addr.error().message().c_str());
      return 2;
    }
    if (vo.paths.size() < o.host_ifaces.size()) addr->host_iface = o.host_ifaces[vo.paths.size()];
    vo.paths.push_back(*addr);
  }
  // The standby paths are the script's to add (add-path).
  const std::vector<TransportAddress> all_paths = vo.paths;
  vo.paths.resize(vo.paths.size() - std::min<size_t>(o.standby_paths, vo.paths.size() - 1));
  vo.connect.subnqn = o.nqn;
  vo.connect.digest = o.digest;
  vo.connect.tls_psk = o.tls_psk;
  vo.connect.hostnqn = o.hostnqn;
  vo.connect.dhchap_secret = o.dhchap_secret;
  vo.connect.dhchap_ctrl_secret = o.dhchap_ctrl_secret;
  vo.connect.io_queue_depth = std::clamp(o.iodepth * 2, 128u, 1024u);
  vo.selector = o.selector;
  vo.reactors = o.reactors;
  vo.poll = o.poll;
  vo.placement = o.placement;
  vo.cpus = o.cpus;
  vo.memory_node = o.memory_node;
  vo.io_deadline = std::chrono::duration_cast<std::chrono::microseconds>(o.io_deadline);
  vo.fence_bound = std::chrono::duration_cast<std::chrono::milliseconds>(o.fence_bound);
  vo.use_ccr = o.ccr;
  vo.connect.kato_ms = o.kato_ms;
  vo.control_socket = o.control_dir;
  vo.metrics_listen = o.metrics_listen;
  apply_environment(vo);

  Result<std::unique_ptr<Volume>> opened = Errc::invalid_argument;
  if (!o.discover.empty()) {
    auto disc = TransportAddress::parse(o.discover);
    if (!disc) {
      std::fprintf(stderr, "nvmeof-bench: --discover %s: %s\n", o.discover.c_str(), disc.error().message().c_str());
      return 2;
    }
    opened = Volume::open_discovered(*disc, vo);
  } else {
    opened = Volume::open(vo);
  }
  if (!opened) {
    print_error("cannot open the volume", opened.error());
    return 1;
  }
  std::unique_ptr<Volume> volume = std::move(*opened);
  if (!o.discover.empty()) {
    const VolumeStats found = volume->stats();
    for (const PathStats& p : found.paths) report.addresses.push_back(p.address);
    say("discovered " + std::to_string(found.paths.size()) + " path(s) of " + o.nqn + " at " + o.discover);
    // Persistent discovery: the run follows what the discovery controller lists from now on.
    if (auto w = volume->host()->add_discovery(*TransportAddress::parse(o.discover), vo.connect); !w)
      std::fprintf(stderr, "nvmeof-bench: --discover %s: cannot keep watching it: %s\n", o.discover.c_str(),
                   w.message().c_str());
    if (o.has_faults() && o.max_fault_path() >= found.paths.size()) {
      std::fprintf(stderr, "nvmeof-bench: %s path %u: the discovery controller listed %zu path(s)\n",
                   o.has_fault_script() ? "--fault-script" : "--fail-path", o.max_fault_path(), found.paths.size());
      return 2;
    }
  }
  if (volume->metrics_port() != 0)
    say("metrics at http://" + o.metrics_listen.substr(0, o.metrics_listen.rfind(':')) + ":" +
        std::to_string(volume->metrics_port()) + "/metrics");
  if (!volume->control_socket_path().empty()) say("control socket " + volume->control_socket_path());
  report.placement_json = to_json(volume->placement());
  if (o.show_placement && !o.json) std::cout << to_text(volume->placement()) << std::flush;
  report.block_size = volume->block_size();
  report.namespace_blocks = volume->size_blocks();

  const uint64_t ns_bytes = report.namespace_blocks * report.block_size;
  if (report.block_size == 0 || o.bs % report.block_size != 0) {
    std::fprintf(stderr, "nvmeof-bench: --bs %u is not a multiple of the block size %u\n", o.bs,
                 report.block_size);
    return 2;
  }
  const uint64_t wanted = o.size ? std::min(o.size, ns_bytes) : std::min(ns_bytes, kDefaultWorkingSetCap);
  WorkloadConfig cfg;
  cfg.rw = o.rw;
  cfg.rwmixread = o.rwmixread;
  cfg.block_size = report.block_size;
  cfg.unit_blocks = o.bs / report.block_size;
  cfg.units = wanted / o.bs;
  cfg.iodepth = o.iodepth;
  cfg.verify = o.verify;
  cfg.seed = o.seed;
  for (const FaultStep& s : o.schedule) cfg.fault_windows += s.action != FaultArg::restore;
  std::unique_ptr<IntervalRecorder> recorder;
  if (o.records_intervals()) {
    recorder = std::make_unique<IntervalRecorder>(to_ns(o.log_interval), to_ns(o.runtime));
    cfg.recorder = recorder.get();
  }
  // Slot i runs on reactor i % reactors; its buffer sits on that reactor's node (or on
  // --memory-node for the remote-memory baseline).
  for (const ReactorPlacement& r : volume->placement().reactors)
    cfg.reactor_nodes.push_back(o.memory_node >= 0 ? o.memory_node : r.node);
  cfg.run_id = mix64(monotonic_ns() ^ (static_cast<uint64_t>(getpid()) << 32) ^ o.seed);
  if (cfg.units == 0) {
    std::fprintf(stderr, "nvmeof-bench: the working set holds no --bs sized I/O\n");
    return 2;
  }
  report.working_set_bytes = cfg.units * o.bs;
  report.run_id = cfg.run_id;

  Workload work(*volume, cfg);
  if (o.verify && o.reads()) {
    say("prefilling " + format_size(report.working_set_bytes) + " for verification");
    work.start(Phase::prefill);
    report.drained = work.wait_idle(kSweepTimeout);
    report.prefill = work.totals(Phase::prefill);
    report.prefilled = true;
  }

  FaultDriver faults(fault_target.get(), all_paths);
  const VolumeStats at_start = volume->stats();
  if (report.drained) {
    say("running " + std::string(to_string(o.rw)) + " for " +
        std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(o.runtime).count()) +
        " ms");
    const uint64_t t0 = monotonic_ns();
    if (recorder) recorder->start(t0);
    work.start(Phase::timed);
    report.timed_start_ns = t0;
    report.fault.inject_ns = t0;  // the timeline's origin until a fault is injected
    ProgressLine progress(o.progress && !o.json, to_ns(o.runtime));
    // Faults and the latency log want millisecond ticks; a plain run only needs this thread for
    // parked slots (woken at once), the progress line and the end. A QD1 run's p99 against a
    // polling target was 2.5x its p50 with a wake-up every millisecond (each one preempts the
    // polling reactor or target on a 2-core machine) and 1.3x with this.
    const uint64_t tick_ns = !report.steps.empty() || recorder ? 1'000'000 : kQuietTickNs;
    const uint64_t end = t0 + to_ns(o.runtime);
    for (uint64_t now = t0; now < end; now = monotonic_ns()) {
      progress.tick(now, t0, *volume);
      if (recorder) recorder->note_usable(now, volume->usable_paths());
      faults.tick(now, t0, work, *volume, report);
      work.service();
      work.wait_for_park(std::chrono::nanoseconds(std::min(tick_ns, end - now)));
    }
    progress.finish();
    report.timed_end_ns = monotonic_ns();
    work.request_stop();
    // Completions may wait for a path up to no_path_timeout; keep the fault schedule running.
    const uint64_t give_up = monotonic_ns() + to_ns(vo.no_path_timeout) + 5'000'000'000ull;
    while (work.active() != 0 && monotonic_ns() < give_up) {
      faults.tick(monotonic_ns(), t0, work, *volume, report);
      work.service();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    report.drained = work.wait_idle(std::chrono::milliseconds(0));
    report.timed = work.totals(Phase::timed);
    if (recorder) report.intervals = recorder->rows();

    const VolumeStats at_end = volume->stats();
    for (size_t i = 0; i < at_end.reactor_cpu_ns.size(); ++i)
      report.reactor_cpu_ns += at_end.reactor_cpu_ns[i] - (i < at_start.reactor_cpu_ns.size() ? at_start.reactor_cpu_ns[i] : 0);
    const VolumeStats& at_fault = report.fault.injected ? faults.snapshot() : at_end;
    for (const PathStats& p : at_end.paths) {
      PathReport pr;
      pr.stats = p;
      pr.ios_timed = p.ios - path_ios(at_start, p.index);
      pr.ios_before_fault = path_ios(at_fault, p.index) - path_ios(at_start, p.index);
      pr.ios_after_fault = p.ios - path_ios(at_fault, p.index);
      report.paths.push_back(pr);
    }
    for (const FailoverEvent& e : at_end.timeline)
      if (e.detect_ns >= t0) report.fault.timeline.push_back(e);
  }

  if (o.verify && report.drained) {
    say("checking " + format_size(report.working_set_bytes) + " read back");
    work.start(Phase::final_check);
    report.drained = work.wait_idle(kSweepTimeout);
    report.final_check = work.totals(Phase::final_check);
    report.final_checked = true;
  }

  report.volume_json = to_json(volume->stats());
  // The volume completes whatever is still queued before it goes: the workload must outlive it.
  volume.reset();
  if (target) target->stop();

  bool written = true;
  if (!o.latency_log.empty()) written = write_file(o.latency_log, latency_csv(report)) && written;
  if (!o.plot.empty()) written = write_file(o.plot, render_svg(plot_data(report))) && written;
  if (o.json) {
    std::cout << to_json(report).dump(2) << "\n";
  } else {
    std::cout << to_text(report);
  }
  return written ? report.exit_code() : 1;
}
