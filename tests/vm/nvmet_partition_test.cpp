// Our initiator against Linux nvmet across a real network partition, run inside the testbed guest
// by nvmet_partition_test.sh: this binary runs in the guest's network namespace $NETNS and
// reaches nvmet over two veth pairs (netns_setup in guest_lib.sh). It cuts path 0 by taking its
// own end of the veth down (SIOCSIFFLAGS): nothing goes in or out, nvmet sees nothing, exactly a
// pulled cable. Linux nvmet 6.1 reports no CQT and has no Cross-Controller Reset, so the volume
// may move writes of unknown outcome only after the TP4129 hold (fence_bound stands in for CQT).
// The cases, selected by tag:
//   [ghost]      writes in flight on path 0 when it is cut; the link heals 400 ms later, before
//                nvmet's keep-alive has ended the controller, so copies still queued in our TCP
//                socket reach nvmet late. The newer writes through path 1 must still win: every
//                block holds its newest write, read through the volume and from the backing
//                file itself.
//   [unsafe]     the negative control: the same with FenceMode::skip_unsafe (and a 5 s KATO, so
//                nvmet keeps the old controller past the heal at 1 s). The writes move at once,
//                the newer ones are acknowledged before the heal, the late copies land over
//                them, and the test sees it.
//   [workload]   a verified mixed workload over both paths (both optimized) across a partition
//                of path 0 that does not heal: zero errors, zero mismatches, and every block the
//                workload acknowledged holds that write in the backing file.
// The script sets the ANA states ([ghost], [unsafe]: path 1 non-optimized, so every write goes
// to path 0 until it fails). Addresses, interfaces and the backing file come from NETNS_ADDR0,
// NETNS_ADDR1, NETNS_IF0 and NS1_FILE (exported by guest_lib.sh).
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "../common/block_stamp.hpp"
#include "../common/verified_workload.hpp"
#include "../common/wait.hpp"
#include "reactor/reactor.hpp"
#include "nvmeof/volume.hpp"
#include "testbed_env.hpp"

using namespace nvmeof;
using namespace std::chrono_literals;

namespace {

using Clock = std::chrono::steady_clock;
using test::env_or;

constexpr auto kFenceBound = 100ms;
// The derived deadline (15 to 25 ms) fails healthy paths under TCG. A path is failed after
// twice an explicit deadline of silence with its probe unanswered (a slow path is hedged, not
// failed), so this one fails the cut path about 200 to 300 ms in: before the 400 ms heal below.
constexpr auto kIoDeadline = 100ms;
constexpr auto kWorkloadRun = 5s;  // after the cut: the hold (about 3.1 s) and some more
// Disjoint LBA regions (4 KiB blocks of the 64 MiB namespace).
constexpr uint64_t kGhostBase = 0;
constexpr uint32_t kGhostBlocks = 32;  // half written before the cut, half after
constexpr uint64_t kWorkloadBase = 8192;

double ms_between(uint64_t from_ns, uint64_t to_ns) {
  return (static_cast<double>(to_ns) - static_cast<double>(from_ns)) / 1e6;
}

TransportAddress path_address(int i) {
  auto a = TransportAddress::parse(env_or(i == 0 ? "NETNS_ADDR0" : "NETNS_ADDR1",
                                          i == 0 ? "10.214.0.1:4420" : "10.214.1.1:4420"));
  REQUIRE(a);
  return *a;
}

// Our end of path 0's cable. Taking it down removes its routes, so what the socket sends meets
// the `unreachable` route and stays queued in it: nvmet receives nothing, sends into a link
// without carrier, and sees silence. The destructor puts the link back up, whatever happened.
class OwnLink {
 public:
  explicit OwnLink(std::string ifname) : name_(std::move(ifname)) {
    fd_ = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) throw std::system_error(errno, std::generic_category(), "socket");
  }
  ~OwnLink() {
    try {
      set(true);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "cannot bring %s back up: %s\n", name_.c_str(), e.what());
    }
    ::close(fd_);
  }
  OwnLink(const OwnLink&) = delete;
  OwnLink& operator=(const OwnLink&) = delete;

  void down() { set(false); }
  void up() { set(true); }

 private:
  void set(bool up) {
    ifreq ifr{};
    std::strncpy(ifr.ifr_name, name_.c_str(), sizeof ifr.ifr_name - 1);
    if (::ioctl(fd_, SIOCGIFFLAGS, &ifr) != 0)
      throw std::system_error(errno, std::generic_category(), "SIOCGIFFLAGS " + name_);
    const short flags = up ? static_cast<short>(ifr.ifr_flags | IFF_UP)
                           : static_cast<short>(ifr.ifr_flags & ~IFF_UP);
    if (flags == ifr.ifr_flags) return;
    ifr.ifr_flags = flags;
    if (::ioctl(fd_, SIOCSIFFLAGS, &ifr) != 0)
      throw std::system_error(errno, std::generic_category(), "SIOCSIFFLAGS " + name_);
  }

  std::string name_;
  int fd_ = -1;
};

