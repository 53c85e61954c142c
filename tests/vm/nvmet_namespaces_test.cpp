// Volumes of one subsystem share its controllers, against Linux nvmet inside the testbed guest
// (nvmet_namespaces_test.sh): one subsystem of four namespaces behind two TCP ports, the four
// namespaces opened as four volumes on one engine (two reactors) with the same options but nsid.
// [namespaces] asserts:
//   - the engine: one subsystem, two controllers (one per path), each carrying the four volumes;
//   - nvmet's side, which knows nothing of our bookkeeping: on each port 1 + reactors established
//     TCP connections (the admin queue and one I/O queue per reactor; a controller set per volume
//     would make 4 x that), and exactly two controllers created for the subsystem in nvmet's
//     kernel log ("creating nvm controller <cntlid> for subsystem <nqn>"), with the cntlids the
//     engine reports. Linux 6.1's nvmet lists no controllers in configfs and has no debugfs, so
//     these two are what the target shows;
//   - a verified workload on every namespace over both paths; then port 0's ANA group made
//     inaccessible, and every namespace keeps completing verified I/O through controller 2 alone
//     (a volume's path counters are its controller's, shared by every namespace, so this is what
//     shows that each namespace was found on that path too); then, optimized again, port 1 taken
//     away (the subsystem unlinked from it in configfs) while it runs: every namespace sees path 1
//     fail and keeps completing verified I/O through controller 1 alone, nvmet ends the port's
//     queues and makes no new controller, zero errors, zero mismatches, and each backing file
//     holds every write its own volume acknowledged and nothing written for another.
// [apart], the negative control (run after it, the port given back): the same four volumes, each
// with a host NQN of its own, make 2 x 4 controllers and 4 x (1 + reactors) connections per port
// on nvmet, counted the same way: what a controller set per volume would have shown above.
// Set-up from the script's environment: NS_NQN, NS_COUNT, NS_ADDR0/NS_ADDR1 and NS_PORT0/NS_PORT1
// (the ports' addresses and nvmet port ids), NS_FILE_PREFIX (namespace n is backed by
// <prefix><n>.img), NVMET.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "../common/block_stamp.hpp"
#include "../common/verified_workload.hpp"
#include "../common/wait.hpp"
#include "nvmeof/host.hpp"
#include "nvmeof/volume.hpp"
#include "testbed_env.hpp"

using namespace nvmeof;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

using test::env_or;

constexpr unsigned kReactors = 2;
constexpr uint32_t kSlots = 8;          // verified loops per namespace
constexpr uint32_t kSlotBlocks = 32;    // LBAs each loop owns
constexpr uint64_t kRegionStride = 1024;  // namespace n's loops start at LBA (n - 1) x this
constexpr uint64_t kIosPerPhase = 200;  // verified I/Os each namespace completes per phase
constexpr auto kPhaseBound = 30s;  // a phase takes 1 to 2 s under TCG

std::string nqn() { return env_or("NS_NQN", "nqn.2014-08.org.nvmexpress:nvmeof-testbed-namespaces"); }
unsigned ns_count() { return static_cast<unsigned>(std::atoi(env_or("NS_COUNT", "4").c_str())); }

TransportAddress path_address(int i) {
  auto a = TransportAddress::parse(env_or(i == 0 ? "NS_ADDR0" : "NS_ADDR1",
                                          i == 0 ? "127.0.0.1:4430" : "127.0.0.2:4431"));
  REQUIRE(a);
  return *a;
}

using test::wait_until;

uint64_t region_base(uint32_t nsid) { return (nsid - 1) * kRegionStride; }

