// The embedded target changing under its hosts: ports added and removed, namespaces attached,
// detached and resized at run time, through the raw client (target_client.hpp). Each change must
// show where a host looks: the discovery log (entries, GENCTR) and its change notice, a port's
// listener and connections, Identify, the Changed Namespace List and its notice, and the status
// of I/O to what is gone. Bad requests change nothing.
#include <catch2/catch.hpp>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>

#include "../common/rig.hpp"
#include "../common/wait.hpp"
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
constexpr uint32_t kDiscChangeEvent = 0x0070F002;  // notice, F0h, log page 70h
constexpr uint32_t kNsChangedEvent = 0x00040002;   // notice, 00h, log page 04h
constexpr uint8_t kLogChangedNs = 0x04;
constexpr uint32_t kAecNsAttr = 1u << 8;
constexpr uint32_t kAecAna = 1u << 11;
constexpr uint32_t kAecDisc = 1u << 31;
// Long enough for a loaded 2-core machine; a notice that works arrives in milliseconds.
constexpr int kEventMs = 10000;

TargetOptions options(size_t nports) {
  TargetOptions o = rig_target_options(nports);
  o.subsystems[0].namespaces[0].size_bytes = 1 << 20;  // 256 blocks
  return o;
}

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

bool set_aec(Client& admin, uint32_t aec) {
  Sqe f;
  prep_set_features(f, feature::kAsyncEventConfig, aec);
  auto r = admin.exec(f);
  return r.ok && r.status().is_success();
}

Reply get_log_rae(Client& admin, uint8_t lid, uint32_t len) {
  Sqe c;
  prep_get_log_page(c, lid, 0xffffffff, len, 0, 0);
  c.cdw10 |= 1u << 15;  // RAE: keep the event (and the log) as it is
  return admin.exec(c, nullptr, 0, len);
}

// The NSIDs of a 4 KiB NSID list (a Changed Namespace List, an Active Namespace ID list), up to
// the first zero.
std::vector<uint32_t> nsid_list(const Reply& r) {
  std::vector<uint32_t> out;
  REQUIRE(r.ok);
  REQUIRE(r.status().is_success());
  REQUIRE(r.data.size() == 4096);
  for (size_t i = 0; i < 1024; ++i) {
    uint32_t v;
    std::memcpy(&v, r.data.data() + 4 * i, 4);
    if (v == 0) break;
    out.push_back(v);
  }
  return out;
}

std::vector<uint32_t> active_nsids(Client& admin) { return nsid_list(admin.identify(cns::kActiveNamespaceList, 0)); }

NamespaceInfo identify_ns(Client& admin, uint32_t nsid) {
  auto r = admin.identify(cns::kNamespace, nsid);
  REQUIRE(r.ok);
  REQUIRE(r.status().is_success());
  auto ns = parse_identify_namespace(r.data, nsid);
  REQUIRE(ns);
  return *ns;
}

// Identify Controller OAES (bytes 95:92), which ControllerInfo does not carry.
uint32_t oaes(Client& admin) {
  auto r = admin.identify(cns::kController);
  REQUIRE(r.ok);
  REQUIRE(r.data.size() >= sizeof(nvme_id_ctrl));
  nvme_id_ctrl id;
  std::memcpy(&id, r.data.data(), sizeof id);
  return id.oaes;
}

DiscoveryLog discovery_log(Client& d) {
  auto hdr = d.get_log(log_page::kDiscovery, 1024);
  REQUIRE(hdr.ok);
  uint64_t numrec = 0;
  std::memcpy(&numrec, hdr.data.data() + 8, 8);
  auto full = d.get_log(log_page::kDiscovery, static_cast<uint32_t>(1024 * (numrec + 1)));
  REQUIRE(full.ok);
  auto log = parse_discovery_log(full.data);
  REQUIRE(log);
  return *log;
}

bool lists_port(const DiscoveryLog& log, uint16_t number) {
  for (const auto& e : log.entries)
    if (e.trsvcid == std::to_string(number)) return true;
  return false;
}

// An admin queue (with the notices asked for) and I/O queue 1 of one controller.
struct Queues {
  Client admin;
  Client io;
  Queues(uint16_t port, uint32_t aec = kAecNsAttr | kAecAna) {
    REQUIRE(admin.open_admin(port, kNqn));
    REQUIRE(set_aec(admin, aec));
    REQUIRE(io.open_io(port, kNqn, admin.cntlid()));
  }
};

}  // namespace

