#include "bench/report.hpp"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace nvmeof::bench {

namespace {

using nlohmann::json;

double round3(double v) { return std::round(v * 1000.0) / 1000.0; }
double ns_to_us(uint64_t ns) { return round3(static_cast<double>(ns) / 1e3); }
double ns_to_ms(double ns) { return round3(ns / 1e6); }

struct OpFigures {
  uint64_t ios = 0;
  uint64_t bytes = 0;
  double iops = 0;
  double mib_per_s = 0;
  const LatencyHistogram* latency = nullptr;
};

OpFigures figures(const OpTotals& t, double seconds) {
  OpFigures f{t.ios, t.bytes, 0, 0, &t.latency};
  if (seconds > 0) {
    f.iops = static_cast<double>(t.ios) / seconds;
    f.mib_per_s = static_cast<double>(t.bytes) / seconds / (1024.0 * 1024.0);
  }
  return f;
}

json op_json(const OpFigures& f) {
  const LatencyHistogram& h = *f.latency;
  return {{"ios", f.ios},
          {"bytes", f.bytes},
          {"iops", std::round(f.iops)},
          {"mib_per_s", round3(f.mib_per_s)},
          {"latency_us",
           {{"p50", ns_to_us(h.percentile(50))},
            {"p99", ns_to_us(h.percentile(99))},
            {"p999", ns_to_us(h.percentile(99.9))},
            {"max", ns_to_us(h.max())},
            {"mean", round3(h.mean() / 1e3)}}}};
}

// A FailoverEvent time (us since detection, -1: never) as ms since the injection, or null.
json since_injection_ms(const FailoverEvent& e, int64_t us, uint64_t inject_ns) {
  if (us < 0) return nullptr;
  const double detect = static_cast<double>(e.detect_ns) - static_cast<double>(inject_ns);
  return ns_to_ms(detect + static_cast<double>(us) * 1e3);
}

std::string status_name(const ErrorCount& e) {
  if (e.submit_rc != 0) return "submit returned " + std::to_string(e.submit_rc);
  return to_string(NvmeStatus{e.status});
}

const char* check_name(BlockCheck c) {
  switch (c) {
    case BlockCheck::ok: return "stale_or_misplaced";
    case BlockCheck::bad_stamp: return "bad_stamp";
    case BlockCheck::bad_pattern: return "bad_pattern";
  }
  return "?";
}

OpTotals combined(const PhaseTotals& t) {
  OpTotals all = t.read;
  all.ios += t.write.ios;
  all.bytes += t.write.bytes;
  all.latency.merge(t.write.latency);
  return all;
}

double since_start_ms(const BenchReport& r, uint64_t ns) {
  return round3((static_cast<double>(ns) - static_cast<double>(r.timed_start_ns)) / 1e6);
}

// A FailoverEvent time (us since its detection, -1: never) as ms since the timed phase started.
double event_ms(const BenchReport& r, const FailoverEvent& e, int64_t us) {
  if (us < 0) return -1;
  return round3((static_cast<double>(e.detect_ns) - static_cast<double>(r.timed_start_ns)) / 1e6 +
                static_cast<double>(us) / 1e3);
}

json ms_or_null(double v) { return v < 0 ? json(nullptr) : json(v); }

const char* no_failover_hint(FaultArg a) {
  switch (a) {
    case FaultArg::refuse: return "refuse closes only new connections, the live ones kept serving";
    case FaultArg::slow: return "a slow path is still a usable one";
    case FaultArg::ana_change: return "ANA change is transient (optimized again 100 ms later)";
    case FaultArg::fail_status: return "its failed commands were retried without failing the path";
    case FaultArg::remove_path: return "a removed path drains: its commands complete, nothing fails over";
    case FaultArg::add_path: return "an added path connects and takes its share";
    default: return nullptr;
  }
}

}  // namespace

