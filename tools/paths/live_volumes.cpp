#include "paths/live_volumes.hpp"

#include <dirent.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>

#include "observe/control_socket.hpp"

namespace nvmeof::paths {

namespace {

using Json = nlohmann::ordered_json;

std::string fmt(const char* f, auto... args) {
  char b[1024];
  std::snprintf(b, sizeof b, f, args...);
  return b;
}

std::string ana_name(const KernelPath& p) { return p.ana_state ? to_string(*p.ana_state) : "unknown"; }

// The ANA state a kernel controller reports for the subsystem's first namespace it reaches.
std::string controller_ana(const KernelSubsystem& s, const std::string& ctrl) {
  for (const auto& ns : s.namespaces)
    for (const auto& p : ns.paths)
      if (p.controller == ctrl) return ana_name(p);
  return "unknown";
}

std::string address_of(const LivePath& p) {
  return p.traddr.empty() ? p.address : "traddr=" + p.traddr + ",trsvcid=" + p.trsvcid;
}

double mib(uint64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

template <class T>
T get_or(const nlohmann::json& j, const char* key, T dflt) {
  if (!j.is_object() || !j.contains(key) || j[key].is_null()) return dflt;
  try {
    return j[key].get<T>();
  } catch (...) {
    return dflt;
  }
}

// Volumes sharing controllers: same process and subsystem number (a volume from a process that
// gives none is a group of its own).
bool same_subsystem(const LiveVolume& a, const LiveVolume& b) {
  if (a.subsystem < 0 || b.subsystem < 0) return a.socket == b.socket;
  return a.pid == b.pid && a.subsystem == b.subsystem;
}

// The live volumes grouped by the controllers they share, in order of first appearance.
std::vector<std::vector<const LiveVolume*>> by_subsystem(const std::vector<LiveVolume>& vols) {
  std::vector<std::vector<const LiveVolume*>> groups;
  for (const auto& v : vols) {
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return same_subsystem(*g.front(), v); });
    if (it == groups.end()) groups.push_back({&v});
    else it->push_back(&v);
  }
  return groups;
}

std::string group_name(const LiveVolume& v) {
  return v.subsystem < 0 ? v.name() : "nvmeof-" + std::to_string(v.pid) + "-s" + std::to_string(v.subsystem);
}

double group_uptime(const std::vector<const LiveVolume*>& g) {
  double t = 0;
  for (const auto* v : g) t = std::max(t, v->uptime_s);
  return t;
}

const LivePath* find_path(const std::vector<LiveVolume>& vols, const LiveVolume& v, int index) {
  for (const auto& o : vols)
    if (same_subsystem(o, v))
      for (const auto& p : o.paths)
        if (p.index == index) return &p;
  return nullptr;
}

}  // namespace

