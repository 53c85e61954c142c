// The embedded target against hostile or careless peers, each case a bug or spec gap once found
// (by the fuzzers in tests/fuzz, or by another initiator): raw PDUs over loopback, then a fresh
// connection to prove the target still serves.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>

#include <cstddef>
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <thread>

#include "core/fabrics_command.hpp"
#include "../common/rig.hpp"
#include "nvmeof/target.hpp"
#include "target_client.hpp"

using namespace nvmeof;
using namespace nvmeof::test;
using namespace std::chrono_literals;

namespace {

constexpr char kNqn[] = "nqn.2024-01.io.nvmeof:target";
constexpr uint32_t kBlock = 4096;
constexpr uint64_t kBacklogBound = 8u << 20;
constexpr uint32_t kDefaultTempOverK = 343;

TargetOptions options() {
  return test::rig_target_options(1);
}

using test::Rig;

using test::wait_until;

// The target still takes a new association and moves data on it.
void still_serves(Rig& rig) {
  Client admin, io;
  REQUIRE(admin.open_admin(rig.port(0), kNqn));
  REQUIRE(io.open_io(rig.port(0), kNqn, admin.cntlid()));
  std::vector<uint8_t> a(kBlock, 0x6b);
  REQUIRE(io.write(1, 7, 1, a.data(), kBlock).status().is_success());
  CHECK(io.read(1, 7, 1, kBlock).data == a);
}

nvmf_connect_data connect_data(uint16_t cntlid, const char* hostnqn = kHostNqn) {
  nvmf_connect_data d{};
  std::memset(d.hostid, 0x5a, sizeof d.hostid);
  d.cntlid = cntlid;
  std::strncpy(d.subsysnqn, kNqn, sizeof d.subsysnqn - 1);
  std::strncpy(d.hostnqn, hostnqn, sizeof d.hostnqn - 1);
  return d;
}

// A Connect whose data the target must ask for (R2T); returns the R2T.
tcp::R2t connect_by_r2t(Client& c, uint16_t cid, uint16_t qid) {
  Sqe s;
  prep_connect(s, qid, 31, 0, 0);
  s.cid = cid;
  set_sgl(s, sgl::kTransportDataBlock, 0, sizeof(nvmf_connect_data));
  c.send_capsule(s);
  auto p = c.next(1000);
  REQUIRE(p);
  REQUIRE(p->type == tcp::PduType::r2t);
  auto r = p->as<tcp::R2t>();
  REQUIRE(r.cccid == cid);
  return r;
}

void send_h2c(Client& c, const tcp::R2t& r, const void* data, uint32_t len) {
  tcp::DataHeader h;
  const size_t hlen = tcp::fill_h2c_data(h, r.cccid, r.ttag, 0, len, true, tcp::Negotiated{});
  c.send_pdu(&h, hlen, data, len);
}

Reply connect_in_capsule(Client& c, uint16_t qid, uint16_t cntlid, const char* hostnqn = kHostNqn) {
  return c.connect_queue(kNqn, qid, cntlid, 0, 31, hostnqn);
}

}  // namespace

