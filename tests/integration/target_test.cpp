// The embedded target alone, driven by a raw NVMe/TCP client (target_client.hpp) over loopback:
// the handshake, Fabrics, admin and I/O commands, discovery, protocol errors and every fault.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <thread>

#include "../common/rig.hpp"
#include "core/fabrics_command.hpp"
#include "core/identify.hpp"
#include "nvmeof/target.hpp"
#include "target_client.hpp"

using namespace nvmeof;
using namespace nvmeof::test;
using namespace std::chrono_literals;

namespace {

constexpr char kNqn[] = "nqn.2024-01.io.nvmeof:target";
constexpr uint32_t kBlock = 4096;

TargetOptions options(size_t nports) {
  // Free ports the kernel picks, so parallel test runs never collide.
  TargetOptions o = test::rig_target_options(nports);
  o.cqt_ms = 50;
  return o;
}

using test::Rig;

// Every block carries its LBA and a sequence number, so a misplaced or stale block shows.
std::vector<uint8_t> stamped(uint64_t slba, uint32_t nblocks, uint32_t seq, uint32_t bs = kBlock) {
  std::vector<uint8_t> b(size_t{nblocks} * bs);
  for (uint32_t i = 0; i < nblocks; ++i)
    for (uint32_t w = 0; w < bs / 8; ++w) {
      const uint64_t v = ((slba + i) << 32) ^ (uint64_t{seq} << 16) ^ w;
      std::memcpy(b.data() + size_t{i} * bs + w * 8, &v, 8);
    }
  return b;
}

std::vector<uint8_t> ns_bytes(Target& t, uint64_t offset, size_t len, const char* nqn = kNqn) {
  std::vector<uint8_t> b(len);
  REQUIRE(t.read_ns(nqn, 1, offset, b.data(), len));
  return b;
}

// An admin queue plus I/O queue 1 of one controller, through `port`.
struct Queues {
  Client admin;
  Client io;
  Queues(Rig& rig, size_t port, const std::string& nqn = kNqn, uint32_t kato_ms = 0) {
    REQUIRE(admin.open_admin(rig.port(port), nqn, kato_ms));
    REQUIRE(io.open_io(rig.port(port), nqn, admin.cntlid()));
  }
};

constexpr char kOtherHost[] = "nqn.2014-08.org.nvmexpress:uuid:target-test-other-host";
constexpr uint32_t kCcrDone = ccr::kImmediateResetSuccessful | ccr::kValidated | ccr::kControllerLevelReset;
constexpr uint32_t kCcrEvent = 0x001EF402;

ControllerInfo identify_controller(Client& admin) {
  auto r = admin.identify(cns::kController);
  REQUIRE(r.ok);
  auto info = parse_identify_controller(r.data);
  REQUIRE(info);
  return *info;
}

using test::wait_until;

// Sends a one-block in-capsule write with command id `cid` and returns without its answer.
void send_write(Client& io, uint16_t cid, uint64_t lba, const std::vector<uint8_t>& data) {
  Sqe w;
  prep_write(w, 1, lba, 1);
  w.cid = cid;
  set_sgl(w, sgl::kDataBlockOffset, 0, kBlock);
  io.send_capsule(w, data.data(), kBlock);
}

struct CcrLogEntry {
  uint16_t icid;
  uint8_t ciu;
  uint16_t acid;
  uint8_t ccrs;
  uint8_t ccrf;
};

std::vector<CcrLogEntry> ccr_log(Client& admin, uint8_t lsp = 0) {
  auto r = admin.get_log(log_page::kCrossControllerReset, 4096, 0, lsp);
  REQUIRE(r.ok);
  REQUIRE(r.status().is_success());
  uint16_t ne = 0;
  std::memcpy(&ne, r.data.data(), 2);
  std::vector<CcrLogEntry> out;
  for (uint16_t i = 0; i < ne; ++i) {
    const uint8_t* p = r.data.data() + ccr::kLogHeaderLen + i * ccr::kLogEntryLen;
    CcrLogEntry e{};
    std::memcpy(&e.icid, p, 2);
    e.ciu = p[2];
    std::memcpy(&e.acid, p + 4, 2);
    e.ccrs = p[6];
    e.ccrf = p[7];
    out.push_back(e);
  }
  return out;
}

}  // namespace

TEST_CASE("ICReq/ICResp, with and without digests", "[target][handshake]") {
  Rig rig(options(2));
  Client plain;
  REQUIRE(plain.connect(rig.port(0)));
  auto r = plain.ic();
  REQUIRE(r);
  CHECK(r->pfv == 0);
  CHECK(r->cpda == 0);
  CHECK(r->digest == 0);
  CHECK(r->maxh2cdata == 131072);

  // Digests both ways: every PDU the target sends is verified by the client's reader.
  Client admin;
  REQUIRE(admin.connect(rig.port(0)));
  auto d = admin.ic(true, true);
  REQUIRE(d);
  CHECK(d->digest == (tcp::ic_digest::kHeader | tcp::ic_digest::kData));
  auto c = admin.connect_queue(kNqn, 0);
  REQUIRE(c.ok);
  REQUIRE(c.status().is_success());
  REQUIRE(admin.identify(cns::kController).ok);
  Client io;
  REQUIRE(io.connect(rig.port(0)));
  REQUIRE(io.ic(true, true));
  REQUIRE(io.connect_queue(kNqn, 1, static_cast<uint16_t>(c.cqe.dw0)).status().is_success());
  const auto small = stamped(3, 1, 1), big = stamped(10, 32, 1);
  REQUIRE(io.write(1, 3, 1, small.data(), kBlock).status().is_success());
  auto w = io.write(1, 10, 32, big.data(), 32 * kBlock);
  REQUIRE(w.ok);
  CHECK(w.r2ts == 1);
  CHECK(io.read(1, 3, 1, kBlock).data == small);
  CHECK(io.read(1, 10, 32, 32 * kBlock).data == big);
  CHECK(io.reader_error == Errc::ok);
}