bool parse_live_volume(const nlohmann::json& r, const std::string& socket, LiveVolume& v) {
  if (!r.is_object() || !get_or(r, "ok", false) || !r.contains("stats") || !r["stats"].is_object()) return false;
  const auto& s = r["stats"];
  v.socket = socket;
  v.pid = get_or(r, "pid", 0);
  v.volume = get_or(r, "volume", 0u);
  v.nqn = get_or(r, "nqn", std::string());
  v.subsystem = get_or(r, "subsystem", int64_t{-1});
  if (s.contains("namespace")) {
    v.nsid = get_or(s["namespace"], "nsid", 0u);
    v.ns_removed = get_or(s["namespace"], "state", std::string("active")) == "removed";
  }
  v.uptime_s = get_or(r, "uptime_s", 0.0);
  v.selector = get_or(s, "selector", std::string());
  v.completed = get_or(s, "completed", uint64_t{0});
  v.failed = get_or(s, "failed", uint64_t{0});
  v.waiting = get_or(s, "waiting", uint64_t{0});
  if (s.contains("timeline") && s["timeline"].is_array()) {
    v.failover_events = s["timeline"].size();
    if (!s["timeline"].empty()) {
      const auto& e = s["timeline"].back();
      const std::string rule = get_or(e, "fence_rule", std::string());
      v.last_failover = "path " + std::to_string(get_or(e, "path", -1)) + ": " + get_or(e, "cause", std::string()) +
                        (rule.empty() ? ", not fenced yet" : ", fenced by " + rule);
    }
  }
  if (!s.contains("paths") || !s["paths"].is_array()) return false;
  for (const auto& pj : s["paths"]) {
    LivePath p;
    p.index = get_or(pj, "index", 0);
    p.address = get_or(pj, "address", std::string());
    p.transport = get_or(pj, "transport", std::string("tcp"));
    p.traddr = get_or(pj, "traddr", std::string());
    p.trsvcid = get_or(pj, "trsvcid", std::string());
    p.state = get_or(pj, "state", std::string("unknown"));
    p.ana_state = get_or(pj, "ana_state", std::string("unknown"));
    p.ana_group = get_or(pj, "ana_group", 0u);
    p.cntlid = get_or(pj, "cntlid", 0u);
    p.outstanding = get_or(pj, "outstanding", 0u);
    p.ios = get_or(pj, "ios", uint64_t{0});
    p.bytes = get_or(pj, "bytes", uint64_t{0});
    p.reads = get_or(pj, "reads", uint64_t{0});
    p.writes = get_or(pj, "writes", uint64_t{0});
    if (pj.contains("latency_us")) {
      p.p50_us = get_or(pj["latency_us"], "p50", 0.0);
      p.p99_us = get_or(pj["latency_us"], "p99", 0.0);
    }
    p.errors = get_or(pj, "errors", uint64_t{0});
    p.retries = get_or(pj, "retries", uint64_t{0});
    p.failovers = get_or(pj, "failovers", uint64_t{0});
    p.reconnects = get_or(pj, "reconnects", uint64_t{0});
    p.keep_alives = get_or(pj, "keep_alives", uint64_t{0});
    p.keep_alives_per_s = get_or(pj, "keep_alives_per_s", 0.0);
    p.numa_node = get_or(pj, "numa_node", -1);
    p.write_fence_ms = get_or(pj, "write_fence_ms", 0u);
    p.write_fence_rule = get_or(pj, "write_fence_rule", std::string());
    v.paths.push_back(std::move(p));
  }
  return true;
}

std::vector<LiveVolume> read_live_volumes(const std::string& dir, int pid, std::vector<std::string>& errors) {
  std::vector<LiveVolume> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) {
    if (errno != ENOENT) errors.push_back(dir + ": " + std::error_code(errno, std::system_category()).message());
    return out;
  }
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n.rfind("nvmeof-", 0) == 0 && n.size() > 5 && n.compare(n.size() - 5, 5, ".sock") == 0) names.push_back(n);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  for (const auto& n : names) {
    if (pid > 0 && n.rfind("nvmeof-" + std::to_string(pid) + "-", 0) != 0) continue;
    const std::string path = dir + "/" + n;
    auto r = detail::control_request(path, R"({"op":"stats"})", std::chrono::seconds(2));
    if (!r) {
      // ECONNREFUSED / ENOENT: a socket its process left behind, or one going away.
      if (r.error().value() != ECONNREFUSED && r.error().value() != ENOENT)
        errors.push_back(path + ": " + r.error().message());
      continue;
    }
    LiveVolume v;
    const auto j = nlohmann::json::parse(*r, nullptr, false);
    if (!parse_live_volume(j, path, v)) {
      errors.push_back(path + ": not a volume's stats reply");
      continue;
    }
    out.push_back(std::move(v));
  }
  std::sort(out.begin(), out.end(), [](const LiveVolume& a, const LiveVolume& b) {
    return a.pid != b.pid ? a.pid < b.pid : a.volume < b.volume;
  });
  return out;
}