// nvmet's backing file: the same page cache nvmet writes through (buffered_io), so a read here
// is what the target holds right now.
class BackingFile {
 public:
  BackingFile() : path_(env_or("NS1_FILE", "/run/nvmet-ns1.img")) {
    fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    INFO("open " << path_ << ": " << std::strerror(errno));
    REQUIRE(fd_ >= 0);
  }
  ~BackingFile() { ::close(fd_); }
  BackingFile(const BackingFile&) = delete;
  BackingFile& operator=(const BackingFile&) = delete;

  bool read_block(uint64_t lba, uint8_t* buf, uint32_t bs) const {
    return ::pread(fd_, buf, bs, static_cast<off_t>(lba * bs)) == static_cast<ssize_t>(bs);
  }

 private:
  std::string path_;
  int fd_ = -1;
};

VolumeOptions volume_options(FenceMode fence, SelectorKind selector) {
  VolumeOptions vo;
  vo.paths = {path_address(0), path_address(1)};
  vo.connect = test::testbed_options();
  vo.connect.io_queue_depth = 64;
  vo.selector = selector;
  vo.fence_bound = kFenceBound;
  vo.fence = fence;
  vo.io_deadline = kIoDeadline;
  vo.no_path_timeout = 20s;
  return vo;
}

using test::wait_for;

const FailoverEvent* event_of(const VolumeStats& st, int path) {
  for (const auto& e : st.timeline)
    if (e.path == path) return &e;
  return nullptr;
}

std::unique_ptr<Volume> open_volume(const VolumeOptions& vo, AnaState ana1) {
  auto v = Volume::open(vo);
  INFO("open: " << (v ? "ok" : v.error().message()));
  REQUIRE(v);
  std::unique_ptr<Volume> vol = std::move(*v);
  REQUIRE(vol->block_size() == 4096);
  const VolumeStats st = wait_for(*vol, 5000ms, [&](const VolumeStats& s) {
    return s.paths.size() == 2 && s.paths[0].state == PathState::live &&
           s.paths[1].state == PathState::live && s.paths[1].ana_state == ana1;
  });
  INFO(to_text(st));
  REQUIRE(vol->usable_paths() == 2);
  REQUIRE(st.paths[0].ana_state == AnaState::optimized);
  REQUIRE(st.paths[1].ana_state == ana1);
  return vol;
}

// Single-block writes (or reads) submitted together and waited for as a group. The volume owns
// each I/O until its completion, so a group whose wait gives up is leaked, never freed under it.
class IoGroup {
 public:
  static IoGroup* create(uint32_t count, uint32_t bs) { return new IoGroup(count, bs); }
  static void destroy(IoGroup* g) {
    if (g->done() == g->ios_.size()) delete g;
  }

  void submit(Volume& vol, IoOp op, uint32_t first, uint32_t count, uint64_t seq) {
    for (uint32_t i = first; i < first + count; ++i) {
      Io& io = ios_[i];
      io.group = this;
      io.v = VolumeIo{};
      io.v.op = op;
      io.v.slba = kGhostBase + i;
      io.v.nlb = 1;
      io.v.buf = io.buf.data();
      io.v.user = &io;
      io.v.done = &IoGroup::on_done;
      if (op == IoOp::write) test::fill_block(io.buf.data(), bs_, io.v.slba, seq);
      REQUIRE(vol.submit(io.v) == 0);
    }
  }
  uint32_t done() const { return done_.load(std::memory_order_acquire); }
  bool wait_until(Clock::time_point until) const {
    std::unique_lock lock(mu_);
    return cv_.wait_until(lock, until, [&] { return done() == ios_.size(); });
  }
  uint32_t failures() const { return failures_.load(); }
  uint64_t last_done_ns() const { return last_done_ns_.load(); }
  const uint8_t* data(uint32_t i) const { return ios_[i].buf.data(); }