TEST_CASE("admin queue: Connect, properties, Identify Controller", "[target][admin]") {
  Rig rig(options(2));
  Client a;
  REQUIRE(a.connect(rig.port(0)));
  REQUIRE(a.ic());
  // Nothing but Connect before Connect.
  CHECK(a.property_get(prop::kCap, true).status() == status::kCommandSequenceError);
  auto c = a.connect_queue(kNqn, 0);
  REQUIRE(c.status().is_success());
  const auto cntlid = static_cast<uint16_t>(c.cqe.dw0);
  CHECK(cntlid >= 1);

  auto cap = a.property_get(prop::kCap, true);
  REQUIRE(cap.status().is_success());
  const uint64_t capv = cap.cqe.dw0 | (uint64_t{cap.cqe.dw1} << 32);
  CHECK((capv & 0xffff) == 1023);
  CHECK(((capv >> 24) & 0xff) > 0);
  CHECK(((capv >> 37) & 1) == 1);
  CHECK(a.property_get(prop::kVs, false).cqe.dw0 == 0x00020000);
  CHECK((a.property_get(prop::kCsts, false).cqe.dw0 & 1) == 0);
  REQUIRE(a.property_set(prop::kCc, 1 | (6u << 16) | (4u << 20)).status().is_success());
  CHECK((a.property_get(prop::kCsts, false).cqe.dw0 & 1) == 1);

  auto id = a.identify(cns::kController);
  REQUIRE(id.ok);
  auto info = parse_identify_controller(id.data);
  REQUIRE(info);
  CHECK(info->cntlid == cntlid);
  CHECK(info->subnqn == kNqn);
  CHECK(info->ioccsz_bytes == 64 + 8192);
  CHECK(info->iorcsz_bytes == 16);
  CHECK(info->mdts == 5);
  CHECK(info->cqt_ms == 50);
  CHECK(info->cmic == 0x0b);
  CHECK(info->anacap == 0x1f);
  CHECK(info->nanagrpid == 2);
  CHECK(info->anatt_s == 2);
  CHECK(info->kas_100ms == 1);
  CHECK(info->cntrltype == 1);
  CHECK(info->nn == 1);
  CHECK(info->ver == 0x00020000);
  CHECK((info->oncs & 0x0c) == 0x0c);
  CHECK((info->sgls & 0x3) == 1);
  CHECK((info->sgls & (1u << 20)) != 0);
  CHECK((info->sgls & (1u << 2)) == 0);
  CHECK((info->vwc & 1) == 1);
  CHECK(info->serial == "NVMEOF0001");

  // A second association gets its own controller id.
  Client b;
  REQUIRE(b.open_admin(rig.port(1), kNqn));
  CHECK(b.cntlid() != cntlid);

  // Shutdown completes at once.
  REQUIRE(a.property_set(prop::kCc, 1 | (1u << 14)).status().is_success());
  CHECK(((a.property_get(prop::kCsts, false).cqe.dw0 >> 2) & 3) == 2);

  // Features.
  Sqe f;
  prep_set_features(f, feature::kNumberOfQueues, (3u << 16) | 3u);
  auto nq = a.exec(f);
  CHECK(nq.cqe.dw0 == ((3u << 16) | 3u));
  prep_set_features(f, feature::kKeepAliveTimer, 5000);
  CHECK(a.exec(f).status().is_success());
  prep_get_features(f, feature::kKeepAliveTimer);
  CHECK(a.exec(f).cqe.dw0 == 5000);
  prep_get_features(f, 0x42);
  CHECK(a.exec(f).status() == status::kInvalidField);
  Sqe bogus;
  prep_command(bogus, 0x55, 0);
  CHECK(a.exec(bogus).status() == status::kInvalidOpcode);
}

TEST_CASE("Identify Namespace and descriptors agree across ports", "[target][admin]") {
  Rig rig(options(2));
  Client a0, a1;
  REQUIRE(a0.open_admin(rig.port(0), kNqn));
  REQUIRE(a1.open_admin(rig.port(1), kNqn));
  NamespaceInfo ns[2];
  Client* cs[2] = {&a0, &a1};
  for (int i = 0; i < 2; ++i) {
    auto r = cs[i]->identify(cns::kNamespace, 1);
    REQUIRE(r.ok);
    auto p = parse_identify_namespace(r.data, 1);
    REQUIRE(p);
    ns[i] = *p;
    auto d = cs[i]->identify(cns::kNamespaceDescriptors, 1);
    REQUIRE(d.ok);
    REQUIRE(parse_ns_descriptors(d.data, ns[i].id));
  }
  CHECK(ns[0].size_blocks == (16u << 20) / kBlock);
  CHECK(ns[0].block_size == kBlock);
  CHECK(ns[0].anagrpid == 1);
  CHECK(ns[1].anagrpid == 2);
  CHECK(ns[0].id.has_nguid);
  CHECK(ns[0].id.has_uuid);
  CHECK(ns[0].id.same_namespace_as(ns[1].id));
  auto list = a0.identify(cns::kActiveNamespaceList, 0);
  REQUIRE(list.ok);
  uint32_t first = 0, second = 0;
  std::memcpy(&first, list.data.data(), 4);
  std::memcpy(&second, list.data.data() + 4, 4);
  CHECK(first == 1);
  CHECK(second == 0);
  CHECK(a0.identify(0x06).status().is_success());  // NVM command set controller data (Linux reads it)
  CHECK(a0.identify(0x10).status() == status::kInvalidField);
  CHECK(a0.identify(cns::kNamespace, 7).status() == status::kInvalidNamespace);
  CHECK(a0.identify(cns::kNamespaceDescriptors, 7).status() == status::kInvalidNamespace);
}

TEST_CASE("ANA log, ANA change notices and path statuses", "[target][ana]") {
  auto o = options(2);
  o.ports[1].ana_state = AnaState::non_optimized;
  Rig rig(o);
  Queues q0(rig, 0), q1(rig, 1);

  auto log = q1.admin.get_log(log_page::kAna, 4096);
  REQUIRE(log.ok);
  auto ana = parse_ana_log(log.data);
  REQUIRE(ana);
  REQUIRE(ana->groups.size() == 2);
  REQUIRE(ana->group(2));
  CHECK(ana->group(2)->state == AnaState::non_optimized);
  CHECK(ana->group(2)->nsids == std::vector<uint32_t>{1});
  CHECK(ana->group(1)->state == AnaState::optimized);
  CHECK(ana->group(1)->nsids.empty());  // a namespace is in one group per controller
  const uint64_t chg0 = ana->chgcnt;

  // Outstanding AERs on both controllers; only port 1's hears about port 1.
  Sqe aer;
  prep_async_event_request(aer);
  aer.cid = 900;
  set_sgl(aer, sgl::kTransportDataBlock, 0, 0);
  q0.admin.send_capsule(aer);
  q1.admin.send_capsule(aer);
  CHECK_FALSE(q1.admin.next(50));
  rig.target->set_ana_state(1, AnaState::inaccessible);
  auto ev = q1.admin.wait_reply(900, nullptr, 1000);
  REQUIRE(ev.ok);
  CHECK(ev.cqe.dw0 == 0x000C0302);
  CHECK_FALSE(q0.admin.next(50));
  CHECK(rig.target->ana_state(1) == AnaState::inaccessible);

  ana = parse_ana_log(q1.admin.get_log(log_page::kAna, 4096).data);
  REQUIRE(ana);
  CHECK(ana->group(2)->state == AnaState::inaccessible);
  CHECK(ana->chgcnt > chg0);

  CHECK(q1.io.read(1, 0, 1, kBlock).status() == status::kAnaInaccessible);
  rig.target->set_ana_state(1, AnaState::persistent_loss);
  CHECK(q1.io.read(1, 0, 1, kBlock).status() == status::kAnaPersistentLoss);
  rig.target->set_ana_state(1, AnaState::change);
  const auto data = stamped(0, 1, 1);
  CHECK(q1.io.write(1, 0, 1, data.data(), kBlock).status() == status::kAnaTransition);
  rig.target->set_ana_state(1, AnaState::non_optimized);
  CHECK(q1.io.write(1, 0, 1, data.data(), kBlock).status().is_success());
  CHECK(q0.io.read(1, 0, 1, kBlock).data == data);
  // An event raised with no AER outstanding is reported by the next AER at once.
  q1.admin.send_capsule(aer);
  REQUIRE(q1.admin.wait_reply(900, nullptr, 1000).cqe.dw0 == 0x000C0302);
}

