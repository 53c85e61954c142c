#include "target/target_metrics.hpp"

#include "observe/metrics_families.hpp"

namespace nvmeof::tools {

Result<std::unique_ptr<detail::MetricsExporter>> start_target_metrics(Target& t, const std::string& listen) {
  return detail::serve_metrics(listen, [&t] {
    const size_t ports = t.port_count();  // ports added at run time included
    using prometheus::MetricType;
    struct Def {
      const char* name;
      const char* help;
      MetricType type;
      double (*value)(const PortStats&);
    };
    static const Def kDefs[] = {
        {"nvmeof_target_port_connections_total", "Connections accepted", MetricType::Counter,
         [](const PortStats& s) { return static_cast<double>(s.connections); }},
        {"nvmeof_target_port_live_connections", "Connections open now", MetricType::Gauge,
         [](const PortStats& s) { return static_cast<double>(s.live_connections); }},
        {"nvmeof_target_port_commands_total", "Commands received", MetricType::Counter,
         [](const PortStats& s) { return static_cast<double>(s.commands); }},
        {"nvmeof_target_port_reads_total", "Read commands executed", MetricType::Counter,
         [](const PortStats& s) { return static_cast<double>(s.reads); }},
        {"nvmeof_target_port_writes_total", "Write commands executed", MetricType::Counter,
         [](const PortStats& s) { return static_cast<double>(s.writes); }},
        {"nvmeof_target_port_protocol_errors_total", "Protocol errors seen", MetricType::Counter,
         [](const PortStats& s) { return static_cast<double>(s.errors); }},
        {"nvmeof_target_port_keep_alive_expiries_total", "Controllers ended by keep-alive expiry",
         MetricType::Counter, [](const PortStats& s) { return static_cast<double>(s.keep_alive_expiries); }},
    };
    std::vector<prometheus::MetricFamily> out;
    std::vector<PortStats> stats;
    std::vector<std::map<std::string, std::string>> labels;
    for (size_t i = 0; i < ports; ++i) {
      stats.push_back(t.stats(i));
      const std::string addr = t.port_address(i);
      std::string traddr = addr.substr(0, addr.rfind(':'));
      if (!traddr.empty() && traddr.front() == '[') traddr = traddr.substr(1, traddr.size() - 2);
      labels.push_back({{"port", std::to_string(i)},
                        {"traddr", traddr},
                        {"trsvcid", std::to_string(t.port_number(i))},
                        {"ana_group", std::to_string(i + 1)}});
    }
    for (const auto& d : kDefs) {
      auto f = detail::metric_family(d.name, d.help, d.type);
      for (size_t i = 0; i < ports; ++i) detail::add_sample(f, labels[i], d.value(stats[i]));
      out.push_back(std::move(f));
    }
    auto ana = detail::metric_family("nvmeof_target_port_ana_state",
                                     "ANA state of the port's group as NVMe codes it (1 optimized .. 15 change)",
                                     MetricType::Gauge);
    for (size_t i = 0; i < ports; ++i)
      detail::add_sample(ana, labels[i], static_cast<double>(static_cast<uint8_t>(t.ana_state(i))));
    out.push_back(std::move(ana));
    return out;
  });
}

}  // namespace nvmeof::tools
