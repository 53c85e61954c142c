// nvmeof-target: the embedded NVMe/TCP target as a standalone server. Parses flags, starts
// nvmeof::Target, serves until SIGINT or SIGTERM, exits 0. One subsystem with one namespace by
// default; --subsystems and --namespaces make many (a host with many volumes to measure).
#include <signal.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/identify.hpp"
#include "core/key_text.hpp"
#include "nvmeof/target.hpp"
#include "target/host_access.hpp"
#include "target/target_control.hpp"
#include "target/target_control_server.hpp"
#include "target/target_metrics.hpp"

using namespace nvmeof;

namespace {

constexpr unsigned kMaxSubsystems = 256;
// An Identify active namespace list holds 1024 NSIDs; more would need hosts to page through it.
constexpr unsigned kMaxNamespaces = 1024;

// "64M", "1G", "4096": bytes with an optional K/M/G/T (binary) suffix.
bool parse_size(const std::string& s, uint64_t& out) {
  if (s.empty()) return false;
  size_t used = 0;
  unsigned long long v = 0;
  try {
    v = std::stoull(s, &used);
  } catch (...) {
    return false;
  }
  unsigned shift = 0;
  if (used < s.size()) {
    if (used + 1 != s.size() && !(used + 2 == s.size() && (s[used + 1] == 'B' || s[used + 1] == 'b')))
      return false;
    switch (s[used]) {
      case 'k': case 'K': shift = 10; break;
      case 'm': case 'M': shift = 20; break;
      case 'g': case 'G': shift = 30; break;
      case 't': case 'T': shift = 40; break;
      default: return false;
    }
  }
  if (v > (UINT64_MAX >> shift)) return false;
  out = static_cast<uint64_t>(v) << shift;
  return true;
}

// "127.0.0.1:4420", "[::1]:4420", "0.0.0.0:0".
bool parse_listen(const std::string& s, TargetPort& p) {
  std::string host, port;
  if (!s.empty() && s[0] == '[') {
    const size_t close = s.find(']');
    if (close == std::string::npos || close + 1 >= s.size() || s[close + 1] != ':') return false;
    host = s.substr(1, close - 1);
    port = s.substr(close + 2);
  } else {
    const size_t colon = s.rfind(':');
    if (colon == std::string::npos) return false;
    host = s.substr(0, colon);
    port = s.substr(colon + 1);
  }
  if (host.empty() || port.empty() || port.find_first_not_of("0123456789") != std::string::npos)
    return false;
  p.traddr = host;
  p.trsvcid = port;
  return true;
}

// A host NQN as --allow-host and the key flags take it: "nqn." and printable, at most 223 bytes.
bool valid_host_nqn(const std::string& n, std::string& why) {
  if (n.rfind("nqn.", 0) != 0) return why = "expected an NQN starting with \"nqn.\"", false;
  if (n.size() > 223) return why = "an NQN has at most 223 bytes", false;
  for (const char c : n)
    if (c <= 0x20 || c > 0x7e) return why = "an NQN has no spaces or control characters", false;
  return true;
}

// The shape of a DH-HMAC-CHAP secret in its interchange form, "DHHC-1:0X:<base64>:" (X 0..3).
// Only the shape: the authentication layer validates the key itself.
bool dhchap_shape(const std::string& k) {
  if (k.rfind("DHHC-1:", 0) != 0 || k.size() < 12) return false;
  if (k[7] != '0' || k[8] < '0' || k[8] > '3' || k[9] != ':' || k.back() != ':') return false;
  for (size_t i = 10; i + 1 < k.size(); ++i) {
    const char c = k[i];
    const bool b64 = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                     c == '+' || c == '/' || c == '=';
    if (!b64) return false;
  }
  return true;
}

// "NQN=SECRET" of --host-key / --host-ctrl-key; SECRET "@FILE" reads it from FILE (one line).
bool parse_host_key(const char* flag, const std::string& arg, std::string& nqn, std::string& key) {
  const size_t eq = arg.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == arg.size()) {
    std::fprintf(stderr, "nvmeof-target: %s %s: expected NQN=SECRET (SECRET: DHHC-1:... or @FILE)\n",
                 flag, arg.c_str());
    return false;
  }
  nqn = arg.substr(0, eq);
  std::string why;
  if (!valid_host_nqn(nqn, why)) {
    std::fprintf(stderr, "nvmeof-target: %s %s: %s\n", flag, nqn.c_str(), why.c_str());
    return false;
  }
  key = arg.substr(eq + 1);
  if (auto text = nvmeof::detail::read_key_text(key)) {
    key = std::move(*text);
  } else {
    std::fprintf(stderr, "nvmeof-target: %s %s: cannot read the key file '%s': %s\n", flag, nqn.c_str(),
                 key.c_str() + 1, text.error().message().c_str());
    return false;
  }
  if (!dhchap_shape(key)) {
    // Never echo the secret itself.
    std::fprintf(stderr, "nvmeof-target: %s %s: the secret is not of the form DHHC-1:0X:<base64>: "
                 "(X 0 to 3)\n", flag, nqn.c_str());
    return false;
  }
  return true;
}

