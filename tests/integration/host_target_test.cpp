// The host side (Controller, TCP queue pairs, SyncIo) against the embedded target over
// loopback: identify, data integrity across sizes, digests and queue depths, ANA, keep-alive,
// connection errors and every fault the target injects.
#include <catch2/catch.hpp>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "../common/block_stamp.hpp"
#include "control/controller_access.hpp"
#include "core/identify.hpp"
#include "nvmeof/controller.hpp"
#include "reactor/sync_io.hpp"
#include "nvmeof/target.hpp"
#include "transport/tcp/queue_pair.hpp"

using namespace nvmeof;
using namespace std::chrono_literals;

namespace {

const std::string kNqn = "nqn.2024-01.io.nvmeof:host-test";
constexpr uint32_t kNs4k = 1;
constexpr uint32_t kNs512 = 2;

struct Env {
  std::unique_ptr<Target> target;
  TransportAddress addr;
  std::unique_ptr<ControlPlane> cp;
  std::unique_ptr<Reactor> reactor;

  explicit Env(const std::function<void(TargetOptions&)>& tweak = {}) {
    TargetOptions to;
    to.ports[0].trsvcid = "0";
    TargetSubsystem sub;
    sub.nqn = kNqn;
    sub.serial = "HOSTTEST42";
    sub.model = "host test model";
    sub.namespaces = {TargetNamespace{kNs4k, 16ull << 20, 4096, {}, {}},
                      TargetNamespace{kNs512, 4ull << 20, 512, {}, {}}};
    to.subsystems = {sub};
    if (tweak) tweak(to);
    auto t = Target::start(to);
    REQUIRE(t);
    target = std::move(*t);
    addr.traddr = "127.0.0.1";
    addr.trsvcid = std::to_string(target->port_number(0));
    cp = ControlPlane::create().value();
    reactor = Reactor::create().value();
  }

  void busy_reactor() { reactor->set_spinning(true); }

  ConnectOptions options(Digest d = Digest::none) const {
    ConnectOptions o;
    o.subnqn = kNqn;
    o.digest = d;
    return o;
  }

  std::shared_ptr<Controller> connect(Digest d = Digest::none) {
    auto c = Controller::connect(*cp, addr, options(d));
    REQUIRE(c);
    return *c;
  }
};

std::vector<uint8_t> stamped(uint32_t block_size, uint64_t slba, uint32_t nlb, uint64_t seq) {
  std::vector<uint8_t> v(static_cast<size_t>(block_size) * nlb);
  test::fill_blocks(v.data(), block_size, slba, nlb, seq);
  return v;
}

bool all_stamped(const std::vector<uint8_t>& v, uint32_t block_size, uint64_t slba, uint64_t seq) {
  return test::count_mismatches(v.data(), block_size, slba, static_cast<uint32_t>(v.size() / block_size), seq) == 0;
}

uint16_t closed_port() {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(s);
  return ntohs(a.sin_port);
}

struct Outcome {
  int done = 0;
  NvmeStatus last;
  int failures = 0;
};

void count_done(IoRequest& r, const Cqe& c) noexcept {
  auto* o = static_cast<Outcome*>(r.user);
  ++o->done;
  o->last = c.status();
  if (!c.status().is_success()) ++o->failures;
}

}  // namespace

TEST_CASE("connect and identify report what the target was configured with") {
  Env env;
  auto ctrl = env.connect();
  const ControllerInfo& i = ctrl->info();
  CHECK(i.serial == "HOSTTEST42");
  CHECK(i.model == "host test model");
  CHECK(i.subnqn == kNqn);
  CHECK(i.max_transfer == 128u * 1024);
  CHECK(i.in_capsule_data() == 8192);
  CHECK(i.cqt_ms == 10);
  CHECK(i.anatt_s == 2);
  CHECK(ctrl->io_queues() >= 1);
  CHECK(ctrl->io_queues() <= 64);
  CHECK(ctrl->is_live());
  CHECK(ctrl->options().hostnqn.rfind("nqn.2014-08.org.nvmexpress:uuid:", 0) == 0);

  auto ns = ctrl->identify_namespace(kNs4k);
  REQUIRE(ns);
  CHECK(ns->block_size == 4096);
  CHECK(ns->size_blocks == (16ull << 20) / 4096);
  CHECK(ns->anagrpid == 1);
  CHECK_FALSE(ns->id.empty());
  auto ns2 = ctrl->identify_namespace(kNs512);
  REQUIRE(ns2);
  CHECK(ns2->block_size == 512);
  CHECK_FALSE(ns2->id.same_namespace_as(ns->id));

  auto list = ctrl->active_namespaces();
  REQUIRE(list);
  CHECK(*list == std::vector<uint32_t>{kNs4k, kNs512});
  CHECK(ctrl->keep_alive());

  auto addr = TransportAddress::parse("tcp://[::1]:4420");
  REQUIRE(addr);
  CHECK(addr->traddr == "::1");
  CHECK(addr->to_string() == "tcp://[::1]:4420");
  CHECK(TransportAddress::parse("10.0.0.1")->trsvcid == "4420");
  CHECK_FALSE(TransportAddress::parse("::1:4420"));
  CHECK_FALSE(TransportAddress::parse("host:99999"));
}

