// Persistent discovery against the embedded target (ARCHITECTURE.md, "Persistent discovery"):
// a watched discovery controller's log becomes paths of the open volumes (merged when two
// discovery controllers list the same ports), a lost discovery controller is reconnected and its
// log read again, and paths the application gave itself are left alone. Each under a verified
// workload: no error, no wrong data.
#include <catch2/catch.hpp>

#include <chrono>
#include <memory>

#include "../common/rig.hpp"
#include "../common/verified_workload.hpp"
#include "nvmeof/host.hpp"
#include "nvmeof/target.hpp"
#include "nvmeof/volume.hpp"

using namespace nvmeof;
using namespace std::chrono_literals;

namespace {

using test::Rig;
using test::VerifiedWorkload;

const HostDiscoveryStats* find_discovery(const HostStats& s, const TransportAddress& a) {
  for (const auto& d : s.discovery)
    if (d.address == a.to_string()) return &d;
  return nullptr;
}

bool has_path(const VolumeStats& s, const TransportAddress& a) {
  for (const auto& p : s.paths)
    if (p.address == a.to_string() && p.state == PathState::live && p.ios > 0) return true;
  return false;
}

struct Setup {
  Rig rig{test::rig_target_options(3)};
  std::shared_ptr<Host> host;
  std::unique_ptr<Volume> vol;

  // A volume over port 0 only, on an engine of its own.
  Setup() {
    auto h = Host::create({});
    REQUIRE(h);
    host = *h;
    auto vo = rig.volume_options();
    vo.paths.resize(1);
    auto v = Volume::open(host, vo);
    REQUIRE(v);
    vol = std::move(*v);
  }
};

void finish_clean(VerifiedWorkload& w) {
  REQUIRE(w.finish(20s));
  INFO(w.first_error());
  CHECK(w.errors() == 0);
  CHECK(w.mismatches() == 0);
}

}  // namespace

TEST_CASE("a watched discovery controller's ports become paths of the open volume, merged across controllers",
          "[discovery]") {
  Setup s;
  VerifiedWorkload w(*s.vol, 16);
  w.start();
  REQUIRE(test::wait_until([&] { return w.completed() >= 200; }, 20s));

  REQUIRE(s.host->add_discovery(s.rig.addr(1)));
  // Every port of the subsystem the log lists is a path now, and carries I/O.
  const auto st = test::wait_for(*s.vol, 20s, [&](const VolumeStats& v) {
    return has_path(v, s.rig.addr(1)) && has_path(v, s.rig.addr(2));
  });
  CHECK(has_path(st, s.rig.addr(1)));
  CHECK(has_path(st, s.rig.addr(2)));
  CHECK(st.paths.size() == 3);
  const auto hs = s.host->stats();
  const HostDiscoveryStats* d = find_discovery(hs, s.rig.addr(1));
  REQUIRE(d);
  CHECK(d->connected);
  CHECK(d->log_reads >= 1);
  CHECK(d->entries >= 3);

  // A second discovery controller listing the same ports adds nothing.
  REQUIRE(s.host->add_discovery(s.rig.addr(2)));
  CHECK(test::wait_until([&] {
    const HostStats hs2 = s.host->stats();
    const HostDiscoveryStats* d2 = find_discovery(hs2, s.rig.addr(2));
    return d2 && d2->log_reads >= 1;
  }, 20s));
  CHECK(s.vol->stats().paths.size() == 3);
  // Watching one twice is refused.
  auto again = s.host->add_discovery(s.rig.addr(2));
  REQUIRE_FALSE(again);
  CHECK(again.error() == std::errc::file_exists);
  finish_clean(w);
  CHECK(s.host->remove_discovery(s.rig.addr(1)));
  CHECK(s.host->remove_discovery(s.rig.addr(2)));
  CHECK(s.host->remove_discovery(s.rig.addr(2)).error() == std::errc::no_such_file_or_directory);
  CHECK(s.host->stats().discovery.empty());
}

TEST_CASE("a lost discovery controller is reconnected and its log read again; the volume is not disturbed",
          "[discovery]") {
  Setup s;
  VerifiedWorkload w(*s.vol, 16);
  w.start();
  REQUIRE(s.host->add_discovery(s.rig.addr(2)));
  REQUIRE(test::wait_until([&] {
    const HostStats hs = s.host->stats();
    const HostDiscoveryStats* d = find_discovery(hs, s.rig.addr(2));
    return d && d->log_reads >= 1;
  }, 20s));
  const HostStats before = s.host->stats();
  const uint64_t reads = find_discovery(before, s.rig.addr(2))->log_reads;
  // Port 2's connections are reset: the discovery connection among them.
  s.rig.target->inject(2, FaultKind::reset);
  REQUIRE(test::wait_until([&] {
    const HostStats hs = s.host->stats();
    const HostDiscoveryStats* d = find_discovery(hs, s.rig.addr(2));
    return d && d->reconnects >= 1 && d->connected && d->log_reads > reads;
  }, 20s));
  const HostStats hs = s.host->stats();
  const HostDiscoveryStats* d = find_discovery(hs, s.rig.addr(2));
  REQUIRE(d);
  CHECK(d->reconnects >= 1);
  CHECK(d->log_reads > reads);
  REQUIRE(test::wait_until([&] { return w.completed() >= 500; }, 20s));
  finish_clean(w);
}

TEST_CASE("an unreachable discovery controller is retried in the background and says why", "[discovery]") {
  Setup s;
  TransportAddress nowhere;
  nowhere.traddr = "127.0.0.1";
  nowhere.trsvcid = "1";
  REQUIRE(s.host->add_discovery(nowhere));
  REQUIRE(test::wait_until([&] {
    const HostStats hs = s.host->stats();
    const HostDiscoveryStats* d = find_discovery(hs, nowhere);
    return d && d->reconnects >= 2;
  }, 20s));
  const HostStats hs = s.host->stats();
  const HostDiscoveryStats* d = find_discovery(hs, nowhere);
  REQUIRE(d);
  CHECK_FALSE(d->connected);
  INFO(d->last_error);
  CHECK(d->last_error.find("connect") != std::string::npos);
  CHECK(s.vol->stats().paths.size() == 1);  // nothing changed
  CHECK(s.host->remove_discovery(nowhere));
}

TEST_CASE("a path the application gave that no log lists is left alone", "[discovery]") {
  // Two subsystems' worth of ports is not needed: a volume of a subsystem no log lists keeps its
  // paths whatever the logs say.
  Setup s;
  TransportAddress other;  // a discovery controller on a target that lists another subsystem
  TargetOptions to = test::rig_target_options(1);
  to.subsystems.at(0).nqn = "nqn.2024-01.io.nvmeof:someone-else";
  auto t2 = Target::start(to);
  REQUIRE(t2);
  other.trsvcid = std::to_string((*t2)->port_number(0));
  REQUIRE(s.host->add_discovery(other));
  REQUIRE(test::wait_until([&] {
    const HostStats hs = s.host->stats();
    const HostDiscoveryStats* d = find_discovery(hs, other);
    return d && d->log_reads >= 1;
  }, 20s));
  const auto st = s.vol->stats();
  REQUIRE(st.paths.size() == 1);
  CHECK(st.paths[0].state == PathState::live);
  CHECK(s.host->remove_discovery(other));
}