TEST_CASE("I/O queue Connect rules", "[target][connect]") {
  Rig rig(options(2));
  Client admin;
  REQUIRE(admin.open_admin(rig.port(0), kNqn));
  auto try_io = [&](const std::string& nqn, uint16_t qid, uint16_t cntlid, uint16_t sqsize = 31,
                    const char* host = kHostNqn) {
    Client c;
    REQUIRE(c.connect(rig.port(0)));
    REQUIRE(c.ic());
    return c.connect_queue(nqn, qid, cntlid, 0, sqsize, host);
  };
  auto r = try_io(kNqn, 1, 0x7777);
  CHECK(r.status() == status::kConnectInvalidParameters);
  CHECK(r.cqe.dw0 == ((1u << 16) | 16u));
  r = try_io("nqn.2024-01.io.nvmeof:nope", 1, admin.cntlid());
  CHECK(r.status() == status::kConnectInvalidParameters);
  CHECK(r.cqe.dw0 == ((1u << 16) | 256u));
  r = try_io(kNqn, 1, admin.cntlid(), 31, "nqn.2014-08.org.nvmexpress:uuid:someone-else");
  CHECK(r.status() == status::kConnectInvalidParameters);
  CHECK(r.cqe.dw0 == ((1u << 16) | 512u));
  CHECK(try_io(kNqn, 1, admin.cntlid(), 0).status() == status::kConnectInvalidParameters);
  CHECK(try_io(kNqn, 1, admin.cntlid(), 4096).status() == status::kConnectInvalidParameters);
  CHECK(try_io(kNqn, 65, admin.cntlid()).status() == status::kConnectInvalidParameters);

  Client io;
  REQUIRE(io.open_io(rig.port(0), kNqn, admin.cntlid(), 1));
  CHECK(try_io(kNqn, 1, admin.cntlid()).status().code() == 0x181);  // qid 1 is taken

  Client bad_fmt;
  REQUIRE(bad_fmt.connect(rig.port(0)));
  REQUIRE(bad_fmt.ic());
  Sqe c;
  prep_connect(c, 0, 31, 0);
  c.cdw10 |= 1;  // RECFMT 1
  nvmf_connect_data d{};
  std::strcpy(d.subsysnqn, kNqn);
  CHECK(bad_fmt.exec(c, &d, sizeof d).status().code() == 0x180);

  // The admin queue's end is the association's end.
  admin.close();
  CHECK(io.closed_within(1000));
}

TEST_CASE("writes and reads move the right bytes", "[target][io]") {
  auto o = options(1);
  o.maxh2cdata = 32768;
  TargetSubsystem small;
  small.nqn = "nqn.2024-01.io.nvmeof:small-blocks";
  char path[] = "/tmp/nvmeof-target-test-XXXXXX";
  const int tmp = ::mkstemp(path);
  REQUIRE(tmp >= 0);
  ::close(tmp);
  small.namespaces[0].file = path;
  small.namespaces[0].block_size = 512;
  small.namespaces[0].size_bytes = 1 << 20;
  o.subsystems.push_back(small);
  Rig rig(o);
  Queues q(rig, 0);

  // In-capsule.
  const auto a = stamped(5, 2, 1);
  auto w = q.io.write(1, 5, 2, a.data(), 2 * kBlock);
  REQUIRE(w.status().is_success());
  CHECK(w.r2ts == 0);
  CHECK(q.io.read(1, 5, 2, 2 * kBlock).data == a);
  CHECK(ns_bytes(*rig.target, 5 * kBlock, 2 * kBlock) == a);

  // Through R2T: 128 KiB in four 32 KiB R2Ts.
  const auto b = stamped(100, 32, 2);
  w = q.io.write(1, 100, 32, b.data(), 32 * kBlock);
  REQUIRE(w.status().is_success());
  CHECK(w.r2ts == 4);
  CHECK(q.io.read(1, 100, 32, 32 * kBlock).data == b);
  CHECK(ns_bytes(*rig.target, 100 * kBlock, 32 * kBlock) == b);

  // What a test writes directly, the host reads.
  const auto c = stamped(4000, 1, 3);
  REQUIRE(rig.target->write_ns(kNqn, 1, 4000ull * kBlock, c.data(), kBlock));
  CHECK(q.io.read(1, 4000, 1, kBlock).data == c);

  // HPDA: data starts on the boundary the host asked for.
  Client aligned;
  REQUIRE(aligned.connect(rig.port(0)));
  REQUIRE(aligned.ic(false, true, 7));
  REQUIRE(aligned.connect_queue(kNqn, 2, q.admin.cntlid()).status().is_success());
  auto rd = aligned.read(1, 100, 1, kBlock);
  REQUIRE(rd.ok);
  CHECK(rd.c2h_pdo % 32 == 0);
  CHECK(std::equal(rd.data.begin(), rd.data.end(), b.begin()));

  // Reads end with a CapsuleResp carrying SQHD, unless the host disabled SQ flow control.
  auto plain = q.io.read(1, 100, 1, kBlock);
  CHECK_FALSE(plain.success_flag);
  CHECK(plain.cqe.sq_head != 0xffff);
  Client noflow;
  REQUIRE(noflow.connect(rig.port(0)));
  REQUIRE(noflow.ic());
  REQUIRE(noflow.connect_queue(kNqn, 3, q.admin.cntlid(), 0, 31, kHostNqn, 0x04).status().is_success());
  auto fast = noflow.read(1, 100, 2, 2 * kBlock);
  CHECK(fast.success_flag);
  CHECK(std::equal(fast.data.begin(), fast.data.end(), b.begin()));
  CHECK(noflow.write(1, 0, 1, b.data(), kBlock).cqe.sq_head == 0xffff);

  // A file-backed namespace with 512-byte blocks.
  Queues s(rig, 0, small.nqn);
  const auto e = stamped(7, 16, 4, 512);
  REQUIRE(s.io.write(1, 7, 16, e.data(), 16 * 512).status().is_success());
  CHECK(s.io.read(1, 7, 16, 16 * 512).data == e);
  CHECK(ns_bytes(*rig.target, 7 * 512, 16 * 512, small.nqn.c_str()) == e);
  rig.target.reset();
  ::unlink(path);
}

TEST_CASE("C2hSuccess::always: every read ends with a SUCCESS-flagged C2HData", "[target][io]") {
  auto o = options(1);
  o.c2h_success = C2hSuccess::always;
  Rig rig(o);
  Queues q(rig, 0);
  const auto a = stamped(8, 4, 1);
  REQUIRE(q.io.write(1, 8, 4, a.data(), 4 * kBlock).status().is_success());
  auto r = q.io.read(1, 8, 4, 4 * kBlock);
  CHECK(r.success_flag);
  CHECK(r.data == a);
  auto id = q.admin.identify(cns::kController);
  CHECK(id.success_flag);
  CHECK(parse_identify_controller(id.data));
}