TEST_CASE("a Connect whose data comes late is still the only Connect", "[target][connect][regression]") {
  Rig rig(options());
  Client other;  // the controller the late I/O Connect names
  REQUIRE(other.open_admin(rig.port(0), kNqn));

  Client c;
  REQUIRE(c.connect(rig.port(0)));
  REQUIRE(c.ic());
  const tcp::R2t r2t = connect_by_r2t(c, 100, 1);
  // The sequence: an admin Connect in the capsule while the first one waits for its
  // data, then an admin command whose data goes by R2T.
  auto second = connect_in_capsule(c, 0, 0xffff);
  REQUIRE(second.ok);
  CHECK(second.status() == status::kCommandSequenceError);
  Sqe a;
  prep_command(a, 0x01, 0);
  a.cid = 101;
  set_sgl(a, sgl::kTransportDataBlock, 0, 4096);
  c.send_capsule(a);
  auto refused = c.wait_reply(101);
  REQUIRE(refused.ok);
  CHECK(refused.status() == status::kCommandSequenceError);
  CHECK(refused.r2ts == 0);

  // The first Connect's data: it executes, and the queue becomes I/O queue 1 of `other`.
  const auto d = connect_data(other.cntlid());
  send_h2c(c, r2t, &d, sizeof d);
  auto first = c.wait_reply(100);
  REQUIRE(first.ok);
  REQUIRE(first.status().is_success());
  CHECK(first.cqe.dw0 == other.cntlid());

  // The role is bound: another Connect is refused and the queue still does I/O.
  auto again = connect_in_capsule(c, 0, 0xffff);
  REQUIRE(again.ok);
  CHECK(again.status() == status::kCommandSequenceError);
  std::vector<uint8_t> blk(kBlock, 0x3c);
  REQUIRE(c.write(1, 3, 1, blk.data(), kBlock).status().is_success());
  CHECK(c.read(1, 3, 1, kBlock).data == blk);
  still_serves(rig);
}

TEST_CASE("the admin command's H2CData after a refused late Connect is a protocol error",
          "[target][connect][regression]") {
  Rig rig(options());
  Client c;
  REQUIRE(c.connect(rig.port(0)));
  REQUIRE(c.ic());
  const tcp::R2t r2t = connect_by_r2t(c, 100, 0);
  // Named CNTLID of nobody: the late admin Connect creates a controller of its own.
  const auto d = connect_data(0xffff);
  send_h2c(c, r2t, &d, sizeof d);
  auto first = c.wait_reply(100);
  REQUIRE(first.ok);
  REQUIRE(first.status().is_success());
  // A second admin controller on the same connection is refused however it comes.
  auto second = connect_in_capsule(c, 0, 0xffff);
  REQUIRE(second.ok);
  CHECK(second.status() == status::kCommandSequenceError);
  Sqe s;
  prep_connect(s, 0, 31, 0, 0);
  s.cid = 102;
  set_sgl(s, sgl::kTransportDataBlock, 0, sizeof d);
  c.send_capsule(s);
  auto third = c.wait_reply(102);
  REQUIRE(third.ok);
  CHECK(third.status() == status::kCommandSequenceError);
  CHECK(third.r2ts == 0);
  // H2CData for a transfer tag the target never handed out.
  tcp::R2t bogus = r2t;
  bogus.ttag = 7;
  bogus.cccid = 103;
  std::vector<uint8_t> junk(4096, 0xee);
  send_h2c(c, bogus, junk.data(), 4096);
  auto term = c.next(1000);
  REQUIRE(term);
  CHECK(term->type == tcp::PduType::c2h_term_req);
  CHECK(c.closed_within(2000));
  still_serves(rig);
}

TEST_CASE("commands before Connect are refused", "[target][connect][regression]") {
  Rig rig(options());
  Client c;
  REQUIRE(c.connect(rig.port(0)));
  REQUIRE(c.ic());
  auto id = c.identify(cns::kController);
  REQUIRE(id.ok);
  CHECK(id.status() == status::kCommandSequenceError);
  CHECK(id.data.empty());
  auto pg = c.property_get(prop::kCap, true);
  REQUIRE(pg.ok);
  CHECK(pg.status() == status::kCommandSequenceError);
  auto rd = c.read(1, 0, 1, kBlock);
  REQUIRE(rd.ok);
  CHECK(rd.status() == status::kCommandSequenceError);
  // Still waiting for its one Connect.
  auto r = connect_in_capsule(c, 0, 0xffff);
  REQUIRE(r.ok);
  CHECK(r.status().is_success());
}

TEST_CASE("a Connect with an empty host NQN is refused, naming the field", "[target][connect]") {
  Rig rig(options());
  Client c;
  REQUIRE(c.connect(rig.port(0)));
  REQUIRE(c.ic());
  auto r = connect_in_capsule(c, 0, 0xffff, "");
  REQUIRE(r.ok);
  CHECK(r.status() == status::kConnectInvalidParameters);
  CHECK(r.cqe.dw0 == ((1u << 16) | offsetof(nvmf_connect_data, hostnqn)));
}

