// A live volume seen from outside: its control socket (and, with metrics_listen, its Prometheus
// endpoint). Every request is answered on the control thread from collect_stats(), the snapshot
// Volume::stats() takes; nothing here touches a lane otherwise. And an engine's Prometheus
// endpoint (HostOptions::metrics_listen), built from Host::stats().
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstdlib>

#include "multipath/engine.hpp"
#include "multipath/observers.hpp"
#include "multipath/option_text.hpp"
#include "multipath/volume_impl.hpp"
#include "observe/control_socket.hpp"
#include "observe/metrics.hpp"

namespace nvmeof::detail {

namespace {

std::atomic<uint32_t> g_next_serial{0};

using Json = nlohmann::ordered_json;

std::string fail(const std::string& why) { return Json{{"ok", false}, {"error", why}}.dump(); }

// mkdir -p with mode 0700 for what it creates.
int make_dirs(const std::string& dir) {
  if (dir.empty()) return EINVAL;
  for (size_t pos = 1;; ++pos) {
    pos = dir.find('/', pos);
    const std::string part = dir.substr(0, pos);
    if (::mkdir(part.c_str(), 0700) != 0 && errno != EEXIST) return errno;
    if (pos == std::string::npos) break;
  }
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) return errno;
  return S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
}

// The volume's endpoints; destroyed first by VolumeImpl::shutdown().
class VolumeObservers final : public Observers {
 public:
  explicit VolumeObservers(VolumeImpl& v) noexcept : v_(v) {}
  ~VolumeObservers() override {
    metrics_.reset();  // waits for a scrape in progress
    if (control_socket_) ControllerAccess::impl(v_.sub_->cp_).call([this] { control_socket_->close(); });
  }
  uint16_t metrics_port() const noexcept override { return metrics_ ? metrics_->port() : 0; }
  std::string control_socket_path() const override {
    return control_socket_ ? control_socket_->path() : std::string();
  }

  VolumeImpl& v_;
  std::unique_ptr<ControlSocket> control_socket_;  // control thread only once open
  std::unique_ptr<MetricsExporter> metrics_;       // its HTTP threads call collect_stats()
};

// The engine's endpoint.
class HostObservers final : public Observers {
 public:
  explicit HostObservers(std::unique_ptr<MetricsExporter> metrics) noexcept : metrics_(std::move(metrics)) {}
  uint16_t metrics_port() const noexcept override { return metrics_->port(); }
  std::string control_socket_path() const override { return {}; }

 private:
  std::unique_ptr<MetricsExporter> metrics_;
};

}  // namespace

Result<std::unique_ptr<Observers>> start_volume_observers(VolumeImpl& v) {
  auto o = std::make_unique<VolumeObservers>(v);
  VolumeObservers* self = o.get();
  v.serial_ = g_next_serial.fetch_add(1);
  if (!v.opts_.metrics_listen.empty()) {
    const std::string name = "nvmeof-" + std::to_string(::getpid()) + "-" + std::to_string(v.serial_);
    auto m = serve_volume_metrics(v.opts_.metrics_listen, name,
                                  [&v](LatencyHistogram& all) { return v.collect_stats(&all); });
    if (!m) return m.error();
    self->metrics_ = std::move(*m);
  }
  std::string dir = v.opts_.control_socket;
  if (dir.empty()) {
    const char* env = std::getenv("NVMEOF_CONTROL_DIR");
    if (env) dir = env;
  }
  if (dir.empty()) return std::unique_ptr<Observers>(std::move(o));
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  if (const int err = make_dirs(dir)) return errno_code(err);
  const std::string path = dir + "/nvmeof-" + std::to_string(::getpid()) + "-" + std::to_string(v.serial_) + ".sock";
  auto handler = [&v, self](std::string_view line) -> std::string {
    const Json req = Json::parse(line, nullptr, false);
    if (req.is_discarded() || !req.is_object() || !req.contains("op") || !req["op"].is_string())
      return fail("expected a JSON object with \"op\": stats or set-selector");
    const std::string op = req["op"].get<std::string>();
    if (op == "stats") {
      const VolumeStats s = v.collect_stats();
      Json j{{"ok", true},
             {"pid", ::getpid()},
             {"volume", v.serial_},
             {"subsystem", v.sub_->serial_},
             {"nqn", v.opts_.connect.subnqn},
             {"uptime_s", static_cast<double>(Reactor::clock_ns() - v.open_ns_) / 1e9},
             {"metrics_port", self->metrics_port()},
             {"stats", Json::parse(to_json(s))}};
      return j.dump();
    }
    if (op == "set-selector") {
      if (!req.contains("selector") || !req["selector"].is_string()) return fail("set-selector needs \"selector\"");
      auto k = parse_selector(req["selector"].get<std::string>());
      if (!k)
        return fail("unknown selector \"" + req["selector"].get<std::string>() +
                    "\" (round-robin, queue-depth, numa, service-time)");
      v.ns_->selector.store(*k, std::memory_order_relaxed);
      return Json{{"ok", true}, {"selector", to_string(*k)}}.dump();
    }
    return fail("unknown op \"" + op + "\" (stats, set-selector)");
  };
  auto sock = ControllerAccess::impl(v.sub_->cp_).call(
      [&] { return ControlSocket::open(engine_of(*v.sub_->host_).io(), path, handler); });
  if (!sock) return sock.error();
  self->control_socket_ = std::move(*sock);
  return std::unique_ptr<Observers>(std::move(o));
}

Result<std::unique_ptr<Observers>> start_host_observers(const Engine& engine) {
  if (engine.opts.metrics_listen.empty()) return std::unique_ptr<Observers>();
  // Built at each scrape from one stats() snapshot.
  const Engine* self = &engine;
  auto m = serve_host_metrics(engine.opts.metrics_listen, [self] { return self->stats(); });
  if (!m) return m.error();
  return std::unique_ptr<Observers>(std::make_unique<HostObservers>(std::move(*m)));
}

}  // namespace nvmeof::detail
