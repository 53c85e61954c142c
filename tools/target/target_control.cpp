#include "target/target_control.hpp"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "core/identify.hpp"
#include "observe/control_socket.hpp"

namespace nvmeof::tools {

namespace {

using Json = nlohmann::ordered_json;

std::string fail(const std::string& why) { return Json{{"ok", false}, {"error", why}}.dump(); }
std::string ok() { return Json{{"ok", true}}.dump(); }

bool parse_fault(std::string_view s, FaultKind& k) {
  if (s == "reset") k = FaultKind::reset;
  else if (s == "blackhole") k = FaultKind::blackhole;
  else if (s == "partition") k = FaultKind::partition;
  else if (s == "refuse") k = FaultKind::refuse;
  else return false;
  return true;
}

bool parse_uint(const std::string& s, unsigned long max, unsigned long& out) {
  if (s.empty() || s[0] == '-' || s[0] == '+') return false;
  errno = 0;
  char* end = nullptr;
  out = std::strtoul(s.c_str(), &end, 0);
  return errno == 0 && end && *end == '\0' && out <= max;
}

Json port_json(const Target& t, size_t i) {
  const PortStats s = t.stats(i);
  return Json{{"index", i},
              {"address", t.port_address(i)},
              {"removed", t.port_removed(i)},
              {"ana_group", i + 1},
              {"ana_state", to_string(t.ana_state(i))},
              {"connections", s.connections},
              {"live_connections", s.live_connections},
              {"commands", s.commands},
              {"reads", s.reads},
              {"writes", s.writes},
              {"errors", s.errors},
              {"commands_dropped", s.commands_dropped},
              {"keep_alive_expiries", s.keep_alive_expiries},
              {"ccr_received", s.ccr_received},
              {"ccr_completed", s.ccr_completed}};
}

// "4096", "64k", "16m", "1g": bytes. false when malformed, 0 or past 2^50.
bool parse_bytes(std::string_view s, uint64_t& out) {
  size_t digits = 0;
  while (digits < s.size() && s[digits] >= '0' && s[digits] <= '9') ++digits;
  if (digits == 0 || digits > 15) return false;
  uint64_t v = std::stoull(std::string(s.substr(0, digits)));
  const std::string_view unit = s.substr(digits);
  if (unit == "k" || unit == "K") v <<= 10;
  else if (unit == "m" || unit == "M") v <<= 20;
  else if (unit == "g" || unit == "G") v <<= 30;
  else if (!unit.empty()) return false;
  if (v == 0 || v > (1ull << 50)) return false;
  out = v;
  return true;
}

std::string fail_result(const ErrorInfo& e) { return fail(e.message()); }

// The run-time changes: add-port, remove-port, attach-ns, detach-ns, resize-ns.
std::string answer_change(Target& t, const std::string& op, const Json& req) {
  if (op == "add-port") {
    if (!req.contains("address") || !req["address"].is_string()) return fail("\"add-port\" needs an address (ADDR:PORT)");
    const std::string a = req["address"].get<std::string>();
    const size_t colon = a.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == a.size())
      return fail("bad address \"" + a + "\": expected ADDR:PORT (port 0 picks one)");
    TargetPort p;
    p.traddr = a.substr(0, colon);
    if (p.traddr.size() > 2 && p.traddr.front() == '[' && p.traddr.back() == ']') p.traddr = p.traddr.substr(1, p.traddr.size() - 2);
    p.trsvcid = a.substr(colon + 1);
    auto r = t.add_port(p);
    if (!r) return fail_result(r.failure());
    return Json{{"ok", true}, {"port", *r}, {"address", t.port_address(*r)}}.dump();
  }
  if (op == "remove-port") {
    if (!req.contains("port") || !req["port"].is_number_unsigned()) return fail("\"remove-port\" needs a port index");
    auto r = t.remove_port(static_cast<size_t>(req["port"].get<uint64_t>()));
    return r ? ok() : fail_result(r.failure());
  }
  // Namespace changes: "nqn" and "nsid" always.
  if (!req.contains("nqn") || !req["nqn"].is_string()) return fail("\"" + op + "\" needs the subsystem's nqn");
  if (!req.contains("nsid") || !req["nsid"].is_number_unsigned() || req["nsid"].get<uint64_t>() == 0 ||
      req["nsid"].get<uint64_t>() >= 0xffffffffu)
    return fail("\"" + op + "\" needs an nsid (1..4294967294)");
  const std::string nqn = req["nqn"].get<std::string>();
  const auto nsid = static_cast<uint32_t>(req["nsid"].get<uint64_t>());
  if (op == "detach-ns") {
    auto r = t.detach_namespace(nqn, nsid);
    return r ? ok() : fail_result(r.failure());
  }
  if (!req.contains("size") || !req["size"].is_number_unsigned()) return fail("\"" + op + "\" needs a size in bytes");
  const uint64_t size = req["size"].get<uint64_t>();
  if (op == "resize-ns") {
    auto r = t.resize_namespace(nqn, nsid, size);
    return r ? ok() : fail_result(r.failure());
  }
  TargetNamespace ns;  // attach-ns
  ns.nsid = nsid;
  ns.size_bytes = size;
  ns.block_size = req.contains("block_size") && req["block_size"].is_number_unsigned()
                      ? static_cast<uint32_t>(req["block_size"].get<uint64_t>())
                      : 4096;
  if (req.contains("file") && req["file"].is_string()) ns.file = req["file"].get<std::string>();
  auto r = t.attach_namespace(nqn, ns);
  return r ? ok() : fail_result(r.failure());
}

}  // namespace