TEST_CASE("Write Zeroes, Dataset Management and Flush", "[target][io]") {
  Rig rig(options(1));
  Queues q(rig, 0);
  const auto a = stamped(0, 16, 1);
  REQUIRE(q.io.write(1, 0, 16, a.data(), 16 * kBlock).status().is_success());
  Sqe c;
  prep_write_zeroes(c, 1, 2, 2);
  REQUIRE(q.io.exec(c).status().is_success());
  DsmRange r{0, 3, 8};
  prep_dsm(c, 1, 1, kDsmDeallocate);
  REQUIRE(q.io.exec(c, &r, sizeof r).status().is_success());
  prep_flush(c, 1);
  REQUIRE(q.io.exec(c).status().is_success());
  prep_flush(c, 0xffffffff);
  REQUIRE(q.io.exec(c).status().is_success());
  auto got = q.io.read(1, 0, 16, 16 * kBlock).data;
  REQUIRE(got.size() == 16 * kBlock);
  for (uint32_t lba = 0; lba < 16; ++lba) {
    const bool zeroed = (lba >= 2 && lba < 4) || (lba >= 8 && lba < 11);
    const std::vector<uint8_t> blk(got.begin() + lba * kBlock, got.begin() + (lba + 1) * kBlock);
    const std::vector<uint8_t> want = zeroed ? std::vector<uint8_t>(kBlock, 0)
                                             : std::vector<uint8_t>(a.begin() + lba * kBlock,
                                                                    a.begin() + (lba + 1) * kBlock);
    INFO("lba " << lba);
    CHECK(blk == want);
  }
  DsmRange out{0, 8, 4095};
  prep_dsm(c, 1, 1, kDsmDeallocate);
  CHECK(q.io.exec(c, &out, sizeof out).status() == status::kLbaOutOfRange);
}

TEST_CASE("I/O command errors", "[target][io]") {
  Rig rig(options(1));
  Queues q(rig, 0);
  CHECK(q.io.read(1, 4095, 2, 2 * kBlock).status() == status::kLbaOutOfRange);
  CHECK(q.io.read(1, ~0ull - 1, 2, 2 * kBlock).status() == status::kLbaOutOfRange);
  CHECK(q.io.read(2, 0, 1, kBlock).status() == status::kInvalidNamespace);
  CHECK(q.io.read(1, 0, 64, 64 * kBlock).status() == status::kInvalidField);  // > MDTS
  Sqe c;
  prep_command(c, 0x05, 1);  // Compare: not supported
  CHECK(q.io.exec(c).status() == status::kInvalidOpcode);
  prep_read(c, 1, 0, 1);
  c.cid = 4242;
  set_sgl(c, 0x30, 0, kBlock);  // a descriptor type TCP does not use
  q.io.send_capsule(c);
  CHECK(q.io.wait_reply(4242).status() == status::kSglInvalidType);
  prep_read(c, 1, 0, 2);
  c.cid = 4243;
  set_sgl(c, sgl::kTransportDataBlock, 0, kBlock);  // shorter than 2 blocks
  q.io.send_capsule(c);
  CHECK(q.io.wait_reply(4243).status().code() == 0x0f);
  // Admin commands do not belong on an I/O queue.
  prep_identify(c, cns::kController, 0);
  CHECK(q.io.exec(c, nullptr, 0, 4096).status() == status::kInvalidOpcode);
  // The queue still works.
  const auto a = stamped(1, 1, 1);
  CHECK(q.io.write(1, 1, 1, a.data(), kBlock).status().is_success());
}

TEST_CASE("malformed PDUs get a C2HTermReq and a closed connection", "[target][errors]") {
  Rig rig(options(1));
  auto expect_term = [](Client& c, tcp::Fes fes, uint32_t fei) {
    auto p = c.next(1000);
    REQUIRE(p);
    REQUIRE(p->type == tcp::PduType::c2h_term_req);
    auto t = p->as<tcp::TermReq>();
    CHECK(t.fes == static_cast<uint16_t>(fes));
    uint32_t got_fei;
    std::memcpy(&got_fei, t.fei, 4);
    CHECK(got_fei == fei);
    CHECK(c.closed_within(1000));
  };

  {  // unknown PDU type
    Client c;
    REQUIRE(c.connect(rig.port(0)));
    REQUIRE(c.ic());
    uint8_t junk[24] = {0x0a, 0, 24, 0, 24, 0, 0, 0};
    c.send_raw(junk, sizeof junk);
    expect_term(c, tcp::Fes::invalid_header_field, 0);
  }
  {  // bad header digest
    Client c;
    REQUIRE(c.connect(rig.port(0)));
    REQUIRE(c.ic(true, false));
    Sqe s;
    prep_keep_alive(s);
    tcp::CapsuleCmd cmd;
    tcp::fill_capsule_cmd(cmd, s, 0, tcp::Negotiated{true, false, 0});
    uint8_t b[76];
    std::memcpy(b, &cmd, 72);
    const uint32_t bad = tcp::header_digest(b, 72) ^ 1;
    std::memcpy(b + 72, &bad, 4);
    c.send_raw(b, sizeof b);
    expect_term(c, tcp::Fes::header_digest_error, 0);
  }
  {  // a second ICReq
    Client c;
    REQUIRE(c.connect(rig.port(0)));
    REQUIRE(c.ic());
    tcp::IcReq r;
    tcp::fill_ic_req(r, 0, false, false, 0);
    c.send_raw(&r, sizeof r);
    expect_term(c, tcp::Fes::sequence_error, 0);
  }
  {  // H2CData for a TTAG never handed out
    Client admin, c;
    REQUIRE(admin.open_admin(rig.port(0), kNqn));
    REQUIRE(c.open_io(rig.port(0), kNqn, admin.cntlid()));
    std::vector<uint8_t> data(512, 7);
    tcp::DataHeader h;
    const size_t hlen = tcp::fill_h2c_data(h, 1, 77, 0, 512, true, tcp::Negotiated{});
    c.send_pdu(&h, hlen, data.data(), 512);
    expect_term(c, tcp::Fes::invalid_header_field, 10);
  }
  {  // PLEN shorter than the header
    Client c;
    REQUIRE(c.connect(rig.port(0)));
    REQUIRE(c.ic());
    uint8_t b[8] = {0x04, 0, 72, 0, 40, 0, 0, 0};
    c.send_raw(b, sizeof b);
    expect_term(c, tcp::Fes::invalid_header_field, 4);
  }
  CHECK(rig.target->stats(0).errors == 5);

  {  // a data digest error fails only its command
    Client admin, c;
    REQUIRE(admin.open_admin(rig.port(0), kNqn));
    REQUIRE(c.connect(rig.port(0)));
    REQUIRE(c.ic(false, true));
    REQUIRE(c.connect_queue(kNqn, 1, admin.cntlid()).status().is_success());
    const auto data = stamped(9, 1, 1);
    Sqe s;
    prep_write(s, 1, 9, 1);
    s.cid = 500;
    set_sgl(s, sgl::kDataBlockOffset, 0, kBlock);
    tcp::CapsuleCmd cmd;
    tcp::fill_capsule_cmd(cmd, s, kBlock, tcp::Negotiated{false, true, 0});
    std::vector<uint8_t> b(cmd.ch.plen);
    std::memcpy(b.data(), &cmd, 72);
    std::memcpy(b.data() + cmd.ch.pdo, data.data(), kBlock);
    const uint32_t bad = detail::crc32c(data.data(), kBlock) ^ 1;
    std::memcpy(b.data() + cmd.ch.pdo + kBlock, &bad, 4);
    c.send_raw(b.data(), b.size());
    CHECK(c.wait_reply(500).status().code() == 0x22);
    CHECK(ns_bytes(*rig.target, 9 * kBlock, kBlock) != data);
    CHECK(c.write(1, 9, 1, data.data(), kBlock).status().is_success());
    CHECK(ns_bytes(*rig.target, 9 * kBlock, kBlock) == data);
  }
  // The target keeps serving.
  Client ok;
  REQUIRE(ok.open_admin(rig.port(0), kNqn));
  CHECK(ok.identify(cns::kController).ok);
}