 private:
  struct Io {
    IoGroup* group = nullptr;
    VolumeIo v;
    std::vector<uint8_t> buf;
  };
  IoGroup(uint32_t count, uint32_t bs) : bs_(bs), ios_(count) {
    for (auto& io : ios_) io.buf.assign(bs, 0);
  }
  static void on_done(VolumeIo& v, NvmeStatus st) noexcept {
    auto& io = *static_cast<Io*>(v.user);
    IoGroup& g = *io.group;
    if (!st.is_success()) g.failures_.fetch_add(1);
    g.last_done_ns_.store(Reactor::clock_ns());
    std::lock_guard lock(g.mu_);
    g.done_.fetch_add(1, std::memory_order_acq_rel);
    g.cv_.notify_all();
  }

  uint32_t bs_;
  std::vector<Io> ios_;
  std::atomic<uint32_t> done_{0}, failures_{0};
  std::atomic<uint64_t> last_done_ns_{0};
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
};

// Writes `seq` to every ghost block through the volume and waits for all of them.
void write_all(Volume& vol, uint64_t seq, std::chrono::milliseconds bound) {
  IoGroup* g = IoGroup::create(kGhostBlocks, vol.block_size());
  g->submit(vol, IoOp::write, 0, kGhostBlocks, seq);
  const bool all = g->wait_until(Clock::now() + bound);
  const uint32_t failures = g->failures();
  IoGroup::destroy(g);
  REQUIRE(all);
  REQUIRE(failures == 0);
}

// Which write each ghost block holds: seq 1..3 (W0, W1, W2), 0 for anything else.
struct BlockCensus {
  uint32_t holds[4] = {0, 0, 0, 0};
  std::string text() const {
    return "W0 x" + std::to_string(holds[1]) + ", W1 x" + std::to_string(holds[2]) + ", W2 x" +
           std::to_string(holds[3]) + ", other x" + std::to_string(holds[0]);
  }
};

uint32_t seq_of(const uint8_t* p, uint32_t bs, uint64_t lba) {
  for (uint32_t seq = 1; seq <= 3; ++seq)
    if (test::block_matches(p, bs, lba, seq)) return seq;
  return 0;
}

BlockCensus census_file(const BackingFile& f, uint32_t bs) {
  BlockCensus c;
  std::vector<uint8_t> buf(bs);
  for (uint32_t i = 0; i < kGhostBlocks; ++i) {
    const uint64_t lba = kGhostBase + i;
    ++c.holds[f.read_block(lba, buf.data(), bs) ? seq_of(buf.data(), bs, lba) : 0];
  }
  return c;
}

BlockCensus census_volume(Volume& vol) {
  const uint32_t bs = vol.block_size();
  IoGroup* g = IoGroup::create(kGhostBlocks, bs);
  g->submit(vol, IoOp::read, 0, kGhostBlocks, 0);
  const bool all = g->wait_until(Clock::now() + 20s);
  BlockCensus c;
  if (all)
    for (uint32_t i = 0; i < kGhostBlocks; ++i) ++c.holds[seq_of(g->data(i), bs, kGhostBase + i)];
  const uint32_t failures = g->failures();
  IoGroup::destroy(g);
  REQUIRE(all);
  REQUIRE(failures == 0);
  return c;
}

// Our TCP socket retries what the cut held back about 200 ms, 600 ms, 1.4 s and 3 s after the
// cut; nvmet ends a silent controller between 1 and 2 x KATO after its last traffic (it looks
// once per KATO). The heal must let a retry through while that controller still lives.
struct GhostCase {
  FenceMode fence = FenceMode::safe;
  uint32_t kato_ms = kKatoShortest;  // nvmet's shortest: 1 s
  std::chrono::milliseconds heal_after{400};  // lets the 600 ms retry through
  // By then nvmet has ended the old controller one way or the other (its keep-alive, or the
  // close that the heal let through), or the retries have landed.
  std::chrono::milliseconds settle_after{2500};
};

struct GhostResult {
  FailoverEvent event;
  double w1_done_ms = 0;          // the last W1 completion, after the cut
  bool w2_before_heal = false;
  uint32_t w1_failures = 0;
  BlockCensus before_heal;  // the backing file just before the heal
  uint32_t landed_during_hold = 0;  // W1 blocks in the file while the hold ran, less before_heal's
  BlockCensus file, volume;
  VolumeStats stats;
};

