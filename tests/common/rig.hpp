// The integration tests' rig: the embedded target with its ports on 127.0.0.1, and (for the tests
// that want one) a volume over every port. Its defaults are the settings most tests share; what
// a test needs differently it sets in a tweak of the options, before the target starts.
#pragma once

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "nvmeof/target.hpp"
#include "nvmeof/volume.hpp"
#include "wait.hpp"

namespace nvmeof::test {

/// The size of the rig's namespace: room for every test's LBAs, small enough to allocate fast.
constexpr uint64_t kRigNamespaceBytes = 16ull << 20;

/// `nports` ports on 127.0.0.1, each on a free port, and the default subsystem with one
/// namespace of `namespace_bytes`.
inline TargetOptions rig_target_options(size_t nports, uint64_t namespace_bytes = kRigNamespaceBytes) {
  TargetOptions to;
  to.ports.assign(nports, TargetPort{});
  for (auto& p : to.ports) p.trsvcid = "0";
  to.subsystems[0].namespaces[0].size_bytes = namespace_bytes;
  return to;
}

/// The volume settings the tests share, without paths: a queue depth of 64 (a workload of up to
/// 64 slots never waits for a free command), and a no-path timeout of 10 s, so that I/O
/// waiting for a path a test broke fails the test within its time limit instead of hanging it.
/// The keep-alive stays the shortest the target allows (the default): should a loaded host make
/// every path miss its deadline at once (no CCR possible then), writes wait 3 x KATO + CQT, not
/// seconds.
inline VolumeOptions rig_volume_options() {
  VolumeOptions vo;
  vo.connect.io_queue_depth = 64;
  vo.no_path_timeout = std::chrono::seconds(10);
  return vo;
}

class Rig {
 public:
  /// Sees the target's and the volume's options before the target starts; the volume's paths
  /// (one per port) and subsystem NQN are filled in after.
  using Tweak = std::function<void(TargetOptions&, VolumeOptions&)>;
  /// Starts the target in place of Target::start (inside a network namespace, say).
  using Start = std::function<Result<std::unique_ptr<Target>>(const TargetOptions&)>;

  /// A target of `nports` ports and a volume over all of them.
  explicit Rig(size_t nports, const Tweak& tweak = {}, const Start& start = {})
      : to(rig_target_options(nports)), vo(rig_volume_options()) {
    if (tweak) tweak(to, vo);
    start_target(start);
    open(volume_options());
  }

  /// The target of `opts` alone; open() adds a volume on it.
  explicit Rig(TargetOptions opts, const Start& start = {}) : to(std::move(opts)), vo(rig_volume_options()) {
    start_target(start);
  }

  Rig(const Rig&) = delete;
  Rig& operator=(const Rig&) = delete;

  uint16_t port(size_t i) const { return target->port_number(i); }
  PortStats stats(size_t i) const { return target->stats(i); }

  /// Port `i` as a path: its own address, or loopback for a wildcard one.
  TransportAddress addr(size_t i) const {
    TransportAddress a;
    const std::string& t = to.ports.at(i).traddr;
    a.traddr = t == "0.0.0.0" || t == "::" ? std::string("127.0.0.1") : t;
    a.trsvcid = std::to_string(port(i));
    return a;
  }

  /// The rig's volume settings with a path to every port and the first subsystem's NQN.
  VolumeOptions volume_options() const {
    VolumeOptions v = vo;
    v.paths.clear();
    for (size_t i = 0; i < to.ports.size(); ++i) v.paths.push_back(addr(i));
    v.connect.subnqn = to.subsystems.at(0).nqn;
    return v;
  }

  /// Opens the rig's volume (`vol`) with `v`.
  Volume& open(const VolumeOptions& v) {
    auto opened = Volume::open(v);
    REQUIRE(opened);
    vol = std::move(*opened);
    return *vol;
  }

  // In this order so that they go in reverse: the volume disconnects while the target still
  // answers.
  TargetOptions to;
  VolumeOptions vo;  ///< without paths; volume_options() adds them
  std::unique_ptr<Target> target;
  std::unique_ptr<Volume> vol;

 private:
  void start_target(const Start& start) {
    auto t = start ? start(to) : Target::start(to);
    REQUIRE(t);
    target = std::move(*t);
  }
};

}  // namespace nvmeof::test
