#include "observe/metrics_families.hpp"

#include <prometheus/collectable.h>
#include <prometheus/exposer.h>

#include <cerrno>
#include <exception>

namespace nvmeof::detail {

namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

// Completion latency bounds (s): 10 us to 1 s, the span a fabric I/O lives in.
constexpr double kLatencyBounds[] = {10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3,
                                     5e-3,  10e-3, 25e-3, 50e-3,  100e-3, 250e-3, 500e-3, 1.0};
// Failover durations (s), detection to the first moved I/O's success.
constexpr double kFailoverBounds[] = {1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3,
                                      500e-3, 1.0, 2.5, 5.0, 10.0, 30.0};

class CallbackCollectable final : public prometheus::Collectable {
 public:
  explicit CallbackCollectable(MetricsCollect c) : collect_(std::move(c)) {}
  std::vector<MetricFamily> Collect() const override {
    try {
      return collect_();
    } catch (...) {
      return {};  // a scrape must not take the process down
    }
  }

 private:
  MetricsCollect collect_;
};

ClientMetric::Label label(std::string n, std::string v) { return {std::move(n), std::move(v)}; }

// AnaState as NVMe codes it (1 optimized .. 4 persistent loss, 15 change).
double ana_code(AnaState s) { return static_cast<double>(static_cast<uint8_t>(s)); }

double state_code(PathState s) {
  switch (s) {
    case PathState::connecting: return 0;
    case PathState::live: return 1;
    case PathState::failed: return 2;
    case PathState::fenced: return 3;
    case PathState::draining: return 4;
    case PathState::removed: return 5;
  }
  return -1;
}

}  // namespace

struct MetricsExporter::Impl {
  std::shared_ptr<CallbackCollectable> collectable;
  std::unique_ptr<prometheus::Exposer> exposer;
};

Result<std::unique_ptr<MetricsExporter>> serve_metrics(const std::string& listen, MetricsCollect collect) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == listen.size() ||
      listen.find_first_not_of("0123456789", colon + 1) != std::string::npos)
    return Errc::invalid_argument;
  auto impl = std::make_unique<MetricsExporter::Impl>();
  impl->collectable = std::make_shared<CallbackCollectable>(std::move(collect));
  try {
    // Two HTTP threads: scrapes are rare and each builds its families from one snapshot, but
    // civetweb is known to misbehave with a single worker (a second client, e.g. curl beside
    // Prometheus, waits on the first) and recommends more than one.
    impl->exposer = std::make_unique<prometheus::Exposer>(listen, 2);
  } catch (const std::exception&) {
    return errno_code(EADDRINUSE);
  }
  const auto ports = impl->exposer->GetListeningPorts();
  if (ports.empty()) return errno_code(EADDRINUSE);
  const auto port = static_cast<uint16_t>(ports.front());
  impl->exposer->RegisterCollectable(impl->collectable);
  return std::make_unique<MetricsExporter>(std::move(impl), port);
}

Result<std::unique_ptr<MetricsExporter>> serve_volume_metrics(const std::string& listen, std::string volume,
                                                              std::function<VolumeStats(LatencyHistogram&)> snapshot) {
  return serve_metrics(listen, [volume = std::move(volume), snapshot = std::move(snapshot)] {
    LatencyHistogram all;
    const VolumeStats s = snapshot(all);
    return volume_families(volume, s, all);
  });
}

Result<std::unique_ptr<MetricsExporter>> serve_host_metrics(const std::string& listen,
                                                            std::function<HostStats()> snapshot) {
  return serve_metrics(listen, [snapshot = std::move(snapshot)] { return host_families(snapshot()); });
}

MetricsExporter::MetricsExporter(std::unique_ptr<Impl> impl, uint16_t port) noexcept
    : impl_(std::move(impl)), port_(port) {}

MetricsExporter::~MetricsExporter() {
  if (impl_ && impl_->exposer) impl_->exposer->RemoveCollectable(impl_->collectable);
  if (impl_) impl_->exposer.reset();  // joins the HTTP threads: no scrape runs after this
}

MetricFamily metric_family(const std::string& name, const std::string& help, MetricType type) {
  MetricFamily f;
  f.name = name;
  f.help = help;
  f.type = type;
  return f;
}

void add_sample(MetricFamily& f, const std::map<std::string, std::string>& labels, double value) {
  ClientMetric m;
  for (const auto& [k, v] : labels) m.label.push_back(label(k, v));
  if (f.type == MetricType::Counter) m.counter.value = value;
  else if (f.type == MetricType::Gauge) m.gauge.value = value;
  else m.untyped.value = value;
  f.metric.push_back(std::move(m));
}