nlohmann::ordered_json kernel_json(const KernelTopology& topo) {
  Json subsystems = Json::array();
  for (const auto& s : topo.subsystems) {
    Json ctrls = Json::array();
    for (const auto& c : s.controllers) {
      ctrls.push_back(Json{{"name", c.name},           {"transport", c.transport},
                           {"address", c.address},     {"traddr", c.traddr},
                           {"trsvcid", c.trsvcid},     {"state", c.state},
                           {"admin_device", c.admin_device}, {"numa_node", c.numa_node},
                           {"queue_count", c.queue_count}});
    }
    Json namespaces = Json::array();
    for (const auto& ns : s.namespaces) {
      Json paths = Json::array();
      for (const auto& p : ns.paths) {
        paths.push_back(Json{{"controller", p.controller},
                             {"block_device", p.block_device},
                             {"generic_device", p.generic_device},
                             {"ana_group", p.ana_group},
                             {"ana_state", ana_name(p)},
                             {"ana_source", to_string(p.ana_source)},
                             {"numa_node", p.numa_node},
                             {"queue_count", p.queue_count}});
      }
      namespaces.push_back(Json{{"nsid", ns.nsid},
                                {"lba_size", ns.lba_size},
                                {"lba_count", ns.lba_count},
                                {"head_device", ns.head_device},
                                {"head_generic_device", ns.head_generic_device},
                                {"paths", std::move(paths)}});
    }
    subsystems.push_back(Json{{"name", s.name},
                              {"nqn", s.nqn},
                              {"controllers", std::move(ctrls)},
                              {"namespaces", std::move(namespaces)}});
  }
  return subsystems;
}

std::string kernel_text(const KernelTopology& topo) {
  std::string out;
  for (const auto& s : topo.subsystems) {
    out += fmt("%s - NQN=%s\n\\\n", s.name.c_str(), s.nqn.c_str());
    for (const auto& c : s.controllers) {
      out += fmt(" +- %s %s %s %s numa %d queues %u\n", c.name.c_str(), c.transport.c_str(), c.address.c_str(),
                 c.state.c_str(), c.numa_node, c.queue_count);
    }
    for (const auto& ns : s.namespaces) {
      out += fmt("    nsid %u: %llu blocks of %u bytes%s%s\n", ns.nsid, static_cast<unsigned long long>(ns.lba_count),
                 ns.lba_size, ns.head_device.empty() ? "" : ", head ", ns.head_device.c_str());
      for (const auto& p : ns.paths) {
        out += fmt("     +- %s %s via %s ana group %u %s (%s) numa %d queues %u\n", p.block_device.c_str(),
                   p.generic_device.empty() ? "-" : p.generic_device.c_str(), p.controller.c_str(), p.ana_group,
                   ana_name(p).c_str(), to_string(p.ana_source), p.numa_node, p.queue_count);
      }
    }
  }
  return out;
}

std::string render_text(const KernelTopology& kernel, const std::vector<LiveVolume>& live) {
  std::string out = kernel_text(kernel);
  for (const auto& g : by_subsystem(live)) {
    const LiveVolume& first = *g.front();
    const std::string name = group_name(first);
    const double uptime = group_uptime(g);
    out += fmt("%s - NQN=%s\n", name.c_str(), first.nqn.c_str());
    out += std::string(name.size() + 3, ' ') +
           fmt("pid=%d controllers=%zu volumes=%zu\n", first.pid, first.paths.size(), g.size());
    out += "\\\n";
    for (const auto& p : first.paths) {
      const double rate = uptime > 0 ? mib(p.bytes) / uptime : 0;
      out += fmt(" +- path%d %s %s %s cntlid %u ios %llu MiB/s %.1f lat p50 %.1f us p99 %.1f us errors %llu retries %llu "
                 "failovers %llu reconnects %llu keep-alives/s %.1f numa %d\n",
                 p.index, p.transport.c_str(), address_of(p).c_str(), p.state.c_str(), p.cntlid,
                 static_cast<unsigned long long>(p.ios), rate, p.p50_us, p.p99_us,
                 static_cast<unsigned long long>(p.errors), static_cast<unsigned long long>(p.retries),
                 static_cast<unsigned long long>(p.failovers), static_cast<unsigned long long>(p.reconnects),
                 p.keep_alives_per_s, p.numa_node);
      if (!p.write_fence_rule.empty())
        out += fmt("        after a failure its writes wait up to %u ms for the fence (%s)\n", p.write_fence_ms,
                   p.write_fence_rule.c_str());
    }
    for (const auto* v : g) {
      std::string ana;
      for (const auto& p : v->paths)
        ana += (ana.empty() ? "" : ", ") + ("path" + std::to_string(p.index)) + " " + p.ana_state;
      out += fmt("    %s nsid %u%s iopolicy=%s completed %llu failed %llu ana %s\n", v->name().c_str(), v->nsid,
                 v->ns_removed ? " (namespace removed)" : "", v->selector.c_str(),
                 static_cast<unsigned long long>(v->completed), static_cast<unsigned long long>(v->failed),
                 ana.c_str());
      out += "      socket=" + v->socket + "\n";
    }
    if (!first.last_failover.empty())
      out += fmt("    failovers %llu, last: %s\n", static_cast<unsigned long long>(first.failover_events),
                 first.last_failover.c_str());
  }
  return out;
}