TEST_CASE("writes read back intact at every size, with and without digests") {
  Env env;
  // Also on a busy reactor, where the queue pairs call recv() and send() themselves each turn.
  const bool busy = GENERATE(false, true);
  INFO("busy reactor: " << busy);
  if (busy) env.busy_reactor();
  const Digest digests[] = {Digest::none, Digest::header, Digest::data, Digest::both};
  uint64_t seq = 1;
  for (Digest d : digests) {
    INFO("digest " << static_cast<int>(d));
    auto ctrl = env.connect(d);
    auto qp = create_io_queue(*ctrl, *env.reactor, 32);
    REQUIRE(qp);
    CHECK((*qp)->max_transfer() == 128u * 1024);
    // Receives go into the staging buffer registered with the reactor's ring (READ_FIXED); on a
    // spinning reactor the pair's own recv() calls fill the same buffer.
    auto* tqp = dynamic_cast<tcp::QueuePair*>(qp->get());
    REQUIRE(tqp);
    CHECK(tqp->registered_receive());
    CHECK(tqp->direct_socket() == busy);
    SyncIo io4k(**qp, *env.reactor, kNs4k, 4096);
    SyncIo io512(**qp, *env.reactor, kNs512, 512);
    struct Case {
      SyncIo* io;
      uint32_t bs;
      uint32_t bytes;
    };
    // 512 B and 4-8 KiB travel in the capsule; 16 KiB and up wait for R2T; 1 MiB is split at
    // MDTS (128 KiB) into eight commands.
    const Case cases[] = {{&io512, 512, 512},   {&io4k, 4096, 4096},   {&io4k, 4096, 8192},
                          {&io4k, 4096, 16384}, {&io4k, 4096, 65536},  {&io4k, 4096, 1u << 20},
                          {&io512, 512, 1u << 20}};
    uint64_t slba = 0;
    for (const Case& c : cases) {
      INFO("bytes " << c.bytes << " block " << c.bs);
      const uint32_t nlb = c.bytes / c.bs;
      auto data = stamped(c.bs, slba, nlb, seq);
      REQUIRE(c.io->write(slba, nlb, data.data()));
      std::vector<uint8_t> back(data.size());
      REQUIRE(c.io->read(slba, nlb, back.data()));
      CHECK(all_stamped(back, c.bs, slba, seq));
      // The target's own view agrees (the write really landed where it says).
      std::vector<uint8_t> raw(data.size());
      REQUIRE(env.target->read_ns(kNqn, c.bs == 512 ? kNs512 : kNs4k, slba * c.bs, raw.data(), raw.size()));
      CHECK(raw == data);
      slba += nlb;
      ++seq;
    }
    REQUIRE(io4k.flush());
    REQUIRE(io4k.write_zeroes(0, 2));
    std::vector<uint8_t> z(8192, 0xff);
    REQUIRE(io4k.read(0, 2, z.data()));
    CHECK(std::all_of(z.begin(), z.end(), [](uint8_t b) { return b == 0; }));
    const DsmRange range{0, 2, 4};
    CHECK(io4k.dsm(std::span(&range, 1), kDsmDeallocate));
    auto out_of_range = io4k.read((16ull << 20) / 4096, 1, z.data());
    REQUIRE_FALSE(out_of_range);
    CHECK(out_of_range.error() == make_error_code(status::kLbaOutOfRange));
    qp->reset();
  }
}

TEST_CASE("a spinning reactor receives a large read's payload straight into its buffer, a sleeping one does not") {
  // A 4 KiB receive buffer: the first receive of a 128 KiB read takes its header and at most
  // 4 KiB of data, so the rest is left for the receives that follow. While the reactor spins
  // those go into the command's buffer (recv_direct); on the ring they always use the buffer.
  const bool busy = GENERATE(false, true);
  INFO("busy reactor: " << busy);
  Env env;
  if (busy) env.busy_reactor();
  auto ctrl = env.connect(Digest::data);  // the data digest is computed over the placed bytes
  auto qp = create_io_queue(*ctrl, *env.reactor, 32, 4096);
  REQUIRE(qp);
  auto* tqp = dynamic_cast<tcp::QueuePair*>(qp->get());
  REQUIRE(tqp);
  SyncIo io(**qp, *env.reactor, kNs4k, 4096);
  constexpr uint32_t kNlb = 32;  // 128 KiB
  auto data = stamped(4096, 64, kNlb, 9);
  REQUIRE(io.write(64, kNlb, data.data()));
  std::vector<uint8_t> back(data.size());
  REQUIRE(io.read(64, kNlb, back.data()));
  CHECK(all_stamped(back, 4096, 64, 9));
  // The target sends the 128 KiB as one PDU. At most one receive's worth (4 KiB) goes through the
  // buffer with the header, and the last bytes of the payload once fewer than 4 KiB are left
  // (kPlacedRecvMin): everything else is placed.
  if (busy)
    CHECK(tqp->placed_bytes() >= data.size() - 2 * 4096);
  else
    CHECK(tqp->placed_bytes() == 0);
  qp->reset();
}

