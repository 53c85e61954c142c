// Writes the fuzz targets' seed corpora and regression inputs with the library's own encoders:
//   fuzz-corpus-gen <tests/fuzz>   (re)creates corpus/<target>/* and regressions/<target>/*
// Identify and log pages come from a running embedded target, PDUs from the shared codec. Each
// regression input reproduces one bug the fuzzers or a reader found; its name says which.
#include <nvme/types.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "command_record.hpp"
#include "core/crc32c.hpp"
#include "core/fabrics_command.hpp"
#include "nvmeof/command.hpp"
#include "nvmeof/identify.hpp"
#include "nvmeof/target.hpp"
#include "target_client.hpp"
#include "transport/tcp/pdu.hpp"

namespace {

using namespace nvmeof;
namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

constexpr char kFuzzNqn[] = "nqn.2024-01.io.nvmeof:fuzz";  // fuzz_target.cpp's subsystem
fs::path g_root;

void put(const std::string& dir, const std::string& name, const Bytes& b) {
  const fs::path d = g_root / dir;
  fs::create_directories(d);
  std::ofstream(d / name, std::ios::binary).write(reinterpret_cast<const char*>(b.data()),
                                                  static_cast<std::streamsize>(b.size()));
}

// One PDU with digests as negotiated: header, header digest, padding to PDO, data, data digest.
void append_pdu(Bytes& out, const void* hdr, size_t hlen, const void* data, uint32_t len) {
  const auto* ch = static_cast<const tcp::CommonHeader*>(hdr);
  const size_t at = out.size();
  out.resize(at + ch->plen, 0);
  std::memcpy(out.data() + at, hdr, hlen);
  if (ch->flags & tcp::pdu_flag::kHdgst) {
    const uint32_t d = tcp::header_digest(out.data() + at, hlen);
    std::memcpy(out.data() + at + hlen, &d, 4);
  }
  if (len) {
    std::memcpy(out.data() + at + ch->pdo, data, len);
    if (ch->flags & tcp::pdu_flag::kDdgst) {
      const uint32_t d = detail::crc32c(data, len);
      std::memcpy(out.data() + at + ch->pdo + len, &d, 4);
    }
  }
}

struct Stream {
  tcp::Negotiated neg{};
  Bytes b;
  uint16_t cid = 0;

