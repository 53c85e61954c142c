#include "bench/fault_target.hpp"

#include <nlohmann/json.hpp>

#include "target/target_control.hpp"

namespace nvmeof::bench {

namespace {

class LocalFaultTarget final : public FaultTarget {
 public:
  explicit LocalFaultTarget(Target& t) : t_(t) {}
  bool set_ana_state(size_t port, AnaState s) override { t_.set_ana_state(port, s); return true; }
  bool inject(size_t port, FaultKind kind) override { t_.inject(port, kind); return true; }
  bool set_latency(size_t port, std::chrono::microseconds l) override { t_.set_latency(port, l); return true; }
  bool fail_commands(size_t port, NvmeStatus s) override { t_.fail_commands(port, s); return true; }
  bool clear_faults(size_t port) override { t_.clear_faults(port); return true; }

 private:
  Target& t_;
};

const char* fault_word(FaultKind k) {
  switch (k) {
    case FaultKind::reset: return "reset";
    case FaultKind::blackhole: return "blackhole";
    case FaultKind::refuse: return "refuse";
    case FaultKind::partition: return "partition";
  }
  return "reset";
}

class RemoteFaultTarget final : public FaultTarget {
 public:
  explicit RemoteFaultTarget(std::string path) : path_(std::move(path)) {}
  bool set_ana_state(size_t port, AnaState s) override {
    return call({{"op", "ana"}, {"port", port}, {"state", to_string(s)}});
  }
  bool inject(size_t port, FaultKind kind) override {
    return call({{"op", "fault"}, {"port", port}, {"kind", fault_word(kind)}});
  }
  bool set_latency(size_t port, std::chrono::microseconds l) override {
    return call({{"op", "latency"}, {"port", port}, {"latency_us", l.count()}});
  }
  bool fail_commands(size_t port, NvmeStatus s) override {
    return call({{"op", "fail-status"}, {"port", port}, {"sct", static_cast<unsigned>(s.sct())}, {"sc", s.sc()}});
  }
  bool clear_faults(size_t port) override { return call({{"op", "clear"}, {"port", port}}); }
  bool call(const nlohmann::json& req) {
    std::string answer;
    return tools::target_control_call(path_, req.dump(), answer, error_);
  }
  bool call_for(const nlohmann::json& req, std::string& answer) {
    return tools::target_control_call(path_, req.dump(), answer, error_);
  }

 private:
  std::string path_;
};

}  // namespace

std::unique_ptr<FaultTarget> local_fault_target(Target& t) { return std::make_unique<LocalFaultTarget>(t); }

std::unique_ptr<FaultTarget> remote_fault_target(const std::string& path, size_t max_port, std::string& error) {
  auto r = std::make_unique<RemoteFaultTarget>(path);
  std::string answer;
  if (!r->call_for({{"op", "stats"}}, answer)) {
    error = "--target-control " + r->error();
    return nullptr;
  }
  const auto j = nlohmann::json::parse(answer, nullptr, false);
  const size_t ports = j.contains("ports") && j["ports"].is_array() ? j["ports"].size() : 0;
  if (max_port >= ports) {
    error = "--target-control " + path + ": the target has " + std::to_string(ports) + " ports, port " +
            std::to_string(max_port) + " asked for";
    return nullptr;
  }
  return r;
}

}  // namespace nvmeof::bench