TEST_CASE("while large reads come, a spinning reactor receives each header alone and places every payload behind it") {
  // Eight 128 KiB reads in flight, the default 256 KiB receive buffer. The target writes each
  // C2HData's header and payload in one go, so a receive of whatever the socket holds takes the
  // header with the start of the payload (then copied out of the buffer). Once a large C2HData
  // has been seen, a receive between payloads takes only the next header (and the data digest
  // before it), and the payload behind it is received in place: every payload after the first.
  const bool header_recv = GENERATE(true, false);
  INFO("header-sized receives: " << header_recv);
  Env env;
  env.busy_reactor();
  auto ctrl = env.connect(Digest::both);  // the digests sit between the payloads too
  auto qpr = create_io_queue(*ctrl, *env.reactor, 32);
  REQUIRE(qpr);
  auto* tqp = dynamic_cast<tcp::QueuePair*>(qpr->get());
  REQUIRE(tqp);
  constexpr uint32_t kNlb = 32;  // 128 KiB
  constexpr uint32_t kReads = 8;
  SyncIo io(**qpr, *env.reactor, kNs4k, 4096);
  for (uint32_t i = 0; i < kReads; ++i) {
    auto data = stamped(4096, i * kNlb, kNlb, 300 + i);
    REQUIRE(io.write(i * kNlb, kNlb, data.data()));
  }
  const uint64_t placed_before = tqp->placed_bytes();
  tcp::g_no_header_recv_for_test = !header_recv;
  std::vector<std::vector<uint8_t>> bufs(kReads, std::vector<uint8_t>(kNlb * 4096, 0));
  std::vector<IoRequest> reqs(kReads);
  Outcome out;
  for (uint32_t i = 0; i < kReads; ++i) {
    prep_read(reqs[i].cmd, kNs4k, i * kNlb, kNlb);
    reqs[i].data = bufs[i].data();
    reqs[i].data_len = kNlb * 4096;
    reqs[i].on_complete = &count_done;
    reqs[i].user = &out;
    REQUIRE(tqp->submit(reqs[i]) == 0);
  }
  const bool done = env.reactor->run_until([&] { return out.done == int{kReads}; }, 10000ms);
  tcp::g_no_header_recv_for_test = false;
  REQUIRE(done);
  CHECK(out.failures == 0);
  for (uint32_t i = 0; i < kReads; ++i) CHECK(all_stamped(bufs[i], 4096, i * kNlb, 300 + i));
  const uint64_t placed = tqp->placed_bytes() - placed_before;
  INFO("placed " << placed << " of " << kReads * kNlb * 4096 << " bytes, " << tqp->header_recvs()
                 << " header-sized receives");
  if (header_recv) {
    CHECK(placed >= (kReads - 1) * kNlb * 4096);
    CHECK(tqp->header_recvs() >= kReads - 1);
  } else {
    CHECK(placed < (kReads - 1) * kNlb * 4096);
    CHECK(tqp->header_recvs() == 0);
  }
  qpr->reset();
}

namespace {

// A stream of 128 KiB reads at depth 8: each completion reads its socket's ACK mode, then
// submits the next read, as a workload at depth does.
struct AckStream {
  tcp::QueuePair* qp = nullptr;
  std::vector<std::vector<uint8_t>> bufs;
  std::vector<IoRequest> reqs;
  uint32_t nlb = 0, extents = 0, submitted = 0, total = 0, done = 0, failures = 0, stamp_errors = 0,
           refused = 0;
  uint32_t interactive = 0;  // completions that found the socket holding its ACKs back
  uint64_t stamp_base = 0;

  void submit(uint32_t slot) noexcept {
    const uint32_t n = submitted++;
    std::fill(bufs[slot].begin(), bufs[slot].end(), uint8_t{0});
    prep_read(reqs[slot].cmd, kNs4k, (n % extents) * nlb, nlb);
    reqs[slot].data = bufs[slot].data();
    reqs[slot].data_len = nlb * 4096;
    reqs[slot].on_complete = &AckStream::on_done;
    reqs[slot].user = this;
    if (qp->submit(reqs[slot]) != 0) ++refused;
  }
  static void on_done(IoRequest& r, const Cqe& c) noexcept {
    auto* s = static_cast<AckStream*>(r.user);
    const auto slot = static_cast<uint32_t>(&r - s->reqs.data());
    // TCP_QUICKACK reads 0 while the kernel holds ACKs back for the next segment we send.
    int quick = 1;
    socklen_t len = sizeof quick;
    if (::getsockopt(s->qp->socket_fd(), IPPROTO_TCP, TCP_QUICKACK, &quick, &len) == 0 && quick == 0)
      ++s->interactive;
    ++s->done;
    if (!c.status().is_success()) ++s->failures;
    const uint64_t lba = r.cmd.cdw10 | (uint64_t{r.cmd.cdw11} << 32);
    if (!all_stamped(s->bufs[slot], 4096, lba, s->stamp_base + lba / s->nlb)) ++s->stamp_errors;
    if (s->submitted < s->total) s->submit(slot);
  }
};

}  // namespace

