#include "bench/report.hpp"

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

}  // namespace

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
  out << (r.exit_code() == 0 ? "  result: ok\n" : "  result: FAILED\n");
  return out.str();
}

}  // namespace nvmeof::bench
