// nvmeof-ublk: serves a volume (one namespace over its paths) as a Linux block device,
// /dev/ublkbN, through the kernel's ublk driver, until SIGINT or SIGTERM; then stops it cleanly
// (STOP_DEV, DEL_DEV). One ublk queue per reactor thread, driven from that reactor's ring
// (ARCHITECTURE.md, "ublk").
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "nvmeof/host.hpp"
#include "nvmeof/volume.hpp"
#include "ublk/control.hpp"
#include "ublk/device.hpp"

using namespace nvmeof;

int main(int argc, char** argv) {
  CLI::App app{
      "nvmeof-ublk: serve a multipath NVMe-oF namespace as the block device /dev/ublkbN through the "
      "kernel's ublk driver (Linux 6.0+ with CONFIG_BLK_DEV_UBLK), until SIGINT or SIGTERM"};
  std::vector<std::string> paths;
  std::string nqn, hostnqn, dhchap_secret, dhchap_ctrl_secret, tls_psk, poll = "adaptive", recovery = "none";
  uint32_t nsid = 1;
  unsigned queues = 1, depth = 128;
  uint32_t max_io = 0, kato_ms = 0;
  int recover = -1, del = -1;
  auto* path_opt = app.add_option("--path", paths, "ADDR:PORT of one path (repeat per path)");
  auto* nqn_opt = app.add_option("--nqn", nqn, "subsystem NQN");
  app.add_option("--nsid", nsid, "namespace ID (on the first path)")->capture_default_str();
  app.add_option("--hostnqn", hostnqn, "the host NQN to connect as (default: one derived from a per-process host ID)");
  app.add_option("--dhchap-secret", dhchap_secret, "DH-HMAC-CHAP: the host's secret (DHHC-1:0X:...:, or @FILE)");
  app.add_option("--dhchap-ctrl-secret", dhchap_ctrl_secret,
                 "DH-HMAC-CHAP: the controller's secret (or @FILE), for bidirectional authentication");
  app.add_option("--tls-psk", tls_psk, "NVMe/TCP TLS 1.3 with this PSK (NVMeTLSkey-1:0X:...:, or @FILE)");
  app.add_option("--kato", kato_ms, "keep-alive timeout in ms (default: the shortest the target allows)");
  app.add_option("--queues", queues, "ublk queues, one per reactor thread")
      ->check(CLI::Range(1u, 64u))
      ->capture_default_str();
  app.add_option("--depth", depth, "requests in flight per queue")->check(CLI::Range(1u, 4096u))->capture_default_str();
  app.add_option("--max-io", max_io,
                 "largest request in bytes (default: the namespace's largest transfer, at most 1 MiB)");
  app.add_option("--poll", poll, "reactor polling: busy, adaptive, sleep")
      ->check(CLI::IsMember({"busy", "adaptive", "sleep"}))
      ->capture_default_str();
  app.add_option("--recovery", recovery,
                 "when this process dies: none (the driver fails queued I/O and removes the device) or "
                 "reissue (the driver holds the I/O for a new nvmeof-ublk --recover ID)")
      ->check(CLI::IsMember({"none", "reissue"}))
      ->capture_default_str();
  auto* recover_opt = app.add_option("--recover", recover,
                                     "take over device ID, left by an nvmeof-ublk --recovery reissue that died")
                          ->check(CLI::NonNegativeNumber);
  auto* del_opt = app.add_option("--delete", del, "delete device ID, left by an nvmeof-ublk that died, and exit")
                      ->check(CLI::NonNegativeNumber);
  del_opt->excludes(path_opt)->excludes(recover_opt);
  CLI11_PARSE(app, argc, argv);

  if (del >= 0) {
    if (auto r = ublk::Device::remove_dead(static_cast<uint32_t>(del)); !r) {
      std::fprintf(stderr, "nvmeof-ublk: delete device %d: %s\n", del, r.message().c_str());
      return 1;
    }
    return 0;
  }
  if (paths.empty() || nqn_opt->count() == 0) {
    std::fprintf(stderr, "nvmeof-ublk: --path and --nqn are required (--help)\n");
    return 2;
  }
  if (access("/dev/ublk-control", F_OK) != 0) {
    std::fprintf(stderr, "nvmeof-ublk: %s\n", ublk::kNoDriver);
    return 1;
  }

  // SIGINT and SIGTERM wait for sigwait() below, in every thread the engine starts.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  VolumeOptions vo;
  for (const auto& a : paths) {
    auto addr = TransportAddress::parse(a);
    if (!addr) {
      std::fprintf(stderr, "nvmeof-ublk: --path %s: %s\n", a.c_str(), addr.error().message().c_str());
      return 2;
    }
    vo.paths.push_back(*addr);
  }
  vo.nsid = nsid;
  vo.connect.subnqn = nqn;
  vo.connect.hostnqn = hostnqn;
  vo.connect.dhchap_secret = dhchap_secret;
  vo.connect.dhchap_ctrl_secret = dhchap_ctrl_secret;
  vo.connect.tls_psk = tls_psk;
  if (kato_ms) vo.connect.kato_ms = kato_ms;
  vo.connect.io_queue_depth = std::clamp(depth * 2, 128u, 1024u);

  HostOptions ho;
  ho.reactors = queues;
  ho.poll = poll == "busy" ? PollMode::busy : poll == "sleep" ? PollMode::sleep : PollMode::adaptive;
  auto host = Host::create(ho);
  if (!host) {
    std::fprintf(stderr, "nvmeof-ublk: engine: %s\n", host.message().c_str());
    return 1;
  }
  auto vol = Volume::open(*host, vo);
  if (!vol) {
    std::fprintf(stderr, "nvmeof-ublk: open %s: %s\n", nqn.c_str(), vol.message().c_str());
    return 1;
  }
  ublk::DeviceOptions dopts;
  dopts.queues = queues;
  dopts.depth = depth;
  dopts.max_io_bytes = max_io;
  dopts.recovery = recovery == "reissue" ? ublk::Recovery::reissue : ublk::Recovery::none;
  dopts.recover_id = recover;
  auto dev = ublk::Device::create(*host, **vol, dopts);
  if (!dev) {
    std::fprintf(stderr, "nvmeof-ublk: %s\n", dev.message().c_str());
    return 1;
  }
  std::printf("%s\n", (*dev)->block_path().c_str());
  std::fflush(stdout);

  int sig = 0;
  sigwait(&stop_signals, &sig);
  std::fprintf(stderr, "nvmeof-ublk: %s: stopping %s\n", sig == SIGINT ? "SIGINT" : "SIGTERM",
               (*dev)->block_path().c_str());
  const uint64_t ios = (*dev)->ios();
  if (auto r = (*dev)->stop(); !r) {
    std::fprintf(stderr, "nvmeof-ublk: stop: %s\n", r.message().c_str());
    return 1;
  }
  std::fprintf(stderr, "nvmeof-ublk: %s stopped and deleted after %llu requests\n", (*dev)->block_path().c_str(),
               static_cast<unsigned long long>(ios));
  return 0;
}