TEST_CASE("a peer that sends and never reads: the output stays bounded", "[target][backlog][regression]") {
  Rig rig(options());
  Client c;
  // A small receive window, so the target's replies pile up on its side.
  c.set_receive_buffer(64 * 1024);
  REQUIRE(c.open_admin(rig.port(0), kNqn));
  const int fl = ::fcntl(c.fd(), F_GETFL);
  ::fcntl(c.fd(), F_SETFL, fl | O_NONBLOCK);
  // 2000 Get Log Page capsules asking 128 KiB each: 250 MiB of replies if all executed.
  std::vector<uint8_t> burst;
  for (uint16_t i = 0; i < 2000; ++i) {
    Sqe s;
    prep_get_log_page(s, 0x01, 0xffffffff, 128 * 1024, 0, 0);
    s.cid = static_cast<uint16_t>(1000 + i);
    set_sgl(s, sgl::kTransportDataBlock, 0, 128 * 1024);
    tcp::CapsuleCmd cap;
    const size_t hlen = tcp::fill_capsule_cmd(cap, s, 0, tcp::Negotiated{});
    const auto* b = reinterpret_cast<const uint8_t*>(&cap);
    burst.insert(burst.end(), b, b + hlen);
  }
  size_t sent = 0;
  const auto until = std::chrono::steady_clock::now() + 3s;
  while (sent < burst.size() && std::chrono::steady_clock::now() < until) {
    const ssize_t n = ::send(c.fd(), burst.data() + sent, burst.size() - sent, MSG_NOSIGNAL);
    if (n > 0)
      sent += static_cast<size_t>(n);
    else
      std::this_thread::sleep_for(1ms);
  }
  // Whatever the target could take, it took by now; its backlog is at its bound.
  REQUIRE(wait_until([&] { return rig.target->stats(0).max_output_backlog > kBacklogBound / 2; }));
  std::this_thread::sleep_for(300ms);
  const PortStats st = rig.target->stats(0);
  INFO("max backlog " << st.max_output_backlog << ", commands " << st.commands);
  CHECK(st.max_output_backlog <= kBacklogBound);
  CHECK(st.commands < 1000);
  still_serves(rig);
}

TEST_CASE("a peer that closes in the middle of a PDU", "[target][errors]") {
  Rig rig(options());
  SECTION("inside a capsule header") {
    Client c;
    REQUIRE(c.open_admin(rig.port(0), kNqn));
    Sqe s;
    prep_identify(s, cns::kController, 0);
    tcp::CapsuleCmd cap;
    const size_t hlen = tcp::fill_capsule_cmd(cap, s, 0, tcp::Negotiated{});
    c.send_raw(&cap, hlen / 2);
    c.close();
  }
  SECTION("inside H2CData of a write") {
    Client admin, io;
    REQUIRE(admin.open_admin(rig.port(0), kNqn));
    REQUIRE(io.open_io(rig.port(0), kNqn, admin.cntlid()));
    Sqe w;
    prep_write(w, 1, 0, 8);
    w.cid = 9;
    set_sgl(w, sgl::kTransportDataBlock, 0, 8 * kBlock);
    io.send_capsule(w);
    auto p = io.next(1000);
    REQUIRE(p);
    REQUIRE(p->type == tcp::PduType::r2t);
    const auto r = p->as<tcp::R2t>();
    std::vector<uint8_t> data(r.r2tl, 0x11);
    tcp::DataHeader h;
    const size_t hlen = tcp::fill_h2c_data(h, r.cccid, r.ttag, 0, r.r2tl, true, tcp::Negotiated{});
    std::vector<uint8_t> b(h.ch.plen);
    std::memcpy(b.data(), &h, hlen);
    std::memcpy(b.data() + h.ch.pdo, data.data(), r.r2tl);
    io.send_raw(b.data(), b.size() / 2);
    io.close();
    admin.close();
  }
  REQUIRE(wait_until([&] { return rig.target->stats(0).live_connections == 0; }));
  still_serves(rig);
}