std::string answer_target_request(Target& t, std::string_view line) {
  const Json req = Json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (req.is_discarded() || !req.is_object()) return fail("request is not a JSON object");
  if (!req.contains("op") || !req["op"].is_string()) return fail("request has no \"op\"");
  const std::string op = req["op"].get<std::string>();
  const size_t ports = t.port_count();
  if (op == "add-port" || op == "remove-port" || op == "attach-ns" || op == "detach-ns" || op == "resize-ns")
    return answer_change(t, op, req);
  if (op == "stats") {
    Json ps = Json::array();
    for (size_t i = 0; i < ports; ++i) ps.push_back(port_json(t, i));
    return Json{{"ok", true}, {"ports", std::move(ps)}}.dump();
  }
  if (op != "ana" && op != "fault" && op != "latency" && op != "fail-status" && op != "clear")
    return fail("unknown op \"" + op +
                "\" (ana, fault, latency, fail-status, clear, stats, add-port, remove-port, attach-ns, detach-ns, "
                "resize-ns)");
  if (!req.contains("port") || !req["port"].is_number_unsigned())
    return fail("\"" + op + "\" needs a port index");
  const uint64_t port = req["port"].get<uint64_t>();
  if (port >= ports)
    return fail("port " + std::to_string(port) + " out of range: the target has " + std::to_string(ports) +
                " port" + (ports == 1 ? "" : "s") + " (0.." + std::to_string(ports - 1) + ")");
  const size_t p = static_cast<size_t>(port);
  if (op == "ana") {
    if (!req.contains("state") || !req["state"].is_string()) return fail("\"ana\" needs a state");
    auto st = parse_ana_state(req["state"].get<std::string>());
    if (!st)
      return fail("unknown ANA state \"" + req["state"].get<std::string>() +
                  "\" (optimized, non-optimized, inaccessible, persistent-loss, change)");
    t.set_ana_state(p, *st);
    return ok();
  }
  if (op == "fault") {
    FaultKind k;
    if (!req.contains("kind") || !req["kind"].is_string() || !parse_fault(req["kind"].get<std::string>(), k))
      return fail("\"fault\" needs a kind: reset, blackhole, partition or refuse");
    t.inject(p, k);
    return ok();
  }
  if (op == "latency") {
    if (!req.contains("latency_us") || !req["latency_us"].is_number_unsigned())
      return fail("\"latency\" needs latency_us (a non-negative integer)");
    t.set_latency(p, std::chrono::microseconds(req["latency_us"].get<uint64_t>()));
    return ok();
  }
  if (op == "fail-status") {
    if (!req.contains("sct") || !req.contains("sc") || !req["sct"].is_number_unsigned() ||
        !req["sc"].is_number_unsigned() || req["sct"].get<uint64_t>() > 7 || req["sc"].get<uint64_t>() > 255)
      return fail("\"fail-status\" needs sct (0..7) and sc (0..255)");
    const auto sct = static_cast<Sct>(req["sct"].get<uint64_t>());
    const auto sc = static_cast<uint8_t>(req["sc"].get<uint64_t>());
    if (req["sct"].get<uint64_t>() == 0 && sc == 0) return fail("status 0/0 is success, not a failure");
    t.fail_commands(p, NvmeStatus::make(sct, sc));
    return ok();
  }
  t.clear_faults(p);  // clear
  return ok();
}