TEST_CASE("discovery lists every port x subsystem", "[target][discovery]") {
  auto o = options(2);
  TargetSubsystem second;
  second.nqn = "nqn.2024-01.io.nvmeof:second";
  second.namespaces[0].size_bytes = 1 << 20;
  o.subsystems.push_back(second);
  Rig rig(o);
  Client d;
  REQUIRE(d.open_admin(rig.port(1), kDiscoveryNqn));
  auto id = parse_identify_controller(d.identify(cns::kController).data);
  REQUIRE(id);
  CHECK(id->cntrltype == 2);
  CHECK(id->subnqn == kDiscoveryNqn);
  CHECK(d.identify(cns::kNamespace, 1).status() == status::kInvalidField);
  CHECK(d.get_log(log_page::kAna, 4096).status().code() == 0x109);

  auto hdr = d.get_log(log_page::kDiscovery, 1024);
  REQUIRE(hdr.ok);
  uint64_t numrec = 0;
  std::memcpy(&numrec, hdr.data.data() + 8, 8);
  REQUIRE(numrec == 4);
  auto full = d.get_log(log_page::kDiscovery, 1024 * 5);
  auto log = parse_discovery_log(full.data);
  REQUIRE(log);
  REQUIRE(log->entries.size() == 4);
  for (size_t i = 0; i < 4; ++i) {
    const auto& e = log->entries[i];
    const size_t port = i / 2;
    CHECK(e.trtype == 3);
    CHECK(e.adrfam == 1);
    CHECK(e.subtype == 2);
    CHECK(e.treq == 0);
    CHECK(e.portid == port + 1);
    CHECK(e.cntlid == 0xffff);
    CHECK(e.asqsz == 32);
    CHECK(e.traddr == "127.0.0.1");
    CHECK(e.trsvcid == std::to_string(rig.port(port)));
    CHECK(e.subnqn == (i % 2 ? second.nqn : std::string(kNqn)));
  }
  // Offset reads return the same bytes.
  auto third = d.get_log(log_page::kDiscovery, 1024, 3 * 1024);
  REQUIRE(third.ok);
  CHECK(std::equal(third.data.begin(), third.data.end(), full.data.begin() + 3 * 1024));
  CHECK(d.get_log(log_page::kDiscovery, 1024, 64 * 1024).status() == status::kInvalidField);
  // No I/O queues on a discovery controller.
  Client io;
  REQUIRE(io.connect(rig.port(1)));
  REQUIRE(io.ic());
  CHECK(io.connect_queue(kDiscoveryNqn, 1, d.cntlid()).status() == status::kConnectInvalidParameters);
}

TEST_CASE("faults: failing commands, latency, refuse, reset, blackhole", "[target][faults]") {
  Rig rig(options(2));
  Queues q(rig, 0);
  const auto a = stamped(1, 1, 1);
  REQUIRE(q.io.write(1, 1, 1, a.data(), kBlock).status().is_success());

  const NvmeStatus fail = NvmeStatus::make(Sct::media, 0x81);
  rig.target->fail_commands(0, fail);
  CHECK(q.io.read(1, 1, 1, kBlock).status() == fail);
  CHECK(q.admin.get_log(log_page::kAna, 4096).status().is_success());
  rig.target->fail_commands(0, std::nullopt);
  CHECK(q.io.read(1, 1, 1, kBlock).data == a);

  rig.target->set_latency(0, 30ms);
  auto t0 = std::chrono::steady_clock::now();
  CHECK(q.io.read(1, 1, 1, kBlock).data == a);
  CHECK(std::chrono::steady_clock::now() - t0 >= 30ms);
  rig.target->set_latency(0, 0us);

  rig.target->inject(1, FaultKind::refuse);
  Client refused;
  REQUIRE(refused.connect(rig.port(1)));
  CHECK(refused.closed_within(500));
  rig.target->clear_faults(1);
  Client back;
  REQUIRE(back.open_admin(rig.port(1), kNqn));

  rig.target->inject(0, FaultKind::blackhole);
  Sqe r;
  prep_read(r, 1, 1, 1);
  r.cid = 321;
  set_sgl(r, sgl::kTransportDataBlock, 0, kBlock);
  q.io.send_capsule(r);
  CHECK_FALSE(q.io.next(200));
  rig.target->clear_faults(0);
  // Healed: the command received during the blackhole is answered now.
  auto late = q.io.wait_reply(321);
  REQUIRE(late.ok);
  CHECK(late.data == a);

  rig.target->inject(0, FaultKind::reset);
  CHECK(q.io.closed_within(500));
  CHECK(q.admin.closed_within(500));
  // New connections are still accepted after a reset.
  Queues again(rig, 0);
  CHECK(again.io.read(1, 1, 1, kBlock).data == a);

  // The blackholed target still notices a host that closes.
  rig.target->inject(0, FaultKind::blackhole);
  const uint64_t live = rig.target->stats(0).live_connections;
  again.io.close();
  for (int i = 0; i < 100 && rig.target->stats(0).live_connections >= live; ++i) std::this_thread::sleep_for(5ms);
  CHECK(rig.target->stats(0).live_connections == live - 1);
  rig.target->clear_faults(0);
}