std::vector<FaultSummary> fault_summaries(const BenchReport& r) {
  std::vector<FaultSummary> out;
  const std::vector<FailoverEvent>& tl = r.fault.timeline;
  std::vector<bool> claimed(tl.size(), false);
  const uint64_t end_ns = r.timed_end_ns ? r.timed_end_ns : r.timed_start_ns;
  for (size_t i = 0; i < r.steps.size(); ++i) {
    const AppliedStep& a = r.steps[i];
    if (a.step.action == FaultArg::restore) continue;
    FaultSummary f;
    f.index = out.size();
    f.applied = &a;
    if (f.index < r.timed.windows.size()) f.window = r.timed.windows[f.index];
    // The next fault (any path) ends its window; the next fault on its own path ends the time
    // in which a failover of that path is its doing.
    uint64_t next_any = 0, next_same = 0, restore_ns = 0;
    for (size_t j = i + 1; j < r.steps.size(); ++j) {
      const AppliedStep& b = r.steps[j];
      if (!b.applied) continue;
      if (b.step.action == FaultArg::restore) {
        if (b.step.path == a.step.path && restore_ns == 0) restore_ns = b.applied_ns;
        continue;
      }
      if (next_any == 0) next_any = b.applied_ns;
      if (b.step.path == a.step.path && next_same == 0) next_same = b.applied_ns;
    }
    if (!a.applied) {
      f.reason = "not applied: the run ended first";
      out.push_back(f);
      continue;
    }
    f.at_ms = since_start_ms(r, a.applied_ns);
    f.window_end_ms = since_start_ms(r, next_any ? next_any : std::max(end_ns, a.applied_ns));
    if (restore_ns) f.restored_at_ms = since_start_ms(r, restore_ns);
    for (size_t k = 0; k < tl.size(); ++k) {
      const FailoverEvent& e = tl[k];
      if (claimed[k] || e.path != static_cast<int>(a.step.path) || e.detect_ns < a.applied_ns) continue;
      if (next_same && e.detect_ns >= next_same) continue;
      claimed[k] = true;
      f.failover = &e;
      break;
    }
    // A path already failed (on its own, or by an earlier fault) and not back yet cannot fail again.
    const FailoverEvent* down = nullptr;
    for (const FailoverEvent& e : tl) {
      if (e.path != static_cast<int>(a.step.path) || e.detect_ns >= a.applied_ns) continue;
      if (e.reconnected_us < 0 || e.detect_ns + static_cast<uint64_t>(e.reconnected_us) * 1000 > a.applied_ns) down = &e;
    }
    const bool path_change = a.step.action == FaultArg::remove_path || a.step.action == FaultArg::add_path;
    if (f.failover == nullptr && path_change && a.delivered) {
      f.reason = no_failover_hint(a.step.action);  // a change of the volume's paths, not a fault
    } else if (f.failover == nullptr) {
      if (!a.delivered) {
        f.reason = "not delivered: " + a.error;
      } else if (down != nullptr) {
        char b[96];
        std::snprintf(b, sizeof b, "the path was already failed (at %.3f ms: ", event_ms(r, *down, 0));
        f.reason = b + down->cause + "), not back yet";
      } else if (restore_ns) {
        char b[160];
        std::snprintf(b, sizeof b, "restored %.0f ms after it, before the volume saw the path fail",
                      static_cast<double>(restore_ns - a.applied_ns) / 1e6);
        f.reason = b;
      } else if (next_same) {
        f.reason = "the path was not seen failing before the next fault on it";
      } else {
        f.reason = "the path was not seen failing before the run ended";
      }
      if (const char* hint = no_failover_hint(a.step.action); hint && a.delivered && down == nullptr)
        f.reason += std::string(" (") + hint + ")";
    }
    out.push_back(f);
  }
  return out;
}