TEST_CASE("a port added at run time serves, joins the discovery log and is announced",
          "[target][runtime][discovery]") {
  Rig rig(options(1));
  Target& t = *rig.target;
  Client d;
  REQUIRE(d.open_admin(rig.port(0), kDiscoveryNqn));
  CHECK((oaes(d) & kAecDisc) != 0);
  REQUIRE(set_aec(d, kAecDisc));
  const DiscoveryLog before = discovery_log(d);
  CHECK(before.entries.size() == 1);
  d.send_aer(900);

  TargetPort p;
  p.traddr = "127.0.0.1";
  p.trsvcid = "0";
  auto added = t.add_port(p);
  REQUIRE(added);
  CHECK(*added == 1);
  CHECK(t.port_count() == 2);
  const uint16_t number = t.port_number(1);
  REQUIRE(number != 0);

  auto ev = d.wait_reply(900, nullptr, kEventMs);
  REQUIRE(ev.ok);
  CHECK(ev.cqe.dw0 == kDiscChangeEvent);
  const DiscoveryLog after = discovery_log(d);
  CHECK(after.genctr > before.genctr);
  CHECK(after.entries.size() == 2);
  CHECK(lists_port(after, number));
  for (const auto& e : after.entries)
    if (e.trsvcid == std::to_string(number)) CHECK(e.portid == 2);

  // The new port serves a controller and its I/O, data verified.
  Queues q(number);
  const auto data = stamped(7, 1, 1);
  REQUIRE(q.io.write(1, 7, 1, data.data(), kBlock).status().is_success());
  auto back = q.io.read(1, 7, 1, kBlock);
  REQUIRE(back.ok);
  CHECK(back.data == data);

  SECTION("removing it closes its connections, refuses new ones and is announced") {
    d.send_aer(901);  // the log was read since the last notice: this one is not masked
    REQUIRE(t.remove_port(1));
    auto ev2 = d.wait_reply(901, nullptr, kEventMs);
    REQUIRE(ev2.ok);
    CHECK(ev2.cqe.dw0 == kDiscChangeEvent);
    const DiscoveryLog gone = discovery_log(d);
    CHECK(gone.genctr > after.genctr);
    CHECK_FALSE(lists_port(gone, number));
    CHECK(gone.entries.size() == 1);
    CHECK(q.admin.closed_within(kEventMs));
    CHECK(q.io.closed_within(kEventMs));
    Client late;
    const bool accepted = late.connect(number) && late.ic().has_value();
    CHECK_FALSE(accepted);
    CHECK(t.port_removed(1));
    CHECK(t.port_count() == 2);  // the index is not given again
    // Port 0 still serves.
    Queues q0(rig.port(0));
    back = q0.io.read(1, 7, 1, kBlock);
    REQUIRE(back.ok);
    CHECK(back.data == data);
    auto again = t.add_port(p);
    REQUIRE(again);
    CHECK(*again == 2);
  }
}

TEST_CASE("a namespace attached at run time is identified, served and announced",
          "[target][runtime][namespace]") {
  Rig rig(options(1));
  Target& t = *rig.target;
  Queues q(rig.port(0));
  CHECK((oaes(q.admin) & kAecNsAttr) != 0);
  auto id = parse_identify_controller(q.admin.identify(cns::kController).data);
  REQUIRE(id);
  CHECK(id->nn == 1);
  q.admin.send_aer(900);

  TargetNamespace ns;
  ns.nsid = 5;
  ns.size_bytes = 8 << 20;
  ns.block_size = 512;
  REQUIRE(t.attach_namespace(kNqn, ns));
  auto ev = q.admin.wait_reply(900, nullptr, kEventMs);
  REQUIRE(ev.ok);
  CHECK(ev.cqe.dw0 == kNsChangedEvent);

  // RAE keeps the list; a read without it returns it and clears it.
  CHECK(nsid_list(get_log_rae(q.admin, kLogChangedNs, 4096)) == std::vector<uint32_t>{5});
  CHECK(nsid_list(q.admin.get_log(kLogChangedNs, 4096)) == std::vector<uint32_t>{5});
  CHECK(nsid_list(q.admin.get_log(kLogChangedNs, 4096)).empty());

  const NamespaceInfo info = identify_ns(q.admin, 5);
  CHECK(info.size_blocks == (8u << 20) / 512);
  CHECK(info.block_size == 512);
  CHECK(active_nsids(q.admin) == std::vector<uint32_t>{1, 5});
  id = parse_identify_controller(q.admin.identify(cns::kController).data);
  REQUIRE(id);
  CHECK(id->nn == 5);

  const auto data = stamped(100, 8, 3, 512);
  REQUIRE(q.io.write(5, 100, 8, data.data(), 4096).status().is_success());
  auto back = q.io.read(5, 100, 8, 4096);
  REQUIRE(back.ok);
  CHECK(back.data == data);
  std::vector<uint8_t> direct(4096);
  REQUIRE(t.read_ns(kNqn, 5, 100 * 512, direct.data(), direct.size()));
  CHECK(direct == data);

  // The notice was unmasked by the read: the next change is announced too.
  q.admin.send_aer(901);
  ns.nsid = 6;
  REQUIRE(t.attach_namespace(kNqn, ns));
  ev = q.admin.wait_reply(901, nullptr, kEventMs);
  REQUIRE(ev.ok);
  CHECK(ev.cqe.dw0 == kNsChangedEvent);
  CHECK(nsid_list(q.admin.get_log(kLogChangedNs, 4096)) == std::vector<uint32_t>{6});
}