TEST_CASE("while large reads come, every payload received is acknowledged at once") {
  // Our capsules follow our receives closely, so the kernel takes the connection for an
  // interactive one and holds its ACKs back to ride on the next capsule; at depth that goes out
  // only once a whole payload is in, and the target's TCP waits for the ACKs in the meantime.
  // A receive of large payload bytes leaves that mode (TCP_QUICKACK) and sends what is held:
  // each completion then finds the socket acknowledging at once, whether the reactor spins
  // (direct receives) or sleeps (ring receives). The negative control shows the kernel's mode
  // without it: after our resubmissions, held ACKs.
  const bool spin = GENERATE(true, false);
  const bool quick = GENERATE(true, false);
  INFO("reactor spinning: " << spin << ", quick ACKs: " << quick);
  Env env;
  if (spin) env.busy_reactor();
  auto ctrl = env.connect(Digest::none);
  auto qpr = create_io_queue(*ctrl, *env.reactor, 32);
  REQUIRE(qpr);
  auto* tqp = dynamic_cast<tcp::QueuePair*>(qpr->get());
  REQUIRE(tqp);
  REQUIRE(tqp->direct_socket() == spin);
  AckStream st;
  st.qp = tqp;
  st.nlb = 32;  // 128 KiB
  st.extents = 16;
  st.total = 96;
  st.stamp_base = 700;
  SyncIo io(**qpr, *env.reactor, kNs4k, 4096);
  for (uint32_t i = 0; i < st.extents; ++i) {
    auto data = stamped(4096, i * st.nlb, st.nlb, st.stamp_base + i);
    REQUIRE(io.write(i * st.nlb, st.nlb, data.data()));
  }
  constexpr uint32_t kDepth = 8;
  st.bufs.assign(kDepth, std::vector<uint8_t>(st.nlb * 4096));
  st.reqs.resize(kDepth);
  const uint64_t acks_before = tqp->quick_acks();
  tcp::g_no_quick_ack_for_test = !quick;
  for (uint32_t i = 0; i < kDepth; ++i) st.submit(i);
  const bool done = env.reactor->run_until([&] { return st.done == st.total || st.refused; }, 20000ms);
  tcp::g_no_quick_ack_for_test = false;
  REQUIRE(st.refused == 0);
  REQUIRE(done);
  CHECK(st.failures == 0);
  CHECK(st.stamp_errors == 0);
  const uint64_t acks = tqp->quick_acks() - acks_before;
  INFO(acks << " quick ACKs, " << st.interactive << " of " << st.total
            << " completions found ACKs held back");
  if (quick) {
    // Direct: a receive per payload at least. Ring: each takes at most the 256 KiB buffer, so
    // at least one per two payloads.
    CHECK(acks >= (spin ? st.total - 1 : st.total / 2 - 1));
    // The first payload may come in with its header before any large one was seen.
    CHECK(st.interactive <= 1);
  } else {
    CHECK(acks == 0);
    CHECK(st.interactive > st.total / 2);
  }
  qpr->reset();
}