nlohmann::ordered_json render_json(const KernelTopology& kernel, const std::vector<LiveVolume>& live) {
  Json subs = Json::array();
  for (const auto& s : kernel.subsystems) {
    Json paths = Json::array();
    for (const auto& c : s.controllers)
      paths.push_back(Json{{"Name", c.name},
                           {"Transport", c.transport},
                           {"Address", c.address},
                           {"State", c.state},
                           {"ANAState", controller_ana(s, c.name)},
                           {"numa_node", c.numa_node}});
    subs.push_back(Json{{"Name", s.name}, {"NQN", s.nqn}, {"IOPolicy", ""}, {"source", "kernel"}, {"Paths", std::move(paths)}});
  }
  for (const auto& v : live) {
    Json paths = Json::array();
    for (const auto& p : v.paths) {
      const double rate = v.uptime_s > 0 ? mib(p.bytes) / v.uptime_s : 0;
      paths.push_back(Json{{"Name", "path" + std::to_string(p.index)},
                           {"Transport", p.transport},
                           {"Address", address_of(p)},
                           {"State", p.state},
                           {"ANAState", p.ana_state},
                           {"ana_group", p.ana_group},
                           {"cntlid", p.cntlid},
                           {"ios", p.ios},
                           {"reads", p.reads},
                           {"writes", p.writes},
                           {"in_flight", p.outstanding},
                           {"mib_per_s", rate},
                           {"latency_p50_us", p.p50_us},
                           {"latency_p99_us", p.p99_us},
                           {"errors", p.errors},
                           {"retries", p.retries},
                           {"failovers", p.failovers},
                           {"reconnects", p.reconnects},
                           {"keep_alives", p.keep_alives},
                           {"keep_alives_per_s", p.keep_alives_per_s},
                           {"numa_node", p.numa_node},
                           {"write_fence_ms", p.write_fence_ms},
                           {"write_fence_rule", p.write_fence_rule}});
    }
    subs.push_back(Json{{"Name", v.name()},
                        {"NQN", v.nqn},
                        {"IOPolicy", v.selector},
                        {"source", "volume"},
                        {"pid", v.pid},
                        {"volume", v.volume},
                        {"subsystem", v.subsystem},
                        {"nsid", v.nsid},
                        {"namespace_state", v.ns_removed ? "removed" : "active"},
                        {"socket", v.socket},
                        {"completed", v.completed},
                        {"failed", v.failed},
                        {"waiting", v.waiting},
                        {"failover_events", v.failover_events},
                        {"Paths", std::move(paths)}});
  }
  // Each of our controllers once, with the volumes (namespaces) it serves.
  Json ctrls = Json::array();
  for (const auto& g : by_subsystem(live)) {
    const LiveVolume& first = *g.front();
    Json names = Json::array();
    for (const auto* v : g) names.push_back(v->name());
    for (const auto& p : first.paths)
      ctrls.push_back(Json{{"Name", group_name(first) + "-path" + std::to_string(p.index)},
                           {"NQN", first.nqn},
                           {"pid", first.pid},
                           {"subsystem", first.subsystem},
                           {"Transport", p.transport},
                           {"Address", address_of(p)},
                           {"State", p.state},
                           {"cntlid", p.cntlid},
                           {"volumes", names},
                           {"ios", p.ios},
                           {"errors", p.errors},
                           {"failovers", p.failovers},
                           {"reconnects", p.reconnects},
                           {"keep_alives", p.keep_alives},
                           {"keep_alives_per_s", p.keep_alives_per_s},
                           {"write_fence_ms", p.write_fence_ms},
                           {"write_fence_rule", p.write_fence_rule}});
  }
  return Json{{"Subsystems", std::move(subs)}, {"Controllers", std::move(ctrls)}, {"subsystems", kernel_json(kernel)}};
}