TEST_CASE("held writes honour the Command Quiesce Time", "[target][faults][cqt]") {
  Rig rig(options(1));  // CQT 50 ms
  const std::string nqn = kNqn;
  auto send_write_and_close = [&](uint64_t lba, const std::vector<uint8_t>& data) {
    Queues q(rig, 0);
    Sqe w;
    prep_write(w, 1, lba, 1);
    w.cid = 77;
    set_sgl(w, sgl::kDataBlockOffset, 0, kBlock);
    q.io.send_capsule(w, data.data(), kBlock);
    std::this_thread::sleep_for(2ms);  // let the target receive it before the teardown
  };

  {  // connection alive: completes after the delay
    rig.target->delay_writes(0, 20ms);
    Queues q(rig, 0);
    const auto d = stamped(10, 1, 1);
    const auto t0 = std::chrono::steady_clock::now();
    REQUIRE(q.io.write(1, 10, 1, d.data(), kBlock).status().is_success());
    CHECK(std::chrono::steady_clock::now() - t0 >= 20ms);
    CHECK(ns_bytes(*rig.target, 10 * kBlock, kBlock) == d);
  }
  const uint64_t executed = rig.target->stats(0).delayed_writes_executed;
  {  // connection torn down, delay ends within CQT: the write still lands
    rig.target->delay_writes(0, 20ms);
    const auto d = stamped(11, 1, 1);
    send_write_and_close(11, d);
    std::this_thread::sleep_for(80ms);
    CHECK(ns_bytes(*rig.target, 11 * kBlock, kBlock) == d);
    CHECK(rig.target->stats(0).delayed_writes_executed == executed + 1);
  }
  {  // delay ends after CQT: dropped
    rig.target->delay_writes(0, 120ms);
    const auto d = stamped(12, 1, 1);
    send_write_and_close(12, d);
    std::this_thread::sleep_for(180ms);
    CHECK(ns_bytes(*rig.target, 12 * kBlock, kBlock) == std::vector<uint8_t>(kBlock, 0));
    CHECK(rig.target->stats(0).delayed_writes_dropped == 1);
  }
  {  // QuiesceMode::ignore: the ghost lands anyway
    rig.target->delay_writes(0, 120ms, QuiesceMode::ignore);
    const auto d = stamped(13, 1, 1);
    send_write_and_close(13, d);
    std::this_thread::sleep_for(180ms);
    CHECK(ns_bytes(*rig.target, 13 * kBlock, kBlock) == d);
    CHECK(rig.target->stats(0).delayed_writes_executed == executed + 2);
  }
  rig.target->clear_faults(0);
}

TEST_CASE("keep-alive timeout ends the association", "[target][keepalive]") {
  Rig rig(options(1));
  {  // kept alive
    Client a, io;
    REQUIRE(a.open_admin(rig.port(0), kNqn, 200));
    REQUIRE(io.open_io(rig.port(0), kNqn, a.cntlid()));
    for (int i = 0; i < 8; ++i) {
      std::this_thread::sleep_for(50ms);
      Sqe k;
      prep_keep_alive(k);
      REQUIRE(a.exec(k).status().is_success());
    }
  }
  {  // silent
    Client a, io;
    REQUIRE(a.open_admin(rig.port(0), kNqn, 200));
    REQUIRE(io.open_io(rig.port(0), kNqn, a.cntlid()));
    const auto t0 = std::chrono::steady_clock::now();
    CHECK(a.closed_within(1000));
    CHECK(std::chrono::steady_clock::now() - t0 >= 150ms);
    CHECK(io.closed_within(500));
  }
}

TEST_CASE("stop() closes every connection and is idempotent", "[target]") {
  Rig rig(options(1));
  Queues q(rig, 0);
  rig.target->stop();
  CHECK(q.admin.closed_within(500));
  CHECK(q.io.closed_within(500));
  rig.target->stop();
  TargetOptions bad = options(1);
  bad.subsystems[0].namespaces[0].block_size = 1024;
  CHECK(Target::start(bad).error() == make_error_code(Errc::invalid_argument));
}

TEST_CASE("Identify reports CIU, CIRN and CCRL; KATO rounds up to KAS", "[target][admin][ccr]") {
  SECTION("CCR enabled") {
    Rig rig(options(2));
    Client a, b;
    REQUIRE(a.open_admin(rig.port(0), kNqn, 250));
    REQUIRE(b.open_admin(rig.port(1), kNqn));
    const ControllerInfo ia = identify_controller(a), ib = identify_controller(b);
    CHECK(ia.ciu != 0);
    CHECK(ia.cirn != ib.cirn);
    CHECK(ia.ccrl == kCcrLimit);
    CHECK(ia.cqt_ms == 50);
    CHECK(ia.traffic_based_keep_alive());
    // A new instance (CSTS.RDY asserted again): another CIU and CIRN.
    REQUIRE(a.property_set(prop::kCc, 0).status().is_success());
    REQUIRE(a.property_set(prop::kCc, 1 | (6u << 16) | (4u << 20)).status().is_success());
    const ControllerInfo again = identify_controller(a);
    CHECK(again.ciu != 0);
    CHECK(again.ciu != ia.ciu);
    CHECK(again.cirn != ia.cirn);

    Sqe f;
    prep_get_features(f, feature::kKeepAliveTimer);
    CHECK(a.exec(f).cqe.dw0 == 300);  // Connect asked 250
    prep_set_features(f, feature::kKeepAliveTimer, 150);
    REQUIRE(a.exec(f).status().is_success());
    prep_get_features(f, feature::kKeepAliveTimer);
    CHECK(a.exec(f).cqe.dw0 == 200);

    // Discovery controllers take no part in CCR.
    Client d;
    REQUIRE(d.open_admin(rig.port(0), kDiscoveryNqn));
    const ControllerInfo id = identify_controller(d);
    CHECK(id.ciu == 0);
    CHECK(id.cirn == 0);
    CHECK(id.ccrl == 0);
    CHECK(d.ccr(a.cntlid(), again.ciu, again.cirn).status() == status::kInvalidOpcode);
  }
  SECTION("CCR disabled, CQT not reported") {
    auto o = options(2);
    o.ccr = CcrSupport::disabled;
    o.report_cqt = false;
    Rig rig(o);
    Client a, b;
    REQUIRE(a.open_admin(rig.port(0), kNqn));
    REQUIRE(b.open_admin(rig.port(1), kNqn));
    const ControllerInfo ia = identify_controller(a);
    CHECK(ia.ccrl == 0);
    CHECK(ia.cqt_ms == 0);
    CHECK(ia.ciu != 0);
    CHECK(b.ccr(a.cntlid(), ia.ciu, ia.cirn).status() == status::kInvalidOpcode);
    CHECK(b.get_log(log_page::kCrossControllerReset, 16).status().code() == 0x109);
    CHECK(a.identify(cns::kController).ok);  // A untouched
  }
}

