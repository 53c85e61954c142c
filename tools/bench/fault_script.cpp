#include "bench/fault_script.hpp"

#include <cctype>
#include <charconv>
#include <fstream>
#include <map>
#include <sstream>

namespace nvmeof::bench {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

const std::map<std::string, FaultArg, std::less<>>& action_names() {
  static const std::map<std::string, FaultArg, std::less<>> k = {
      {"reset", FaultArg::reset}, {"blackhole", FaultArg::blackhole}, {"partition", FaultArg::partition},
      {"refuse", FaultArg::refuse}, {"ana-inaccessible", FaultArg::ana_inaccessible},
      {"ana-change", FaultArg::ana_change}, {"slow", FaultArg::slow}, {"latency", FaultArg::slow},
      {"fail-status", FaultArg::fail_status}, {"restore", FaultArg::restore}, {"clear", FaultArg::restore},
      {"remove-path", FaultArg::remove_path}, {"add-path", FaultArg::add_path}};
  return k;
}

std::string action_list() {
  std::string s;
  for (const auto& [name, a] : action_names()) s += (s.empty() ? "" : ", ") + name;
  return s;
}

std::string ms_text(std::chrono::nanoseconds d) {
  std::ostringstream o;
  o << static_cast<double>(d.count()) / 1e6 << " ms";
  return o.str();
}

}  // namespace

std::optional<std::chrono::nanoseconds> parse_script_time(std::string_view s) {
  s = trim(s);
  size_t i = 0;
  uint64_t whole = 0;
  bool digits = false;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) {
    if (whole > 1'000'000'000ull) return std::nullopt;
    whole = whole * 10 + static_cast<uint64_t>(s[i++] - '0');
    digits = true;
  }
  uint64_t frac = 0, frac_scale = 1;
  if (i < s.size() && s[i] == '.') {
    ++i;
    bool frac_digits = false;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) {
      if (frac_scale < 1'000'000'000ull) {
        frac = frac * 10 + static_cast<uint64_t>(s[i] - '0');
        frac_scale *= 10;
      }
      ++i;
      frac_digits = true;
    }
    if (!frac_digits) return std::nullopt;
  }
  if (!digits) return std::nullopt;
  const std::string_view unit = s.substr(i);
  uint64_t scale = 0;
  if (unit == "s") scale = 1'000'000'000ull;
  else if (unit == "ms") scale = 1'000'000ull;
  else if (unit == "us") scale = 1'000ull;
  else return std::nullopt;
  return std::chrono::nanoseconds(static_cast<int64_t>(whole * scale + frac * scale / frac_scale));
}