TEST_CASE("Disconnect ends the queue; on the admin queue, the association", "[target][fabrics]") {
  Rig rig(options());
  Client admin, io;
  REQUIRE(admin.open_admin(rig.port(0), kNqn));
  REQUIRE(io.open_io(rig.port(0), kNqn, admin.cntlid()));
  Sqe d;
  prep_fabrics(d, fctype::kDisconnect);
  auto r = io.exec(d);
  REQUIRE(r.ok);
  CHECK(r.status().is_success());
  CHECK(io.closed_within(2000));
  // The controller lives on, and qid 1 is free again.
  CHECK(admin.property_get(prop::kCsts, false).status().is_success());
  Client io2;
  REQUIRE(io2.open_io(rig.port(0), kNqn, admin.cntlid()));
  auto ra = admin.exec(d);
  REQUIRE(ra.ok);
  CHECK(ra.status().is_success());
  CHECK(admin.closed_within(2000));
  CHECK(io2.closed_within(2000));
  still_serves(rig);
}

// What became of each command of a pipeline, read until the target ends the connection.
struct Outcome {
  std::map<uint16_t, NvmeStatus> answered;  // cid -> its completion's status
  std::vector<uint16_t> order;              // cids in the order their completions came
  bool ended = false;                       // the target closed the connection (FIN or RST)
};

// Reads every PDU until the connection ends. A target that leaves a command waiting on an open
// connection is caught by `hang_ms`, which only a failure waits out: a correct one ends it (an
// event) long before.
Outcome read_until_end(Client& c, int hang_ms = 10000) {
  Outcome o;
  for (;;) {
    auto p = c.next(hang_ms);
    if (!p) break;
    if (p->type == tcp::PduType::capsule_resp) {
      const Cqe cqe = p->as<tcp::CapsuleResp>().cqe;
      o.answered.emplace(cqe.cid, cqe.status());
      o.order.push_back(cqe.cid);
    } else if (p->type == tcp::PduType::c2h_data) {
      const auto d = p->as<tcp::DataHeader>();
      if (d.ch.flags & tcp::pdu_flag::kSuccess) {
        o.answered.emplace(d.cccid, status::kSuccess);
        o.order.push_back(d.cccid);
      }
    }
  }
  o.ended = c.closed();
  return o;
}

Sqe disconnect_cmd(uint16_t cid) {
  Sqe d;
  prep_fabrics(d, fctype::kDisconnect);
  d.cid = cid;
  return d;
}

Sqe with_cid(Sqe s, uint16_t cid, uint32_t rlen = 0) {
  s.cid = cid;
  set_sgl(s, sgl::kTransportDataBlock, 0, rlen);
  return s;
}

// Commands behind a Disconnect belong to a queue that no longer exists: none may execute (a
// success), and each is either answered with an error or ended with the connection.
void check_nothing_ran_after(const Outcome& o, uint16_t disconnect_cid, std::initializer_list<uint16_t> behind) {
  REQUIRE(o.answered.count(disconnect_cid));
  CHECK(o.answered.at(disconnect_cid).is_success());
  CHECK(o.ended);
  for (const uint16_t cid : behind) {
    INFO("cid " << cid);
    if (o.answered.count(cid)) CHECK_FALSE(o.answered.at(cid).is_success());
  }
}

