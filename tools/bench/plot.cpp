#include "bench/plot.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

namespace nvmeof::bench {

namespace {

constexpr double kWidth = 960, kHeight = 620;
constexpr double kLeft = 80, kRight = 24, kTop = 64;
constexpr double kPanelHeight = 210, kPanelGap = 70;
constexpr size_t kLabelChars = 44;
constexpr const char* kTotalColour = "#1f77b4";
constexpr const char* kReadColour = "#2ca02c";
constexpr const char* kWriteColour = "#ff7f0e";
constexpr const char* kP99Colour = "#9467bd";

const char* marker_colour(PlotMarker::Kind k) {
  switch (k) {
    case PlotMarker::Kind::fault: return "#d62728";
    case PlotMarker::Kind::restore: return "#17becf";
    case PlotMarker::Kind::failover: return "#7f7f7f";
  }
  return "#000000";
}

std::string esc(const std::string& s) {
  std::string o;
  for (const char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&apos;"; break;
      default:
        // Control characters are not allowed in XML 1.0 text.
        if (static_cast<unsigned char>(c) >= 0x20 || c == '\t' || c == '\n') o += c;
    }
  }
  return o;
}

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", v);
  return b;
}

// 1, 2 or 5 times a power of ten, so that about `want` steps cover `span`.
double nice_step(double span, int want) {
  if (span <= 0) return 1;
  const double raw = span / want;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double f = raw / mag;
  return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * mag;
}

std::string tick_label(double v) {
  char b[32];
  const double a = std::fabs(v);
  if (a >= 1e6) std::snprintf(b, sizeof b, "%gM", v / 1e6);
  else if (a >= 1e3) std::snprintf(b, sizeof b, "%gk", v / 1e3);
  else std::snprintf(b, sizeof b, "%g", v);
  return b;
}

std::string latency_label(double us) {
  char b[32];
  if (us >= 1e6) std::snprintf(b, sizeof b, "%gs", us / 1e6);
  else if (us >= 1e3) std::snprintf(b, sizeof b, "%gms", us / 1e3);
  else std::snprintf(b, sizeof b, "%gus", us);
  return b;
}

struct Panel {
  double y0;  // top
  double h;
};

}  // namespace

const char* to_string(PlotMarker::Kind k) noexcept {
  switch (k) {
    case PlotMarker::Kind::fault: return "fault";
    case PlotMarker::Kind::restore: return "restore";
    case PlotMarker::Kind::failover: return "failover";
  }
  return "?";
}