TEST_CASE("CCR through controller B resets controller A", "[target][ccr]") {
  Rig rig(options(2));  // CQT 50 ms
  Queues qa(rig, 0);
  Client b;
  REQUIRE(b.open_admin(rig.port(1), kNqn));
  const ControllerInfo ia = identify_controller(qa.admin);

  // A held write (delay_writes honour) and a latency-delayed one, both received before the CCR.
  rig.target->delay_writes(0, 300ms);
  send_write(qa.io, 71, 20, stamped(20, 1, 1));
  REQUIRE(wait_until([&] { return rig.target->stats(0).writes == 1; }));
  rig.target->delay_writes(0, 0ms);
  rig.target->set_latency(0, 150ms);
  send_write(qa.io, 72, 21, stamped(21, 1, 1));
  REQUIRE(wait_until([&] { return rig.target->stats(0).writes == 2; }));

  const auto t0 = std::chrono::steady_clock::now();
  auto r = b.ccr(qa.admin.cntlid(), ia.ciu, ia.cirn);
  const auto took = std::chrono::steady_clock::now() - t0;
  REQUIRE(r.ok);
  REQUIRE(r.status().is_success());
  CHECK(r.cqe.dw0 == kCcrDone);
  std::printf("synchronous CCR took %lld us\n",
              static_cast<long long>(std::chrono::duration_cast<std::chrono::microseconds>(took).count()));
  // The held write was dropped before the CCR completed.
  CHECK(rig.target->stats(0).delayed_writes_dropped == 1);
  CHECK(rig.target->stats(1).ccr_received == 1);
  CHECK(rig.target->stats(1).ccr_completed == 1);
  CHECK(qa.admin.closed_within(1000));
  CHECK(qa.io.closed_within(1000));

  // A is gone: no queue joins it, a second CCR names nothing.
  Client late;
  REQUIRE(late.connect(rig.port(0)));
  REQUIRE(late.ic());
  CHECK(late.connect_queue(kNqn, 2, qa.admin.cntlid()).status() == status::kConnectInvalidParameters);
  CHECK(b.ccr(qa.admin.cntlid(), ia.ciu, ia.cirn).status() == status::kInvalidField);
  CHECK(ccr_log(b).empty());  // a reset that finished at once leaves no log entry

  // Neither write ever executes, not even once their delays are over.
  std::this_thread::sleep_for(350ms);
  rig.target->clear_faults(0);
  CHECK(ns_bytes(*rig.target, 20 * kBlock, 2 * kBlock) == std::vector<uint8_t>(2 * kBlock, 0));
  CHECK(rig.target->stats(0).delayed_writes_executed == 0);
  CHECK(rig.target->stats(0).keep_alive_expiries == 0);
}

TEST_CASE("CCR of a controller behind a partition", "[target][ccr][partition]") {
  Rig rig(options(2));
  Queues qa(rig, 0);
  Client b;
  REQUIRE(b.open_admin(rig.port(1), kNqn));
  const ControllerInfo ia = identify_controller(qa.admin);
  rig.target->delay_writes(0, 300ms);
  send_write(qa.io, 71, 30, stamped(30, 1, 1));
  REQUIRE(wait_until([&] { return rig.target->stats(0).writes == 1; }));
  rig.target->inject(0, FaultKind::partition);

  auto r = b.ccr(qa.admin.cntlid(), ia.ciu, ia.cirn);
  REQUIRE(r.status().is_success());
  CHECK(r.cqe.dw0 == kCcrDone);
  CHECK(rig.target->stats(0).delayed_writes_dropped == 1);
  // No FIN crosses the partition: A's sockets close only once it heals.
  CHECK_FALSE(qa.admin.closed_within(100));
  CHECK(rig.target->stats(0).live_connections == 2);
  rig.target->clear_faults(0);
  CHECK(qa.admin.closed_within(1000));
  CHECK(qa.io.closed_within(1000));
  CHECK(ns_bytes(*rig.target, 30 * kBlock, kBlock) == std::vector<uint8_t>(kBlock, 0));
}

TEST_CASE("CCR rejects what names no other live controller of the same host", "[target][ccr]") {
  Rig rig(options(2));
  Queues qa(rig, 0);
  Client b, other;
  REQUIRE(b.open_admin(rig.port(1), kNqn));
  REQUIRE(other.open_admin(rig.port(1), kNqn, 0, kOtherHost));
  const ControllerInfo ia = identify_controller(qa.admin);
  const uint16_t a = qa.admin.cntlid();
  CHECK(b.ccr(a, static_cast<uint8_t>(ia.ciu + 1), ia.cirn).status() == status::kInvalidField);
  CHECK(b.ccr(a, ia.ciu, ia.cirn ^ 1).status() == status::kInvalidField);
  CHECK(b.ccr(0x7777, ia.ciu, ia.cirn).status() == status::kInvalidField);
  const ControllerInfo ib = identify_controller(b);
  CHECK(b.ccr(b.cntlid(), ib.ciu, ib.cirn).status() == status::kInvalidField);  // itself
  CHECK(other.ccr(a, ia.ciu, ia.cirn).status() == status::kInvalidField);  // another host's
  CHECK(rig.target->stats(1).ccr_received == 5);
  CHECK(rig.target->stats(1).ccr_completed == 0);
  // A still serves.
  const auto d = stamped(5, 1, 1);
  CHECK(qa.io.write(1, 5, 1, d.data(), kBlock).status().is_success());
  CHECK(qa.io.read(1, 5, 1, kBlock).data == d);
}

TEST_CASE("CCR limit and a reset already in progress", "[target][ccr]") {
  auto o = options(2);
  o.ccr_async = true;
  o.ccr_async_delay = 60s;  // every reset stays in progress for the whole test
  Rig rig(o);
  Client b;
  REQUIRE(b.open_admin(rig.port(1), kNqn));
  std::vector<std::unique_ptr<Client>> others;
  std::vector<ControllerInfo> ids;
  for (int i = 0; i < kCcrLimit + 1; ++i) {
    others.push_back(std::make_unique<Client>());
    REQUIRE(others.back()->open_admin(rig.port(0), kNqn));
    ids.push_back(identify_controller(*others.back()));
  }
  for (int i = 0; i < kCcrLimit; ++i) {
    auto r = b.ccr(ids[i].cntlid, ids[i].ciu, ids[i].cirn);
    REQUIRE(r.status().is_success());
    CHECK(r.cqe.dw0 == 0);  // in progress
  }
  const NvmeStatus in_progress = NvmeStatus::make(Sct::command_specific, ccr::kScInProgress, true);
  const NvmeStatus limit = NvmeStatus::make(Sct::command_specific, ccr::kScLimitExceeded, true);
  CHECK(b.ccr(ids[0].cntlid, ids[0].ciu, ids[0].cirn).status() == in_progress);
  CHECK(b.ccr(ids[kCcrLimit].cntlid, ids[kCcrLimit].ciu, ids[kCcrLimit].cirn).status() == limit);
  auto log = ccr_log(b, 1);  // RMC keeps entries still in progress
  REQUIRE(log.size() == kCcrLimit);
  for (int i = 0; i < kCcrLimit; ++i) {
    CHECK(log[i].icid == ids[i].cntlid);
    CHECK(log[i].ciu == ids[i].ciu);
    CHECK(log[i].acid == b.cntlid());
    CHECK(log[i].ccrs == ccr::kStatusInProgress);
    CHECK(log[i].ccrf == 0);
  }
  CHECK(ccr_log(b).size() == kCcrLimit);
  // The impacted controllers were torn down at once; only the report waits.
  for (int i = 0; i < kCcrLimit; ++i) CHECK(others[i]->closed_within(1000));
}