TEST_CASE("commands pipelined behind an I/O queue's Disconnect: none left waiting",
          "[target][fabrics][disconnect][regression]") {
  Rig rig(options());
  Client admin, io;
  REQUIRE(admin.open_admin(rig.port(0), kNqn));
  REQUIRE(io.open_io(rig.port(0), kNqn, admin.cntlid()));
  // One send: the Disconnect, an opcode no command set defines, a read and a write.
  Sqe unknown, rd, wr;
  prep_command(unknown, 0x7e, 1);
  prep_read(rd, 1, 0, 1);
  prep_write_zeroes(wr, 1, 0, 1);
  std::vector<uint8_t> burst;
  for (const Sqe& s : {disconnect_cmd(0x40), with_cid(unknown, 0x41), with_cid(rd, 0x42, kBlock),
                       with_cid(wr, 0x43)}) {
    const auto b = io.capsule_bytes(s);
    burst.insert(burst.end(), b.begin(), b.end());
  }
  io.send_raw(burst.data(), burst.size());
  const Outcome o = read_until_end(io);
  check_nothing_ran_after(o, 0x40, {0x41, 0x42, 0x43});
  // The Disconnect's completion came before anything else, and the controller lives on.
  REQUIRE_FALSE(o.order.empty());
  CHECK(o.order.front() == 0x40);
  CHECK(admin.property_get(prop::kCsts, false).status().is_success());
  Client io2;
  REQUIRE(io2.open_io(rig.port(0), kNqn, admin.cntlid()));
  CHECK(io2.read(1, 0, 1, kBlock).status().is_success());
}

TEST_CASE("commands pipelined behind the admin queue's Disconnect, and on its I/O queue after it",
          "[target][fabrics][disconnect][regression]") {
  Rig rig(options());
  Client admin, io;
  REQUIRE(admin.open_admin(rig.port(0), kNqn));
  REQUIRE(io.open_io(rig.port(0), kNqn, admin.cntlid()));
  Sqe ka, id, gl;
  prep_keep_alive(ka);
  prep_identify(id, cns::kController, 0);
  prep_get_log_page(gl, 0x02, 0xffffffff, 512);
  std::vector<uint8_t> burst;
  for (const Sqe& s : {disconnect_cmd(0x50), with_cid(ka, 0x51), with_cid(id, 0x52, 4096),
                       with_cid(gl, 0x53, 512)}) {
    const auto b = admin.capsule_bytes(s);
    burst.insert(burst.end(), b.begin(), b.end());
  }
  admin.send_raw(burst.data(), burst.size());
  const Outcome o = read_until_end(admin);
  check_nothing_ran_after(o, 0x50, {0x51, 0x52, 0x53});
  // The association ended with it: a command on its I/O queue runs no more, and that queue's
  // connection ends too.
  Sqe rd;
  prep_read(rd, 1, 0, 1);
  const auto b = io.capsule_bytes(with_cid(rd, 0x60, kBlock));
  io.send_raw(b.data(), b.size());
  const Outcome oi = read_until_end(io);
  CHECK(oi.ended);
  if (oi.answered.count(0x60)) CHECK_FALSE(oi.answered.at(0x60).is_success());
  still_serves(rig);
}

// The replies queued ahead of a Disconnect, and its own, reach a host that reads only once it
// sent everything: 6 MiB of log pages behind a small receive window, more than the sockets hold.
TEST_CASE("the admin queue's Disconnect is answered behind output the host has not read yet",
          "[target][fabrics][disconnect][backlog][regression]") {
  TargetOptions opts = options();
  opts.mdts = 6;  // 256 KiB
  Rig rig(opts);
  Client admin;
  admin.set_receive_buffer(4096);
  REQUIRE(admin.open_admin(rig.port(0), kNqn));
  constexpr uint32_t kLen = 256 * 1024;
  constexpr uint16_t kLogs = 24;
  std::vector<uint8_t> burst;
  for (uint16_t i = 0; i < kLogs; ++i) {
    Sqe s;
    prep_get_log_page(s, 0x02, 0xffffffff, kLen);
    const auto b = admin.capsule_bytes(with_cid(s, static_cast<uint16_t>(0x100 + i), kLen));
    burst.insert(burst.end(), b.begin(), b.end());
  }
  const auto b = admin.capsule_bytes(disconnect_cmd(0x200));
  burst.insert(burst.end(), b.begin(), b.end());
  admin.send_raw(burst.data(), burst.size());
  const Outcome o = read_until_end(admin);
  // The case exists only if the replies did not all fit in the sockets (they do not with
  // Linux's default socket buffer limits).
  if (rig.target->stats(0).max_output_backlog == 0) WARN("the sockets took every reply: no backlog tested");
  for (uint16_t i = 0; i < kLogs; ++i) CHECK(o.answered.count(static_cast<uint16_t>(0x100 + i)));
  REQUIRE(o.answered.count(0x200));
  CHECK(o.answered.at(0x200).is_success());
  CHECK(o.ended);
  REQUIRE_FALSE(o.order.empty());
  CHECK(o.order.back() == 0x200);
}