std::optional<std::vector<FaultStep>> parse_fault_script(std::string_view text, const FaultScriptLimits& limits,
                                                         std::string& error, const std::string& source) {
  std::vector<FaultStep> steps;
  std::vector<bool> faulted;
  std::vector<bool> outside;  // remove-path / add-path: the paths not in the volume now
  size_t entry = 0, line = 1;
  auto fail = [&](const std::string& entry_text, const std::string& why) {
    error = "--fault-script ";
    error += source.empty() ? "" : source + ":" + std::to_string(line) + ": ";
    error += "entry " + std::to_string(entry) + " \"" + entry_text + "\": " + why;
    return std::nullopt;
  };
  size_t pos = 0;
  while (pos <= text.size()) {
    // One entry: up to a comma, a newline or the end; a comment runs to the end of its line.
    size_t end = pos;
    while (end < text.size() && text[end] != ',' && text[end] != '\n' && text[end] != '#') ++end;
    const std::string_view raw = trim(text.substr(pos, end - pos));
    const size_t entry_line = line;
    if (end < text.size() && text[end] == '#') {
      while (end < text.size() && text[end] != '\n') ++end;
    }
    const bool newline = end < text.size() && text[end] == '\n';
    pos = end + 1;
    if (!raw.empty()) {
      ++entry;
      const std::string e(raw);
      line = entry_line;
      if (entry > kMaxFaultSteps) return fail(e, "more than " + std::to_string(kMaxFaultSteps) + " entries");
      const size_t c1 = e.find(':');
      const size_t c2 = c1 == std::string::npos ? c1 : e.find(':', c1 + 1);
      if (c2 == std::string::npos || e.find(':', c2 + 1) != std::string::npos)
        return fail(e, "want TIME:ACTION:PATH (e.g. 2s:reset:0)");
      FaultStep st;
      st.text = e;
      const std::string time_s(trim(std::string_view(e).substr(0, c1)));
      const std::string action_s(trim(std::string_view(e).substr(c1 + 1, c2 - c1 - 1)));
      const std::string path_s(trim(std::string_view(e).substr(c2 + 1)));
      const auto at = parse_script_time(time_s);
      if (!at) return fail(e, "bad time \"" + time_s + "\" (want a number with s, ms or us: 2s, 1.5s, 250ms)");
      st.at = *at;
      std::string name = action_s, arg;
      if (const size_t eq = action_s.find('='); eq != std::string::npos) {
        name = action_s.substr(0, eq);
        arg = action_s.substr(eq + 1);
      }
      const auto it = action_names().find(name);
      if (it == action_names().end())
        return fail(e, "unknown action \"" + name + "\" (one of " + action_list() + ")");
      st.action = it->second;
      if (st.action == FaultArg::slow) {
        st.latency = limits.slow_latency;
        if (action_s.find('=') != std::string::npos) {
          const auto l = parse_script_time(arg);
          if (!l || l->count() == 0) return fail(e, "bad delay \"" + arg + "\" for slow (e.g. slow=20ms)");
          st.latency = *l;
        }
      } else if (!arg.empty() || action_s.find('=') != std::string::npos) {
        return fail(e, "\"" + name + "\" takes no =VALUE (only slow does)");
      }
      unsigned path = 0;
      const auto [p_end, p_ec] = std::from_chars(path_s.data(), path_s.data() + path_s.size(), path);
      if (path_s.empty() || p_ec != std::errc{} || p_end != path_s.data() + path_s.size())
        return fail(e, "bad path \"" + path_s + "\" (want a path index: 0, 1, ...)");
      if (limits.paths != 0 && path >= limits.paths)
        return fail(e, "path " + path_s + " out of range (" + std::to_string(limits.paths) + " path" +
                           (limits.paths == 1 ? "" : "s") + ": 0.." + std::to_string(limits.paths - 1) + ")");
      if (path >= 1024) return fail(e, "path " + path_s + " out of range");
      st.path = path;
      if (limits.runtime.count() > 0 && st.at >= limits.runtime)
        return fail(e, "time " + ms_text(st.at) + " is not inside --runtime (" + ms_text(limits.runtime) + ")");
      if (!steps.empty() && st.at < steps.back().at)
        return fail(e, "time goes back (" + ms_text(st.at) + " after " + ms_text(steps.back().at) +
                           "): write the entries in the order they happen");
      if (faulted.size() <= path) faulted.resize(path + 1, false);
      if (st.action == FaultArg::remove_path || st.action == FaultArg::add_path) {
        // Known paths only: with --discover the volume's paths are not known yet.
        if (limits.paths != 0) {
          if (outside.empty())
            for (unsigned i = 0; i < limits.paths; ++i) outside.push_back(i + limits.standby >= limits.paths);
          const bool add = st.action == FaultArg::add_path;
          if (add && !outside[path]) return fail(e, "add-path of path " + path_s + ", which is in the volume");
          if (!add && outside[path]) return fail(e, "remove-path of path " + path_s + ", which is not in the volume");
          outside[path] = !add;
        }
      } else if (st.action == FaultArg::restore) {
        if (!faulted[path]) return fail(e, "restore of path " + path_s + " with no fault before it");
        faulted[path] = false;
      } else {
        faulted[path] = true;
      }
      steps.push_back(std::move(st));
    }
    if (newline) ++line;
    if (end >= text.size()) break;
  }
  bool any_fault = false;
  for (const FaultStep& s : steps) any_fault = any_fault || s.action != FaultArg::restore;
  if (!any_fault) {
    error = "--fault-script " + (source.empty() ? std::string() : source + ": ") + "no fault in it";
    return std::nullopt;
  }
  return steps;
}

std::optional<std::vector<FaultStep>> load_fault_script(const std::string& spec, const FaultScriptLimits& limits,
                                                        std::string& error) {
  if (spec.empty() || spec[0] != '@') return parse_fault_script(spec, limits, error);
  const std::string file = spec.substr(1);
  std::ifstream in(file);
  if (!in) {
    error = "--fault-script: cannot read " + file;
    return std::nullopt;
  }
  std::ostringstream text;
  text << in.rdbuf();
  return parse_fault_script(text.str(), limits, error, file);
}

}  // namespace nvmeof::bench