std::string render_svg(const PlotData& d) {
  const double plot_w = kWidth - kLeft - kRight;
  double t_end = d.duration_s;
  for (const PlotPoint& p : d.points) t_end = std::max(t_end, p.t_s);
  for (const PlotMarker& m : d.markers) t_end = std::max(t_end, m.t_s);
  if (t_end <= 0) t_end = 1;
  auto x_of = [&](double t) { return kLeft + std::clamp(t / t_end, 0.0, 1.0) * plot_w; };

  bool mixed = false;
  double iops_max = 0, lat_min = 0, lat_max = 0;
  for (const PlotPoint& p : d.points) {
    mixed = mixed || (p.read_iops > 0 && p.write_iops > 0);
    iops_max = std::max(iops_max, p.read_iops + p.write_iops);
    if (p.p99_us > 0) {
      lat_min = lat_min == 0 ? p.p99_us : std::min(lat_min, p.p99_us);
      lat_max = std::max(lat_max, p.p99_us);
    }
  }
  const double iops_step = nice_step(iops_max > 0 ? iops_max : 1, 5);
  const double iops_top = std::max(iops_step, std::ceil(iops_max / iops_step) * iops_step);
  // Latency: whole decades around the data, at least one.
  const double dec_lo = lat_min > 0 ? std::floor(std::log10(lat_min)) : 1;
  const double dec_hi = std::max(dec_lo + 1, lat_max > 0 ? std::ceil(std::log10(lat_max)) : dec_lo + 1);

  const Panel top{kTop, kPanelHeight};
  const Panel bottom{kTop + kPanelHeight + kPanelGap, kPanelHeight};
  auto y_iops = [&](double v) { return top.y0 + top.h - std::clamp(v / iops_top, 0.0, 1.0) * top.h; };
  auto y_lat = [&](double us) {
    const double f = (std::log10(std::max(us, 1e-3)) - dec_lo) / (dec_hi - dec_lo);
    return bottom.y0 + bottom.h - std::clamp(f, 0.0, 1.0) * bottom.h;
  };

  std::ostringstream o;
  o << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth << "\" height=\"" << kHeight
    << "\" viewBox=\"0 0 " << kWidth << " " << kHeight << "\" font-family=\"sans-serif\" font-size=\"11\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"" << kLeft << "\" y=\"22\" font-size=\"14\" font-weight=\"bold\">" << esc(d.title) << "</text>\n";

  // Time axis ticks, under each panel, with vertical grid lines.
  const double t_step = nice_step(t_end, 10);
  for (const Panel& p : {top, bottom}) {
    o << "<g class=\"axis x\">\n";
    o << "<line x1=\"" << kLeft << "\" y1=\"" << num(p.y0 + p.h) << "\" x2=\"" << kLeft + plot_w << "\" y2=\""
      << num(p.y0 + p.h) << "\" stroke=\"black\"/>\n";
    for (double t = 0; t <= t_end + t_step * 1e-9; t += t_step) {
      const double x = x_of(t);
      o << "<line x1=\"" << num(x) << "\" y1=\"" << num(p.y0) << "\" x2=\"" << num(x) << "\" y2=\"" << num(p.y0 + p.h)
        << "\" stroke=\"#e6e6e6\"/>"
        << "<line x1=\"" << num(x) << "\" y1=\"" << num(p.y0 + p.h) << "\" x2=\"" << num(x) << "\" y2=\""
        << num(p.y0 + p.h + 5) << "\" stroke=\"black\"/>"
        << "<text x=\"" << num(x) << "\" y=\"" << num(p.y0 + p.h + 17) << "\" text-anchor=\"middle\">"
        << tick_label(std::round(t / t_step) * t_step) << "</text>\n";
    }
    o << "<text x=\"" << num(kLeft + plot_w / 2) << "\" y=\"" << num(p.y0 + p.h + 32)
      << "\" text-anchor=\"middle\">time since the timed phase started (s)</text>\n</g>\n";
  }

  // IOPS axis.
  o << "<g class=\"axis y iops\">\n<line x1=\"" << kLeft << "\" y1=\"" << top.y0 << "\" x2=\"" << kLeft << "\" y2=\""
    << top.y0 + top.h << "\" stroke=\"black\"/>\n";
  for (double v = 0; v <= iops_top + iops_step * 1e-9; v += iops_step) {
    const double y = y_iops(v);
    o << "<line x1=\"" << kLeft << "\" y1=\"" << num(y) << "\" x2=\"" << kLeft + plot_w << "\" y2=\"" << num(y)
      << "\" stroke=\"#e6e6e6\"/><line x1=\"" << kLeft - 5 << "\" y1=\"" << num(y) << "\" x2=\"" << kLeft
      << "\" y2=\"" << num(y) << "\" stroke=\"black\"/><text x=\"" << kLeft - 8 << "\" y=\"" << num(y + 4)
      << "\" text-anchor=\"end\">" << tick_label(v) << "</text>\n";
  }
  o << "<text transform=\"translate(18," << num(top.y0 + top.h / 2)
    << ") rotate(-90)\" text-anchor=\"middle\">IOPS</text>\n</g>\n";

  // Latency axis (decades, with 2 and 5 minor ticks).
  o << "<g class=\"axis y p99\">\n<line x1=\"" << kLeft << "\" y1=\"" << bottom.y0 << "\" x2=\"" << kLeft
    << "\" y2=\"" << bottom.y0 + bottom.h << "\" stroke=\"black\"/>\n";
  for (double dec = dec_lo; dec <= dec_hi + 1e-9; dec += 1) {
    const double v = std::pow(10.0, dec);
    const double y = y_lat(v);
    o << "<line x1=\"" << kLeft << "\" y1=\"" << num(y) << "\" x2=\"" << kLeft + plot_w << "\" y2=\"" << num(y)
      << "\" stroke=\"#e6e6e6\"/><line x1=\"" << kLeft - 5 << "\" y1=\"" << num(y) << "\" x2=\"" << kLeft
      << "\" y2=\"" << num(y) << "\" stroke=\"black\"/><text x=\"" << kLeft - 8 << "\" y=\"" << num(y + 4)
      << "\" text-anchor=\"end\">" << latency_label(v) << "</text>\n";
    if (dec + 1 <= dec_hi + 1e-9)
      for (const double m : {2.0, 5.0})
        o << "<line x1=\"" << kLeft - 3 << "\" y1=\"" << num(y_lat(v * m)) << "\" x2=\"" << kLeft << "\" y2=\""
          << num(y_lat(v * m)) << "\" stroke=\"black\"/>\n";
  }
  o << "<text transform=\"translate(18," << num(bottom.y0 + bottom.h / 2)
    << ") rotate(-90)\" text-anchor=\"middle\">p99 latency</text>\n</g>\n";

  // Series.
  auto polyline = [&](const char* id, const char* colour, auto value, auto y_of, bool skip_zero) {
    o << "<polyline id=\"" << id << "\" class=\"series\" fill=\"none\" stroke=\"" << colour
      << "\" stroke-width=\"1.5\" points=\"";
    bool first = true;
    for (const PlotPoint& p : d.points) {
      const double v = value(p);
      if (skip_zero && v <= 0) continue;
      o << (first ? "" : " ") << num(x_of(p.t_s)) << "," << num(y_of(v));
      first = false;
    }
    o << "\"/>\n";
  };
  auto y_i = [&](double v) { return y_iops(v); };
  auto y_l = [&](double v) { return y_lat(v); };
  polyline("iops", kTotalColour, [](const PlotPoint& p) { return p.read_iops + p.write_iops; }, y_i, false);
  if (mixed) {
    polyline("iops-read", kReadColour, [](const PlotPoint& p) { return p.read_iops; }, y_i, false);
    polyline("iops-write", kWriteColour, [](const PlotPoint& p) { return p.write_iops; }, y_i, false);
  }
  polyline("p99", kP99Colour, [](const PlotPoint& p) { return p.p99_us; }, y_l, true);

  // Markers across both panels; labels staggered so that close ones stay readable.
  std::vector<PlotMarker> markers = d.markers;
  std::stable_sort(markers.begin(), markers.end(),
                   [](const PlotMarker& a, const PlotMarker& b) { return a.t_s < b.t_s; });
  double last_x = -1e9;
  int row = 0;
  for (const PlotMarker& m : markers) {
    const double x = x_of(m.t_s);
    row = x - last_x < 90 ? (row + 1) % 3 : 0;
    last_x = x;
    const char* colour = marker_colour(m.kind);
    // The label goes right of its line in the left part of the plot, left of it in the right
    // part, cut short (the whole of it is in the marker's title, a tooltip).
    const bool right_half = x > kLeft + plot_w * 0.6;
    std::string shown = m.label;
    if (shown.size() > kLabelChars) shown = shown.substr(0, kLabelChars - 3) + "...";
    o << "<g class=\"marker " << to_string(m.kind) << "\"><title>" << esc(m.label) << " at " << m.t_s
      << " s</title><line x1=\"" << num(x) << "\" y1=\"" << top.y0 << "\" x2=\"" << num(x) << "\" y2=\""
      << bottom.y0 + bottom.h << "\" stroke=\"" << colour << "\" stroke-dasharray=\""
      << (m.kind == PlotMarker::Kind::failover ? "2,3" : "6,3") << "\"/><text x=\"" << num(right_half ? x - 3 : x + 3)
      << "\" y=\"" << num(top.y0 + 12 + row * 12) << "\" fill=\"" << colour << "\""
      << (right_half ? " text-anchor=\"end\"" : "") << ">" << esc(shown) << "</text></g>\n";
  }

  // Legend, above the top panel.
  struct Entry {
    const char* name;
    const char* colour;
    bool dashed;
  };
  std::vector<Entry> legend = {{"IOPS", kTotalColour, false}};
  if (mixed) {
    legend.push_back({"read IOPS", kReadColour, false});
    legend.push_back({"write IOPS", kWriteColour, false});
  }
  legend.push_back({"p99 latency", kP99Colour, false});
  legend.push_back({"fault", marker_colour(PlotMarker::Kind::fault), true});
  legend.push_back({"restore", marker_colour(PlotMarker::Kind::restore), true});
  legend.push_back({"failover", marker_colour(PlotMarker::Kind::failover), true});
  o << "<g class=\"legend\">\n";
  double lx = kLeft;
  for (const Entry& e : legend) {
    o << "<line x1=\"" << num(lx) << "\" y1=\"42\" x2=\"" << num(lx + 22) << "\" y2=\"42\" stroke=\"" << e.colour
      << "\" stroke-width=\"2\"" << (e.dashed ? " stroke-dasharray=\"4,2\"" : "") << "/><text x=\"" << num(lx + 26)
      << "\" y=\"46\">" << e.name << "</text>\n";
    lx += 40 + 6.5 * static_cast<double>(std::string(e.name).size());
  }
  o << "</g>\n</svg>\n";
  return o.str();
}

}  // namespace nvmeof::bench
