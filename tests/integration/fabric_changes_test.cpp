// The embedded target changing under running volumes (ARCHITECTURE.md, "Persistent discovery and
// namespace changes"): ports added and removed at run time reach the volumes through persistent
// discovery (the target's Discovery Log Page Change notice), namespaces grown, shrunk, detached
// and attached reach them through Namespace Attribute Changed; each under a verified workload,
// with bad requests to the target refused and nothing changed.
#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <optional>

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

constexpr uint32_t kBlock = 4096;

const PathStats* path_at(const VolumeStats& s, const std::string& port) {
  for (const auto& p : s.paths)
    if (p.trsvcid == port) return &p;
  return nullptr;
}

bool carries(const Volume& v, const std::string& port) {
  const VolumeStats s = v.stats();
  const PathStats* p = path_at(s, port);
  return p && p->state == PathState::live && p->ios > 0;
}

bool listed(const Volume& v, const std::string& port) {
  const VolumeStats s = v.stats();
  return path_at(s, port) != nullptr;
}

bool moving(const VerifiedWorkload& w, uint64_t more) {
  const uint64_t from = w.completed();
  return test::wait_until([&] { return w.completed() >= from + more; }, 20s);
}

void finish_clean(VerifiedWorkload& w) {
  REQUIRE(w.finish(20s));
  INFO(w.first_error());
  CHECK(w.errors() == 0);
  CHECK(w.mismatches() == 0);
}

// Two namespaces (4 KiB blocks) behind two ports, a host of its own watching port 0's discovery
// controller, and a volume of each namespace over port 0.
struct Fabric {
  Rig rig{[] {
    TargetOptions to = test::rig_target_options(2);
    auto& ns = to.subsystems.at(0).namespaces;
    ns.at(0).block_size = kBlock;
    TargetNamespace second = ns.at(0);
    second.nsid = 2;
    ns.push_back(second);
    return to;
  }()};
  std::shared_ptr<Host> host;
  std::unique_ptr<Volume> v1, v2;

  Fabric() {
    auto h = Host::create({});
    REQUIRE(h);
    host = *h;
    v1 = open(1);
    v2 = open(2);
    REQUIRE(host->add_discovery(rig.addr(0)));
  }
  std::unique_ptr<Volume> open(uint32_t nsid) {
    auto vo = rig.volume_options();
    vo.paths.resize(1);
    vo.nsid = nsid;
    auto v = Volume::open(host, vo);
    REQUIRE(v);
    return std::move(*v);
  }
  const std::string& nqn() const { return rig.to.subsystems.at(0).nqn; }
};

}  // namespace

TEST_CASE("a port added to the target becomes a path of the running volumes; removed, it goes", "[fabric]") {
  Fabric f;
  VerifiedWorkload w1(*f.v1, 16), w2(*f.v2, 16);
  w1.start();
  w2.start();
  // Discovery lists port 1 already: both volumes carry I/O on it.
  const std::string p1 = std::to_string(f.rig.port(1));
  REQUIRE(test::wait_until([&] { return carries(*f.v1, p1) && carries(*f.v2, p1); }, 20s));

  // A port added at run time: the discovery controller's notice, the log read again, a path.
  TargetPort np;
  np.trsvcid = "0";
  const auto t0 = std::chrono::steady_clock::now();
  auto added = f.rig.target->add_port(np);
  REQUIRE(added);
  CHECK(*added == 2);
  const std::string p2 = std::to_string(f.rig.port(2));
  REQUIRE(test::wait_until([&] { return carries(*f.v1, p2) && carries(*f.v2, p2); }, 20s));
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("fabric_changes_test: port added -> first I/O on it within %.1f ms\n", ms);
  const HostStats hs = f.host->stats();
  REQUIRE(hs.discovery.size() == 1);
  CHECK(hs.discovery[0].change_events >= 1);

  // Removed at run time: its connections close, the log loses it, the path goes; no I/O fails.
  REQUIRE(f.rig.target->remove_port(2));
  CHECK(f.rig.target->port_removed(2));
  REQUIRE(test::wait_until([&] { return !listed(*f.v1, p2) && !listed(*f.v2, p2); }, 20s));
  REQUIRE(moving(w1, 300));
  REQUIRE(moving(w2, 300));
  finish_clean(w1);
  finish_clean(w2);
  // Bad requests: nothing changes.
  CHECK(f.rig.target->remove_port(2).error() == make_error_code(Errc::invalid_argument));
  CHECK(f.rig.target->remove_port(9).error() == make_error_code(Errc::invalid_argument));
  TargetPort taken;
  taken.trsvcid = std::to_string(f.rig.port(0));  // in use
  CHECK_FALSE(f.rig.target->add_port(taken));
  CHECK(f.rig.target->port_count() == 3);
}

