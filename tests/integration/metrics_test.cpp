// Prometheus metrics over HTTP on loopback: a volume with VolumeOptions::metrics_listen under
// verified I/O against the embedded target, scraped twice; every metric of the issue is there,
// counters move with the I/O, a failover and an ANA change show. nvmeof-target --metrics-listen
// is scraped the same way, and so is an engine (HostOptions::metrics_listen): one sample per
// controller whatever the number of volumes on it. Bad listen addresses fail the open.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "../common/rig.hpp"
#include "../common/tool_process.hpp"
#include "../common/verified_workload.hpp"
#include "nvmeof/host.hpp"
#include "nvmeof/target.hpp"
#include "nvmeof/volume.hpp"

using namespace nvmeof;
using namespace std::chrono_literals;

namespace {

// One GET /metrics on a new connection: the whole reply, or "" and the failing step in `why`.
std::string get_metrics(uint16_t port, std::string& why) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string resp;
  const std::string req = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    why = std::string("connect: ") + std::strerror(errno);
  } else if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) {
    why = std::string("send: ") + std::strerror(errno);
  } else {
    char b[8192];
    ssize_t n;
    while ((n = ::recv(fd, b, sizeof b, 0)) > 0 || (n < 0 && errno == EINTR))
      if (n > 0) resp.append(b, static_cast<size_t>(n));
    if (resp.empty()) why = n == 0 ? "closed before any reply" : std::string("recv: ") + std::strerror(errno);
  }
  ::close(fd);
  return resp;
}

// GET /metrics from 127.0.0.1:port; the body. The HTTP server (civetweb, under prometheus-cpp)
// has been seen once to close a connection with no reply on a loaded machine under ASan; a
// second connection is tried then, and each empty reply is reported with its cause.
std::string scrape(uint16_t port) {
  std::string resp;
  for (int attempt = 0; attempt < 3 && resp.empty(); ++attempt) {
    std::string why;
    resp = get_metrics(port, why);
    if (resp.empty()) WARN("scrape of port " << port << ", attempt " << attempt + 1 << ": " << why);
  }
  REQUIRE(resp.rfind("HTTP/1.", 0) == 0);
  CHECK(resp.find(" 200 ") != std::string::npos);
  const size_t body = resp.find("\r\n\r\n");
  return body == std::string::npos ? "" : resp.substr(body + 4);
}

// "name{labels}" -> value, for every sample line.
std::map<std::string, double> samples(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t sp = line.rfind(' ');
    out[line.substr(0, sp)] = std::stod(line.substr(sp + 1));
  }
  return out;
}

// The value of the first sample of `name` whose labels contain every one of `with`.
double value(const std::map<std::string, double>& s, const std::string& name, const std::string& with = "") {
  for (const auto& [k, v] : s) {
    if (k.compare(0, name.size(), name) != 0 || (k.size() > name.size() && k[name.size()] != '{')) continue;
    if (with.empty() || k.find(with) != std::string::npos) return v;
  }
  FAIL("no sample " << name << " with " << with);
  return 0;
}

using test::Rig;

// The rig's volume over every port, serving its metrics at `listen`; a deadline a loaded
// machine cannot make a healthy path miss.
VolumeOptions metrics_options(const Rig& r, const std::string& listen) {
  VolumeOptions vo = r.volume_options();
  vo.io_deadline = 2s;
  vo.metrics_listen = listen;
  return vo;
}

}  // namespace

