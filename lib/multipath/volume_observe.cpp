// A live volume seen from outside: its control socket (and, with metrics_listen, its Prometheus
// endpoint). Every request is answered on the control thread from collect_stats(), the snapshot
// Volume::stats() takes; nothing here touches a lane otherwise.
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstdlib>

#include "control/control_socket.hpp"
#include "control/metrics.hpp"
#include "multipath/option_text.hpp"
#include "multipath/volume_impl.hpp"

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

}  // namespace

uint16_t VolumeImpl::metrics_port() const noexcept { return metrics_ ? metrics_->port() : 0; }

std::string VolumeImpl::control_socket_path() const {
  return control_socket_ ? control_socket_->path() : std::string();
}

Result<void> VolumeImpl::start_observers() {
  serial_ = g_next_serial.fetch_add(1);
  if (!opts_.metrics_listen.empty()) {
    const std::string name = "nvmeof-" + std::to_string(::getpid()) + "-" + std::to_string(serial_);
    auto m = serve_volume_metrics(opts_.metrics_listen, name,
                                  [this](LatencyHistogram& all) { return collect_stats(&all); });
    if (!m) return m.error();
    metrics_ = std::move(*m);
  }
  std::string dir = opts_.control_socket;
  if (dir.empty()) {
    const char* env = std::getenv("NVMEOF_CONTROL_DIR");
    if (env) dir = env;
  }
  if (dir.empty()) return {};
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  if (const int err = make_dirs(dir)) return errno_code(err);
  const std::string path = dir + "/nvmeof-" + std::to_string(::getpid()) + "-" + std::to_string(serial_) + ".sock";
  auto handler = [this](std::string_view line) -> std::string {
    const Json req = Json::parse(line, nullptr, false);
    if (req.is_discarded() || !req.is_object() || !req.contains("op") || !req["op"].is_string())
      return fail("expected a JSON object with \"op\": stats or set-selector");
    const std::string op = req["op"].get<std::string>();
    if (op == "stats") {
      const VolumeStats s = collect_stats();
      Json j{{"ok", true},
             {"pid", ::getpid()},
             {"volume", serial_},
             {"subsystem", sub_->serial_},
             {"nqn", opts_.connect.subnqn},
             {"uptime_s", static_cast<double>(Reactor::clock_ns() - open_ns_) / 1e9},
             {"metrics_port", metrics_port()},
             {"stats", Json::parse(to_json(s))}};
      return j.dump();
    }
    if (op == "set-selector") {
      if (!req.contains("selector") || !req["selector"].is_string()) return fail("set-selector needs \"selector\"");
      auto k = parse_selector(req["selector"].get<std::string>());
      if (!k)
        return fail("unknown selector \"" + req["selector"].get<std::string>() +
                    "\" (round-robin, queue-depth, numa, service-time)");
      ns_->selector.store(*k, std::memory_order_relaxed);
      return Json{{"ok", true}, {"selector", to_string(*k)}}.dump();
    }
    return fail("unknown op \"" + op + "\" (stats, set-selector)");
  };
  auto sock = ControllerAccess::impl(sub_->cp_).call([&] { return ControlSocket::open(engine_of(*sub_->host_).io(), path, handler); });
  if (!sock) return sock.error();
  control_socket_ = std::move(*sock);
  return {};
}

void VolumeImpl::stop_observers() {
  metrics_.reset();  // waits for a scrape in progress
  if (control_socket_) {
    ControllerAccess::impl(sub_->cp_).call([this] { control_socket_->close(); });
    control_socket_.reset();
  }
}

}  // namespace nvmeof::detail

namespace nvmeof {
uint16_t Volume::metrics_port() const noexcept { return impl_->metrics_port(); }
std::string Volume::control_socket_path() const { return impl_->control_socket_path(); }
}  // namespace nvmeof