// The access rule of a subsystem (every one has the same), for the start-up line and the JSON.
struct AccessInfo {
  bool any_host = true;
  std::string line;     // what the start-up output says
  std::string warning;  // empty, or a warning for stderr
};

AccessInfo access_info(const TargetOptions& o, const TargetSubsystem& s) {
  AccessInfo a;
  a.any_host = nvmeof::target::any_host_allowed(s, o.ports);
  std::string open_addr;
  for (const auto& p : o.ports)
    if (!nvmeof::target::is_loopback_traddr(p.traddr)) {
      open_addr = p.traddr;
      break;
    }
  if (a.any_host) {
    if (s.access == HostAccess::automatic) {
      a.line = "any host may connect (every listen address is loopback)";
    } else {
      a.line = "any host may connect (--allow-any-host)";
      if (!open_addr.empty())
        a.warning = "warning: --allow-any-host: any host that reaches " + open_addr +
                    " (not a loopback address) may connect";
    }
    return a;
  }
  if (s.hosts.empty()) {
    a.line = "no host may connect: " + open_addr +
             " is not a loopback address and no --allow-host was given";
    a.warning = "warning: no host may connect to " + s.nqn +
                ": name hosts with --allow-host NQN, or open it with --allow-any-host";
    return a;
  }
  a.line = s.hosts.size() == 1 ? std::string("only this host may connect:")
                               : "only these " + std::to_string(s.hosts.size()) + " hosts may connect:";
  for (const auto& h : s.hosts) {
    a.line += " " + h.nqn;
    if (!h.dhchap_key.empty()) a.line += h.dhchap_ctrl_key.empty() ? " (key)" : " (key, ctrl key)";
  }
  return a;
}