// Established TCP connections whose local end is `addr` (nvmet's listening address): the queues
// nvmet serves on that port. Host and target share the guest's network namespace, so
// /proc/net/tcp lists both ends; only the target's has the port's address as its local one.
unsigned target_connections(const TransportAddress& addr) {
  in_addr ip{};
  REQUIRE(::inet_pton(AF_INET, addr.traddr.c_str(), &ip) == 1);
  char want[16];
  // The kernel prints the address as the u32 it holds (network order read natively), the port
  // in host order.
  std::snprintf(want, sizeof want, "%08X:%04X", ip.s_addr,
                static_cast<unsigned>(std::stoul(addr.trsvcid)));
  std::ifstream in("/proc/net/tcp");
  REQUIRE(in);
  std::string line;
  std::getline(in, line);  // header
  unsigned n = 0;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string sl, local, remote, st;
    f >> sl >> local >> remote >> st;
    if (local == want && st == "01") ++n;  // 01: TCP_ESTABLISHED
  }
  return n;
}

// The controllers nvmet has created for the subsystem since boot, by cntlid, from the kernel log
// (nvmet_execute_admin_connect: "nvmet: creating nvm controller %d for subsystem %s for NQN ...").
std::multiset<unsigned> target_controllers_created() {
  const int fd = ::open("/dev/kmsg", O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  INFO("open /dev/kmsg: " << std::strerror(errno));
  REQUIRE(fd >= 0);
  const std::string key = "creating nvm controller ";
  const std::string sub = " for subsystem " + nqn() + " for NQN ";
  std::multiset<unsigned> ids;
  char rec[8192];
  for (;;) {
    const ssize_t n = ::read(fd, rec, sizeof rec - 1);
    if (n < 0 && errno == EPIPE) continue;  // a record overwritten while reading: go on
    if (n <= 0) break;                      // EAGAIN: the end of the log
    const std::string_view r(rec, static_cast<size_t>(n));
    const size_t k = r.find(key);
    if (k == std::string_view::npos) continue;
    const size_t num = k + key.size();
    const size_t end = r.find(' ', num);
    if (end == std::string_view::npos || r.substr(end, sub.size()) != sub) continue;
    ids.insert(static_cast<unsigned>(std::stoul(std::string(r.substr(num, end - num)))));
  }
  ::close(fd);
  return ids;
}

// Takes the subsystem off an nvmet port (nvmet deletes its controllers there and, the port
// exporting nothing else, stops listening) and puts it back when the test ends.
class PortLink {
 public:
  explicit PortLink(const std::string& port)
      : link_(fs::path(env_or("NVMET", "/sys/kernel/config/nvmet")) / "ports" / port /
              "subsystems" / nqn()),
        target_(fs::path(env_or("NVMET", "/sys/kernel/config/nvmet")) / "subsystems" / nqn()) {
    REQUIRE(fs::is_symlink(link_));
  }
  ~PortLink() {
    std::error_code ec;
    if (removed_) fs::create_directory_symlink(target_, link_, ec);
    if (ec) std::fprintf(stderr, "cannot link %s again: %s\n", link_.c_str(), ec.message().c_str());
  }
  PortLink(const PortLink&) = delete;
  PortLink& operator=(const PortLink&) = delete;

  void remove() {
    fs::remove(link_);
    removed_ = true;
  }

 private:
  fs::path link_, target_;
  bool removed_ = false;
};

// The ANA state of group 1 (every namespace's) on an nvmet port.
void set_ana(const std::string& port, const char* state) {
  const fs::path f = fs::path(env_or("NVMET", "/sys/kernel/config/nvmet")) / "ports" / port /
                     "ana_groups" / "1" / "ana_state";
  std::ofstream out(f);
  out << state << "\n";
  out.close();
  INFO(f.string());
  REQUIRE(out.good());
}

// A namespace's backing file: nvmet writes through the page cache (buffered_io), so a read here
// is what the target holds.
std::vector<uint8_t> read_file_blocks(uint32_t nsid, uint64_t lba, uint64_t count, uint32_t bs) {
  const std::string path = env_or("NS_FILE_PREFIX", "/run/nvmet-multi-ns") + std::to_string(nsid) + ".img";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  INFO("open " << path << ": " << std::strerror(errno));
  REQUIRE(fd >= 0);
  std::vector<uint8_t> buf(count * bs);
  const ssize_t n = ::pread(fd, buf.data(), buf.size(), static_cast<off_t>(lba * bs));
  ::close(fd);
  REQUIRE(n == static_cast<ssize_t>(buf.size()));
  return buf;
}

const FailoverEvent* event_of(const VolumeStats& st, int path) {
  for (const auto& e : st.timeline)
    if (e.path == path) return &e;
  return nullptr;
}

std::string host_text(const HostStats& hs) {
  std::string s = "engine: " + std::to_string(hs.volumes) + " volumes, " +
                  std::to_string(hs.subsystems) + " subsystems, " +
                  std::to_string(hs.controllers.size()) + " controllers\n";
  for (const auto& c : hs.controllers)
    s += "  controller " + std::to_string(c.cntlid) + " at " + c.address + ": " + to_string(c.state) +
         ", " + std::to_string(c.volumes) + " volumes, " + std::to_string(c.ios) + " I/Os, " +
         std::to_string(c.failovers) + " failovers, " + std::to_string(c.reconnects) + " reconnects\n";
  return s;
}

// Every volume's options but nsid.
VolumeOptions volume_options() {
  VolumeOptions vo;
  vo.paths = {path_address(0), path_address(1)};
  vo.connect = test::testbed_options();
  vo.connect.subnqn = nqn();
  vo.connect.io_queue_depth = 64;
  // Both paths take every namespace's I/O until one goes away.
  vo.selector = SelectorKind::round_robin;
  // TCG: a deadline tuned for hardware would call healthy paths dead; the port loss is seen by
  // the connection closing, not by a deadline.
  vo.io_deadline = 2s;
  vo.no_path_timeout = 20s;
  vo.fence_bound = 100ms;  // nvmet reports no Command Quiesce Time
  return vo;
}

std::shared_ptr<Host> make_host() {
  HostOptions ho;
  ho.reactors = kReactors;
  ho.placement = PlacementMode::unpinned;
  auto host = Host::create(ho);
  INFO("host: " << (host ? "ok" : host.error().message()));
  REQUIRE(host);
  return *host;
}

bool all_reached(const std::vector<std::unique_ptr<test::VerifiedWorkload>>& work,
                 const std::vector<uint64_t>& from, uint64_t more) {
  for (size_t i = 0; i < work.size(); ++i)
    if (work[i]->completed() < from[i] + more) return false;
  return true;
}

}  // namespace