// As above on an I/O queue, for a host that starts reading only a while after it sent the
// Disconnect: the target waits for it to take the replies, and only then ends the connection.
TEST_CASE("an I/O queue's Disconnect is answered to a host that reads late",
          "[target][fabrics][disconnect][backlog][regression]") {
  TargetOptions opts = options();
  opts.mdts = 6;
  Rig rig(opts);
  Client admin, io;
  REQUIRE(admin.open_admin(rig.port(0), kNqn));
  io.set_receive_buffer(4096);
  REQUIRE(io.open_io(rig.port(0), kNqn, admin.cntlid()));
  constexpr uint32_t kBlocks = 64;  // 256 KiB
  constexpr uint16_t kReads = 24;
  std::vector<uint8_t> burst;
  for (uint16_t i = 0; i < kReads; ++i) {
    Sqe s;
    prep_read(s, 1, uint64_t{i} * kBlocks, kBlocks);
    const auto b = io.capsule_bytes(with_cid(s, static_cast<uint16_t>(0x100 + i), kBlocks * kBlock));
    burst.insert(burst.end(), b.begin(), b.end());
  }
  const auto b = io.capsule_bytes(disconnect_cmd(0x200));
  burst.insert(burst.end(), b.begin(), b.end());
  io.send_raw(burst.data(), burst.size());
  // A host busy elsewhere: not a bound the target must meet, a pause it must outlast.
  std::this_thread::sleep_for(500ms);
  const Outcome o = read_until_end(io);
  if (rig.target->stats(0).max_output_backlog == 0) WARN("the sockets took every reply: no backlog tested");
  for (uint16_t i = 0; i < kReads; ++i) CHECK(o.answered.count(static_cast<uint16_t>(0x100 + i)));
  REQUIRE(o.answered.count(0x200));
  CHECK(o.answered.at(0x200).is_success());
  CHECK(o.ended);
  CHECK(admin.property_get(prop::kCsts, false).status().is_success());
}

TEST_CASE("Number of Queues once I/O queues exist: Command Sequence Error", "[target][features]") {
  Rig rig(options());
  Client admin, io;
  REQUIRE(admin.open_admin(rig.port(0), kNqn));
  Sqe f;
  prep_set_features(f, feature::kNumberOfQueues, (3u << 16) | 3u);
  auto before = admin.exec(f);
  REQUIRE(before.ok);
  CHECK(before.status().is_success());
  REQUIRE(io.open_io(rig.port(0), kNqn, admin.cntlid()));
  auto after = admin.exec(f);
  REQUIRE(after.ok);
  CHECK(after.status() == status::kCommandSequenceError);
}