namespace {

// One family per row of `table`, one sample per item (labelled by `labels(item)`).
template <typename Stats>
struct FieldMetric {
  const char* name;
  const char* help;
  MetricType type;
  double (*value)(const Stats&);
};

template <typename Stats, size_t N, typename Labels>
void add_field_families(std::vector<MetricFamily>& out, const FieldMetric<Stats> (&table)[N],
                        const std::vector<Stats>& items, Labels labels) {
  for (const auto& m : table) {
    auto f = metric_family(m.name, m.help, m.type);
    for (const auto& it : items) add_sample(f, labels(it), m.value(it));
    out.push_back(std::move(f));
  }
}

}  // namespace

std::vector<MetricFamily> volume_families(const std::string& volume, const VolumeStats& s,
                                          const LatencyHistogram& latency) {
  std::vector<MetricFamily> out;
  const std::map<std::string, std::string> vl{{"volume", volume}};
  uint64_t reads = 0, writes = 0, rbytes = 0, wbytes = 0;
  for (const auto& p : s.paths) {
    reads += p.reads;
    writes += p.writes;
    rbytes += p.read_bytes;
    wbytes += p.write_bytes;
  }
  auto volume_metric = [&](const char* name, const char* help, MetricType t, double v) {
    auto f = metric_family(name, help, t);
    add_sample(f, vl, v);
    out.push_back(std::move(f));
  };
  volume_metric("nvmeof_volume_reads_completed_total", "Read commands completed (split pieces counted each)",
                MetricType::Counter, static_cast<double>(reads));
  volume_metric("nvmeof_volume_writes_completed_total", "Write commands completed (split pieces counted each)",
                MetricType::Counter, static_cast<double>(writes));
  volume_metric("nvmeof_volume_read_bytes_total", "Bytes read", MetricType::Counter, static_cast<double>(rbytes));
  volume_metric("nvmeof_volume_written_bytes_total", "Bytes written", MetricType::Counter, static_cast<double>(wbytes));
  volume_metric("nvmeof_volume_failovers_total", "Path failures the volume failed over from",
                MetricType::Counter, static_cast<double>(s.timeline_dropped + s.timeline.size()));
  volume_metric("nvmeof_volume_io_waiting_for_path", "I/Os queued for a usable path right now",
                MetricType::Gauge, static_cast<double>(s.waiting));

  {
    auto f = metric_family("nvmeof_volume_io_latency_seconds", "Command completion latency on its path",
                           MetricType::Histogram);
    ClientMetric m;
    m.label.push_back(label("volume", volume));
    m.histogram.sample_count = latency.count();
    m.histogram.sample_sum = static_cast<double>(latency.sum()) / 1e9;
    for (double b : kLatencyBounds)
      m.histogram.bucket.push_back({latency.count_at_most(static_cast<uint64_t>(b * 1e9)), b});
    m.histogram.bucket.push_back({latency.count(), std::numeric_limits<double>::infinity()});
    f.metric.push_back(std::move(m));
    out.push_back(std::move(f));
  }
  {
    auto f = metric_family("nvmeof_volume_failover_duration_seconds",
                           "From detecting a path failure to the first success of an I/O it moved",
                           MetricType::Histogram);
    ClientMetric m;
    m.label.push_back(label("volume", volume));
    std::vector<double> d;
    for (const auto& e : s.timeline)
      if (e.first_success_us >= 0) d.push_back(static_cast<double>(e.first_success_us) / 1e6);
    m.histogram.sample_count = d.size();
    for (double x : d) m.histogram.sample_sum += x;
    for (double b : kFailoverBounds) {
      uint64_t n = 0;
      for (double x : d) n += x <= b;
      m.histogram.bucket.push_back({n, b});
    }
    m.histogram.bucket.push_back({d.size(), std::numeric_limits<double>::infinity()});
    f.metric.push_back(std::move(m));
    out.push_back(std::move(f));
  }

  static const FieldMetric<PathStats> kPath[] = {
      {"nvmeof_path_state", "Path state: 0 connecting, 1 live, 2 failed, 3 fenced, 4 draining", MetricType::Gauge,
       [](const PathStats& p) { return state_code(p.state); }},
      {"nvmeof_path_ana_state",
       "ANA state as NVMe codes it: 1 optimized, 2 non-optimized, 3 inaccessible, 4 persistent loss, 15 change",
       MetricType::Gauge, [](const PathStats& p) { return ana_code(p.ana_state); }},
      {"nvmeof_path_reads_completed_total", "Read commands completed on the path", MetricType::Counter,
       [](const PathStats& p) { return static_cast<double>(p.reads); }},
      {"nvmeof_path_writes_completed_total", "Write commands completed on the path", MetricType::Counter,
       [](const PathStats& p) { return static_cast<double>(p.writes); }},
      {"nvmeof_path_io_in_flight", "Commands outstanding on the path", MetricType::Gauge,
       [](const PathStats& p) { return static_cast<double>(p.outstanding); }},
      {"nvmeof_path_command_errors_total", "Failed completions seen on the path (retried or not)",
       MetricType::Counter, [](const PathStats& p) { return static_cast<double>(p.errors); }},
      {"nvmeof_path_retries_total", "I/Os resubmitted away from or on the path", MetricType::Counter,
       [](const PathStats& p) { return static_cast<double>(p.retries); }},
      {"nvmeof_path_failovers_total", "Times the path failed", MetricType::Counter,
       [](const PathStats& p) { return static_cast<double>(p.failovers); }},
      {"nvmeof_path_keep_alives_total", "Keep Alive commands the path's controller sent", MetricType::Counter,
       [](const PathStats& p) { return static_cast<double>(p.keep_alives); }},
      {"nvmeof_path_reconnects_total", "Times the path was reconnected", MetricType::Counter,
       [](const PathStats& p) { return static_cast<double>(p.reconnects); }},
      {"nvmeof_path_write_fence_seconds",
       "After the path fails, how long its writes may wait for their fence before they move (known at connect)",
       MetricType::Gauge, [](const PathStats& p) { return static_cast<double>(p.write_fence_ms) / 1e3; }},
  };
  add_field_families(out, kPath, s.paths, [&](const PathStats& p) -> std::map<std::string, std::string> {
    return {{"volume", volume},
            {"path", std::to_string(p.index)},
            {"transport", p.transport},
            {"traddr", p.traddr},
            {"trsvcid", p.trsvcid},
            {"ana_group", std::to_string(p.ana_group)},
            {"numa_node", std::to_string(p.numa_node)}};
  });
  return out;
}