TEST_CASE("four namespaces of one nvmet subsystem share two controllers; a port lost under "
          "verified I/O", "[namespaces]") {
  const unsigned count = ns_count();
  REQUIRE(count >= 2);
  const TransportAddress addr0 = path_address(0), addr1 = path_address(1);
  // Nothing of this subsystem before the volumes open.
  REQUIRE(target_connections(addr0) == 0);
  REQUIRE(target_connections(addr1) == 0);
  REQUIRE(target_controllers_created().empty());
  PortLink port1(env_or("NS_PORT1", "31"));

  auto host = make_host();

  VolumeOptions vo = volume_options();
  std::vector<std::unique_ptr<Volume>> vols;
  for (uint32_t nsid = 1; nsid <= count; ++nsid) {
    vo.nsid = nsid;
    auto v = Volume::open(host, vo);
    INFO("open nsid " << nsid << ": " << (v ? "ok" : v.error().message()));
    REQUIRE(v);
    vols.push_back(std::move(*v));
    Volume& vol = *vols.back();
    CHECK(vol.ns().nsid == nsid);
    REQUIRE(vol.block_size() == 4096);
    REQUIRE(vol.size_blocks() >= region_base(count) + kSlots * kSlotBlocks);
    if (nsid == 1) {
      // The first volume made the controllers: per port, the admin queue and an I/O queue per
      // reactor.
      CHECK(target_connections(addr0) == 1 + kReactors);
      CHECK(target_connections(addr1) == 1 + kReactors);
    }
  }
  for (auto& v : vols)
    REQUIRE(wait_until([&] { return v->usable_paths() == 2; }, 10s));

  // The engine's view.
  HostStats hs = host->stats();
  INFO(host_text(hs));
  CHECK(hs.reactors == kReactors);
  CHECK(hs.volumes == count);
  CHECK(hs.subsystems == 1);
  REQUIRE(hs.controllers.size() == 2);
  std::multiset<unsigned> engine_ids;
  for (const auto& c : hs.controllers) {
    CHECK(c.volumes == count);
    CHECK(c.state == PathState::live);
    CHECK(c.subnqn == nqn());
    engine_ids.insert(c.cntlid);
  }
  CHECK(hs.controllers[0].address != hs.controllers[1].address);

  // nvmet's view: the same queues and controllers, whatever the number of namespaces.
  const unsigned conn0 = target_connections(addr0), conn1 = target_connections(addr1);
  const std::multiset<unsigned> created = target_controllers_created();
  std::printf("nvmet: %zu controllers created for %s (cntlids", created.size(), nqn().c_str());
  for (unsigned id : created) std::printf(" %u", id);
  std::printf("); established connections: %u on %s, %u on %s\n", conn0, addr0.to_string().c_str(),
              conn1, addr1.to_string().c_str());
  std::printf("%s", host_text(hs).c_str());
  std::fflush(stdout);
  CHECK(conn0 == 1 + kReactors);
  CHECK(conn1 == 1 + kReactors);
  CHECK(created.size() == 2);
  CHECK(created == engine_ids);

  // A verified workload on every namespace, each in its own LBA region.
  std::vector<std::unique_ptr<test::VerifiedWorkload>> work;
  for (size_t i = 0; i < vols.size(); ++i)
    work.push_back(std::make_unique<test::VerifiedWorkload>(
        *vols[i], kSlots, kSlotBlocks, region_base(static_cast<uint32_t>(i + 1)), 8));
  for (auto& w : work) w->start();
  const std::vector<uint64_t> zero(work.size(), 0);
  const bool warmed = wait_until([&] { return all_reached(work, zero, kIosPerPhase); }, kPhaseBound);
  REQUIRE(warmed);
  for (size_t i = 0; i < work.size(); ++i) {
    INFO("nsid " << i + 1 << ": " << work[i]->first_error());
    CHECK(work[i]->errors() == 0);
    CHECK(work[i]->mismatches() == 0);
  }
  // A volume's path counters are its controller's (every namespace on it), so that each
  // namespace is reachable through controller 2 is shown by taking controller 1's port out of
  // service: ANA inaccessible on port 0, and every namespace keeps completing verified I/O.
  set_ana(env_or("NS_PORT0", "30"), "inaccessible");
  const bool ana_seen = wait_until([&] {
    for (auto& v : vols)
      if (v->stats().paths.at(0).ana_state != AnaState::inaccessible) return false;
    return true;
  }, 20s);
  std::vector<uint64_t> at_ana(work.size());
  for (size_t i = 0; i < work.size(); ++i) at_ana[i] = work[i]->completed();
  REQUIRE(ana_seen);
  const bool via_path1 =
      wait_until([&] { return all_reached(work, at_ana, kIosPerPhase); }, kPhaseBound);
  std::vector<uint64_t> ana_phase(work.size());
  for (size_t i = 0; i < work.size(); ++i) ana_phase[i] = work[i]->completed() - at_ana[i];
  set_ana(env_or("NS_PORT0", "30"), "optimized");
  CHECK(via_path1);
  REQUIRE(wait_until([&] {
    for (auto& v : vols)
      if (v->stats().paths.at(0).ana_state != AnaState::optimized) return false;
    return true;
  }, 20s));
  hs = host->stats();
  for (const auto& c : hs.controllers) {
    INFO(host_text(hs));
    CHECK(c.ios > 0);
    CHECK(c.failovers == 0);
  }
  // Under load still the same connections: no queue per namespace was added.
  CHECK(target_connections(addr0) == 1 + kReactors);
  CHECK(target_connections(addr1) == 1 + kReactors);
  CHECK(target_controllers_created().size() == 2);

  // Port 1 goes away under the workload.
  std::printf("removing the subsystem from the port at %s\n", addr1.to_string().c_str());
  std::fflush(stdout);
  port1.remove();
  // Every namespace sees path 1 fail once, fenced before its writes move.
  const bool failed_over = wait_until([&] {
    for (auto& v : vols) {
      const VolumeStats st = v->stats();
      const FailoverEvent* e = event_of(st, 1);
      if (e == nullptr || e->fenced_us < 0) return false;
    }
    return true;
  }, 30s);
  std::vector<uint64_t> at_failover(work.size());
  for (size_t i = 0; i < work.size(); ++i) at_failover[i] = work[i]->completed();
  const HostControllerStats* c0 = nullptr;
  const HostStats hs_failover = host->stats();
  for (const auto& c : hs_failover.controllers)
    if (c.address == addr0.to_string()) c0 = &c;
  REQUIRE(c0 != nullptr);
  const uint64_t c0_at_failover = c0->ios;
  INFO(to_text(vols[0]->stats()));
  REQUIRE(failed_over);
  const bool carried =
      wait_until([&] { return all_reached(work, at_failover, kIosPerPhase); }, kPhaseBound);
  std::string progress = "verified I/Os since path 1 failed:";
  for (size_t i = 0; i < work.size(); ++i)
    progress += " nsid " + std::to_string(i + 1) + " " + std::to_string(work[i]->completed() - at_failover[i]);
  INFO(progress);
  CHECK(carried);
  // nvmet ended the port's queues and made no controller since.
  CHECK(wait_until([&] { return target_connections(addr1) == 0; }, 10s));
  CHECK(target_connections(addr0) == 1 + kReactors);
  const std::multiset<unsigned> created_after = target_controllers_created();
  CHECK(created_after == created);

  for (auto& w : work) REQUIRE(w->finish(30s));
  hs = host->stats();
  std::printf("%s", host_text(hs).c_str());
  for (size_t i = 0; i < vols.size(); ++i) {
    const uint32_t nsid = static_cast<uint32_t>(i + 1);
    const test::VerifiedWorkload& w = *work[i];
    const VolumeStats st = vols[i]->stats();
    const FailoverEvent* e = event_of(st, 1);
    std::printf("nsid %u: %llu verified I/Os: %llu over both paths, %llu through path 1 alone "
                "(port %s inaccessible), %llu through path 0 alone (after path 1 failed); %llu "
                "errors, %llu mismatches; path 1 failed (%s), fenced +%.1f ms by %s; longest I/O "
                "%.1f ms, longest stall %.1f ms\n",
                nsid, static_cast<unsigned long long>(w.completed()),
                static_cast<unsigned long long>(at_ana[i]),
                static_cast<unsigned long long>(ana_phase[i]), env_or("NS_PORT0", "30").c_str(),
                static_cast<unsigned long long>(w.completed() - at_failover[i]),
                static_cast<unsigned long long>(w.errors()),
                static_cast<unsigned long long>(w.mismatches()), e ? e->cause.c_str() : "-",
                e ? static_cast<double>(e->fenced_us) / 1000.0 : -1.0, e ? e->fence_rule.c_str() : "-",
                static_cast<double>(w.longest_io_us()) / 1000.0,
                static_cast<double>(w.longest_gap_us()) / 1000.0);
    INFO("nsid " << nsid << "\n" << to_text(st));
    INFO("first error: " << w.first_error());
    CHECK(w.errors() == 0);
    CHECK(w.mismatches() == 0);
    CHECK(w.completed() == w.issued());
    CHECK(st.failed == 0);
    CHECK(st.paths.at(0).failovers == 0);
    CHECK(st.paths.at(1).failovers >= 1);
    CHECK(st.paths.at(1).state != PathState::live);
  }
  std::fflush(stdout);
  for (const auto& c : hs.controllers) {
    INFO(host_text(hs));
    CHECK(c.volumes == count);
    if (c.address == addr0.to_string()) {
      CHECK(c.state == PathState::live);
      CHECK(c.failovers == 0);
      CHECK(c.ios > c0_at_failover);  // it carried every namespace since
    } else {
      CHECK(c.state != PathState::live);
      CHECK(c.failovers >= 1);
    }
  }

  // What nvmet holds: each namespace's file has every write its volume acknowledged, in its own
  // region, and nothing in the regions the other volumes wrote (a volume reaching another
  // namespace on either path would show here).
  for (uint32_t nsid = 1; nsid <= count; ++nsid) {
    const test::VerifiedWorkload& w = *work[nsid - 1];
    const uint32_t bs = vols[nsid - 1]->block_size();
    const std::vector<uint8_t> own = read_file_blocks(nsid, w.first_lba(), w.lba_count(), bs);
    uint64_t checked = 0, stale = 0;
    for (uint64_t k = 0; k < w.lba_count(); ++k) {
      const uint64_t lba = w.first_lba() + k;
      const uint64_t seq = w.acked_seq(lba);
      if (seq == 0) continue;
      ++checked;
      if (!test::block_matches(own.data() + k * bs, bs, lba, seq)) ++stale;
    }
    uint64_t foreign = 0;
    for (uint32_t other = 1; other <= count; ++other) {
      if (other == nsid) continue;
      const std::vector<uint8_t> region = read_file_blocks(nsid, region_base(other), w.lba_count(), bs);
      for (uint64_t k = 0; k < w.lba_count(); ++k)
        if (!test::block_matches(region.data() + k * bs, bs, region_base(other) + k, 0)) ++foreign;
    }
    std::printf("nsid %u backing file: %llu of %llu written blocks hold their last acknowledged "
                "write; %llu blocks written in other namespaces' regions\n",
                nsid, static_cast<unsigned long long>(checked - stale),
                static_cast<unsigned long long>(checked), static_cast<unsigned long long>(foreign));
    INFO("nsid " << nsid);
    CHECK(checked > 0);
    CHECK(stale == 0);
    CHECK(foreign == 0);
  }
  std::fflush(stdout);
}

