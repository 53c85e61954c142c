// The one place the host library's diagnostics go through. By default a line on stderr; an
// application (the C API's nvmeof_set_log_callback, the Python package) may install a sink
// instead. The embedded target keeps its own stderr lines (it is not part of the host library).
//
// Threading: log() from any thread (reactors, the control plane, callers); the sink is called
// on the logging thread, one call at a time. set_log_sink() from any thread.
#pragma once

namespace nvmeof::detail {

/// syslog-style levels.
inline constexpr int kLogError = 3;
inline constexpr int kLogWarning = 4;
inline constexpr int kLogInfo = 6;

/// `msg` has no trailing newline.
using LogSink = void (*)(int level, const char* msg, void* ctx);

/// nullptr restores the default (stderr).
void set_log_sink(LogSink sink, void* ctx) noexcept;

/// printf-style; a trailing newline in the format is dropped.
void log(int level, const char* fmt, ...) noexcept __attribute__((format(printf, 2, 3)));

#define NVMEOF_LOG_FORMAT __attribute__((format(printf, 1, 2)))
void log_warning(const char* fmt, ...) noexcept NVMEOF_LOG_FORMAT;
void log_info(const char* fmt, ...) noexcept NVMEOF_LOG_FORMAT;
#undef NVMEOF_LOG_FORMAT

}  // namespace nvmeof::detail