TEST_CASE("a detached namespace fails its I/O with Invalid Namespace, the others go on",
          "[target][runtime][namespace]") {
  auto o = options(1);
  TargetNamespace second;
  second.nsid = 2;
  second.size_bytes = 1 << 20;
  o.subsystems[0].namespaces.push_back(second);
  Rig rig(o);
  Target& t = *rig.target;
  Queues q(rig.port(0));
  const auto one = stamped(3, 1, 1), two = stamped(3, 1, 2);
  REQUIRE(q.io.write(1, 3, 1, one.data(), kBlock).status().is_success());
  REQUIRE(q.io.write(2, 3, 1, two.data(), kBlock).status().is_success());

  // Another queue keeps writing to namespace 2 while it goes: every command answers, with
  // success or Invalid Namespace, and none after the first refusal succeeds.
  Client io2;
  REQUIRE(io2.open_io(rig.port(0), kNqn, q.admin.cntlid(), 2));
  std::atomic<bool> refused{false};
  std::atomic<int> bad{0}, succeeded_after{0};
  std::atomic<uint64_t> writes{0};
  std::thread writer([&] {
    const auto b = stamped(9, 1, 9);
    int after = 0;
    for (int i = 0; i < 1000000 && after < 20; ++i) {
      const auto r = io2.write(2, 9, 1, b.data(), kBlock);
      writes.fetch_add(1);
      if (!r.ok) {
        bad.fetch_add(1);
        return;
      }
      if (refused.load()) ++after;
      if (r.status() == status::kInvalidNamespace) refused.store(true);
      else if (r.status().is_success() && refused.load()) succeeded_after.fetch_add(1);
      else if (!r.status().is_success()) bad.fetch_add(1);
    }
  });
  REQUIRE(wait_until([&] { return writes.load() > 20; }));
  q.admin.send_aer(900);
  REQUIRE(t.detach_namespace(kNqn, 2));
  writer.join();
  CHECK(refused.load());
  CHECK(bad.load() == 0);
  CHECK(succeeded_after.load() == 0);

  auto ev = q.admin.wait_reply(900, nullptr, kEventMs);
  REQUIRE(ev.ok);
  CHECK(ev.cqe.dw0 == kNsChangedEvent);
  CHECK(nsid_list(q.admin.get_log(kLogChangedNs, 4096)) == std::vector<uint32_t>{2});

  CHECK(q.io.read(2, 3, 1, kBlock).status() == status::kInvalidNamespace);
  CHECK(q.io.write(2, 3, 1, two.data(), kBlock).status() == status::kInvalidNamespace);
  CHECK(active_nsids(q.admin) == std::vector<uint32_t>{1});
  auto back = q.io.read(1, 3, 1, kBlock);
  REQUIRE(back.ok);
  CHECK(back.status().is_success());
  CHECK(back.data == one);
  const auto more = stamped(4, 1, 5);
  REQUIRE(q.io.write(1, 4, 1, more.data(), kBlock).status().is_success());
  CHECK(q.io.read(1, 4, 1, kBlock).data == more);
  CHECK(t.namespaces(kNqn).size() == 1);
}