TEST_CASE("negative control: the four namespaces opened as four hosts make four controllers per "
          "port on nvmet", "[apart]") {
  // What the counts above would show without sharing: each volume its own host NQN, so the
  // engine cannot share (nor may it: other hosts are other controllers), and nvmet counts a
  // controller set per volume.
  const unsigned count = ns_count();
  const TransportAddress addr0 = path_address(0), addr1 = path_address(1);
  REQUIRE(wait_until([&] { return target_connections(addr0) + target_connections(addr1) == 0; }, 10s));
  const size_t created_before = target_controllers_created().size();
  auto host = make_host();
  std::vector<std::unique_ptr<Volume>> vols;
  for (uint32_t nsid = 1; nsid <= count; ++nsid) {
    VolumeOptions vo = volume_options();
    vo.nsid = nsid;
    vo.connect.hostnqn = "nqn.2014-08.org.nvmexpress:nvmeof-testbed-apart-" + std::to_string(nsid);
    auto v = Volume::open(host, vo);
    INFO("open nsid " << nsid << ": " << (v ? "ok" : v.error().message()));
    REQUIRE(v);
    vols.push_back(std::move(*v));
  }
  const HostStats hs = host->stats();
  const unsigned conn0 = target_connections(addr0), conn1 = target_connections(addr1);
  const size_t created = target_controllers_created().size() - created_before;
  std::printf("apart: nvmet created %zu controllers; established connections: %u on %s, %u on "
              "%s\n%s",
              created, conn0, addr0.to_string().c_str(), conn1, addr1.to_string().c_str(),
              host_text(hs).c_str());
  std::fflush(stdout);
  INFO(host_text(hs));
  CHECK(hs.subsystems == count);
  CHECK(hs.controllers.size() == 2 * count);
  for (const auto& c : hs.controllers) CHECK(c.volumes == 1);
  CHECK(created == 2 * count);
  CHECK(conn0 == count * (1 + kReactors));
  CHECK(conn1 == count * (1 + kReactors));
  vols.clear();
  CHECK(wait_until([&] { return target_connections(addr0) + target_connections(addr1) == 0; }, 10s));
}