bool parse_latency(std::string_view s, std::chrono::microseconds& out) {
  size_t digits = 0;
  while (digits < s.size() && s[digits] >= '0' && s[digits] <= '9') ++digits;
  if (digits == 0 || digits > 12) return false;
  const uint64_t v = std::stoull(std::string(s.substr(0, digits)));
  const std::string_view unit = s.substr(digits);
  if (unit == "us") out = std::chrono::microseconds(v);
  else if (unit == "ms") out = std::chrono::microseconds(v * 1000);
  else if (unit == "s") out = std::chrono::microseconds(v * 1000000);
  else if (unit.empty() && v == 0) out = std::chrono::microseconds(0);
  else return false;
  return true;
}

bool ctl_request_from_words(const std::vector<std::string>& w, std::string& request, std::string& error) {
  const char* usage = "expected: ana PORT STATE | fault PORT reset|blackhole|partition|refuse | "
                      "latency PORT DURATION | fail-status PORT SCT/SC | clear PORT | stats | add-port ADDR:PORT | "
                      "remove-port PORT | attach-ns NQN NSID SIZE [BLOCK_SIZE] | detach-ns NQN NSID | "
                      "resize-ns NQN NSID SIZE";
  if (w.empty()) {
    error = usage;
    return false;
  }
  const std::string& op = w[0];
  auto nsid_of = [&](const std::string& s, unsigned long& out) {
    if (parse_uint(s, 0xfffffffeul, out) && out != 0) return true;
    error = "bad nsid \"" + s + "\": expected 1..4294967294";
    return false;
  };
  auto size_of = [&](const std::string& s, uint64_t& out) {
    if (parse_bytes(s, out)) return true;
    error = "bad size \"" + s + "\": expected bytes, e.g. 64m, 1g, 1048576";
    return false;
  };
  if (op == "add-port" || op == "remove-port" || op == "attach-ns" || op == "detach-ns" || op == "resize-ns") {
    const size_t want_min = op == "add-port" || op == "remove-port" ? 2 : op == "detach-ns" ? 3 : 4;
    const size_t want_max = op == "attach-ns" ? 5 : want_min;
    if (w.size() < want_min || w.size() > want_max) {
      error = op + ": wrong number of arguments; " + usage;
      return false;
    }
    Json req{{"op", op}};
    if (op == "add-port") {
      req["address"] = w[1];
    } else if (op == "remove-port") {
      unsigned long port = 0;
      if (!parse_uint(w[1], 1u << 20, port)) {
        error = "bad port \"" + w[1] + "\": expected a port index (0, 1, ...)";
        return false;
      }
      req["port"] = port;
    } else {
      unsigned long nsid = 0;
      if (!nsid_of(w[2], nsid)) return false;
      req["nqn"] = w[1];
      req["nsid"] = nsid;
      if (op != "detach-ns") {
        uint64_t size = 0;
        if (!size_of(w[3], size)) return false;
        req["size"] = size;
      }
      if (op == "attach-ns" && w.size() == 5) {
        unsigned long bs = 0;
        if (!parse_uint(w[4], 65536, bs) || (bs != 512 && bs != 4096)) {
          error = "bad block size \"" + w[4] + "\": 512 or 4096";
          return false;
        }
        req["block_size"] = bs;
      }
    }
    request = req.dump();
    return true;
  }
  if (op == "stats") {
    if (w.size() != 1) {
      error = "stats takes no arguments";
      return false;
    }
    request = Json{{"op", "stats"}}.dump();
    return true;
  }
  const size_t want = op == "clear" ? 2 : 3;
  if ((op != "ana" && op != "fault" && op != "latency" && op != "fail-status" && op != "clear")) {
    error = "unknown command \"" + op + "\"; " + usage;
    return false;
  }
  if (w.size() != want) {
    error = op + ": wrong number of arguments; " + usage;
    return false;
  }
  unsigned long port = 0;
  if (!parse_uint(w[1], 1u << 20, port)) {
    error = "bad port \"" + w[1] + "\": expected a port index (0, 1, ...)";
    return false;
  }
  Json req{{"op", op}, {"port", port}};
  if (op == "ana") {
    if (!parse_ana_state(w[2])) {
      error = "bad ANA state \"" + w[2] + "\": optimized, non-optimized, inaccessible, persistent-loss or change";
      return false;
    }
    req["state"] = w[2];
  } else if (op == "fault") {
    FaultKind k;
    if (!parse_fault(w[2], k)) {
      error = "bad fault \"" + w[2] + "\": reset, blackhole, partition or refuse";
      return false;
    }
    req["kind"] = w[2];
  } else if (op == "latency") {
    std::chrono::microseconds d{};
    if (!parse_latency(w[2], d)) {
      error = "bad latency \"" + w[2] + "\": expected e.g. 5ms, 250us, 1s or 0";
      return false;
    }
    req["latency_us"] = d.count();
  } else if (op == "fail-status") {
    const size_t slash = w[2].find('/');
    unsigned long sct = 0, sc = 0;
    if (slash == std::string::npos || !parse_uint(w[2].substr(0, slash), 7, sct) ||
        !parse_uint(w[2].substr(slash + 1), 255, sc) || (sct == 0 && sc == 0)) {
      error = "bad status \"" + w[2] + "\": expected SCT/SC, e.g. 0/0x6 (SCT 0..7, SC 0..255, not 0/0)";
      return false;
    }
    req["sct"] = sct;
    req["sc"] = sc;
  }
  request = req.dump();
  return true;
}