TEST_CASE("Get/Set Features: arbitration, power, temperature, error recovery, write cache",
          "[target][features]") {
  Rig rig(options());
  Client admin;
  REQUIRE(admin.open_admin(rig.port(0), kNqn));
  auto get = [&](uint8_t fid, uint32_t cdw11 = 0, uint32_t sel = 0) {
    Sqe c;
    prep_get_features(c, fid);
    c.cdw10 |= sel << 8;
    c.cdw11 = cdw11;
    auto r = admin.exec(c);
    REQUIRE(r.ok);
    REQUIRE(r.status().is_success());
    return r.cqe.dw0;
  };
  auto set = [&](uint8_t fid, uint32_t cdw11) {
    Sqe c;
    prep_set_features(c, fid, cdw11);
    auto r = admin.exec(c);
    REQUIRE(r.ok);
    return r.status();
  };
  CHECK(get(feature::kArbitration) == 0);
  CHECK(get(feature::kPowerManagement) == 0);
  CHECK(get(feature::kTemperatureThreshold) == kDefaultTempOverK);
  CHECK(get(feature::kTemperatureThreshold, 1u << 20) == 0);
  CHECK(get(feature::kErrorRecovery) == 0);
  CHECK(get(feature::kVolatileWriteCache) == 1);

  CHECK(set(feature::kArbitration, 0x03020105).is_success());
  CHECK(get(feature::kArbitration) == 0x03020105);
  CHECK(set(feature::kPowerManagement, 1) == status::kInvalidField);  // one power state
  CHECK(set(feature::kTemperatureThreshold, 350).is_success());
  CHECK(set(feature::kTemperatureThreshold, (1u << 20) | 260).is_success());
  CHECK(get(feature::kTemperatureThreshold) == 350);
  CHECK(get(feature::kTemperatureThreshold, 1u << 20) == 260);
  CHECK(get(feature::kTemperatureThreshold, 0, 1) == kDefaultTempOverK);  // SEL default
  CHECK(set(feature::kTemperatureThreshold, 1u << 16) == status::kInvalidField);  // no sensor 1
  CHECK(set(feature::kErrorRecovery, 20).is_success());
  CHECK(get(feature::kErrorRecovery) == 20);
  CHECK(set(feature::kErrorRecovery, 1u << 16) == status::kInvalidField);  // no DULBE
  CHECK(set(feature::kVolatileWriteCache, 0).is_success());
  CHECK(get(feature::kVolatileWriteCache) == 0);
  CHECK((get(feature::kVolatileWriteCache, 0, 3) & 0x4) != 0);  // changeable
}

TEST_CASE("a file-backed namespace: write cache off writes through, Flush flushes", "[target][io]") {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("nvmeof-vwc-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  TargetOptions o = options();
  o.subsystems[0].namespaces[0].file = (dir / "ns1.img").string();
  {
    Rig rig(o);
    Client admin, io;
    REQUIRE(admin.open_admin(rig.port(0), kNqn));
    REQUIRE(io.open_io(rig.port(0), kNqn, admin.cntlid()));
    auto id = admin.identify(cns::kController);
    REQUIRE(id.ok);
    CHECK((id.data[offsetof(nvme_id_ctrl, vwc)] & 1) == 1);
    std::vector<uint8_t> a(4 * kBlock, 0x5e);
    REQUIRE(io.write(1, 0, 4, a.data(), 4 * kBlock).status().is_success());
    Sqe f;
    prep_flush(f, 1);
    CHECK(io.exec(f).status().is_success());
    prep_set_features(f, feature::kVolatileWriteCache, 0);
    REQUIRE(admin.exec(f).status().is_success());
    std::vector<uint8_t> b(4 * kBlock, 0xa1);
    REQUIRE(io.write(1, 4, 4, b.data(), 4 * kBlock).status().is_success());
    CHECK(io.read(1, 0, 4, 4 * kBlock).data == a);
    CHECK(io.read(1, 4, 4, 4 * kBlock).data == b);
  }
  // What was flushed or written through is in the file.
  std::vector<uint8_t> got(8 * kBlock);
  const int fd = ::open((dir / "ns1.img").c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  REQUIRE(::pread(fd, got.data(), got.size(), 0) == static_cast<ssize_t>(got.size()));
  ::close(fd);
  CHECK(std::all_of(got.begin(), got.begin() + 4 * kBlock, [](uint8_t v) { return v == 0x5e; }));
  CHECK(std::all_of(got.begin() + 4 * kBlock, got.end(), [](uint8_t v) { return v == 0xa1; }));
  std::filesystem::remove_all(dir);
}