std::vector<MetricFamily> host_families(const HostStats& s) {
  std::vector<MetricFamily> out;
  auto engine_metric = [&](const char* name, const char* help, double v) {
    auto f = metric_family(name, help, MetricType::Gauge);
    add_sample(f, {}, v);
    out.push_back(std::move(f));
  };
  engine_metric("nvmeof_host_reactors", "Reactor threads of the engine", s.reactors);
  engine_metric("nvmeof_host_threads", "Threads the engine runs (reactors, control thread, pool)", s.threads);
  engine_metric("nvmeof_host_volumes", "Volumes open on the engine", s.volumes);
  engine_metric("nvmeof_host_subsystems", "Subsystems the open volumes are on (each one controller per path)",
                s.subsystems);
  {
    auto cpu = metric_family("nvmeof_host_reactor_cpu_seconds_total", "CPU used by each reactor thread",
                             MetricType::Counter);
    auto wake = metric_family("nvmeof_host_reactor_wakeups_total",
                              "Times each reactor thread came back from a wait in its ring", MetricType::Counter);
    for (size_t i = 0; i < s.reactor_cpu_ns.size(); ++i)
      add_sample(cpu, {{"reactor", std::to_string(i)}}, static_cast<double>(s.reactor_cpu_ns[i]) / 1e9);
    for (size_t i = 0; i < s.reactor_wakeups.size(); ++i)
      add_sample(wake, {{"reactor", std::to_string(i)}}, static_cast<double>(s.reactor_wakeups[i]));
    out.push_back(std::move(cpu));
    out.push_back(std::move(wake));
  }
  static const FieldMetric<HostControllerStats> kController[] = {
      {"nvmeof_controller_state", "Controller (path) state: 0 connecting, 1 live, 2 failed, 3 fenced, 4 draining",
       MetricType::Gauge, [](const HostControllerStats& c) { return state_code(c.state); }},
      {"nvmeof_controller_volumes", "Volumes (namespaces) open on the controller", MetricType::Gauge,
       [](const HostControllerStats& c) { return static_cast<double>(c.volumes); }},
      {"nvmeof_controller_keep_alives_total", "Keep Alive commands sent on the controller", MetricType::Counter,
       [](const HostControllerStats& c) { return static_cast<double>(c.keep_alives); }},
      {"nvmeof_controller_io_completed_total", "Commands completed on its I/O queues, every volume's",
       MetricType::Counter, [](const HostControllerStats& c) { return static_cast<double>(c.ios); }},
      {"nvmeof_controller_failovers_total", "Times the controller's path failed", MetricType::Counter,
       [](const HostControllerStats& c) { return static_cast<double>(c.failovers); }},
      {"nvmeof_controller_reconnects_total", "Times the controller was reconnected", MetricType::Counter,
       [](const HostControllerStats& c) { return static_cast<double>(c.reconnects); }},
      {"nvmeof_controller_write_fence_seconds",
       "After the controller fails, how long its writes may wait for their fence before they move",
       MetricType::Gauge, [](const HostControllerStats& c) { return static_cast<double>(c.write_fence_ms) / 1e3; }},
  };
  add_field_families(out, kController, s.controllers,
                     [](const HostControllerStats& c) -> std::map<std::string, std::string> {
                       return {{"subnqn", c.subnqn}, {"address", c.address}, {"cntlid", std::to_string(c.cntlid)}};
                     });
  return out;
}

}  // namespace nvmeof::detail
