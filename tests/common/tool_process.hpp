// Runs the project's tool binaries from tests: a long-running one (a server whose first stdout
// line is read back) and one-shot commands whose output and exit code are checked. The binary
// paths come from the environment (meson's test() env), so a test runs the tool it was built with.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "wait.hpp"

extern char** environ;

namespace nvmeof::test {

/// The path in environment variable `var`, or an exception naming it.
inline std::string tool_path(const char* var) {
  const char* p = std::getenv(var);
  if (p == nullptr || *p == '\0') throw std::runtime_error(std::string("environment variable ") + var + " not set");
  return p;
}

/// A child process with its stdout on a pipe; SIGTERM and reaped on destruction.
class ToolProcess {
 public:
  explicit ToolProcess(const std::vector<std::string>& argv) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    const int rc = posix_spawn(&pid_, args[0], &fa, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    ::close(fds[1]);
    out_ = fds[0];
    if (rc != 0) {
      pid_ = -1;
      throw std::runtime_error("cannot start " + argv[0]);
    }
  }
  ~ToolProcess() { stop(); }
  ToolProcess(const ToolProcess&) = delete;
  ToolProcess& operator=(const ToolProcess&) = delete;

  /// The next stdout line (without the newline); "" on EOF or after `timeout`.
  std::string read_line(std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      const size_t nl = buf_.find('\n');
      if (nl != std::string::npos) {
        std::string line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return line;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
      if (left.count() <= 0) return "";
      pollfd p{out_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char b[4096];
      const ssize_t n = ::read(out_, b, sizeof b);
      if (n <= 0) return "";
      buf_.append(b, static_cast<size_t>(n));
    }
  }

  /// SIGTERM, then the exit status (as waitpid gives it); -1 if not running.
  int stop() {
    if (pid_ <= 0) return -1;
    ::kill(pid_, SIGTERM);
    int st = 0;
    ::waitpid(pid_, &st, 0);
    pid_ = -1;
    if (out_ >= 0) ::close(out_);
    out_ = -1;
    return st;
  }
  pid_t pid() const noexcept { return pid_; }

 private:
  pid_t pid_ = -1;
  int out_ = -1;
  std::string buf_;
};

struct CommandResult {
  int exit_code = -1;
  std::string output;  ///< stdout and stderr together
};

/// Runs `command` through the shell (stderr merged into stdout), under `timeout` seconds.
inline CommandResult run_command(const std::string& command, int timeout_s = 30) {
  CommandResult r;
  const std::string cmd = "timeout " + std::to_string(timeout_s) + " " + command + " 2>&1";
  FILE* f = ::popen(cmd.c_str(), "r");
  if (!f) return r;
  char b[4096];
  size_t n;
  while ((n = std::fread(b, 1, sizeof b, f)) > 0) r.output.append(b, n);
  const int st = ::pclose(f);
  r.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

}  // namespace nvmeof::test