TEST_CASE("a namespace grown and shrunk under a running volume: the volume's size follows", "[fabric]") {
  Fabric f;
  VerifiedWorkload w(*f.v1, 8, 32, 0);  // LBAs 0..255: inside every size below
  w.start();
  REQUIRE(moving(w, 100));
  const uint64_t blocks = f.v1->size_blocks();
  REQUIRE(f.rig.target->resize_namespace(f.nqn(), 1, 2 * blocks * kBlock));
  REQUIRE(test::wait_until([&] { return f.v1->size_blocks() == 2 * blocks; }, 20s));
  CHECK(f.v1->stats().ns.size_blocks == 2 * blocks);
  // Past the old end: written and read back.
  std::vector<uint8_t> out(kBlock, 0x6b), in(kBlock, 0);
  CHECK(test::run_io(*f.v1, IoOp::write, out.data(), blocks + 5, 1).is_success());
  CHECK(test::run_io(*f.v1, IoOp::read, in.data(), blocks + 5, 1).is_success());
  CHECK(in == out);
  // Shrunk below where it began: I/O past the new end is refused at submit.
  REQUIRE(f.rig.target->resize_namespace(f.nqn(), 1, blocks / 2 * kBlock));
  REQUIRE(test::wait_until([&] { return f.v1->size_blocks() == blocks / 2; }, 20s));
  VolumeIo io;
  io.op = IoOp::read;
  io.slba = blocks / 2;
  io.nlb = 1;
  io.buf = in.data();
  io.done = [](VolumeIo&, NvmeStatus) noexcept {};
  CHECK(f.v1->submit(io) == -EINVAL);
  REQUIRE(moving(w, 100));
  finish_clean(w);
  // The engine reported each resize once, though both controllers told it.
  size_t resized = 0;
  for (const auto& e : f.host->take_namespace_events()) resized += e.kind == NamespaceEvent::Kind::resized;
  CHECK(resized == 2);
  // Bad sizes: refused, nothing changes.
  CHECK_FALSE(f.rig.target->resize_namespace(f.nqn(), 1, 0));
  CHECK_FALSE(f.rig.target->resize_namespace(f.nqn(), 1, 1000));
  CHECK_FALSE(f.rig.target->resize_namespace(f.nqn(), 7, 1 << 20));
  CHECK_FALSE(f.rig.target->resize_namespace("nqn.2024-01.io.nvmeof:nobody", 1, 1 << 20));
  CHECK(f.v1->size_blocks() == blocks / 2);
}

TEST_CASE("a namespace detached: its volume's I/O fails clearly, the other volume on the same controllers goes on",
          "[fabric]") {
  Fabric f;
  VerifiedWorkload w1(*f.v1, 16);
  w1.start();
  REQUIRE(moving(w1, 100));
  REQUIRE(f.rig.target->detach_namespace(f.nqn(), 2));
  REQUIRE(test::wait_until([&] { return f.v2->stats().namespace_removed; }, 20s));
  std::vector<uint8_t> buf(kBlock);
  const NvmeStatus st = test::run_io(*f.v2, IoOp::read, buf.data(), 0, 1);
  CHECK(st.code() == status::kInvalidNamespace.code());
  REQUIRE(moving(w1, 300));
  finish_clean(w1);
  size_t removed = 0;
  for (const auto& e : f.host->take_namespace_events()) removed += e.kind == NamespaceEvent::Kind::removed && e.nsid == 2;
  CHECK(removed == 1);
  CHECK_FALSE(f.rig.target->detach_namespace(f.nqn(), 2));  // not active any more

  // Attached again (the same identity: NSID and subsystem): the volume works again.
  TargetNamespace again = f.rig.to.subsystems.at(0).namespaces.at(1);
  REQUIRE(f.rig.target->attach_namespace(f.nqn(), again));
  REQUIRE(test::wait_until([&] { return !f.v2->stats().namespace_removed; }, 20s));
  std::vector<uint8_t> out(kBlock, 0x33);
  CHECK(test::run_io(*f.v2, IoOp::write, out.data(), 3, 1).is_success());
  CHECK(test::run_io(*f.v2, IoOp::read, buf.data(), 3, 1).is_success());
  CHECK(buf == out);
}

TEST_CASE("a namespace attached at run time is reported to the application and can be opened", "[fabric]") {
  Fabric f;
  TargetNamespace n3;
  n3.nsid = 3;
  n3.block_size = kBlock;
  n3.size_bytes = 8 << 20;
  REQUIRE(f.rig.target->attach_namespace(f.nqn(), n3));
  std::vector<NamespaceEvent> seen;
  REQUIRE(test::wait_until([&] {
    for (auto& e : f.host->take_namespace_events()) seen.push_back(e);
    for (const auto& e : seen)
      if (e.kind == NamespaceEvent::Kind::added && e.nsid == 3) return true;
    return false;
  }, 20s));
  size_t added = 0;
  for (const auto& e : seen) {
    if (e.kind != NamespaceEvent::Kind::added) continue;
    ++added;
    CHECK(e.subnqn == f.nqn());
    CHECK(e.size_blocks == (8u << 20) / kBlock);
    CHECK(e.block_size == kBlock);
  }
  CHECK(added == 1);  // both controllers told the engine; it reports it once
  auto v3 = f.open(3);
  std::vector<uint8_t> out(kBlock, 0x71), in(kBlock);
  CHECK(test::run_io(*v3, IoOp::write, out.data(), 9, 1).is_success());
  CHECK(test::run_io(*v3, IoOp::read, in.data(), 9, 1).is_success());
  CHECK(in == out);
  // An NSID in use, or a bad namespace: refused.
  CHECK_FALSE(f.rig.target->attach_namespace(f.nqn(), n3));
  TargetNamespace bad = n3;
  bad.nsid = 4;
  bad.size_bytes = 1000;
  CHECK_FALSE(f.rig.target->attach_namespace(f.nqn(), bad));
}