// W0 everywhere; half of W1 submitted just before the cut, half just after (so some are surely
// still in our socket); the heal; W2 once W1 completed; the census once settled.
GhostResult run_ghost(const GhostCase& gc) {
  const char* mode = gc.fence == FenceMode::safe ? "safe" : "skipped";
  BackingFile file;
  OwnLink link(env_or("NETNS_IF0", "nvh0"));
  VolumeOptions vo = volume_options(gc.fence, SelectorKind::service_time);
  vo.connect.kato_ms = gc.kato_ms;
  std::unique_ptr<Volume> vol = open_volume(vo, AnaState::non_optimized);
  const uint32_t bs = vol->block_size();
  write_all(*vol, 1, 10s);
  REQUIRE(census_file(file, bs).holds[1] == kGhostBlocks);

  GhostResult r;
  IoGroup* w1 = IoGroup::create(kGhostBlocks, bs);
  w1->submit(*vol, IoOp::write, 0, kGhostBlocks / 2, 2);
  link.down();
  const uint64_t cut_ns = Reactor::clock_ns();
  const auto cut_at = Clock::now();
  w1->submit(*vol, IoOp::write, kGhostBlocks / 2, kGhostBlocks / 2, 2);

  const auto heal_at = cut_at + gc.heal_after;
  if (w1->wait_until(heal_at)) {
    // Moved at once (the fence skipped): the newer writes go in before the heal.
    write_all(*vol, 3, 10s);
    r.w2_before_heal = Clock::now() < heal_at;
  }
  std::this_thread::sleep_until(heal_at);
  r.before_heal = census_file(file, bs);
  link.up();
  if (w1->done() < kGhostBlocks) {
    // The hold runs: the copies queued in our socket get through meanwhile (or not). Whatever
    // lands does so while nvmet's controller lives, within 2 s of the cut; the hold ends later.
    std::this_thread::sleep_until(cut_at + 2500ms);
    if (w1->done() < kGhostBlocks)
      r.landed_during_hold = census_file(file, bs).holds[2] - r.before_heal.holds[2];
    const bool all = w1->wait_until(Clock::now() + 20s);
    INFO(to_text(vol->stats()));
    REQUIRE(all);
    write_all(*vol, 3, 10s);
  }
  r.w1_done_ms = ms_between(cut_ns, w1->last_done_ns());
  r.w1_failures = w1->failures();
  IoGroup::destroy(w1);
  std::this_thread::sleep_until(cut_at + gc.settle_after);

  r.file = census_file(file, bs);
  r.volume = census_volume(*vol);
  r.stats = vol->stats();
  if (const FailoverEvent* e = event_of(r.stats, 0)) r.event = *e;
  const std::string landed = gc.fence == FenceMode::safe
                                 ? "; W1 copies that reached nvmet over the healed link while the "
                                   "hold ran: " + std::to_string(r.landed_during_hold) + " of " +
                                       std::to_string(kGhostBlocks)
                                 : "";
  std::printf("ghost (fence %s): path 0 failed %.1f ms after the cut (%s), fenced +%.1f ms by "
              "%s; W1 completed %.1f ms after the cut; W2 acknowledged %s the heal at %lld ms%s\n",
              mode, ms_between(cut_ns, r.event.detect_ns), r.event.cause.c_str(),
              static_cast<double>(r.event.fenced_us) / 1000.0, r.event.fence_rule.c_str(),
              r.w1_done_ms, r.w2_before_heal ? "before" : "after",
              static_cast<long long>(gc.heal_after.count()), landed.c_str());
  std::printf("ghost (fence %s): backing file before the heal %s; settled %s; read through the "
              "volume %s\n",
              mode, r.before_heal.text().c_str(), r.file.text().c_str(), r.volume.text().c_str());
  std::printf("%s", to_text(r.stats).c_str());
  return r;
}

}  // namespace