bool target_control_call(const std::string& path, const std::string& request, std::string& answer,
                         std::string& error) {
  auto r = detail::control_request(path, request);
  if (!r) {
    const int e = r.error().value();
    if (e == ENOENT) error = "no control socket at " + path;
    else if (e == ECONNREFUSED) error = "nothing listens on " + path + " (is nvmeof-target running with --control?)";
    else error = path + ": " + r.error().message();
    return false;
  }
  answer = *r;
  const Json j = Json::parse(answer, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("ok")) {
    error = path + ": not a control socket answer";
    return false;
  }
  if (!j["ok"].get<bool>()) {
    error = j.value("error", std::string("request refused"));
    return false;
  }
  return true;
}

int run_ctl(int argc, char** argv) {
  if (argc >= 1 && (std::string(argv[0]) == "--help" || std::string(argv[0]) == "-h")) {
    std::printf("usage: nvmeof-target ctl PATH ana PORT STATE | fault PORT reset|blackhole|partition|refuse |\n"
                "                          latency PORT DURATION | fail-status PORT SCT/SC | clear PORT | stats |\n"
                "                          add-port ADDR:PORT | remove-port PORT |\n"
                "                          attach-ns NQN NSID SIZE [BLOCK_SIZE] | detach-ns NQN NSID |\n"
                "                          resize-ns NQN NSID SIZE\n"
                "add-port prints the new port's index and address; sizes take k, m or g (64m).\n");
    return 0;
  }
  if (argc < 2) {
    std::fprintf(stderr, "nvmeof-target ctl: expected PATH and a command (try ctl --help)\n");
    return 2;
  }
  const std::string path = argv[0];
  std::vector<std::string> words(argv + 1, argv + argc);
  std::string request, answer, error;
  if (!ctl_request_from_words(words, request, error)) {
    std::fprintf(stderr, "nvmeof-target ctl: %s\n", error.c_str());
    return 2;
  }
  if (!target_control_call(path, request, answer, error)) {
    std::fprintf(stderr, "nvmeof-target ctl: %s\n", error.c_str());
    return 1;
  }
  if (words[0] == "stats") std::cout << Json::parse(answer).dump(2) << "\n";
  if (words[0] == "add-port") {
    const Json j = Json::parse(answer);
    std::printf("port %llu at %s\n", static_cast<unsigned long long>(j.value("port", uint64_t{0})),
                j.value("address", std::string()).c_str());
  }
  return 0;
}

}  // namespace nvmeof::tools
