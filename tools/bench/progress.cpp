#include "bench/progress.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace nvmeof::bench {

namespace {

constexpr uint64_t kPeriodNs = 1'000'000'000;

std::string rate(double v) {
  char b[32];
  if (v >= 1e6) std::snprintf(b, sizeof b, "%.2fM", v / 1e6);
  else if (v >= 1e3) std::snprintf(b, sizeof b, "%.1fk", v / 1e3);
  else std::snprintf(b, sizeof b, "%.0f", v);
  return b;
}

}  // namespace

ProgressLine::ProgressLine(bool wanted, uint64_t total_ns)
    : enabled_(wanted && ::isatty(STDERR_FILENO)), total_ns_(total_ns) {}

std::string ProgressLine::render(double elapsed_s, double total_s, const VolumeStats& before, const VolumeStats& now,
                                 double dt_s, unsigned usable) {
  uint64_t r = 0, w = 0, rb = 0, wb = 0, all = 0;
  double p99 = 0;
  std::vector<uint64_t> per_path;
  for (size_t i = 0; i < now.paths.size(); ++i) {
    const PathStats& p = now.paths[i];
    const PathStats* b = i < before.paths.size() ? &before.paths[i] : nullptr;
    const uint64_t dr = p.reads - (b ? std::min(b->reads, p.reads) : 0);
    const uint64_t dw = p.writes - (b ? std::min(b->writes, p.writes) : 0);
    r += dr;
    w += dw;
    rb += p.read_bytes - (b ? std::min(b->read_bytes, p.read_bytes) : 0);
    wb += p.write_bytes - (b ? std::min(b->write_bytes, p.write_bytes) : 0);
    per_path.push_back(dr + dw);
    all += dr + dw;
    p99 = std::max(p99, p.latency.p99_us);
  }
  const double dt = dt_s > 0 ? dt_s : 1;
  char line[512];
  std::snprintf(line, sizeof line, "[%5.1f/%.1f s] read %s IOPS %.1f MiB/s | write %s IOPS %.1f MiB/s | p99 %.0f us |",
                elapsed_s, total_s, rate(static_cast<double>(r) / dt).c_str(),
                static_cast<double>(rb) / dt / 1048576.0, rate(static_cast<double>(w) / dt).c_str(),
                static_cast<double>(wb) / dt / 1048576.0, p99);
  std::string out = line;
  for (size_t i = 0; i < per_path.size(); ++i) {
    std::snprintf(line, sizeof line, " %zu:%.0f%%", i,
                  all ? 100.0 * static_cast<double>(per_path[i]) / static_cast<double>(all) : 0.0);
    out += line;
  }
  std::snprintf(line, sizeof line, " | usable %u/%zu", usable, now.paths.size());
  return out + line;
}

void ProgressLine::tick(uint64_t now_ns, uint64_t start_ns, Volume& vol) {
  if (!enabled_) return;
  if (last_ns_ == 0) {
    last_ns_ = now_ns;
    last_ = vol.stats();
    return;
  }
  if (now_ns < last_ns_ + kPeriodNs) return;
  VolumeStats s = vol.stats();
  const std::string l = render(static_cast<double>(now_ns - start_ns) / 1e9, static_cast<double>(total_ns_) / 1e9,
                               last_, s, static_cast<double>(now_ns - last_ns_) / 1e9, vol.usable_paths());
  std::fprintf(stderr, "\r%s\033[K", l.c_str());  // rewrite in place, clear the rest
  std::fflush(stderr);
  drawn_ = true;
  last_ns_ = now_ns;
  last_ = std::move(s);
}

void ProgressLine::finish() {
  if (drawn_) std::fputc('\n', stderr);
  drawn_ = false;
}

}  // namespace nvmeof::bench