TEST_CASE("writes in flight across a partition that heals before nvmet notices: the newest "
          "write holds", "[ghost]") {
  const GhostResult r = run_ghost(GhostCase{});
  INFO(to_text(r.stats));
  CHECK(r.w1_failures == 0);
  CHECK(r.stats.failed == 0);
  CHECK(r.event.fence_rule == "time");
  // nvmet reports no CQT: 2 x KATO + fence_bound at the least (3 x with traffic-based
  // keep-alive); the shortest KATO nvmet allows is 1 s.
  CHECK(r.event.fenced_us >= 2 * 1'000'000 + 100'000);
  CHECK_FALSE(r.w2_before_heal);
  CHECK(r.file.holds[3] == kGhostBlocks);
  CHECK(r.volume.holds[3] == kGhostBlocks);
}

TEST_CASE("negative control: with the fence skipped, late copies of the moved writes land over "
          "the newer ones", "[unsafe]") {
  // A KATO long enough that nvmet keeps the old controller past every retry before 3 s: what a
  // host that moved writes the moment its own connection failed would face.
  GhostCase gc;
  gc.fence = FenceMode::skip_unsafe;
  gc.kato_ms = 5000;
  gc.heal_after = 1000ms;  // lets the 1.4 s retry through
  gc.settle_after = 3500ms;
  const GhostResult r = run_ghost(gc);
  INFO(to_text(r.stats));
  CHECK(r.w1_failures == 0);
  CHECK(r.event.fence_rule == "skipped (unsafe)");
  // The newer writes were acknowledged, and on nvmet, before the heal let the old copies through.
  REQUIRE(r.w2_before_heal);
  CHECK(r.before_heal.holds[3] == kGhostBlocks);
  CHECK(r.file.holds[2] >= 1);  // a stale W1 over an acknowledged W2: what the fence prevents
  CHECK(r.volume.holds[2] == r.file.holds[2]);
}

TEST_CASE("a verified workload over both paths across a partition of path 0", "[workload]") {
  BackingFile file;
  OwnLink link(env_or("NETNS_IF0", "nvh0"));
  std::unique_ptr<Volume> vol =
      open_volume(volume_options(FenceMode::safe, SelectorKind::round_robin), AnaState::optimized);
  const uint32_t bs = vol->block_size();
  test::VerifiedWorkload w(*vol, 16, 64, kWorkloadBase, 4);
  w.start();
  std::this_thread::sleep_for(1s);
  const uint64_t before = w.completed();
  REQUIRE(before > 0);

  link.down();
  const uint64_t cut_ns = Reactor::clock_ns();
  const auto cut_at = Clock::now();
  const VolumeStats detected = wait_for(*vol, 10000ms, [](const VolumeStats& s) {
    return event_of(s, 0) != nullptr;
  });
  INFO(to_text(detected));
  REQUIRE(event_of(detected, 0) != nullptr);
  const uint64_t p1_at_detect = detected.paths.at(1).ios;
  std::this_thread::sleep_until(cut_at + kWorkloadRun);
  const uint64_t during = w.completed() - before;
  REQUIRE(w.finish(30s));

  const VolumeStats st = vol->stats();
  INFO(to_text(st));
  INFO("first error: " << w.first_error());
  CHECK(w.errors() == 0);
  CHECK(w.mismatches() == 0);
  CHECK(w.completed() == w.issued());
  CHECK(st.failed == 0);
  CHECK(during > 100);  // I/O kept flowing through path 1
  CHECK(st.paths.at(1).ios > p1_at_detect);
  CHECK(st.paths.at(0).failovers >= 1);
  CHECK(st.paths.at(1).failovers == 0);
  const FailoverEvent* e = event_of(st, 0);
  REQUIRE(e != nullptr);
  CHECK(e->fence_rule == "time");
  CHECK(e->fenced_us >= 2 * 1'000'000 + 100'000);

  // What nvmet holds, block by block, against the last acknowledged write (the link still down:
  // nothing more can arrive from the cut path).
  std::vector<uint8_t> buf(bs);
  uint64_t stale = 0, checked = 0;
  for (uint64_t lba = w.first_lba(); lba < w.first_lba() + w.lba_count(); ++lba) {
    const uint64_t seq = w.acked_seq(lba);
    if (seq == 0) continue;
    ++checked;
    if (!file.read_block(lba, buf.data(), bs) || !test::block_matches(buf.data(), bs, lba, seq)) ++stale;
  }
  CHECK(checked > 0);
  CHECK(stale == 0);

  std::printf("workload: path 0 failed %.1f ms after the cut (%s); fenced +%.1f ms by %s, first "
              "resubmit +%.1f ms, first success +%.1f ms; %u reads and %u writes moved; longest "
              "I/O %.1f ms, longest stall %.1f ms; %llu I/Os (%llu during the %lld s after the "
              "cut), %llu errors, %llu mismatches; backing file: %llu of %llu written blocks "
              "hold their last acknowledged write\n",
              ms_between(cut_ns, e->detect_ns), e->cause.c_str(),
              static_cast<double>(e->fenced_us) / 1000.0, e->fence_rule.c_str(),
              static_cast<double>(e->first_resubmit_us) / 1000.0,
              static_cast<double>(e->first_success_us) / 1000.0, e->reads_moved, e->writes_moved,
              static_cast<double>(w.longest_io_us()) / 1000.0,
              static_cast<double>(w.longest_gap_us()) / 1000.0,
              static_cast<unsigned long long>(w.completed()), static_cast<unsigned long long>(during),
              static_cast<long long>(std::chrono::duration_cast<std::chrono::seconds>(kWorkloadRun).count()),
              static_cast<unsigned long long>(w.errors()), static_cast<unsigned long long>(w.mismatches()),
              static_cast<unsigned long long>(checked - stale), static_cast<unsigned long long>(checked));
  std::printf("%s", to_text(st).c_str());
}