nlohmann::json describe(const Target& t, const TargetOptions& o) {
  nlohmann::json j;
  j["ports"] = nlohmann::json::array();
  for (size_t i = 0; i < o.ports.size(); ++i) {
    const std::string addr = t.port_address(i);
    const size_t colon = addr.rfind(':');
    std::string traddr = addr.substr(0, colon);
    if (!traddr.empty() && traddr.front() == '[') traddr = traddr.substr(1, traddr.size() - 2);
    j["ports"].push_back({{"index", i},
                          {"address", addr},
                          {"traddr", traddr},
                          {"trsvcid", std::to_string(t.port_number(i))},
                          {"ana_group", i + 1},
                          {"ana_state", to_string(t.ana_state(i))}});
  }
  j["subsystems"] = nlohmann::json::array();
  for (const auto& s : o.subsystems) {
    nlohmann::json ns = nlohmann::json::array();
    for (const auto& n : s.namespaces)
      ns.push_back({{"nsid", n.nsid},
                    {"size_bytes", n.size_bytes},
                    {"block_size", n.block_size},
                    {"backing", n.file.empty() ? "ram" : "file"},
                    {"file", n.file}});
    // The hosts, never their keys.
    nlohmann::json hosts = nlohmann::json::array();
    for (const auto& h : s.hosts) hosts.push_back(h.nqn);
    const AccessInfo a = access_info(o, s);
    j["subsystems"].push_back({{"nqn", s.nqn},
                               {"namespaces", ns},
                               {"any_host", a.any_host},
                               {"hosts", hosts},
                               {"access", a.line}});
  }
  j["discovery_nqn"] = kDiscoveryNqn;
  j["cqt_ms"] = o.cqt_ms;
  j["report_cqt"] = o.report_cqt;
  j["ccr"] = o.ccr == CcrSupport::enabled;
  j["ccr_async"] = o.ccr_async;
  j["poll"] = o.poll == TargetPoll::busy ? "busy" : o.poll == TargetPoll::sleep ? "sleep" : "adaptive";
  j["poll_spin_us"] = o.poll_spin_us;
  return j;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "ctl") return nvmeof::tools::run_ctl(argc - 2, argv + 2);
  CLI::App app{"nvmeof-target: an NVMe/TCP target (RAM- or file-backed namespace, several ports, "
               "one ANA group per port, discovery, keep-alive in 100 ms units, Command Quiesce "
               "Time, Cross-Controller Reset). Serves until SIGINT or SIGTERM."};
  std::vector<std::string> listen{"127.0.0.1:4420"};
  std::string nqn = TargetSubsystem{}.nqn;
  std::string size = "64M";
  uint32_t block_size = 4096;
  std::string file;
  unsigned namespaces = 1, subsystems = 1;
  TargetOptions opts;
  std::vector<std::string> ana;
  bool json = false;
  app.add_option("--listen,-l", listen, "ADDR:PORT to listen on, repeatable; [v6addr]:port for "
                 "IPv6; port 0 picks a free one")
      ->capture_default_str();
  app.add_option("--nqn", nqn, "subsystem NQN (with --subsystems M > 1: NQN-1 ... NQN-M)")
      ->capture_default_str();
  app.add_option("--subsystems", subsystems, "subsystems, each with the same namespaces and hosts")
      ->check(CLI::Range(1u, kMaxSubsystems))
      ->capture_default_str();
  app.add_option("--namespaces", namespaces, "namespaces per subsystem (NSID 1 to N, each --size)")
      ->check(CLI::Range(1u, kMaxNamespaces))
      ->capture_default_str();
  app.add_option("--size", size, "namespace size, e.g. 64M, 1G (RAM: committed only when written)")
      ->capture_default_str();
  app.add_option("--block-size", block_size, "logical block size")
      ->check(CLI::IsMember({512, 4096}))
      ->capture_default_str();
  app.add_option("--file", file, "back the namespace with this file (created if absent) instead of "
                 "RAM; one subsystem with one namespace only");
  app.add_option("--cqt-ms", opts.cqt_ms, "Command Quiesce Time honoured (and reported), ms")
      ->capture_default_str();
  bool no_cqt_report = false, no_ccr = false;
  unsigned ccr_async_delay_ms = 0;
  app.add_flag("--no-cqt-report", no_cqt_report,
               "report CQT 0 in Identify (as Linux nvmet does) while still honouring --cqt-ms");
  app.add_flag("--no-ccr", no_ccr,
               "no Cross-Controller Reset: CCRL 0, the command fails with Invalid Opcode");
  app.add_flag("--ccr-async", opts.ccr_async,
               "test option: every Cross-Controller Reset completes asynchronously (DW0 0, then "
               "a CCR log entry and an asynchronous event)");
  app.add_option("--ccr-async-delay-ms", ccr_async_delay_ms,
                 "with --ccr-async: report each reset done no sooner than this after its command")
      ->capture_default_str();
  // uint8_t options would parse and print as characters: take them as unsigned.
  unsigned anatt = opts.anatt_s, mdts = opts.mdts;
  app.add_option("--anatt", anatt, "ANA transition time reported, s")
      ->check(CLI::Range(0, 255))
      ->capture_default_str();
  app.add_option("--mdts", mdts, "maximum data transfer size, 2^N * 4 KiB (0: unlimited)")
      ->check(CLI::Range(0, 16))
      ->capture_default_str();
  app.add_option("--in-capsule-data", opts.in_capsule_data, "in-capsule data of I/O queues, bytes")
      ->capture_default_str();
  app.add_option("--queue-depth", opts.max_queue_depth, "largest queue (CAP.MQES + 1)")
      ->capture_default_str();
  app.add_option("--ana", ana, "PORT=STATE: initial ANA state of port index PORT (optimized, "
                 "non-optimized, inaccessible, persistent-loss, change), repeatable");
  std::vector<std::string> allow_hosts, host_keys, host_ctrl_keys;
  bool allow_any_host = false;
  app.add_option("--allow-host", allow_hosts,
                 "host NQN allowed to connect, repeatable; once any host is named (here or by a "
                 "key), only the named hosts may connect");
  app.add_flag("--allow-any-host", allow_any_host,
               "any host may connect (the default only when every listen address is loopback)");
  app.add_option("--host-key", host_keys,
                 "NQN=SECRET: the host's DH-HMAC-CHAP secret (DHHC-1:... or @FILE), repeatable; "
                 "adds the host to the allowed ones");
  app.add_option("--host-ctrl-key", host_ctrl_keys,
                 "NQN=SECRET: the controller's secret for bidirectional authentication of that "
                 "host (needs --host-key for it), repeatable");
  std::string poll = "adaptive";
  app.add_option("--poll", poll, "how connection threads wait: busy (never sleep), adaptive "
                 "(spin --poll-spin-us after work, then sleep) or sleep")
      ->check(CLI::IsMember({"busy", "adaptive", "sleep"}))
      ->capture_default_str();
  app.add_option("--poll-spin-us", opts.poll_spin_us, "with --poll adaptive: the spin after work, us")
      ->check(CLI::Range(0u, 1'000'000u))
      ->capture_default_str();
  app.add_flag("--log", opts.log_connections, "log connects, disconnects and errors to stderr");
  app.add_flag("--json", json, "print the bound ports as one JSON line on start");
  // Fault rehearsal from outside: `nvmeof-target ctl PATH ...` talks to this socket.
  std::string control_path;
  app.add_option("--control", control_path,
                 "open a control socket (mode 0600) at PATH; drive it with `nvmeof-target ctl PATH "
                 "ana|fault|latency|fail-status|clear|stats ...`");
  std::string tls_mode = "none";
  app.add_option("--tls", tls_mode,
                 "NVMe/TCP secure channel of every port: none, not-required (TLS 1.3 or plaintext) "
                 "or required (TLS 1.3 only)")
      ->check(CLI::IsMember({"none", "not-required", "required"}))
      ->capture_default_str();
  std::string tls_psk;
  app.add_option("--tls-psk", tls_psk,
                 "configured PSK in the interchange form (NVMeTLSkey-1:01:...:, as nvme gen-tls-key "
                 "prints it); needed with --tls");
  std::string metrics_listen;
  app.add_option("--metrics-listen", metrics_listen,
                 "serve Prometheus metrics of every port at ADDR:PORT/metrics (e.g. 127.0.0.1:9465)");
  app.footer("Control: nvmeof-target ctl PATH ana PORT STATE | fault PORT "
             "reset|blackhole|partition|refuse | latency PORT 5ms | fail-status PORT SCT/SC | "
             "clear PORT | stats");
  CLI11_PARSE(app, argc, argv);
  opts.poll = poll == "busy" ? TargetPoll::busy : poll == "sleep" ? TargetPoll::sleep : TargetPoll::adaptive;
  opts.anatt_s = static_cast<uint8_t>(anatt);
  opts.mdts = static_cast<uint8_t>(mdts);
  opts.report_cqt = !no_cqt_report;
  opts.ccr = no_ccr ? CcrSupport::disabled : CcrSupport::enabled;
  opts.ccr_async_delay = std::chrono::milliseconds(ccr_async_delay_ms);

  opts.ports.clear();
  for (const auto& l : listen) {
    TargetPort p;
    if (!parse_listen(l, p)) {
      std::fprintf(stderr, "nvmeof-target: --listen %s: expected ADDR:PORT\n", l.c_str());
      return 2;
    }
    p.tls = tls_mode == "required"       ? PortTls::required
            : tls_mode == "not-required" ? PortTls::not_required
                                         : PortTls::none;
    p.tls_psk = tls_psk;
    opts.ports.push_back(p);
  }
  if (tls_mode != "none" && tls_psk.empty()) {
    std::fprintf(stderr, "nvmeof-target: --tls %s needs --tls-psk\n", tls_mode.c_str());
    return 2;
  }
  for (const auto& a : ana) {
    const size_t eq = a.find('=');
    size_t idx = 0;
    bool ok = eq != std::string::npos && eq > 0 &&
              a.find_first_not_of("0123456789") == eq;
    if (ok) idx = std::stoul(a.substr(0, eq));
    auto st = ok ? parse_ana_state(a.substr(eq + 1)) : Result<AnaState>(Errc::invalid_argument);
    if (!ok || !st || idx >= opts.ports.size()) {
      std::fprintf(stderr, "nvmeof-target: --ana %s: expected PORT=STATE with PORT < %zu\n",
                   a.c_str(), opts.ports.size());
      return 2;
    }
    opts.ports[idx].ana_state = *st;
  }
  TargetNamespace ns;
  if (!parse_size(size, ns.size_bytes) || ns.size_bytes == 0 || ns.size_bytes % block_size != 0) {
    std::fprintf(stderr, "nvmeof-target: --size %s: expected a multiple of the block size\n",
                 size.c_str());
    return 2;
  }
  ns.block_size = block_size;
  ns.file = file;
  if (!file.empty() && (namespaces > 1 || subsystems > 1)) {
    std::fprintf(stderr, "nvmeof-target: --file backs one namespace: not with --namespaces or "
                 "--subsystems above 1\n");
    return 2;
  }
  opts.subsystems[0].nqn = subsystems > 1 ? nqn + "-1" : nqn;
  opts.subsystems[0].namespaces.clear();
  for (uint32_t i = 1; i <= namespaces; ++i) {
    ns.nsid = i;
    opts.subsystems[0].namespaces.push_back(ns);
  }

  // Host entries: --allow-host in order, then hosts only a key names.
  std::vector<TargetHost>& hosts = opts.subsystems[0].hosts;
  auto entry = [&hosts](const std::string& n) -> TargetHost& {
    for (auto& h : hosts)
      if (h.nqn == n) return h;
    hosts.push_back(TargetHost{n, {}, {}, {}, {}});
    return hosts.back();
  };
  for (const auto& h : allow_hosts) {
    std::string why;
    if (!valid_host_nqn(h, why)) {
      std::fprintf(stderr, "nvmeof-target: --allow-host %s: %s\n", h.c_str(), why.c_str());
      return 2;
    }
    entry(h);
  }
  for (const auto& [flag, list] : {std::pair{"--host-key", &host_keys},
                                   std::pair{"--host-ctrl-key", &host_ctrl_keys}}) {
    const bool ctrl = std::string(flag) == "--host-ctrl-key";
    for (const auto& arg : *list) {
      std::string n, key;
      if (!parse_host_key(flag, arg, n, key)) return 2;
      TargetHost& h = entry(n);
      std::string& slot = ctrl ? h.dhchap_ctrl_key : h.dhchap_key;
      if (!slot.empty()) {
        std::fprintf(stderr, "nvmeof-target: %s: %s has a key already\n", flag, n.c_str());
        return 2;
      }
      slot = key;
    }
  }
  for (const auto& h : hosts)
    if (!h.dhchap_ctrl_key.empty() && h.dhchap_key.empty()) {
      std::fprintf(stderr, "nvmeof-target: --host-ctrl-key %s: needs --host-key for that host too\n",
                   h.nqn.c_str());
      return 2;
    }
  opts.subsystems[0].access =
      allow_any_host ? HostAccess::any : hosts.empty() ? HostAccess::automatic : HostAccess::allow_list;
  const AccessInfo access = access_info(opts, opts.subsystems[0]);
  for (unsigned i = 2; i <= subsystems; ++i) {
    TargetSubsystem s = opts.subsystems[0];
    s.nqn = nqn + "-" + std::to_string(i);
    char serial[16];
    std::snprintf(serial, sizeof serial, "NVMEOF%04u", i);  // subsystem 1 keeps the default's
    s.serial = serial;
    opts.subsystems.push_back(std::move(s));
  }

  // Block the signals before any thread starts so every thread inherits the mask and only
  // sigwait below receives them.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  signal(SIGPIPE, SIG_IGN);

  auto target = Target::start(opts);
  if (!target) {
    std::fprintf(stderr, "nvmeof-target: cannot start: %s\n", target.error().message().c_str());
    return 1;
  }
  nvmeof::tools::TargetControlServer control;
  if (!control_path.empty()) {
    if (auto r = control.start(**target, control_path); !r) {
      std::fprintf(stderr, "nvmeof-target: --control %s: %s\n", control_path.c_str(),
                   r.error().message().c_str());
      return 1;
    }
  }
  std::unique_ptr<nvmeof::detail::MetricsExporter> metrics;
  if (!metrics_listen.empty()) {
    auto m = nvmeof::tools::start_target_metrics(**target, metrics_listen);
    if (!m) {
      const bool unsupported = m.error() == nvmeof::make_error_code(nvmeof::Errc::unsupported);
      std::fprintf(stderr, "nvmeof-target: --metrics-listen %s: %s\n", metrics_listen.c_str(),
                   unsupported ? "built without metrics support" : m.error().message().c_str());
      return 1;
    }
    metrics = std::move(*m);
  }
  if (!access.warning.empty()) std::fprintf(stderr, "nvmeof-target: %s\n", access.warning.c_str());
  if (json) {
    nlohmann::json j = describe(**target, opts);
    if (metrics) j["metrics_port"] = metrics->port();
    if (!control_path.empty()) j["control"] = control_path;
    std::cout << j.dump() << std::endl;
  } else {
    for (size_t i = 0; i < opts.ports.size(); ++i)
      std::printf("nvmeof-target: listening on %s (ANA group %zu, %s)\n",
                  (*target)->port_address(i).c_str(), i + 1, to_string((*target)->ana_state(i)));
    const std::string nsids = namespaces == 1 ? "nsid 1" : "nsid 1-" + std::to_string(namespaces);
    for (const auto& s : opts.subsystems) {
      std::printf("nvmeof-target: %s %s: %llu bytes%s, %u-byte blocks, %s\n", s.nqn.c_str(),
                  nsids.c_str(), static_cast<unsigned long long>(ns.size_bytes),
                  namespaces == 1 ? "" : " each", block_size, file.empty() ? "RAM" : file.c_str());
      std::printf("nvmeof-target: %s: %s\n", s.nqn.c_str(), access.line.c_str());
    }
    std::fflush(stdout);
  }

  int sig = 0;
  sigwait(&sigs, &sig);
  control.stop();
  metrics.reset();
  (*target)->stop();
  if (opts.log_connections) {
    for (size_t i = 0; i < opts.ports.size(); ++i) {
      const PortStats s = (*target)->stats(i);
      std::fprintf(stderr,
                   "nvmeof-target: %s: %llu connections, %llu commands, %llu reads, %llu writes, "
                   "%llu errors, %llu keep-alive expiries, %llu/%llu CCRs completed/received\n",
                   (*target)->port_address(i).c_str(), static_cast<unsigned long long>(s.connections),
                   static_cast<unsigned long long>(s.commands), static_cast<unsigned long long>(s.reads),
                   static_cast<unsigned long long>(s.writes), static_cast<unsigned long long>(s.errors),
                   static_cast<unsigned long long>(s.keep_alive_expiries),
                   static_cast<unsigned long long>(s.ccr_completed),
                   static_cast<unsigned long long>(s.ccr_received));
    }
  }
  return 0;
}