TEST_CASE("a volume's metrics are scraped over HTTP and move with its I/O", "[metrics]") {
  Rig r(test::rig_target_options(2));
  r.open(metrics_options(r, "127.0.0.1:0"));
  const uint16_t port = r.vol->metrics_port();
  REQUIRE(port != 0);
  test::VerifiedWorkload w(*r.vol);
  w.start();
  REQUIRE(test::wait_until([&] { return r.vol->stats().completed > 500; }));
  const auto first = samples(scrape(port));
  for (const char* m :
       {"nvmeof_volume_reads_completed_total", "nvmeof_volume_writes_completed_total", "nvmeof_volume_read_bytes_total",
        "nvmeof_volume_written_bytes_total", "nvmeof_volume_io_latency_seconds_count",
        "nvmeof_volume_io_latency_seconds_sum", "nvmeof_volume_failovers_total",
        "nvmeof_volume_failover_duration_seconds_count", "nvmeof_volume_io_waiting_for_path", "nvmeof_path_state",
        "nvmeof_path_ana_state", "nvmeof_path_reads_completed_total", "nvmeof_path_writes_completed_total",
        "nvmeof_path_io_in_flight", "nvmeof_path_command_errors_total", "nvmeof_path_retries_total",
        "nvmeof_path_failovers_total", "nvmeof_path_reconnects_total"}) {
    INFO(m);
    CHECK(value(first, m) >= 0);
  }
  const std::string p0 = "path=\"0\"", p1 = "path=\"1\"";
  const std::string port0 = "trsvcid=\"" + std::to_string(r.target->port_number(0)) + "\"";
  CHECK(value(first, "nvmeof_path_state", p0) == 1);      // live
  CHECK(value(first, "nvmeof_path_ana_state", p0) == 1);  // optimized
  value(first, "nvmeof_path_reads_completed_total", port0 + ",volume");  // the labels the issue names
  value(first, "nvmeof_path_reads_completed_total", "ana_group=\"1\",numa_node=");
  CHECK(value(first, "nvmeof_volume_reads_completed_total") > 0);
  CHECK(value(first, "nvmeof_volume_io_latency_seconds_bucket", "le=\"+Inf\"") ==
        value(first, "nvmeof_volume_io_latency_seconds_count"));

  // A reset on port 0 and port 1 turned inaccessible: both show at the next scrape.
  const double before_reads = value(first, "nvmeof_volume_reads_completed_total");
  r.target->inject(0, FaultKind::reset);
  REQUIRE(test::wait_until([&] { return !r.vol->stats().timeline.empty(); }));
  r.target->set_ana_state(1, AnaState::inaccessible);
  REQUIRE(test::wait_until([&] { return r.vol->stats().paths[1].ana_state == AnaState::inaccessible; }));
  REQUIRE(test::wait_until([&] { return r.vol->stats().completed > 3000; }));
  const auto second = samples(scrape(port));
  CHECK(value(second, "nvmeof_volume_reads_completed_total") > before_reads);
  CHECK(value(second, "nvmeof_volume_written_bytes_total") > value(first, "nvmeof_volume_written_bytes_total"));
  CHECK(value(second, "nvmeof_volume_io_latency_seconds_count") > value(first, "nvmeof_volume_io_latency_seconds_count"));
  CHECK(value(second, "nvmeof_volume_failovers_total") >= 1);
  CHECK(value(second, "nvmeof_path_failovers_total", p0) >= 1);
  CHECK(value(second, "nvmeof_path_ana_state", p1) == 3);  // inaccessible
  REQUIRE(w.finish(30s));
  CHECK(w.errors() == 0);
  CHECK(w.mismatches() == 0);
}

TEST_CASE("a bad or taken metrics address fails Volume::open", "[metrics]") {
  Rig r(test::rig_target_options(2));
  auto v = Volume::open(metrics_options(r, "nonsense"));
  REQUIRE_FALSE(v);
  CHECK(v.error() == make_error_code(Errc::invalid_argument));
  r.open(metrics_options(r, "127.0.0.1:0"));
  auto again = Volume::open(metrics_options(r, "127.0.0.1:" + std::to_string(r.vol->metrics_port())));
  REQUIRE_FALSE(again);
  CHECK(again.error() == std::error_code(EADDRINUSE, std::system_category()));
}

TEST_CASE("nvmeof-target --metrics-listen serves its ports' counters", "[metrics]") {
  test::ToolProcess proc({test::tool_path("NVMEOF_TARGET"), "--listen", "127.0.0.1:0", "--metrics-listen",
                          "127.0.0.1:0", "--json"});
  const auto j = nlohmann::json::parse(proc.read_line());
  const auto port = j["metrics_port"].get<uint16_t>();
  const auto s = samples(scrape(port));
  CHECK(value(s, "nvmeof_target_port_ana_state", "port=\"0\"") == 1);
  CHECK(value(s, "nvmeof_target_port_connections_total", "port=\"0\"") == 0);
}