TEST_CASE("a namespace grown then shrunk keeps its data below the end", "[target][runtime][namespace]") {
  Rig rig(options(1));
  Target& t = *rig.target;
  Queues q(rig.port(0));
  const auto low = stamped(10, 1, 1), high = stamped(200, 1, 2);
  REQUIRE(q.io.write(1, 10, 1, low.data(), kBlock).status().is_success());
  REQUIRE(q.io.write(1, 200, 1, high.data(), kBlock).status().is_success());

  q.admin.send_aer(900);
  REQUIRE(t.resize_namespace(kNqn, 1, 2 << 20));
  auto ev = q.admin.wait_reply(900, nullptr, kEventMs);
  REQUIRE(ev.ok);
  CHECK(ev.cqe.dw0 == kNsChangedEvent);
  CHECK(nsid_list(q.admin.get_log(kLogChangedNs, 4096)) == std::vector<uint32_t>{1});
  CHECK(identify_ns(q.admin, 1).size_blocks == 512);
  CHECK(q.io.read(1, 10, 1, kBlock).data == low);
  CHECK(q.io.read(1, 200, 1, kBlock).data == high);
  const auto top = stamped(511, 1, 3);
  REQUIRE(q.io.write(1, 511, 1, top.data(), kBlock).status().is_success());
  CHECK(q.io.read(1, 511, 1, kBlock).data == top);

  q.admin.send_aer(901);
  REQUIRE(t.resize_namespace(kNqn, 1, 512 << 10));
  ev = q.admin.wait_reply(901, nullptr, kEventMs);
  REQUIRE(ev.ok);
  CHECK(ev.cqe.dw0 == kNsChangedEvent);
  CHECK(identify_ns(q.admin, 1).size_blocks == 128);
  CHECK(q.io.read(1, 10, 1, kBlock).data == low);
  CHECK(q.io.read(1, 200, 1, kBlock).status() == status::kLbaOutOfRange);
  CHECK(q.io.read(1, 127, 2, 2 * kBlock).status() == status::kLbaOutOfRange);
  CHECK(q.io.write(1, 128, 1, top.data(), kBlock).status() == status::kLbaOutOfRange);
  const auto last = stamped(127, 1, 4);
  REQUIRE(q.io.write(1, 127, 1, last.data(), kBlock).status().is_success());
  CHECK(q.io.read(1, 127, 1, kBlock).data == last);

  // Growing again brings zeroes, not the data the shrink cut off.
  REQUIRE(t.resize_namespace(kNqn, 1, 1 << 20));
  CHECK(identify_ns(q.admin, 1).size_blocks == 256);
  CHECK(q.io.read(1, 200, 1, kBlock).data == std::vector<uint8_t>(kBlock, 0));
  CHECK(q.io.read(1, 10, 1, kBlock).data == low);
}

TEST_CASE("bad run-time changes say why and change nothing", "[target][runtime]") {
  Rig rig(options(1));
  Target& t = *rig.target;
  const uint64_t gen = t.discovery_generation();

  auto r = t.remove_port(7);
  CHECK(r.error() == make_error_code(Errc::invalid_argument));
  CHECK(r.message().find("no port 7") != std::string::npos);
  TargetPort taken;
  taken.traddr = "127.0.0.1";
  taken.trsvcid = std::to_string(rig.port(0));
  auto a = t.add_port(taken);
  CHECK_FALSE(a);
  CHECK(a.error() == errno_code(EADDRINUSE));
  TargetPort bad_tls = taken;
  bad_tls.trsvcid = "0";
  bad_tls.tls = PortTls::required;
  bad_tls.tls_psk = "not a key";
  CHECK(t.add_port(bad_tls).error() == make_error_code(Errc::invalid_argument));
  CHECK(t.port_count() == 1);
  CHECK(t.discovery_generation() == gen);

  TargetNamespace dup;
  dup.nsid = 1;
  r = t.attach_namespace(kNqn, dup);
  CHECK(r.error() == make_error_code(Errc::invalid_argument));
  CHECK(r.message().find("already in use") != std::string::npos);
  TargetNamespace odd;
  odd.nsid = 3;
  odd.size_bytes = 1000;
  CHECK(t.attach_namespace(kNqn, odd).error() == make_error_code(Errc::invalid_argument));
  odd.size_bytes = 1 << 20;
  CHECK(t.attach_namespace("nqn.2024-01.io.nvmeof:nobody", odd).error() ==
        make_error_code(Errc::invalid_argument));
  CHECK(t.detach_namespace(kNqn, 9).error() == make_error_code(Errc::invalid_argument));
  r = t.resize_namespace(kNqn, 1, 0);
  CHECK(r.error() == make_error_code(Errc::invalid_argument));
  r = t.resize_namespace(kNqn, 1, (1 << 20) + 512);
  CHECK(r.error() == make_error_code(Errc::invalid_argument));
  CHECK(r.message().find("multiple of the block size") != std::string::npos);
  CHECK(t.resize_namespace(kNqn, 9, 1 << 20).error() == make_error_code(Errc::invalid_argument));

  const auto ns = t.namespaces(kNqn);
  REQUIRE(ns.size() == 1);
  CHECK(ns[0].nsid == 1);
  CHECK(ns[0].size_bytes == (1u << 20));
  // A controller sees the same namespace and no change to read.
  Queues q(rig.port(0));
  CHECK(active_nsids(q.admin) == std::vector<uint32_t>{1});
  CHECK(identify_ns(q.admin, 1).size_blocks == 256);
  CHECK(nsid_list(q.admin.get_log(kLogChangedNs, 4096)).empty());
}