  void icreq(bool hd, bool dd) {
    tcp::IcReq r;
    tcp::fill_ic_req(r, 0, hd, dd, 0);
    append_pdu(b, &r, sizeof r, nullptr, 0);
    neg = tcp::Negotiated{hd, dd, 0};
  }
  // A command; `len` bytes of `data` in the capsule, or `xfer` bytes announced for R2T / C2H.
  uint16_t cmd(Sqe s, const void* data = nullptr, uint32_t len = 0, uint32_t xfer = 0) {
    s.cid = ++cid;
    if (len)
      set_sgl(s, sgl::kDataBlockOffset, 0, len);
    else
      set_sgl(s, sgl::kTransportDataBlock, 0, xfer);
    tcp::CapsuleCmd c;
    const size_t hlen = tcp::fill_capsule_cmd(c, s, len, neg);
    append_pdu(b, &c, hlen, data, len);
    return s.cid;
  }
  void h2c(uint16_t cccid, uint16_t ttag, uint32_t off, const void* data, uint32_t len) {
    tcp::DataHeader h;
    const size_t hlen = tcp::fill_h2c_data(h, cccid, ttag, off, len, true, neg);
    append_pdu(b, &h, hlen, data, len);
  }
  Bytes with_mode(uint8_t mode) const {
    Bytes out{mode};
    out.insert(out.end(), b.begin(), b.end());
    return out;
  }
};

nvmf_connect_data connect_data(uint16_t cntlid) {
  nvmf_connect_data d{};
  std::memset(d.hostid, 0x5a, sizeof d.hostid);
  d.cntlid = cntlid;
  std::strncpy(d.subsysnqn, kFuzzNqn, sizeof d.subsysnqn - 1);
  std::strncpy(d.hostnqn, test::kHostNqn, sizeof d.hostnqn - 1);
  return d;
}

Sqe connect_sqe(uint16_t qid) {
  Sqe s;
  prep_connect(s, qid, 31, 0, 0);
  return s;
}

void admin_commands(Stream& s) {
  Sqe c;
  prep_property_get(c, prop::kCap, true);
  s.cmd(c);
  prep_property_set(c, prop::kCc, 1 | (6u << 16) | (4u << 20), false);
  s.cmd(c);
  for (uint8_t cns_value : {cns::kController, cns::kNamespace, cns::kActiveNamespaceList,
                            cns::kNamespaceDescriptors}) {
    prep_identify(c, cns_value, cns_value == cns::kController ? 0 : 1);
    s.cmd(c, nullptr, 0, 4096);
  }
  for (uint8_t lid : {uint8_t{0x01}, uint8_t{0x02}, uint8_t{0x03}, log_page::kAna,
                      log_page::kCrossControllerReset}) {
    prep_get_log_page(c, lid, 0xffffffff, 4096, 0, 0);
    s.cmd(c, nullptr, 0, 4096);
  }
  for (uint8_t fid : {feature::kArbitration, feature::kPowerManagement, feature::kTemperatureThreshold,
                      feature::kErrorRecovery, feature::kVolatileWriteCache, feature::kNumberOfQueues,
                      feature::kAsyncEventConfig, feature::kKeepAliveTimer}) {
    prep_get_features(c, fid);
    s.cmd(c);
    prep_set_features(c, fid, fid == feature::kNumberOfQueues ? 0x00030003u : 0u);
    s.cmd(c);
  }
  prep_command(c, opcode::kKeepAlive, 0);
  s.cmd(c);
  prep_async_event_request(c);
  s.cmd(c);
  prep_cross_controller_reset(c, 2, 1, 1);
  s.cmd(c);
}

void io_commands(Stream& s) {
  Bytes blk(4096, 0x42);
  Sqe c;
  prep_write(c, 1, 0, 1);
  s.cmd(c, blk.data(), 4096);
  prep_write(c, 1, 1, 2);
  const uint16_t w = s.cmd(c, nullptr, 0, 8192);
  // The target's first free slot (transfer tag) on a fresh queue is 0.
  Bytes two(8192, 0x43);
  s.h2c(w, 0, 0, two.data(), 8192);
  prep_read(c, 1, 0, 3);
  s.cmd(c, nullptr, 0, 3 * 4096);
  prep_write_zeroes(c, 1, 4, 4);
  s.cmd(c);
  DsmRange r{0, 8, 2};
  prep_dsm(c, 1, 1, kDsmDeallocate);
  s.cmd(c, &r, sizeof r);
  prep_flush(c, 1);
  s.cmd(c);
  prep_flush(c, 0xffffffff);
  s.cmd(c);
}

void target_corpus() {
  const auto d0 = connect_data(0xffff);
  for (int dg = 0; dg < 4; ++dg) {
    const bool hd = dg & 1, dd = dg & 2;
    const auto mode = static_cast<uint8_t>((hd ? 4 : 0) | (dd ? 8 : 0));
    Stream raw;  // stage 0: the input says everything
    raw.icreq(hd, dd);
    raw.cmd(connect_sqe(0), &d0, sizeof d0);
    admin_commands(raw);
    put("corpus/target", "raw_admin_dg" + std::to_string(dg), raw.with_mode(mode | 0));

    Stream admin;  // stage 2: admin queue live
    admin.neg = tcp::Negotiated{hd, dd, 0};
    admin_commands(admin);
    put("corpus/target", "admin_dg" + std::to_string(dg), admin.with_mode(mode | 2));

    Stream io;  // stage 3: I/O queue 1 live
    io.neg = tcp::Negotiated{hd, dd, 0};
    io_commands(io);
    put("corpus/target", "io_dg" + std::to_string(dg), io.with_mode(mode | 3));
  }
  Stream late;  // stage 1: a Connect whose data comes by R2T
  const uint16_t c1 = late.cmd(connect_sqe(0), nullptr, 0, sizeof d0);
  late.h2c(c1, 0, 0, &d0, sizeof d0);
  Sqe c;
  prep_identify(c, cns::kController, 0);
  late.cmd(c, nullptr, 0, 4096);
  put("corpus/target", "connect_by_r2t", late.with_mode(1));

  Stream disc;
  prep_fabrics(c, fctype::kDisconnect);
  disc.cmd(c);
  put("corpus/target", "admin_disconnect", disc.with_mode(2));
  put("corpus/target", "io_disconnect", disc.with_mode(3));

  Stream behind;  // commands pipelined behind a Disconnect, on either queue
  prep_fabrics(c, fctype::kDisconnect);
  behind.cmd(c);
  prep_command(c, 0x7e, 1);
  behind.cmd(c);
  prep_read(c, 1, 0, 1);
  behind.cmd(c, nullptr, 0, 4096);
  prep_keep_alive(c);
  behind.cmd(c);
  put("corpus/target", "admin_disconnect_behind", behind.with_mode(2));
  put("corpus/target", "io_disconnect_behind", behind.with_mode(3));
}

// Command lists (fuzz::Record): the fuzz target builds the capsules and answers the R2Ts.
struct Commands {
  std::vector<fuzz::Record> recs;
  void add(uint8_t kind, uint8_t pick, uint32_t len = 0, uint8_t aux = 0, uint32_t cdw10 = 0,
           uint32_t cdw11 = 0, uint32_t cdw12 = 0) {
    recs.push_back({kind, pick, fuzz::index_of(fuzz::kLengths, len), aux, cdw10, cdw11, cdw12});
  }
  void admin(uint8_t op, fuzz::DataMode d, uint32_t len = 0, fuzz::Sel nsid = fuzz::kSel1,
             uint32_t cdw10 = 0, uint32_t cdw11 = 0) {
    add(fuzz::kind(fuzz::kAdmin, d, nsid), fuzz::index_of(fuzz::kAdminOps, op), len, 0, cdw10, cdw11);
  }
  // NVM I/O on namespace 1: `nlb` blocks from `slba`.
  void io(uint8_t op, fuzz::DataMode d, uint32_t len, uint32_t slba = 0, uint32_t nlb = 1) {
    add(fuzz::kind(fuzz::kIo, d), fuzz::index_of(fuzz::kIoOps, op), len, 0, slba, 0, nlb - 1);
  }
  void opcode_raw(uint8_t op) { add(fuzz::kind(fuzz::kAnyOpcode, fuzz::kNoData), op); }
  void fabrics(uint8_t type, fuzz::DataMode d = fuzz::kNoData, uint32_t len = 0, uint8_t aux = 0,
               fuzz::Sel sel = fuzz::kSel0, uint8_t extra = 0, uint32_t cdw11 = 0, uint32_t cdw12 = 0) {
    add(fuzz::kind(fuzz::kFabrics, d, sel, extra), fuzz::index_of(fuzz::kFabricsTypes, type), len,
        aux, 0, cdw11, cdw12);
  }
  void disconnect() { fabrics(fctype::kDisconnect); }
  // A Connect of queue `qid` (SQSIZE 31), its data in the capsule.
  void connect(uint8_t qid, uint8_t extra = 0, fuzz::Sel cntlid = fuzz::kSel0) {
    fabrics(fctype::kConnect, fuzz::kNatural, 0, fuzz::aux_qid(qid), cntlid, extra, 31);
  }
  void property_get(fuzz::Sel which, bool size8) {
    fabrics(fctype::kPropertyGet, fuzz::kNoData, 0, size8 ? fuzz::kAuxSize8 : 0, which);
  }
  void enable() {  // CC.EN with the I/O queue entry sizes
    fabrics(fctype::kPropertySet, fuzz::kNoData, 0, 0, fuzz::kSel1, 0, 0, 1 | (6u << 16) | (4u << 20));
  }
  Bytes with_mode(uint8_t mode) const {
    Bytes out{static_cast<uint8_t>(mode | fuzz::kModeCommands)};
    const auto* p = reinterpret_cast<const uint8_t*>(recs.data());
    out.insert(out.end(), p, p + recs.size() * sizeof(fuzz::Record));
    return out;
  }
};

void command_corpus() {
  using fuzz::kNatural;
  {  // admin queue: properties, a few admin commands, then a Disconnect with commands behind it
    Commands c;
    c.property_get(fuzz::kSel0, true);
    c.enable();
    c.admin(opcode::kIdentify, kNatural, 4096, fuzz::kSel1, cns::kController);
    c.admin(opcode::kGetLogPage, kNatural, 512, fuzz::kSel2, 0x02 | (127u << 16));
    c.admin(opcode::kKeepAlive, fuzz::kNoData);
    c.admin(opcode::kAsyncEventRequest, fuzz::kNoData);
    c.admin(opcode::kGetFeatures, fuzz::kNoData, 0, fuzz::kSel1, feature::kVolatileWriteCache);
    c.disconnect();
    c.admin(opcode::kIdentify, kNatural, 4096, fuzz::kSel1, cns::kController);
    c.admin(opcode::kKeepAlive, fuzz::kNoData);
    put("corpus/target", "cmds_admin", c.with_mode(2));
  }
  {  // I/O queue: data both ways, Fabrics commands an I/O queue refuses, a Disconnect, more
    Commands c;
    c.io(opcode::kWrite, fuzz::kInCapsule, 4096);
    c.io(opcode::kWrite, fuzz::kByPdus, 8192, 1, 2);
    c.io(opcode::kRead, kNatural, 4096);
    c.io(opcode::kFlush, fuzz::kNoData, 0);
    c.io(opcode::kWriteZeroes, fuzz::kNoData, 0, 4, 4);
    c.opcode_raw(0x7e);
    c.property_get(fuzz::kSel2, false);
    c.connect(1, 0, fuzz::kSel1);
    c.fabrics(fctype::kAuthenticationSend, kNatural, 0, fuzz::kAuxNegotiate);
    c.fabrics(fctype::kAuthenticationReceive, kNatural, 4096);
    c.disconnect();
    c.opcode_raw(0x7e);
    c.io(opcode::kRead, kNatural, 4096);
    put("corpus/target", "cmds_io", c.with_mode(3));
  }
  {  // before and after a Connect on a fresh connection, then the Connect again
    Commands c;
    c.admin(opcode::kIdentify, kNatural, 4096, fuzz::kSel1, cns::kController);
    c.connect(0);
    c.enable();
    c.property_get(fuzz::kSel2, false);
    c.connect(0);
    c.admin(opcode::kIdentify, kNatural, 4096, fuzz::kSel1, cns::kController);
    c.fabrics(fctype::kAuthenticationSend, kNatural, 0, fuzz::kAuxNegotiate);
    c.fabrics(fctype::kAuthenticationReceive, kNatural, 4096);
    c.disconnect();
    c.admin(opcode::kKeepAlive, fuzz::kNoData);
    put("corpus/target", "cmds_connect", c.with_mode(1));
  }
  {  // a host that must authenticate: refused commands, the negotiation, a wrong reply
    Commands c;
    c.connect(0, fuzz::kAuthHostBit);
    c.admin(opcode::kIdentify, kNatural, 4096, fuzz::kSel1, cns::kController);
    c.fabrics(fctype::kAuthenticationSend, kNatural, 0, fuzz::kAuxNegotiate);
    c.fabrics(fctype::kAuthenticationReceive, kNatural, 4096);
    c.fabrics(fctype::kAuthenticationSend, fuzz::kInCapsule, 512);
    c.fabrics(fctype::kAuthenticationReceive, kNatural, 4096);
    c.admin(opcode::kKeepAlive, fuzz::kNoData);
    put("corpus/target", "cmds_auth", c.with_mode(1));
  }
  {  // the association ends (a Disconnect on the admin queue) under an I/O queue's commands
    Commands c;
    c.io(opcode::kWrite, fuzz::kInCapsule, 4096);
    c.io(opcode::kRead, kNatural, 4096);
    c.fabrics(fctype::kDisconnect, fuzz::kNoData, 0, 0, fuzz::kSel0, fuzz::kOnAdminBit);
    for (int i = 0; i < 8; ++i) {
      c.io(opcode::kRead, kNatural, 4096);
      c.io(opcode::kWrite, fuzz::kByPdus, 4096);
    }
    put("corpus/target", "cmds_io_association_ends", c.with_mode(3));
  }
  {  // the Connect's data by R2T, with digests
    Commands c;
    c.fabrics(fctype::kConnect, fuzz::kByPdus, 1024, fuzz::aux_qid(0), fuzz::kSel0, 0, 31);
    c.enable();
    c.admin(opcode::kGetLogPage, kNatural, 4096, fuzz::kSel2, 0x02 | (1023u << 16));
    c.disconnect();
    put("corpus/target", "cmds_connect_r2t_dg", c.with_mode(1 | 4 | 8));
  }
}

void target_regressions() {
  // A late Connect: queue 1's Connect waits for its data while an admin Connect makes the queue
  // live; an admin command's data goes by R2T; then the first Connect's data names the new
  // controller (CNTLID 1 on a fresh target), which turned the live admin queue into I/O queue 1,
  // and the admin command's data then executed as a write with no namespace (null deref).
  {
    Stream s;
    const auto d1 = connect_data(1);
    const auto d0 = connect_data(0xffff);
    const uint16_t io = s.cmd(connect_sqe(1), nullptr, 0, sizeof d1);  // slot 0
    s.cmd(connect_sqe(0), &d0, sizeof d0);                               // slot 1, freed
    Sqe a;
    prep_command(a, 0x01, 0);
    const uint16_t adm = s.cmd(a, nullptr, 0, 4096);                     // slot 1 again
    s.h2c(io, 0, 0, &d1, sizeof d1);
    Bytes junk(4096, 0xee);
    s.h2c(adm, 1, 0, junk.data(), 4096);
    put("regressions/target", "late_connect_null_namespace", s.with_mode(1));
  }
  // The same late Connect for the admin queue: a second admin controller on one connection.
  {
    Stream s;
    const auto d0 = connect_data(0xffff);
    const uint16_t first = s.cmd(connect_sqe(0), nullptr, 0, sizeof d0);
    s.cmd(connect_sqe(0), &d0, sizeof d0);
    s.h2c(first, 0, 0, &d0, sizeof d0);
    Sqe c;
    prep_identify(c, cns::kController, 0);
    s.cmd(c, nullptr, 0, 4096);
    put("regressions/target", "late_connect_second_admin", s.with_mode(1));
  }
  // A peer that sends and never reads: Get Log Page capsules of 128 KiB each, one chunk of them.
  {
    Stream s;
    for (int i = 0; i < 600; ++i) {
      Sqe c;
      prep_get_log_page(c, 0x01, 0xffffffff, 128 * 1024, 0, 0);
      s.cmd(c, nullptr, 0, 128 * 1024);
    }
    put("regressions/target", "backlog_never_read", s.with_mode(2 | 16));
  }
  // The admin queue's Disconnect behind 6 MiB of log pages a lazy peer has not read yet: the
  // association's end asked the admin connection itself to close, which it did at once,
  // dropping the replies it still held, the Disconnect's completion among them.
  {
    Commands c;
    for (int i = 0; i < 48; ++i)
      c.admin(opcode::kGetLogPage, fuzz::kNatural, 131072, fuzz::kSel2, 0x02 | (32767u << 16));
    c.disconnect();
    c.admin(opcode::kKeepAlive, fuzz::kNoData);
    put("regressions/target", "admin_disconnect_behind_backlog", c.with_mode(2 | 16));
  }
  // Data digests and a read of odd length: the next C2HData starts misaligned in the output,
  // where seal_c2h read its header in place (UBSan: misaligned access).
  {
    Stream s;
    s.neg = tcp::Negotiated{true, true, 0};
    for (int i = 0; i < 3; ++i) {
      Sqe c;
      prep_identify(c, cns::kController, 0);
      s.cmd(c, nullptr, 0, 4095);
    }
    put("regressions/target", "misaligned_c2h_digest", s.with_mode(2 | 4 | 8));
  }
}

// Host-side PDU streams: flags byte, the stream, then chunk sizes (read from the end).
void pdu_corpus() {
  const Bytes chunks(128, 0x07);
  for (int dg = 0; dg < 4; ++dg) {
    const tcp::Negotiated n{(dg & 1) != 0, (dg & 2) != 0, 0};
    Bytes host;
    tcp::IcResp ic;
    tcp::fill_ic_resp(ic, 0, n.hdgst, n.ddgst, 131072);
    append_pdu(host, &ic, sizeof ic, nullptr, 0);
    Cqe cqe{};
    cqe.cid = 1;
    tcp::CapsuleResp r;
    append_pdu(host, &r, tcp::fill_capsule_resp(r, cqe, n), nullptr, 0);
    Bytes data(512, 0x33);
    tcp::DataHeader d;
    append_pdu(host, &d, tcp::fill_c2h_data(d, 2, 0, 512, true, true, n), data.data(), 512);
    append_pdu(host, &d, tcp::fill_c2h_data(d, 3, 0, 100, false, false, n), data.data(), 100);
    tcp::R2t t;
    append_pdu(host, &t, tcp::fill_r2t(t, 4, 0, 0, 8192, n), nullptr, 0);
    tcp::TermReq term;
    tcp::fill_term_req(term, tcp::PduType::c2h_term_req, tcp::Fes::invalid_header_field, 4, 24);
    Bytes tr(reinterpret_cast<uint8_t*>(&term), reinterpret_cast<uint8_t*>(&term) + sizeof term);
    tr.insert(tr.end(), 24, 0x04);
    Bytes out{static_cast<uint8_t>(dg)};
    out.insert(out.end(), host.begin(), host.end());
    out.insert(out.end(), tr.begin(), tr.end());
    out.insert(out.end(), chunks.begin(), chunks.end());
    put("corpus/pdu_reader", "host_dg" + std::to_string(dg), out);

    Stream ctrl;  // what the target's reader sees
    ctrl.icreq(n.hdgst, n.ddgst);
    const auto cd = connect_data(0xffff);
    ctrl.cmd(connect_sqe(0), &cd, sizeof cd);
    ctrl.h2c(1, 0, 0, data.data(), 512);
    Bytes o2{static_cast<uint8_t>(dg | 0x20)};
    o2.insert(o2.end(), ctrl.b.begin(), ctrl.b.end());
    o2.insert(o2.end(), chunks.begin(), chunks.end());
    put("corpus/pdu_reader", "controller_dg" + std::to_string(dg), o2);
  }
}

// fuzz_queue_pair inputs: flags, command count and chunk size, one byte per command, then what
// the fake controller sends (see fuzz_queue_pair.cpp). CIDs are 0, 1, ... in command order.
struct CtrlStream {
  tcp::Negotiated neg{};
  Bytes b;
  void resp(uint16_t cid, uint16_t status_field = 0) {
    Cqe cqe{};
    cqe.cid = cid;
    cqe.status_field = status_field;
    tcp::CapsuleResp r;
    append_pdu(b, &r, tcp::fill_capsule_resp(r, cqe, neg), nullptr, 0);
  }
  void c2h(uint16_t cid, uint32_t off, uint32_t len, bool last, bool success) {
    const Bytes data(len, static_cast<uint8_t>(0x30 + cid));
    tcp::DataHeader d;
    append_pdu(b, &d, tcp::fill_c2h_data(d, cid, off, len, last, success, neg), data.data(), len);
  }
  void r2t(uint16_t cid, uint16_t ttag, uint32_t off, uint32_t len) {
    tcp::R2t t;
    append_pdu(b, &t, tcp::fill_r2t(t, cid, ttag, off, len, neg), nullptr, 0);
  }
  void term() {
    tcp::TermReq term;
    tcp::fill_term_req(term, tcp::PduType::c2h_term_req, tcp::Fes::invalid_header_field, 4, 24);
    append_pdu(b, &term, sizeof term, nullptr, 0);
    b.resize(b.size() + 24, 0x04);
  }
};

// Command bytes: kind (0 read, 1 write, 2 flush) and 512-byte blocks.
constexpr uint8_t qp_read(unsigned blocks) { return static_cast<uint8_t>((blocks - 1) << 2); }
constexpr uint8_t qp_write(unsigned blocks) { return static_cast<uint8_t>(1 | (blocks - 1) << 2); }
constexpr uint8_t qp_flush = 2;

Bytes qp_input(uint8_t flags, uint8_t chunk16, const Bytes& cmds, const CtrlStream& s) {
  Bytes out{flags, static_cast<uint8_t>((cmds.size() - 1) | chunk16 << 3)};
  out.insert(out.end(), cmds.begin(), cmds.end());
  out.insert(out.end(), s.b.begin(), s.b.end());
  return out;
}

void queue_pair_corpus() {
  for (int dg = 0; dg < 4; ++dg) {
    const bool hd = dg & 1, dd = dg & 2;
    const tcp::Negotiated n{hd, dd, 0};
    const auto f = static_cast<uint8_t>(dg);
    const std::string sfx = "_dg" + std::to_string(dg);
    {  // reads answered in two C2HData each, one with SUCCESS, the rest with a response
      CtrlStream s;
      s.neg = n;
      s.c2h(0, 0, 2048, false, false);
      s.c2h(0, 2048, 2048, true, false);
      s.resp(0);
      s.c2h(1, 0, 512, true, true);
      s.c2h(2, 0, 8192, true, false);
      s.resp(2);
      put("corpus/queue_pair", "reads" + sfx, qp_input(f, 0, {qp_read(8), qp_read(1), qp_read(16)}, s));
    }
    {  // writes by R2T (two R2Ts for the second), a flush, then every response
      CtrlStream s;
      s.neg = n;
      s.r2t(0, 7, 0, 4096);
      s.r2t(1, 8, 0, 8192);
      s.resp(2);
      s.resp(0);
      s.r2t(1, 9, 8192, 8192);
      s.resp(1);
      put("corpus/queue_pair", "writes_r2t" + sfx,
          qp_input(static_cast<uint8_t>(f | 16), 2, {qp_write(8), qp_write(32), qp_flush}, s));
    }
  }
  CtrlStream s;
  s.resp(1);
  s.c2h(0, 0, 4096, true, false);
  s.resp(0, status::kInvalidField.cqe_field());
  s.r2t(2, 1, 0, 1024);
  s.resp(2);
  put("corpus/queue_pair", "in_capsule_mixed", qp_input(32 | 1 << 6, 2, {qp_read(8), qp_flush, qp_write(32), qp_write(2)}, s));
  CtrlStream bogus;
  bogus.resp(5);  // no such command
  put("corpus/queue_pair", "bogus_cid", qp_input(0, 0, {qp_read(1), qp_write(1)}, bogus));
  CtrlStream off;
  off.c2h(0, 512, 512, true, false);  // data at the wrong offset
  put("corpus/queue_pair", "c2h_wrong_offset", qp_input(0, 0, {qp_read(2)}, off));
  CtrlStream longer;
  longer.c2h(0, 0, 4096, true, true);  // more data than the read asked for
  put("corpus/queue_pair", "c2h_too_long", qp_input(2 << 6, 0, {qp_read(2)}, longer));
  CtrlStream r2t;
  r2t.r2t(0, 1, 0, 8192);  // R2T beyond the write, then one for a read
  r2t.r2t(1, 2, 0, 512);
  put("corpus/queue_pair", "r2t_out_of_range", qp_input(3 << 6, 0, {qp_write(4), qp_read(1)}, r2t));
  CtrlStream cut;
  cut.c2h(0, 0, 4096, true, true);
  cut.b.resize(cut.b.size() - 1000);  // the stream ends in the middle of the PDU
  put("corpus/queue_pair", "truncated_c2h", qp_input(0, 3, {qp_read(8)}, cut));
  CtrlStream term;
  term.term();
  put("corpus/queue_pair", "term_req", qp_input(0, 0, {qp_read(1), qp_flush}, term));
}

// Identify and log pages as the embedded target returns them, whole and cut short.
void identify_corpus() {
  TargetOptions o;
  o.ports.assign(2, TargetPort{"127.0.0.1", "0", AnaState::optimized});
  o.subsystems[0].nqn = kFuzzNqn;
  auto t = Target::start(o);
  if (!t) {
    std::fprintf(stderr, "fuzz-corpus-gen: target did not start\n");
    std::exit(1);
  }
  test::Client a;
  if (!a.open_admin((*t)->port_number(0), kFuzzNqn)) std::exit(1);
  auto keep = [](const char* name, const Bytes& b) {
    put("corpus/identify", name, b);
    put("corpus/identify", std::string(name) + "_short", Bytes(b.begin(), b.begin() + std::min<size_t>(b.size(), 77)));
  };
  keep("id_ctrl", a.identify(cns::kController).data);
  keep("id_ns", a.identify(cns::kNamespace, 1).data);
  keep("ns_descs", a.identify(cns::kNamespaceDescriptors, 1).data);
  keep("ana_log", a.get_log(log_page::kAna, 4096).data);
  test::Client d;
  if (!d.open_admin((*t)->port_number(0), kDiscoveryNqn)) std::exit(1);
  keep("discovery_log", d.get_log(0x70, 3 * 1024).data);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz-corpus-gen <tests/fuzz directory>\n");
    return 2;
  }
  g_root = argv[1];
  target_corpus();
  command_corpus();
  target_regressions();
  pdu_corpus();
  queue_pair_corpus();
  identify_corpus();
  return 0;
}