TEST_CASE("an engine's metrics show each controller once, shared by the volumes on it", "[metrics]") {
  TargetOptions to = test::rig_target_options(2);
  to.subsystems[0].namespaces.clear();
  for (uint32_t i = 1; i <= 2; ++i) {
    TargetNamespace ns;
    ns.nsid = i;
    ns.size_bytes = 8ull << 20;
    to.subsystems[0].namespaces.push_back(ns);
  }
  Rig r(to);
  auto& target = *r.target;

  HostOptions ho;
  ho.placement = PlacementMode::unpinned;
  ho.metrics_listen = "nonsense";
  auto bad = Host::create(ho);
  REQUIRE_FALSE(bad);
  CHECK(bad.error() == make_error_code(Errc::invalid_argument));
  ho.metrics_listen = "127.0.0.1:0";
  auto host = Host::create(ho);
  REQUIRE(host);
  const uint16_t port = (*host)->metrics_port();
  REQUIRE(port != 0);

  std::vector<std::unique_ptr<Volume>> vols;
  for (uint32_t nsid = 1; nsid <= 2; ++nsid) {
    VolumeOptions vo = r.volume_options();
    vo.nsid = nsid;
    vo.io_deadline = 2s;
    auto v = Volume::open(*host, vo);
    REQUIRE(v);
    vols.push_back(std::move(*v));
  }
  test::VerifiedWorkload w1(*vols[0]), w2(*vols[1]);
  w1.start();
  w2.start();
  REQUIRE(test::wait_until([&] { return vols[0]->stats().completed > 300 && vols[1]->stats().completed > 300; }));
  const uint64_t done = vols[0]->stats().completed + vols[1]->stats().completed;
  const auto s = samples(scrape(port));
  CHECK(value(s, "nvmeof_host_volumes") == 2);
  CHECK(value(s, "nvmeof_host_subsystems") == 1);
  CHECK(value(s, "nvmeof_host_reactors") == 1);
  CHECK(value(s, "nvmeof_host_reactor_wakeups_total", "reactor=\"0\"") > 0);
  // One sample per controller (path), not per volume; both volumes on each.
  size_t controllers = 0;
  double ios = 0;
  for (const auto& [k, v] : s) {
    if (k.rfind("nvmeof_controller_state{", 0) == 0) ++controllers;
    if (k.rfind("nvmeof_controller_io_completed_total{", 0) == 0) ios += v;
  }
  CHECK(controllers == 2);
  const std::string port0 = "127.0.0.1:" + std::to_string(target.port_number(0)) + "\"";
  CHECK(value(s, "nvmeof_controller_volumes", port0) == 2);
  CHECK(value(s, "nvmeof_controller_state", port0) == 1);  // live
  CHECK(value(s, "nvmeof_controller_state", "subnqn=\"" + TargetSubsystem{}.nqn + "\"") == 1);
  CHECK(ios >= static_cast<double>(done));  // every volume's commands, counted by the controller

  // A reset of port 0: its controller's failover shows, once for both volumes.
  target.inject(0, FaultKind::reset);
  REQUIRE(test::wait_until([&] {
    const auto h = (*host)->stats();
    for (const auto& c : h.controllers)
      if (c.address.find(":" + std::to_string(target.port_number(0))) != std::string::npos && c.reconnects >= 1)
        return true;
    return false;
  }));
  const auto after = samples(scrape(port));
  CHECK(value(after, "nvmeof_controller_failovers_total", port0) >= 1);
  CHECK(value(after, "nvmeof_controller_reconnects_total", port0) >= 1);
  REQUIRE(w1.finish(30s));
  REQUIRE(w2.finish(30s));
  CHECK(w1.errors() == 0);
  CHECK(w2.errors() == 0);
  vols.clear();
  const auto closed = samples(scrape(port));
  CHECK(value(closed, "nvmeof_host_volumes") == 0);
}