TEST_CASE("asynchronous CCR: DW0 0, then the event and the log entry", "[target][ccr][aen]") {
  auto o = options(2);
  o.ccr_async = true;
  o.ccr_async_delay = 20ms;
  Rig rig(o);
  Queues qa(rig, 0);
  Client b;
  REQUIRE(b.open_admin(rig.port(1), kNqn));
  const ControllerInfo ia = identify_controller(qa.admin);
  b.send_aer(900);
  auto r = b.ccr(qa.admin.cntlid(), ia.ciu, ia.cirn);
  REQUIRE(r.status().is_success());
  CHECK(r.cqe.dw0 == 0);
  auto ev = b.wait_reply(900, nullptr, 2000);
  REQUIRE(ev.ok);
  CHECK(ev.cqe.dw0 == kCcrEvent);
  CHECK(rig.target->stats(1).ccr_completed == 1);
  CHECK(qa.admin.closed_within(1000));
  CHECK(qa.io.closed_within(1000));

  auto log = ccr_log(b);
  REQUIRE(log.size() == 1);
  CHECK(log[0].icid == qa.admin.cntlid());
  CHECK(log[0].ciu == ia.ciu);
  CHECK(log[0].acid == b.cntlid());
  CHECK(log[0].ccrs == ccr::kStatusSuccess);
  CHECK(log[0].ccrf == 0x03);  // V | CLRI
  CHECK(ccr_log(b, 1).size() == 1);  // RMC returns it, then removes it
  CHECK(ccr_log(b).empty());

  // A notice raised while no AER is outstanding is kept for the next one.
  Queues qc(rig, 0);
  const ControllerInfo ic = identify_controller(qc.admin);
  REQUIRE(b.ccr(qc.admin.cntlid(), ic.ciu, ic.cirn).status().is_success());
  REQUIRE(wait_until([&] { return rig.target->stats(1).ccr_completed == 2; }));
  b.send_aer(901);
  auto ev2 = b.wait_reply(901, nullptr, 2000);
  REQUIRE(ev2.ok);
  CHECK(ev2.cqe.dw0 == kCcrEvent);
}

TEST_CASE("keep-alive ends a blackholed controller at KATO", "[target][keepalive][faults]") {
  Rig rig(options(1));
  Queues q(rig, 0, kNqn, 300);
  const auto t0 = std::chrono::steady_clock::now();
  Sqe k;
  prep_keep_alive(k);
  REQUIRE(q.admin.exec(k).status().is_success());  // the timer restarts after t0
  const PortStats before = rig.target->stats(0);
  rig.target->inject(0, FaultKind::blackhole);
  REQUIRE(q.admin.closed_within(3000));
  // Not before KATO: the timer never fires early, however idle or loaded the machine.
  CHECK(std::chrono::steady_clock::now() - t0 >= 300ms);
  CHECK(q.io.closed_within(1000));
  // Ended by its keep-alive expiry, and the connections slept until that deadline rather than
  // looking for it: the blackhole's own wake-up of each queue, the expiry and the teardown make
  // a handful of wake-ups (a check every millisecond would make some 300). Load only delays them.
  const PortStats after = rig.target->stats(0);
  INFO("wake-ups " << after.poll_wakeups - before.poll_wakeups << ", passes " << after.poll_passes - before.poll_passes);
  CHECK(after.keep_alive_expiries - before.keep_alive_expiries == 1);
  CHECK(after.poll_wakeups - before.poll_wakeups <= 20);
  rig.target->clear_faults(0);
}

TEST_CASE("partition: the host's close goes unnoticed, keep-alive ends the controller",
          "[target][keepalive][faults][partition]") {
  Rig rig(options(1));  // CQT 50 ms
  Queues gone(rig, 0, kNqn, 300);  // its host closes its sockets behind the partition
  Queues kept(rig, 0, kNqn, 300);  // its host keeps them
  rig.target->delay_writes(0, 1000ms);
  const auto data = stamped(40, 1, 1);
  const auto t0 = std::chrono::steady_clock::now();
  send_write(gone.io, 81, 40, data);  // the last command of either controller: after t0
  send_write(kept.io, 82, 41, data);
  REQUIRE(wait_until([&] { return rig.target->stats(0).writes == 2; }));
  rig.target->inject(0, FaultKind::partition);
  gone.admin.close();
  gone.io.close();

  // Both ended by keep-alive expiry (nothing else could end them behind the partition), and
  // not before KATO: the timer never fires early.
  REQUIRE(wait_until([&] { return rig.target->stats(0).keep_alive_expiries == 2; }));
  const auto ended = std::chrono::steady_clock::now() - t0;
  std::printf("partitioned controllers ended %lld ms after their last command (KATO 300 ms)\n",
              static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(ended).count()));
  CHECK(ended >= 300ms);
  CHECK(rig.target->stats(0).live_connections == 4);  // nothing noticed the host's close
  // Held writes come due long after teardown + CQT: dropped.
  REQUIRE(wait_until([&] { return rig.target->stats(0).delayed_writes_dropped == 2; }));
  CHECK(rig.target->stats(0).delayed_writes_executed == 0);
  CHECK(ns_bytes(*rig.target, 40 * kBlock, 2 * kBlock) == std::vector<uint8_t>(2 * kBlock, 0));

  CHECK_FALSE(kept.admin.closed_within(50));
  // New connections get nothing behind the partition.
  Client fresh;
  REQUIRE(fresh.connect(rig.port(0)));
  CHECK_FALSE(fresh.ic());
  rig.target->clear_faults(0);
  // Healed: the ended controller's sockets close now.
  CHECK(kept.admin.closed_within(1000));
  CHECK(kept.io.closed_within(1000));
  REQUIRE(wait_until([&] { return rig.target->stats(0).live_connections == 1; }));  // `fresh`
}

TEST_CASE("drop_commands: N commands never answered, later ones answered", "[target][faults]") {
  Rig rig(options(1));
  Queues q(rig, 0);
  const auto d = stamped(7, 1, 1);
  REQUIRE(q.io.write(1, 7, 1, d.data(), kBlock).status().is_success());
  rig.target->drop_commands(0, 2);
  Sqe r;
  prep_read(r, 1, 7, 1);
  r.cid = 501;
  set_sgl(r, sgl::kTransportDataBlock, 0, kBlock);
  q.io.send_capsule(r);
  send_write(q.io, 502, 8, stamped(8, 1, 1));
  Sqe k;
  prep_keep_alive(k);
  CHECK(q.admin.exec(k).status().is_success());  // admin commands are never dropped
  r.cid = 503;
  q.io.send_capsule(r);
  // Answers come in order on one queue: the first PDU back is 503's.
  auto p = q.io.next(2000);
  REQUIRE(p);
  REQUIRE(p->type == tcp::PduType::c2h_data);
  CHECK(p->as<tcp::DataHeader>().cccid == 503);
  CHECK(p->data == d);
  if (!(p->as<tcp::DataHeader>().ch.flags & tcp::pdu_flag::kSuccess)) {
    auto resp = q.io.next(2000);
    REQUIRE(resp);
    CHECK(resp->as<tcp::CapsuleResp>().cqe.cid == 503);
  }
  CHECK_FALSE(q.io.next(50));
  CHECK(rig.target->stats(0).commands_dropped == 2);
  CHECK(ns_bytes(*rig.target, 8 * kBlock, kBlock) == std::vector<uint8_t>(kBlock, 0));  // never executed
  CHECK(q.io.read(1, 7, 1, kBlock).data == d);
}
