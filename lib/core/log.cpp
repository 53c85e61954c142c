#include "core/log.hpp"

#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>

namespace nvmeof::detail {
namespace {

std::mutex g_mu;
LogSink g_sink = nullptr;
void* g_ctx = nullptr;

}  // namespace

void set_log_sink(LogSink sink, void* ctx) noexcept {
  std::lock_guard lk(g_mu);
  g_sink = sink;
  g_ctx = ctx;
}

namespace {

void vlog(int level, const char* fmt, va_list ap) noexcept {
  char line[1024];
  if (std::vsnprintf(line, sizeof line, fmt, ap) < 0) return;
  size_t len = std::strlen(line);
  while (len > 0 && line[len - 1] == '\n') line[--len] = '\0';
  std::lock_guard lk(g_mu);
  if (g_sink) {
    g_sink(level, line, g_ctx);
  } else {
    std::fprintf(stderr, "%s\n", line);
  }
}

}  // namespace

void log(int level, const char* fmt, ...) noexcept {
  va_list ap;
  va_start(ap, fmt);
  vlog(level, fmt, ap);
  va_end(ap);
}

void log_warning(const char* fmt, ...) noexcept {
  va_list ap;
  va_start(ap, fmt);
  vlog(kLogWarning, fmt, ap);
  va_end(ap);
}

void log_info(const char* fmt, ...) noexcept {
  va_list ap;
  va_start(ap, fmt);
  vlog(kLogInfo, fmt, ap);
  va_end(ap);
}

}  // namespace nvmeof::detail
