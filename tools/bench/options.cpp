#include "bench/options.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>

#include "bench/fault_script.hpp"
#include "bench/intervals.hpp"
#include "multipath/option_text.hpp"
#include "numa/cpulist.hpp"

namespace nvmeof::bench {

const char* to_string(RwMode m) noexcept {
  switch (m) {
    case RwMode::read: return "read";
    case RwMode::write: return "write";
    case RwMode::randread: return "randread";
    case RwMode::randwrite: return "randwrite";
    case RwMode::rw: return "rw";
    case RwMode::randrw: return "randrw";
  }
  return "?";
}

const char* to_string(FaultArg f) noexcept {
  switch (f) {
    case FaultArg::none: return "none";
    case FaultArg::reset: return "reset";
    case FaultArg::blackhole: return "blackhole";
    case FaultArg::partition: return "partition";
    case FaultArg::ana_inaccessible: return "ana-inaccessible";
    case FaultArg::ana_change: return "ana-change";
    case FaultArg::slow: return "slow";
    case FaultArg::fail_status: return "fail-status";
    case FaultArg::refuse: return "refuse";
    case FaultArg::restore: return "restore";
    case FaultArg::remove_path: return "remove-path";
    case FaultArg::add_path: return "add-path";
  }
  return "?";
}

bool BenchOptions::reads() const noexcept {
  switch (rw) {
    case RwMode::read: case RwMode::randread: return true;
    case RwMode::write: case RwMode::randwrite: return false;
    case RwMode::rw: case RwMode::randrw: return rwmixread > 0;
  }
  return false;
}

bool BenchOptions::writes() const noexcept {
  switch (rw) {
    case RwMode::read: case RwMode::randread: return false;
    case RwMode::write: case RwMode::randwrite: return true;
    case RwMode::rw: case RwMode::randrw: return rwmixread < 100;
  }
  return false;
}

unsigned BenchOptions::max_fault_path() const noexcept {
  unsigned m = 0;
  for (const FaultStep& s : schedule) m = std::max(m, s.path);
  return m;
}

bool BenchOptions::random() const noexcept {
  return rw == RwMode::randread || rw == RwMode::randwrite || rw == RwMode::randrw;
}

namespace {

// Splits "123unit" into its number and its lower-cased unit.
bool split_number(std::string_view s, uint64_t& n, std::string& unit) {
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  if (ec != std::errc{} || end == s.data()) return false;
  unit.clear();
  for (const char* p = end; p != s.data() + s.size(); ++p)
    unit += static_cast<char>(std::tolower(static_cast<unsigned char>(*p)));
  return true;
}

template <class T>
std::vector<std::string> keys(const std::map<std::string, T>& m) {
  std::vector<std::string> k;
  for (const auto& [name, value] : m) k.push_back(name);
  return k;
}

}  // namespace

std::optional<uint64_t> parse_size(std::string_view s) {
  uint64_t n = 0;
  std::string unit;
  if (!split_number(s, n, unit)) return std::nullopt;
  static const std::map<std::string, unsigned> kShift = {
      {"", 0}, {"b", 0}, {"k", 10}, {"kb", 10}, {"kib", 10}, {"m", 20}, {"mb", 20},
      {"mib", 20}, {"g", 30}, {"gb", 30}, {"gib", 30}};
  const auto it = kShift.find(unit);
  if (it == kShift.end() || n == 0 || n > (UINT64_MAX >> it->second)) return std::nullopt;
  return n << it->second;
}

std::optional<std::chrono::nanoseconds> parse_duration(std::string_view s) {
  uint64_t n = 0;
  std::string unit;
  if (!split_number(s, n, unit)) return std::nullopt;
  using namespace std::chrono;
  if (unit.empty() || unit == "s") return duration_cast<nanoseconds>(seconds(n));
  if (unit == "ms") return duration_cast<nanoseconds>(milliseconds(n));
  if (unit == "us") return duration_cast<nanoseconds>(microseconds(n));
  return std::nullopt;
}

std::string format_size(uint64_t bytes) {
  static constexpr std::pair<unsigned, const char*> kUnits[] = {{30, "g"}, {20, "m"}, {10, "k"}};
  for (const auto& [shift, suffix] : kUnits) {
    if (bytes != 0 && bytes % (uint64_t{1} << shift) == 0)
      return std::to_string(bytes >> shift) + suffix;
  }
  return std::to_string(bytes);
}

ParsedArgs parse_args(int argc, char** argv) {
  BenchOptions o;
  CLI::App app{"nvmeof-bench: an fio-like load generator over an nvmeof::Volume, with data "
               "verification and fault injection on the embedded target"};
  app.option_defaults()->always_capture_default();

  const std::map<std::string, RwMode> rw_names = {
      {"read", RwMode::read}, {"write", RwMode::write}, {"randread", RwMode::randread},
      {"randwrite", RwMode::randwrite}, {"rw", RwMode::rw}, {"randrw", RwMode::randrw}};
  const std::map<std::string, SelectorKind> selector_names = {
      {"service-time", SelectorKind::service_time}, {"round-robin", SelectorKind::round_robin},
      {"queue-depth", SelectorKind::queue_depth}, {"numa", SelectorKind::numa}};
  const std::map<std::string, Digest> digest_names = {
      {"none", Digest::none}, {"header", Digest::header}, {"data", Digest::data},
      {"both", Digest::both}};
  const std::map<std::string, FaultArg> fault_names = {
      {"reset", FaultArg::reset}, {"blackhole", FaultArg::blackhole}, {"partition", FaultArg::partition},
      {"ana-inaccessible", FaultArg::ana_inaccessible}, {"ana-change", FaultArg::ana_change},
      {"slow", FaultArg::slow}, {"fail-status", FaultArg::fail_status}, {"refuse", FaultArg::refuse}};

  const CLI::Validator size_check(
      [](std::string& s) { return parse_size(s) ? std::string{} : "not a size: " + s; }, "SIZE");
  const CLI::Validator duration_check(
      [](std::string& s) { return parse_duration(s) ? std::string{} : "not a duration: " + s; },
      "DURATION");

  std::string bs = "4k", runtime = "5s", size, fail_at = "2s", restore_after = "0",
              slow_latency = "50ms", io_deadline = "0", fence_bound = "0";
  std::string rw = "read", selector = "service-time", digest = "none", fail_kind = "reset";
  app.add_option("--rw", rw, "I/O pattern (rw, randrw: mixed)")->check(CLI::IsMember(keys(rw_names)));
  app.add_option("--rwmixread", o.rwmixread, "percent of reads in rw / randrw")
      ->check(CLI::Range(0u, 100u));
  app.add_option("--bs", bs, "bytes per I/O (k/m suffix), a multiple of the block size")
      ->check(size_check);
  app.add_option("--iodepth", o.iodepth, "I/Os kept in flight")->check(CLI::Range(1u, 4096u));
  app.add_option("--runtime", runtime, "timed phase (s/ms suffix)")->check(duration_check);
  app.add_option("--size", size, "working set bytes (default: the namespace, at most 1g)")
      ->check(size_check);
  auto* target = app.add_option("--target", o.targets, "ADDR:PORT of one path (repeat per path)")
                     ->allow_extra_args(false);
  app.add_option("--nqn", o.nqn, "subsystem NQN");
  auto* embedded = app.add_flag("--embedded", o.embedded,
                                "start an embedded target in-process (--paths ports, 256 MiB RAM)");
  target->excludes(embedded);
  app.add_option("--paths", o.paths, "ports of the embedded target")->check(CLI::Range(1u, 16u));
  app.add_option("--standby-paths", o.standby_paths,
                 "the last N paths are not opened with the volume; a --fault-script add-path adds one")
      ->check(CLI::Range(1u, 15u));
  app.add_option("--selector", selector, "path selector")
      ->check(CLI::IsMember(keys(selector_names)));
  app.add_option("--digest", digest, "NVMe/TCP digests")->check(CLI::IsMember(keys(digest_names)));
  app.add_option("--reactors", o.reactors, "data-plane threads")->check(CLI::Range(1u, 64u));
  std::string poll = "adaptive";
  app.add_option("--poll", poll, "reactor polling: busy (never sleeps), adaptive, sleep")
      ->check(CLI::IsMember({"busy", "adaptive", "sleep"}));
  std::string placement = "numa", cpus;
  app.add_option("--placement", placement,
                 "numa: reactors pinned, memory on their node, paths by distance; unpinned: none")
      ->check(CLI::IsMember({"numa", "unpinned"}));
  app.add_option("--cpus", cpus, "CPU list for the reactors (e.g. 0-3,8)")
      ->check(CLI::Validator(
          [](std::string& s) { return parse_cpulist(s) ? std::string{} : "not a CPU list: " + s; },
          "CPULIST"));
  app.add_option("--memory-node", o.memory_node,
                 "put every reactor's memory and the I/O buffers on this node")
      ->check(CLI::Range(0, 1023));
  app.add_option("--host-iface", o.host_ifaces, "interface to bind each --target to (in order)")
      ->needs(target);
  app.add_option("--io-deadline", io_deadline,
                 "per-command deadline (0: derived from latency; raise it under valgrind or TCG)")
      ->check(duration_check);
  app.add_option("--fence-bound", fence_bound,
                 "wait before writes leave a dead path when the target reports no CQT "
                 "(0: the keep-alive timeout)")
      ->check(duration_check);
  std::string ccr = "on", kato;
  app.add_option("--ccr", ccr,
                 "Cross-Controller Reset: on (writes leave a silent path once another controller "
                 "reset it) or off (they wait 3 x KATO + CQT); with --embedded, the target's too")
      ->check(CLI::IsMember({"on", "off"}));
  app.add_option("--kato", kato, "keep-alive timeout (default: the shortest the target allows)")
      ->check(duration_check);
  app.add_flag("--show-placement", o.show_placement, "print the placement plan");
  app.add_flag("--verify,!--no-verify", o.verify, "stamp and check every block");
  app.add_flag("--json", o.json, "print the report as JSON");
  auto* fail_path = app.add_option("--fail-path", o.fail_path,
                                   "port index to fault (one fault; --fault-script for several)")
                        ->check(CLI::Range(0, 15));
  app.add_option("--fail-at", fail_at, "when to inject, from the start of the timed phase")
      ->check(duration_check)->needs(fail_path);
  app.add_option("--fail-kind", fail_kind, "fault to inject")
      ->check(CLI::IsMember(keys(fault_names)))->needs(fail_path);
  app.add_option("--restore-after", restore_after, "give the port back this long after the fault")
      ->check(duration_check)->needs(fail_path);
  app.add_option("--slow-latency", slow_latency, "delay per command for --fail-kind slow")
      ->check(duration_check)->needs(fail_path);
  app.add_option("--seed", o.seed, "random seed of the offsets and the read/write mix");
  auto* script = app.add_option(
      "--fault-script", o.fault_script,
      "several faults in one run: TIME:ACTION:PATH entries separated by commas, or @FILE with one "
      "entry a line (# comments). TIME from the start of the timed phase (2s, 1.5s, 250ms), inside "
      "--runtime and never going back; ACTION reset, blackhole, partition, refuse, ana-inaccessible, "
      "ana-change, slow[=DELAY] (alias latency), fail-status, or restore (alias clear: the path's "
      "faults end, its ANA group optimized again; only after a fault on that path); or a change of "
      "the volume's paths: remove-path (it drains and is removed) and add-path (a removed one, or "
      "one of --standby-paths); PATH the path "
      "index. Example: 1s:reset:0,2s:partition:1,2.5s:restore:1. The report has one entry per fault "
      "(JSON: faults) with the failover it caused, or why none");
  script->excludes(fail_path);
  std::string log_interval = "1s";
  app.add_option("--latency-log", o.latency_log,
                 "write a CSV of the timed phase: header row,time_s,read_iops,write_iops,read_mib_s,"
                 "write_mib_s,lat_p50_us,lat_p99_us,lat_max_us,usable_paths,event,path,detail; "
                 "`interval` rows (one per --log-interval, time_s its end, latency of the I/Os completed "
                 "in it, usable_paths the fewest seen) and `event` rows (fault, restore, path_failed, "
                 "io_moved, reconnected; only time_s, event, path, detail) in time order");
  app.add_option("--log-interval", log_interval, "interval of --latency-log and --plot (e.g. 100ms)")
      ->check(duration_check);
  app.add_option("--plot", o.plot,
                 "write an SVG of the timed phase: IOPS and p99 latency over time, each fault, restore "
                 "and failover marked");
  // Observability and external fault injection.
  app.add_option(
      "--target-control", o.target_control,
      "control socket of an external nvmeof-target (its --control PATH): --fail-path and --fault-script "
      "faults go there");
  auto* discover = app.add_option("--discover", o.discover,
                                  "ADDR:PORT of a discovery controller: open every path it lists for --nqn, and "
                                  "keep watching it: a port it lists later becomes a path, one it stops listing is "
                                  "removed (persistent discovery)");
  discover->excludes(target)->excludes(embedded);
  app.add_option("--tls-psk", o.tls_psk,
                 "NVMe/TCP TLS 1.3 with this PSK (NVMeTLSkey-1:0X:...:, as nvme gen-tls-key prints "
                 "it, or @FILE) on every path; with --embedded the target's ports require it");
  app.add_option("--tls", o.tls,
                 "with --embedded: the target ports' secure channel (none, not-required, required; "
                 "default required with --tls-psk, else none); the host uses TLS when --tls-psk is set")
      ->check(CLI::IsMember({"none", "not-required", "required"}));
  app.add_option("--hostnqn", o.hostnqn,
                 "the host NQN to connect as (default: one derived from a per-process host ID); with "
                 "--embedded the target allows only this host");
  app.add_option("--dhchap-secret", o.dhchap_secret,
                 "DH-HMAC-CHAP: the host's secret (DHHC-1:0X:...:, as nvme gen-dhchap-key prints it, or "
                 "@FILE); with --embedded the target asks the host to authenticate with it (needs --hostnqn)");
  app.add_option("--dhchap-ctrl-secret", o.dhchap_ctrl_secret,
                 "DH-HMAC-CHAP: the controller's secret (or @FILE), so that the host authenticates the "
                 "controller too (bidirectional; needs --dhchap-secret)");
  app.add_flag("!--no-progress", o.progress, "no status line while running (none either when stderr is not a terminal)");
  app.add_option("--control-dir", o.control_dir,
                 "publish the volume on a control socket in DIR (nvmeof-paths --control-dir DIR reads it)");
  app.add_option("--metrics-listen", o.metrics_listen,
                 "serve Prometheus metrics of the volume at ADDR:PORT/metrics (e.g. 127.0.0.1:9464)");

  try {
    app.parse(argc, argv);
    if (!o.embedded && o.targets.empty() && o.discover.empty())
      throw CLI::RequiredError("--target, --discover or --embedded");
    if (!o.tls.empty() && !o.embedded) throw CLI::ValidationError("--tls", "needs --embedded");
    if (!o.dhchap_ctrl_secret.empty() && o.dhchap_secret.empty())
      throw CLI::ValidationError("--dhchap-ctrl-secret", "needs --dhchap-secret");
    if (!o.dhchap_secret.empty() && o.embedded && o.hostnqn.empty())
      throw CLI::ValidationError("--dhchap-secret", "with --embedded needs --hostnqn (the host the target allows)");
    if (!o.tls.empty() && o.tls != "none" && o.tls_psk.empty())
      throw CLI::ValidationError("--tls", "needs --tls-psk");
    if (!o.target_control.empty() && o.embedded)
      throw CLI::ValidationError("--target-control", "is for an external target (--target or --discover)");
    if (const auto b = parse_size(bs); b && *b > (16u << 20))
      throw CLI::ValidationError("--bs", "at most 16m");
    if (o.host_ifaces.size() > o.targets.size())
      throw CLI::ValidationError("--host-iface", "at most one per --target");
    if (o.has_fault() && !o.embedded && o.target_control.empty())
      throw CLI::ValidationError("--fail-path", "needs --embedded or --target-control");
    if (o.has_fault_script() && !o.embedded && o.target_control.empty())
      throw CLI::ValidationError("--fault-script", "needs --embedded or --target-control");
    if (const auto li = parse_duration(log_interval); !li || li->count() == 0)
      throw CLI::ValidationError("--log-interval", "must be above 0");
    else if (const auto rt = parse_duration(runtime);
             rt && static_cast<uint64_t>((rt->count() + li->count() - 1) / li->count()) > IntervalRecorder::kMaxIntervals)
      throw CLI::ValidationError("--log-interval", "at most " + std::to_string(IntervalRecorder::kMaxIntervals) +
                                                       " intervals in --runtime: raise it");
    if (o.has_fault() && o.discover.empty() &&
        static_cast<unsigned>(o.fail_path) >= (o.embedded ? o.paths : o.targets.size()))
      throw CLI::ValidationError("--fail-path", "must be below the number of paths");
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return {std::nullopt, rc == 0 ? 0 : 2};
  }
  o.placement = placement == "numa" ? PlacementMode::numa : PlacementMode::unpinned;
  if (!cpus.empty()) o.cpus = *parse_cpulist(cpus);
  o.rw = rw_names.at(rw);
  o.selector = selector_names.at(selector);
  o.poll = *parse_poll_mode(poll);
  o.digest = digest_names.at(digest);
  o.fail_kind = fault_names.at(fail_kind);
  o.bs = static_cast<uint32_t>(*parse_size(bs));
  o.runtime = *parse_duration(runtime);
  o.size = size.empty() ? 0 : *parse_size(size);
  o.fail_at = *parse_duration(fail_at);
  o.restore_after = *parse_duration(restore_after);
  o.slow_latency = *parse_duration(slow_latency);
  o.io_deadline = *parse_duration(io_deadline);
  o.fence_bound = *parse_duration(fence_bound);
  o.ccr = ccr == "on";
  if (!kato.empty())
    o.kato_ms = static_cast<uint32_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(*parse_duration(kato)).count());
  o.log_interval = *parse_duration(log_interval);
  if (!o.has_fault()) o.fail_kind = FaultArg::none;
  if (!o.embedded) o.paths = static_cast<unsigned>(o.targets.size());
  if (o.standby_paths > 0 && (!o.discover.empty() || o.standby_paths >= o.paths)) {
    std::fprintf(stderr, "nvmeof-bench: --standby-paths: must leave at least one of the %u paths open "
                         "(and cannot go with --discover)\n", o.paths);
    return {std::nullopt, 2};
  }
  if (script->count() > 0) {
    FaultScriptLimits limits;
    limits.paths = o.discover.empty() ? o.paths : 0;
    limits.standby = o.standby_paths;
    limits.runtime = o.runtime;
    limits.slow_latency = o.slow_latency;
    std::string error;
    auto steps = load_fault_script(o.fault_script, limits, error);
    if (!steps) {
      std::fprintf(stderr, "nvmeof-bench: %s\n", error.c_str());
      return {std::nullopt, 2};
    }
    o.schedule = std::move(*steps);
  } else if (o.has_fault()) {
    // The single-fault flags are a one-entry schedule (two with --restore-after).
    const auto path = static_cast<unsigned>(o.fail_path);
    o.schedule.push_back({o.fail_at, o.fail_kind, path, o.slow_latency,
                          "--fail-kind " + std::string(to_string(o.fail_kind)) + " --fail-path " + std::to_string(path)});
    if (o.restore_after.count() > 0)
      o.schedule.push_back({o.fail_at + o.restore_after, FaultArg::restore, path, {}, "--restore-after"});
  }
  // Fail now rather than after the run when an output file cannot be written.
  for (const std::string* f : {&o.latency_log, &o.plot}) {
    if (f->empty()) continue;
    std::ofstream probe(*f, std::ios::trunc);
    if (!probe) {
      std::fprintf(stderr, "nvmeof-bench: cannot write %s\n", f->c_str());
      return {std::nullopt, 2};
    }
  }
  return {o, 0};
}

}  // namespace nvmeof::bench