std::string render_top(const std::vector<LiveVolume>& now, const std::vector<LiveVolume>& before, double interval_s) {
  const auto groups = by_subsystem(now);
  std::string out = "Path health\n";
  out += fmt("%-18s %-6s %-28s %-10s %6s %7s %8s %8s %8s %8s %6s %5s\n", "Subsystem", "Path", "Address", "State",
             "Cntlid", "Volumes", "Errors", "Retries", "Failover", "Reconn", "KA/s", "NUMA");
  for (const auto& g : groups)
    for (const auto& p : g.front()->paths)
      out += fmt("%-18s %-6s %-28s %-10s %6u %7zu %8llu %8llu %8llu %8llu %6.1f %5d\n", group_name(*g.front()).c_str(),
                 ("path" + std::to_string(p.index)).c_str(), address_of(p).c_str(), p.state.c_str(), p.cntlid,
                 g.size(), static_cast<unsigned long long>(p.errors), static_cast<unsigned long long>(p.retries),
                 static_cast<unsigned long long>(p.failovers), static_cast<unsigned long long>(p.reconnects),
                 p.keep_alives_per_s, p.numa_node);
  out += "\nPath performance\n";
  out += fmt("%-18s %-6s %10s %10s %10s %10s %10s %9s\n", "Subsystem", "Path", "Read/s", "Write/s", "MiB/s",
             "p50 us", "p99 us", "In-flight");
  for (const auto& g : groups) {
    const LiveVolume& v = *g.front();
    for (const auto& p : v.paths) {
      const LivePath* b = find_path(before, v, p.index);
      double rs, ws, ms;
      if (b && interval_s > 0 && p.ios >= b->ios) {
        rs = static_cast<double>(p.reads - std::min(p.reads, b->reads)) / interval_s;
        ws = static_cast<double>(p.writes - std::min(p.writes, b->writes)) / interval_s;
        ms = mib(p.bytes - std::min(p.bytes, b->bytes)) / interval_s;
      } else {
        const double up = group_uptime(g);
        const double t = up > 0 ? up : 1;
        rs = static_cast<double>(p.reads) / t;
        ws = static_cast<double>(p.writes) / t;
        ms = mib(p.bytes) / t;
      }
      out += fmt("%-18s %-6s %10.0f %10.0f %10.1f %10.1f %10.1f %9u\n", group_name(v).c_str(),
                 ("path" + std::to_string(p.index)).c_str(), rs, ws, ms, p.p50_us, p.p99_us, p.outstanding);
    }
    if (!v.last_failover.empty()) out += fmt("  %s last failover: %s\n", group_name(v).c_str(), v.last_failover.c_str());
    for (const LiveVolume* r : g)
      if (r->ns_removed) out += fmt("  %s nsid %u: namespace removed\n", group_name(v).c_str(), r->nsid);
  }
  if (now.empty()) out += "(no live volumes)\n";
  return out;
}

}  // namespace nvmeof::paths