std::vector<RunEvent> run_events(const BenchReport& r) {
  std::vector<RunEvent> ev;
  for (const AppliedStep& a : r.steps) {
    if (!a.applied) continue;
    std::string detail = to_string(a.step.action);
    if (a.step.action == FaultArg::slow)
      detail += "=" + std::to_string(std::chrono::duration_cast<std::chrono::microseconds>(a.step.latency).count()) + "us";
    if (!a.delivered) detail += " (not delivered)";
    ev.push_back({since_start_ms(r, a.applied_ns) / 1e3, a.step.action == FaultArg::restore ? "restore" : "fault",
                  static_cast<int>(a.step.path), detail});
  }
  for (const FailoverEvent& e : r.fault.timeline) {
    ev.push_back({event_ms(r, e, 0) / 1e3, "path_failed", e.path, e.cause});
    const int64_t moved = e.first_resubmit_us >= 0 ? e.first_resubmit_us : e.first_success_us;
    if (moved >= 0)
      ev.push_back({event_ms(r, e, moved) / 1e3, "io_moved", e.path,
                    std::to_string(e.reads_moved) + " reads, " + std::to_string(e.writes_moved) + " writes"});
    if (e.reconnected_us >= 0) ev.push_back({event_ms(r, e, e.reconnected_us) / 1e3, "reconnected", e.path, ""});
  }
  std::stable_sort(ev.begin(), ev.end(), [](const RunEvent& a, const RunEvent& b) { return a.t_s < b.t_s; });
  return ev;
}

