// nvmeof-paths: what this host reaches, path by path: the kernel's NVMe subsystems and the live
// user-space volumes that publish a control socket (VolumeOptions::control_socket or
// NVMEOF_CONTROL_DIR). Text in the shape of `nvme list-subsys`; --json with nvme-cli's key
// names plus ours per path (and the kernel detail under "subsystems", snake_case); --watch
// redraws a path health and performance table like `nvme top`.
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>

#include "control/kernel_paths.hpp"
#include "paths/live_volumes.hpp"

namespace {

volatile sig_atomic_t g_stop = 0;

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "nvmeof-paths: the NVMe subsystems this host reaches through the kernel (every path's generic "
      "char device, ANA state, NUMA node and queue count) and the live user-space volumes that "
      "publish a control socket"};
  bool json = false;
  bool no_admin = false;
  bool no_kernel = false;
  nvmeof::KernelScanOptions opts;
  const char* env_dir = std::getenv("NVMEOF_CONTROL_DIR");
  std::string control_dir = env_dir ? env_dir : "";
  int pid = 0;
  double watch = 0;
  app.add_flag("--json", json, "print JSON (nvme-cli's key names, arrays are always arrays)");
  app.add_option("--sysfs-root", opts.sysfs_root, "where sysfs is mounted")->capture_default_str();
  app.add_option("--dev-root", opts.dev_root, "where the device nodes are")->capture_default_str();
  app.add_flag("--no-admin", no_admin,
               "read ANA states from sysfs only (no Get Log Page through /dev/nvmeX)");
  app.add_option("--control-dir", control_dir,
                 "where live volumes put their sockets (default: $NVMEOF_CONTROL_DIR)");
  app.add_option("--volume", pid, "only the live volumes of this process (PID)")->check(CLI::PositiveNumber);
  app.add_flag("--no-kernel", no_kernel, "leave out the kernel's subsystems");
  app.add_option("--watch", watch, "redraw a path health and performance table every INTERVAL s (default 1)")
      ->expected(0, 1)
      ->default_str("1")
      ->check(CLI::Range(0.1, 3600.0));
  CLI11_PARSE(app, argc, argv);
  if (no_admin) opts.ana = nvmeof::AnaLookup::sysfs_only;
  if (app.count("--watch") && watch == 0) watch = 1;
  if (pid > 0 && control_dir.empty()) {
    std::fprintf(stderr, "nvmeof-paths: --volume needs --control-dir or NVMEOF_CONTROL_DIR\n");
    return 2;
  }

  auto read_live = [&] {
    std::vector<std::string> errors;
    auto vols = control_dir.empty() ? std::vector<nvmeof::paths::LiveVolume>{}
                                    : nvmeof::paths::read_live_volumes(control_dir, pid, errors);
    for (const auto& e : errors) std::fprintf(stderr, "nvmeof-paths: %s\n", e.c_str());
    return vols;
  };

  if (watch > 0) {
    signal(SIGINT, [](int) { g_stop = 1; });
    signal(SIGTERM, [](int) { g_stop = 1; });
    const bool tty = ::isatty(STDOUT_FILENO);
    std::vector<nvmeof::paths::LiveVolume> before;
    auto last = std::chrono::steady_clock::now();
    while (!g_stop) {
      auto now_vols = read_live();
      const auto now = std::chrono::steady_clock::now();
      const double dt = std::chrono::duration<double>(now - last).count();
      const std::string screen = nvmeof::paths::render_top(now_vols, before, before.empty() ? 0 : dt);
      if (tty) std::fputs("\033[H\033[2J", stdout);  // home and clear, as top does
      std::fputs(screen.c_str(), stdout);
      if (!tty) std::fputs("\n", stdout);
      std::fflush(stdout);
      before = std::move(now_vols);
      last = now;
      for (double waited = 0; waited < watch && !g_stop; waited += 0.05)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return 0;
  }

  nvmeof::KernelTopology topo;
  if (!no_kernel && pid == 0) {
    auto t = nvmeof::scan_kernel_paths(opts);
    if (!t) {
      std::fprintf(stderr, "nvmeof-paths: scan failed: %s\n", t.error().message().c_str());
      return 1;
    }
    topo = std::move(*t);
  }
  const auto live = read_live();
  if (pid > 0 && live.empty()) {
    std::fprintf(stderr, "nvmeof-paths: no live volume of process %d in %s\n", pid, control_dir.c_str());
    return 1;
  }
  if (json) std::cout << nvmeof::paths::render_json(topo, live).dump(2) << '\n';
  else std::cout << nvmeof::paths::render_text(topo, live);
  return 0;
}