TEST_CASE("a queue pair reads its socket itself while the reactor spins, and arms a ring receive when it stops") {
  // An adaptive lane's spin windows (Reactor::set_spinning). The two ways never overlap: a ring
  // receive armed before the spin delivers first, none is armed while spinning, and the turn
  // after the spin ends arms one again, so a reactor that then sleeps still sees the answer.
  Env env;
  auto ctrl = env.connect();
  auto qpr = create_io_queue(*ctrl, *env.reactor, 16);
  REQUIRE(qpr);
  auto* tqp = dynamic_cast<tcp::QueuePair*>(qpr->get());
  REQUIRE(tqp);
  CHECK(tqp->inflight_ops() == 1);  // not spinning: its receive is on the ring
  CHECK_FALSE(tqp->direct_socket());
  auto round_trip = [&](uint64_t slba, uint64_t seq, bool spin) {
    std::vector<uint8_t> data = stamped(4096, slba, 2, seq), back(8192, 0);
    for (int op = 0; op < 2; ++op) {
      Outcome out;
      IoRequest r;
      if (op == 0) prep_write(r.cmd, kNs4k, slba, 2);
      else prep_read(r.cmd, kNs4k, slba, 2);
      r.data = op == 0 ? data.data() : back.data();
      r.data_len = 8192;
      r.on_complete = &count_done;
      r.user = &out;
      REQUIRE(tqp->submit(r) == 0);
      const uint64_t give_up = Reactor::clock_ns() + 10'000'000'000ull;
      while (out.done == 0 && Reactor::clock_ns() < give_up)
        env.reactor->poll(spin ? 0us : std::chrono::microseconds(100'000));
      REQUIRE(out.done == 1);
      CHECK(out.failures == 0);
    }
    CHECK(all_stamped(back, 4096, slba, seq));
  };
  env.reactor->set_spinning(true);
  CHECK(tqp->direct_socket());
  for (uint64_t i = 0; i < 8; ++i) round_trip(i * 2, 50 + i, true);
  CHECK(tqp->inflight_ops() == 0);  // the ring receive came back and was not armed again
  env.reactor->set_spinning(false);
  env.reactor->poll(0us);  // the turn before a wait
  CHECK(tqp->inflight_ops() == 1);
  // Asleep in the ring between turns (100 ms waits): the armed receive wakes it.
  for (uint64_t i = 0; i < 4; ++i) round_trip(100 + i * 2, 70 + i, false);
  CHECK(tqp->state() == QpState::live);
  qpr->reset();
}

TEST_CASE("Queues connect with SQ flow control off, and again without it where refused") {
  // Off: the target ends each read with a SUCCESS-flagged C2HData (no CapsuleResp). The admin
  // queue asks too (some targets decide it per controller from that Connect). A target that
  // cannot disable it refuses that Connect (Connect Invalid Parameters): the host connects the
  // queue again without asking, and the data is the same.
  const bool allow = GENERATE(true, false);
  INFO("target allows SQ flow control off: " << allow);
  Env env([&](TargetOptions& to) { to.allow_sq_flow_control_disable = allow; });
  auto ctrl = env.connect();
  auto qp = create_io_queue(*ctrl, *env.reactor, 16);
  REQUIRE(qp);
  SyncIo io(**qp, *env.reactor, kNs4k, 4096);
  for (uint32_t nlb : {1u, 8u, 64u}) {
    auto data = stamped(4096, 100, nlb, 40 + nlb);
    REQUIRE(io.write(100, nlb, data.data()));
    std::vector<uint8_t> back(data.size());
    REQUIRE(io.read(100, nlb, back.data()));
    CHECK(all_stamped(back, 4096, 100, 40 + nlb));
  }
  const auto st = env.target->stats(0);
  CHECK(st.io_queues_without_sq_flow_control == (allow ? 1u : 0u));
  CHECK(st.admin_queues_without_sq_flow_control == (allow ? 1u : 0u));
  qp->reset();
}

TEST_CASE("QD128 of asynchronous writes and reads on one reactor keeps every block intact") {
  Env env;
  const bool busy = GENERATE(false, true);
  INFO("busy reactor: " << busy);
  if (busy) env.busy_reactor();
  auto ctrl = env.connect(Digest::both);
  auto qpr = create_io_queue(*ctrl, *env.reactor, 256);
  REQUIRE(qpr);
  QueuePair& qp = **qpr;
  constexpr uint32_t kQd = 128;
  // Mixed sizes: in-capsule (4 KiB, 8 KiB) and R2T (16 KiB, 32 KiB), interleaved on one socket.
  const uint32_t blocks[] = {1, 2, 4, 8};
  std::vector<IoRequest> reqs(kQd);
  std::vector<std::vector<uint8_t>> bufs(kQd);
  std::vector<uint64_t> lbas(kQd);
  Outcome out;
  for (int round = 0; round < 3; ++round) {
    const uint64_t seq = 100 + static_cast<uint64_t>(round);
    out = Outcome{};
    for (uint32_t i = 0; i < kQd; ++i) {
      const uint32_t nlb = blocks[i % 4];
      lbas[i] = i * 8ull;
      bufs[i] = stamped(4096, lbas[i], nlb, seq);
      reqs[i] = IoRequest{};
      prep_write(reqs[i].cmd, kNs4k, lbas[i], nlb);
      reqs[i].data = bufs[i].data();
      reqs[i].data_len = nlb * 4096;
      reqs[i].on_complete = &count_done;
      reqs[i].user = &out;
      REQUIRE(qp.submit(reqs[i]) == 0);
    }
    CHECK(qp.outstanding() == kQd);
    REQUIRE(env.reactor->run_until([&] { return out.done == int{kQd}; }, 10000ms));
    CHECK(out.failures == 0);
    out = Outcome{};
    for (uint32_t i = 0; i < kQd; ++i) {
      std::fill(bufs[i].begin(), bufs[i].end(), 0);
      const uint32_t nlb = blocks[i % 4];
      reqs[i] = IoRequest{};
      prep_read(reqs[i].cmd, kNs4k, lbas[i], nlb);
      reqs[i].data = bufs[i].data();
      reqs[i].data_len = nlb * 4096;
      reqs[i].on_complete = &count_done;
      reqs[i].user = &out;
      REQUIRE(qp.submit(reqs[i]) == 0);
    }
    REQUIRE(env.reactor->run_until([&] { return out.done == int{kQd}; }, 10000ms));
    CHECK(out.failures == 0);
    for (uint32_t i = 0; i < kQd; ++i) REQUIRE(all_stamped(bufs[i], 4096, lbas[i], seq));
  }
  CHECK(qp.outstanding() == 0);
}

TEST_CASE("QD1024, the deepest queue allowed, keeps every block intact") {
  Env env;
  auto ctrl = env.connect();
  auto qpr = create_io_queue(*ctrl, *env.reactor, tcp::kMaxQueueDepth);
  REQUIRE(qpr);
  QueuePair& qp = **qpr;
  constexpr uint32_t kQd = tcp::kMaxQueueDepth;
  std::vector<IoRequest> reqs(kQd);
  std::vector<std::vector<uint8_t>> bufs(kQd);
  Outcome out;
  // Every slot outstanding at once: writes, then reads of the same blocks.
  for (uint32_t i = 0; i < kQd; ++i) {
    bufs[i] = stamped(4096, i * 4ull, 1, 7);
    reqs[i] = IoRequest{};
    prep_write(reqs[i].cmd, kNs4k, i * 4ull, 1);
    reqs[i].data = bufs[i].data();
    reqs[i].data_len = 4096;
    reqs[i].on_complete = &count_done;
    reqs[i].user = &out;
    REQUIRE(qp.submit(reqs[i]) == 0);
  }
  CHECK(qp.outstanding() == kQd);
  REQUIRE(env.reactor->run_until([&] { return out.done == int{kQd}; }, 20000ms));
  CHECK(out.failures == 0);
  out = Outcome{};
  for (uint32_t i = 0; i < kQd; ++i) {
    std::fill(bufs[i].begin(), bufs[i].end(), 0);
    reqs[i] = IoRequest{};
    prep_read(reqs[i].cmd, kNs4k, i * 4ull, 1);
    reqs[i].data = bufs[i].data();
    reqs[i].data_len = 4096;
    reqs[i].on_complete = &count_done;
    reqs[i].user = &out;
    REQUIRE(qp.submit(reqs[i]) == 0);
  }
  CHECK(qp.outstanding() == kQd);
  REQUIRE(env.reactor->run_until([&] { return out.done == int{kQd}; }, 20000ms));
  CHECK(out.failures == 0);
  for (uint32_t i = 0; i < kQd; ++i) REQUIRE(all_stamped(bufs[i], 4096, i * 4ull, 7));
  CHECK(qp.outstanding() == 0);
}

TEST_CASE("the ANA log and ANA change events") {
  Env env;
  auto ctrl = env.connect();
  auto log = ctrl->ana_log();
  REQUIRE(log);
  const AnaGroup* g = log->group(1);
  REQUIRE(g);
  CHECK(g->state == AnaState::optimized);
  CHECK(g->nsids == std::vector<uint32_t>{kNs4k, kNs512});

  std::atomic<uint32_t> event{0};
  ctrl->on_async_event([&](uint32_t dw0) { event = dw0; });
  env.target->set_ana_state(0, AnaState::non_optimized);
  for (int i = 0; i < 200 && event == 0; ++i) std::this_thread::sleep_for(5ms);
  CHECK(event.load() == 0x000C0302u);
  log = ctrl->ana_log();
  REQUIRE(log);
  REQUIRE(log->group(1));
  CHECK(log->group(1)->state == AnaState::non_optimized);
  // The request was re-armed: a second change is reported too.
  event = 0;
  env.target->set_ana_state(0, AnaState::optimized);
  for (int i = 0; i < 200 && event == 0; ++i) std::this_thread::sleep_for(5ms);
  CHECK(event.load() == 0x000C0302u);
}

TEST_CASE("the discovery controller lists the subsystem") {
  Env env;
  ConnectOptions o;
  o.subnqn = kDiscoveryNqn;
  o.kato_ms = 0;
  auto d = Controller::connect(*env.cp, env.addr, o);
  REQUIRE(d);
  auto log = (*d)->discovery_log();
  REQUIRE(log);
  bool found = false;
  for (const auto& e : log->entries)
    if (e.subnqn == kNqn && e.trsvcid == env.addr.trsvcid) found = true;
  CHECK(found);
}

TEST_CASE("keep-alive holds an idle connection with KATO 1000 ms") {
  Env env;
  ConnectOptions o = env.options();
  o.kato_ms = 1000;
  auto c = Controller::connect(*env.cp, env.addr, o);
  REQUIRE(c);
  std::atomic<bool> failed{false};
  (*c)->on_failure([&](std::error_code) { failed = true; });
  std::this_thread::sleep_for(2000ms);
  CHECK((*c)->is_live());
  CHECK_FALSE(failed.load());
  CHECK((*c)->identify_namespace(kNs4k));
}

TEST_CASE("by default the host asks for the shortest KATO the controller allows, and keeps it") {
  Env env;
  auto c = Controller::connect(*env.cp, env.addr, env.options());
  REQUIRE(c);
  CHECK((*c)->info().kas_100ms == 1);
  CHECK((*c)->kato_ms() == 100);  // one KAS unit, set after Identify
  std::atomic<bool> failed{false};
  (*c)->on_failure([&](std::error_code) { failed = true; });
  std::this_thread::sleep_for(1000ms);  // ten KATO periods of an idle admin queue
  CHECK((*c)->is_live());
  CHECK_FALSE(failed.load());
  // An explicit KATO is rounded up to the granularity the controller counts in.
  ConnectOptions o = env.options();
  o.kato_ms = 250;
  auto d = Controller::connect(*env.cp, env.addr, o);
  REQUIRE(d);
  CHECK((*d)->kato_ms() == 300);
}

TEST_CASE("connection errors: closed port, wrong NQN") {
  Env env;
  TransportAddress nowhere = env.addr;
  nowhere.trsvcid = std::to_string(closed_port());
  // Refused, not waited out: a connect that ran into its timeout fails with Errc::timeout.
  auto c = Controller::connect(*env.cp, nowhere, env.options());
  REQUIRE_FALSE(c);
  CHECK(c.error() == make_error_code(Errc::connection_refused));

  ConnectOptions wrong = env.options();
  wrong.subnqn = "nqn.2024-01.io.nvmeof:nobody";
  auto w = Controller::connect(*env.cp, env.addr, wrong);
  REQUIRE_FALSE(w);
  CHECK(w.error().category() == nvme_category());
}

TEST_CASE("reset: outstanding I/O completes with a host path error") {
  Env env;
  auto ctrl = env.connect();
  std::atomic<int> admin_failures{0};
  ctrl->on_failure([&](std::error_code) { ++admin_failures; });
  auto qpr = create_io_queue(*ctrl, *env.reactor, 64);
  REQUIRE(qpr);
  QueuePair& qp = **qpr;
  env.target->set_latency(0, 300ms);
  std::vector<std::vector<uint8_t>> bufs(16, std::vector<uint8_t>(4096));
  std::vector<IoRequest> reqs(16);
  Outcome out;
  for (size_t i = 0; i < reqs.size(); ++i) {
    prep_read(reqs[i].cmd, kNs4k, i, 1);
    reqs[i].data = bufs[i].data();
    reqs[i].data_len = 4096;
    reqs[i].on_complete = &count_done;
    reqs[i].user = &out;
    REQUIRE(qp.submit(reqs[i]) == 0);
  }
  for (int i = 0; i < 5; ++i) env.reactor->poll(std::chrono::milliseconds(2));
  env.target->inject(0, FaultKind::reset);
  REQUIRE(env.reactor->run_until([&] { return out.done == 16; }, 2000ms));
  // Completed by the reset, not answered: every one failed with a host path error (after the
  // 300 ms latency the target would have answered each with success).
  CHECK(out.failures == 16);
  CHECK(out.last == status::kHostPathError);
  CHECK((qp.error() == make_error_code(Errc::connection_reset) ||
         qp.error() == make_error_code(Errc::connection_closed)));
  CHECK(qp.state() == QpState::closed);
  for (int i = 0; i < 100 && admin_failures == 0; ++i) std::this_thread::sleep_for(5ms);
  CHECK(admin_failures == 1);
  CHECK_FALSE(ctrl->is_live());
  env.target->set_latency(0, 0us);
  qpr->reset();
  // A new controller connects fine after the reset.
  auto again = env.connect();
  CHECK(again->is_live());
}

TEST_CASE("blackhole: commands do not complete, the pair stays live, close() completes them") {
  Env env;
  // A keep-alive timeout far beyond the test: it is about the queue pair, not keep-alive.
  ConnectOptions o = env.options();
  o.kato_ms = 10000;
  auto c = Controller::connect(*env.cp, env.addr, o);
  REQUIRE(c);
  auto ctrl = *c;
  auto qpr = create_io_queue(*ctrl, *env.reactor, 32);
  REQUIRE(qpr);
  QueuePair& qp = **qpr;
  env.target->inject(0, FaultKind::blackhole);
  std::vector<uint8_t> rbuf(4096), wbuf = stamped(4096, 5, 4, 9);
  IoRequest rd, wr;
  Outcome out;
  prep_read(rd.cmd, kNs4k, 0, 1);
  rd.data = rbuf.data();
  rd.data_len = 4096;
  rd.on_complete = &count_done;
  rd.user = &out;
  prep_write(wr.cmd, kNs4k, 5, 4);  // 16 KiB: waits for an R2T that never comes
  wr.data = wbuf.data();
  wr.data_len = 16384;
  wr.on_complete = &count_done;
  wr.user = &out;
  REQUIRE(qp.submit(rd) == 0);
  REQUIRE(qp.submit(wr) == 0);
  CHECK_FALSE(env.reactor->run_until([&] { return out.done > 0; }, 200ms));
  CHECK(qp.state() == QpState::live);
  CHECK(qp.outstanding() == 2);
  qp.close();
  REQUIRE(env.reactor->run_until([&] { return out.done == 2; }, 2000ms));
  CHECK(out.failures == 2);
  CHECK(out.last == status::kHostPathError);
  CHECK(qp.state() == QpState::closed);
  env.target->clear_faults(0);
  qpr->reset();
}

TEST_CASE("a QP destroyed with commands outstanding completes them first") {
  Env env;
  auto ctrl = env.connect();
  auto qpr = create_io_queue(*ctrl, *env.reactor, 32);
  REQUIRE(qpr);
  env.target->set_latency(0, 200ms);
  std::vector<uint8_t> buf(4096);
  IoRequest rd;
  Outcome out;
  prep_read(rd.cmd, kNs4k, 0, 1);
  rd.data = buf.data();
  rd.data_len = 4096;
  rd.on_complete = &count_done;
  rd.user = &out;
  REQUIRE((*qpr)->submit(rd) == 0);
  env.reactor->poll();
  qpr->reset();
  CHECK(out.done == 1);
  CHECK(out.last == status::kHostPathError);
}

TEST_CASE("a small MAXH2CDATA splits every R2T into many H2CData PDUs across send batches") {
  Env env([](TargetOptions& to) { to.maxh2cdata = 4096; });
  auto ctrl = env.connect(Digest::both);
  auto qpr = create_io_queue(*ctrl, *env.reactor, 64);
  REQUIRE(qpr);
  QueuePair& qp = **qpr;
  constexpr uint32_t kCmds = 12, kNlb = 32;  // 12 x 128 KiB = 384 H2CData PDUs in flight
  std::vector<std::vector<uint8_t>> bufs(kCmds);
  std::vector<IoRequest> reqs(kCmds);
  Outcome out;
  for (uint32_t i = 0; i < kCmds; ++i) {
    bufs[i] = stamped(4096, i * kNlb, kNlb, 77);
    prep_write(reqs[i].cmd, kNs4k, i * kNlb, kNlb);
    reqs[i].data = bufs[i].data();
    reqs[i].data_len = kNlb * 4096;
    reqs[i].on_complete = &count_done;
    reqs[i].user = &out;
    REQUIRE(qp.submit(reqs[i]) == 0);
  }
  REQUIRE(env.reactor->run_until([&] { return out.done == int{kCmds}; }, 10000ms));
  CHECK(out.failures == 0);
  std::vector<uint8_t> back(size_t{kCmds} * kNlb * 4096);
  SyncIo io(qp, *env.reactor, kNs4k, 4096);
  REQUIRE(io.read(0, kCmds * kNlb, back.data()));
  CHECK(all_stamped(back, 4096, 0, 77));
}

TEST_CASE("the shared Fabrics Connect and its post-connect step against the target") {
  Env env;
  tcp::QpConfig cfg;
  cfg.trsvcid = env.addr.trsvcid;
  cfg.qid = 0;
  cfg.depth = 8;
  cfg.subnqn = kNqn;
  cfg.hostnqn = "nqn.2014-08.org.nvmexpress:uuid:fabric-test";
  cfg.connect_timeout = 5000ms;
  std::error_code recv_ec, send_ec;
  fabric::PostConnect seen;
  int calls = 0;
  cfg.authenticate = [&](fabric::CommandChannel& ch, const fabric::PostConnect& ctx) {
    ++calls;
    seen = ctx;
    // The target answers both commands on the set-up socket (it does not authenticate: a
    // status, not a transport error), and the queue stays usable.
    uint8_t buf[64];
    recv_ec = fabric::auth_receive(ch, buf, ctx.deadline).error();
    const uint8_t negotiate[8] = {0x10, 0x00};
    send_ec = fabric::auth_send(ch, negotiate, ctx.deadline).error();
    return Result<void>{};
  };
  auto qp = tcp::QueuePair::connect(*env.reactor, cfg);
  REQUIRE(qp);
  CHECK(calls == 1);
  CHECK(seen.qid == 0);
  CHECK(seen.subnqn == kNqn);
  CHECK(seen.hostnqn == cfg.hostnqn);
  CHECK(seen.cntlid == (*qp)->session().cntlid);
  CHECK_FALSE(seen.response.auth_required);
  REQUIRE(recv_ec);
  CHECK(recv_ec.category() == nvme_category());
  REQUIRE(send_ec);
  CHECK(send_ec.category() == nvme_category());
  // Identify Controller on the admin queue so set up.
  (*qp)->start();
  SyncIo admin(**qp, *env.reactor, 0, 4096, 5000ms);
  Sqe id;
  prep_identify(id, cns::kController, 0);
  std::vector<uint8_t> data(4096);
  REQUIRE(admin.execute(id, data.data(), 4096));
  auto info = parse_identify_controller(data);
  REQUIRE(info);
  CHECK(info.value().serial == "HOSTTEST42");
  CHECK(info.value().cntlid == (*qp)->session().cntlid);
  qp->reset();

  // An authenticator's error fails the connect with it.
  cfg.authenticate = [](fabric::CommandChannel&, const fabric::PostConnect&) {
    return make_error_code(Errc::unsupported);
  };
  auto refused = tcp::QueuePair::connect(*env.reactor, cfg);
  REQUIRE_FALSE(refused);
  CHECK(refused.error() == make_error_code(Errc::unsupported));
}

namespace {
struct CountingListener final : QueuePairListener {
  int calls = 0;
  std::error_code why;
  QpState seen = QpState::live;
  void on_queue_failed(QueuePair& qp, std::error_code w) noexcept override {
    ++calls;
    why = w;
    seen = qp.state();
  }
};
}  // namespace

TEST_CASE("a TCP pair fails the same way before and after start: the listener once, then closed") {
  Env env;
  tcp::QpConfig cfg;
  cfg.trsvcid = env.addr.trsvcid;
  cfg.qid = 0;
  cfg.depth = 8;
  cfg.subnqn = kNqn;
  cfg.hostnqn = "nqn.2014-08.org.nvmexpress:uuid:lifecycle-test";
  cfg.connect_timeout = 5000ms;
  for (const bool started : {false, true}) {
    INFO((started ? "after start()" : "before start()"));
    auto qp = tcp::QueuePair::connect(*env.reactor, cfg);
    REQUIRE(qp);
    CountingListener l;
    (*qp)->set_listener(&l);
    if (started) (*qp)->start();
    CHECK((*qp)->state() == (started ? QpState::live : QpState::connecting));
    (*qp)->close();
    CHECK(l.calls == 1);
    CHECK(l.why == errno_code(ECANCELED));
    CHECK(l.seen == QpState::failed);
    // Before start() nothing is in flight: closed at once; after it, once the receive is back.
    REQUIRE(env.reactor->run_until([&] { return (*qp)->state() == QpState::closed; }, 2000ms));
    CHECK((*qp)->inflight_ops() == 0);
    (*qp)->close();
    CHECK(l.calls == 1);
    CHECK((*qp)->error() == errno_code(ECANCELED));
    IoRequest r{};
    prep_keep_alive(r.cmd);
    CHECK((*qp)->submit(r) == -ENOTCONN);
    qp->reset();
    CHECK(l.calls == 1);
  }
}