std::string latency_csv(const BenchReport& r) {
  auto quote = [](const std::string& s) {
    std::string q = "\"";
    for (const char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
    return q + "\"";
  };
  std::string out =
      "row,time_s,read_iops,write_iops,read_mib_s,write_mib_s,lat_p50_us,lat_p99_us,lat_max_us,usable_paths,"
      "event,path,detail\n";
  const std::vector<RunEvent> ev = run_events(r);
  size_t e = 0;
  char line[320];
  auto flush_events = [&](double until) {
    for (; e < ev.size() && ev[e].t_s <= until; ++e) {
      std::snprintf(line, sizeof line, "event,%.6f,,,,,,,,,%s,%d,", ev[e].t_s, ev[e].kind.c_str(), ev[e].path);
      out += line + quote(ev[e].detail) + "\n";
    }
  };
  for (const IntervalRow& row : r.intervals) {
    flush_events(row.end_s);
    std::snprintf(line, sizeof line, "interval,%.6f,%.0f,%.0f,%.3f,%.3f,%.1f,%.1f,%.1f,", row.end_s, row.read_iops,
                  row.write_iops, row.read_mib_s, row.write_mib_s, row.p50_us, row.p99_us, row.max_us);
    out += line;
    out += row.usable_paths >= 0 ? std::to_string(row.usable_paths) : std::string();
    out += ",,,\n";
  }
  flush_events(1e300);
  return out;
}

PlotData plot_data(const BenchReport& r) {
  PlotData d;
  const BenchOptions& o = r.options;
  d.title = "nvmeof-bench " + std::string(to_string(o.rw)) + " bs=" + format_size(o.bs) +
            " iodepth=" + std::to_string(o.iodepth) + " paths=" + std::to_string(r.addresses.size()) +
            " selector=" + to_string(o.selector);
  d.duration_s = std::chrono::duration<double>(o.runtime).count();
  for (const IntervalRow& row : r.intervals) d.points.push_back({row.end_s, row.read_iops, row.write_iops, row.p99_us});
  for (const RunEvent& e : run_events(r)) {
    if (e.kind == "fault") {
      d.markers.push_back({e.t_s, PlotMarker::Kind::fault, e.detail + " path " + std::to_string(e.path)});
    } else if (e.kind == "restore") {
      d.markers.push_back({e.t_s, PlotMarker::Kind::restore, "restore path " + std::to_string(e.path)});
    } else if (e.kind == "path_failed") {
      d.markers.push_back({e.t_s, PlotMarker::Kind::failover, "path " + std::to_string(e.path) + " failed: " + e.detail});
    }
  }
  return d;
}

nlohmann::json to_json(const BenchReport& r) {
  const BenchOptions& o = r.options;
  const double secs = r.timed.seconds();
  const OpTotals all = combined(r.timed);

  json errors_kinds = json::array();
  json examples = json::array();
  for (const PhaseTotals* p : {&r.prefill, &r.timed, &r.final_check}) {
    const Phase phase = p == &r.prefill ? Phase::prefill
                        : p == &r.timed ? Phase::timed
                                        : Phase::final_check;
    for (const ErrorCount& e : p->error_counts)
      errors_kinds.push_back({{"phase", to_string(phase)},
                              {"status", status_name(e)},
                              {"status_raw", e.status},
                              {"submit_rc", e.submit_rc},
                              {"count", e.count}});
    for (const Mismatch& m : p->mismatch_examples)
      examples.push_back({{"phase", to_string(m.phase)},
                          {"lba", m.lba},
                          {"expected_seq_low", m.expected_seq_low},
                          {"expected_seq_high", m.expected_seq_high},
                          {"problem", check_name(m.check)},
                          {"found_lba", m.found.lba},
                          {"found_seq", m.found.seq},
                          {"found_run_id", m.found.run_id}});
  }

  json paths = json::array();
  for (const PathReport& p : r.paths)
    paths.push_back({{"index", p.stats.index},
                     {"address", p.stats.address},
                     {"state", to_string(p.stats.state)},
                     {"ana_state", to_string(p.stats.ana_state)},
                     {"ios", p.ios_timed},
                     {"ios_before_fault", p.ios_before_fault},
                     {"ios_after_fault", p.ios_after_fault},
                     {"errors", p.stats.errors},
                     {"retries", p.stats.retries},
                     {"failovers", p.stats.failovers},
                     {"reconnects", p.stats.reconnects},
                     {"keep_alives", p.stats.keep_alives},
                     {"keep_alives_per_s", p.stats.keep_alives_per_s},
                     {"write_fence_ms", p.stats.write_fence_ms},
                     {"write_fence_rule", p.stats.write_fence_rule},
                     {"latency_us",
                      {{"p50", p.stats.latency.p50_us},
                       {"p99", p.stats.latency.p99_us},
                       {"p999", p.stats.latency.p999_us},
                       {"max", p.stats.latency.max_us},
                       {"mean", p.stats.latency.mean_us}}}});

  const FaultReport& f = r.fault;
  json timeline = json::array();
  for (const FailoverEvent& e : f.timeline)
    timeline.push_back(
        {{"path", e.path},
         {"cause", e.cause},
         {"detect_ms", ns_to_ms(static_cast<double>(e.detect_ns) - static_cast<double>(f.inject_ns))},
         {"fenced_ms", since_injection_ms(e, e.fenced_us, f.inject_ns)},
         {"fence_rule", e.fence_rule},
         {"first_resubmit_ms", since_injection_ms(e, e.first_resubmit_us, f.inject_ns)},
         {"first_success_ms", since_injection_ms(e, e.first_success_us, f.inject_ns)},
         {"reconnected_ms", since_injection_ms(e, e.reconnected_us, f.inject_ns)},
         {"reads_moved", e.reads_moved},
         {"writes_moved", e.writes_moved}});

  json faults = json::array();
  for (const FaultSummary& s : fault_summaries(r)) {
    const AppliedStep& a = *s.applied;
    json fo = nullptr;
    if (const FailoverEvent* e = s.failover) {
      const int64_t moved = e->first_resubmit_us >= 0 ? e->first_resubmit_us : e->first_success_us;
      fo = {{"path", e->path},
            {"cause", e->cause},
            {"failed_at_ms", event_ms(r, *e, 0)},
            {"detected_after_ms", round3((static_cast<double>(e->detect_ns) - static_cast<double>(a.applied_ns)) / 1e6)},
            {"fenced_at_ms", ms_or_null(event_ms(r, *e, e->fenced_us))},
            {"fence_rule", e->fence_rule},
            {"io_moved_at_ms", ms_or_null(event_ms(r, *e, moved))},
            {"first_success_at_ms", ms_or_null(event_ms(r, *e, e->first_success_us))},
            {"reconnected_at_ms", ms_or_null(event_ms(r, *e, e->reconnected_us))},
            {"reads_moved", e->reads_moved},
            {"writes_moved", e->writes_moved}};
    }
    faults.push_back(
        {{"index", s.index},
         {"entry", a.step.text},
         {"action", to_string(a.step.action)},
         {"path", a.step.path},
         {"latency_us", a.step.action == FaultArg::slow
                            ? json(std::chrono::duration_cast<std::chrono::microseconds>(a.step.latency).count())
                            : json(nullptr)},
         {"scheduled_ms", round3(std::chrono::duration<double, std::milli>(a.step.at).count())},
         {"applied", a.applied},
         {"at_ms", ms_or_null(s.at_ms)},
         {"delivered", a.delivered},
         {"error", a.delivered ? json(nullptr) : json(a.error)},
         {"restored_at_ms", ms_or_null(s.restored_at_ms)},
         {"window_end_ms", ms_or_null(s.window_end_ms)},
         {"outcome", s.failover ? "failover" : !a.applied ? "not applied" : "no failover"},
         {"reason", s.failover ? json(nullptr) : json(s.reason)},
         {"failover", fo},
         {"ios", s.window.ios},
         {"errors", s.window.errors},
         {"longest_io_ms", ns_to_ms(static_cast<double>(s.window.max_latency_ns))},
         {"longest_gap_ms", ns_to_ms(static_cast<double>(s.window.max_gap_ns))}});
  }

  json volume;
  try {
    volume = json::parse(r.volume_json);
  } catch (const json::exception&) {
    volume = r.volume_json;
  }
  json placement = nullptr;
  if (!r.placement_json.empty()) placement = json::parse(r.placement_json, nullptr, false);

  char run_id[24];
  std::snprintf(run_id, sizeof run_id, "%016" PRIx64, r.run_id);
  return {
      {"config",
       {{"rw", to_string(o.rw)},
        {"rwmixread", o.rwmixread},
        {"bs", o.bs},
        {"iodepth", o.iodepth},
        {"runtime_ms", std::chrono::duration_cast<std::chrono::milliseconds>(o.runtime).count()},
        {"size", r.working_set_bytes},
        {"targets", r.addresses},
        {"nqn", o.nqn},
        {"embedded", o.embedded},
        {"paths", r.addresses.size()},
        {"selector", to_string(o.selector)},
        {"digest", o.digest == Digest::none     ? "none"
                   : o.digest == Digest::header ? "header"
                   : o.digest == Digest::data   ? "data"
                                                : "both"},
        {"tls", !o.tls_psk.empty()},
        {"hostnqn", o.hostnqn},
        {"dhchap", o.dhchap_secret.empty() ? "none" : o.dhchap_ctrl_secret.empty() ? "host" : "bidirectional"},
        {"reactors", o.reactors},
        {"poll", to_string(o.poll)},
        {"io_deadline_ms", std::chrono::duration<double, std::milli>(o.io_deadline).count()},
        {"fence_bound_ms", std::chrono::duration<double, std::milli>(o.fence_bound).count()},
        {"ccr", o.ccr},
        {"verify", o.verify},
        {"seed", o.seed}}},
      {"namespace", {{"block_size", r.block_size}, {"size_blocks", r.namespace_blocks}}},
      {"run_id", run_id},
      {"runtime_s", round3(secs)},
      {"total", op_json(figures(all, secs))},
      {"read", op_json(figures(r.timed.read, secs))},
      {"write", op_json(figures(r.timed.write, secs))},
      {"reactor_cpu",
       {{"seconds", round3(static_cast<double>(r.reactor_cpu_ns) / 1e9)},
        {"us_per_io", all.ios ? static_cast<double>(r.reactor_cpu_ns) / 1e3 / static_cast<double>(all.ios) : 0.0},
        {"utilization", secs > 0 ? static_cast<double>(r.reactor_cpu_ns) / 1e9 / secs : 0.0}}},
      {"errors", r.errors()},
      {"error_kinds", errors_kinds},
      {"mismatches", r.mismatches()},
      {"verify",
       {{"enabled", o.verify},
        {"prefilled", r.prefilled},
        {"final_check", r.final_checked},
        {"blocks_checked_timed", r.timed.verified_blocks},
        {"blocks_checked_final", r.final_check.verified_blocks},
        {"mismatch_examples", examples}}},
      {"drained", r.drained},
      {"paths", paths},
      {"fault",
       {{"injected", f.injected},
        {"path", f.path},
        {"kind", to_string(f.kind)},
        {"at_ms", round3(f.at_ms)},
        {"restored_after_ms", f.restored_after_ms < 0 ? json(nullptr) : json(round3(f.restored_after_ms))},
        {"longest_io_ms", ns_to_ms(static_cast<double>(r.timed.max_latency_after_fault_ns))},
        {"longest_gap_ms", ns_to_ms(static_cast<double>(r.timed.max_gap_after_fault_ns))},
        {"timeline", timeline}}},
      {"faults", faults},
      {"volume", volume},
      {"placement", placement},
      {"ok", r.exit_code() == 0}};
}

std::string to_text(const BenchReport& r) {
  const json j = to_json(r);
  const BenchOptions& o = r.options;
  std::ostringstream out;
  char line[512];
  std::snprintf(line, sizeof line,
                "nvmeof-bench: rw=%s%s bs=%s iodepth=%u size=%s paths=%zu selector=%s digest=%s "
                "reactors=%u verify=%s\n",
                to_string(o.rw),
                (o.rw == RwMode::rw || o.rw == RwMode::randrw)
                    ? (" rwmixread=" + std::to_string(o.rwmixread)).c_str()
                    : "",
                format_size(o.bs).c_str(), o.iodepth, format_size(r.working_set_bytes).c_str(),
                r.addresses.size(), to_string(o.selector),
                j["config"]["digest"].get<std::string>().c_str(), o.reactors,
                o.verify ? "on" : "off");
  out << line;
  for (const char* name : {"read", "write", "total"}) {
    const json& x = j[name];
    const json& l = x["latency_us"];
    std::snprintf(line, sizeof line,
                  "  %-5s: ios=%-9" PRIu64 " iops=%-9.0f MiB/s=%-8.1f lat(us) p50=%.1f p99=%.1f "
                  "p99.9=%.1f max=%.1f mean=%.1f\n",
                  name, x["ios"].get<uint64_t>(), x["iops"].get<double>(),
                  x["mib_per_s"].get<double>(), l["p50"].get<double>(), l["p99"].get<double>(),
                  l["p999"].get<double>(), l["max"].get<double>(), l["mean"].get<double>());
    out << line;
  }
  std::snprintf(line, sizeof line, "  reactor CPU (poll %s): %.3f s, %.2f us per I/O, %.0f%% of one core\n",
                to_string(o.poll), j["reactor_cpu"]["seconds"].get<double>(),
                j["reactor_cpu"]["us_per_io"].get<double>(), j["reactor_cpu"]["utilization"].get<double>() * 100);
  out << line;
  std::snprintf(line, sizeof line, "  runtime %.3f s, errors %" PRIu64 ", mismatches %" PRIu64
                                   " (blocks checked: %" PRIu64 " timed, %" PRIu64 " final%s)\n",
                r.timed.seconds(), r.errors(), r.mismatches(), r.timed.verified_blocks,
                r.final_check.verified_blocks, r.prefilled ? ", prefilled" : "");
  out << line;
  for (const json& e : j["error_kinds"])
    out << "    error (" << e["phase"].get<std::string>() << "): " << e["status"].get<std::string>()
        << " x" << e["count"].get<uint64_t>() << "\n";
  for (const json& m : j["verify"]["mismatch_examples"])
    out << "    mismatch (" << m["phase"].get<std::string>() << ") lba " << m["lba"] << ": "
        << m["problem"].get<std::string>() << ", expected seq " << m["expected_seq_low"] << ".."
        << m["expected_seq_high"] << ", found lba " << m["found_lba"] << " seq "
        << m["found_seq"] << "\n";
  if (!r.drained) out << "  I/O still in flight when the bench stopped waiting\n";

  out << "  paths:\n";
  for (const PathReport& p : r.paths) {
    std::snprintf(line, sizeof line,
                  "    #%d %-21s %-10s %-14s ios=%-9" PRIu64 " errors=%" PRIu64
                  " failovers=%" PRIu64 " reconnects=%" PRIu64,
                  p.stats.index, p.stats.address.c_str(), to_string(p.stats.state),
                  to_string(p.stats.ana_state), p.ios_timed, p.stats.errors, p.stats.failovers,
                  p.stats.reconnects);
    out << line;
    if (r.fault.injected)
      out << " (before fault " << p.ios_before_fault << ", after " << p.ios_after_fault << ")";
    if (!p.stats.write_fence_rule.empty())
      out << " write-fence=" << p.stats.write_fence_ms << "ms(" << p.stats.write_fence_rule << ")";
    out << "\n";
  }

  if (r.fault.injected) {
    const json& f = j["fault"];
    std::snprintf(line, sizeof line,
                  "  fault: %s on path %d at %.0f ms%s; longest I/O after it %.3f ms, longest "
                  "completion gap %.3f ms\n",
                  to_string(r.fault.kind), r.fault.path, r.fault.at_ms,
                  r.fault.restored_after_ms >= 0
                      ? (", restored " + std::to_string(static_cast<int>(r.fault.restored_after_ms)) +
                         " ms later")
                            .c_str()
                      : "",
                  f["longest_io_ms"].get<double>(), f["longest_gap_ms"].get<double>());
    out << line;
    out << "  failover timeline (ms since injection):\n";
    if (f["timeline"].empty()) out << "    (none)\n";
    auto ms = [](const json& v) { return v.is_null() ? std::string("-") : v.dump(); };
    for (const json& e : f["timeline"])
      out << "    path " << e["path"] << " (" << e["cause"].get<std::string>()
          << "): detect " << ms(e["detect_ms"]) << ", fenced " << ms(e["fenced_ms"])
          << (e["fence_rule"].get<std::string>().empty() ? "" : " by " + e["fence_rule"].get<std::string>())
          << ", first resubmit " << ms(e["first_resubmit_ms"]) << ", first success "
          << ms(e["first_success_ms"]) << ", reconnected " << ms(e["reconnected_ms"]) << "; moved "
          << e["reads_moved"] << " reads, " << e["writes_moved"] << " writes\n";
  }
  if (r.steps.size() > 1 || o.has_fault_script()) {
    out << "  faults (ms since the timed phase started):\n";
    auto ms = [](const json& v) { return v.is_null() ? std::string("-") : v.dump(); };
    for (const json& f : j["faults"]) {
      out << "    #" << f["index"] << " " << f["action"].get<std::string>() << " path " << f["path"] << " at "
          << ms(f["at_ms"]);
      if (!f["restored_at_ms"].is_null()) out << ", restored at " << ms(f["restored_at_ms"]);
      out << ": ";
      if (f["failover"].is_null()) {
        out << "no failover, " << f["reason"].get<std::string>();
      } else {
        const json& e = f["failover"];
        out << "failover (" << e["cause"].get<std::string>() << "): path failed at " << ms(e["failed_at_ms"])
            << ", I/O moved at " << ms(e["io_moved_at_ms"]) << ", reconnected at " << ms(e["reconnected_at_ms"]);
      }
      out << "; until " << ms(f["window_end_ms"]) << ": longest I/O " << ms(f["longest_io_ms"])
          << ", longest gap " << ms(f["longest_gap_ms"]) << ", errors " << f["errors"] << "\n";
    }
  }
  out << (r.exit_code() == 0 ? "  result: ok\n" : "  result: FAILED\n");
  return out.str();
}

}  // namespace nvmeof::bench
