#include <catch2/catch.hpp>

#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "core/crc32c.hpp"
#include "core/fabrics_command.hpp"
#include "transport/tcp/pdu.hpp"

using namespace nvmeof;
using namespace nvmeof::tcp;

namespace {

struct Received {
  std::vector<uint8_t> header;
  std::vector<uint8_t> data;
};

// Collects every PDU the reader delivers.
struct Collector {
  std::vector<Received> pdus;
  std::vector<uint8_t> buf;
  Errc reject = Errc::ok;
  Errc on_header(const uint8_t*, const HeaderCheck& hc, uint8_t*& dst) {
    if (reject != Errc::ok) return reject;
    buf.assign(hc.data_len, 0);
    dst = hc.data_len ? buf.data() : nullptr;
    return Errc::ok;
  }
  Errc on_pdu(const uint8_t* hdr, const HeaderCheck& hc) {
    CommonHeader ch;
    std::memcpy(&ch, hdr, sizeof ch);
    Received r;
    r.header.assign(hdr, hdr + (ch.type == PduType::h2c_term_req || ch.type == PduType::c2h_term_req ? ch.plen : ch.hlen));
    r.data.assign(buf.begin(), buf.begin() + hc.data_len);
    pdus.push_back(std::move(r));
    return Errc::ok;
  }
};

// Serializes header + header digest + pad + data + data digest the way a sender does.
std::vector<uint8_t> wire(const void* hdr, size_t hlen, const std::vector<uint8_t>& data) {
  CommonHeader ch;
  std::memcpy(&ch, hdr, sizeof ch);
  std::vector<uint8_t> out(static_cast<const uint8_t*>(hdr), static_cast<const uint8_t*>(hdr) + hlen);
  if (ch.flags & pdu_flag::kHdgst) {
    const uint32_t d = header_digest(hdr, hlen);
    out.insert(out.end(), reinterpret_cast<const uint8_t*>(&d), reinterpret_cast<const uint8_t*>(&d) + 4);
  }
  if (!data.empty()) {
    out.resize(ch.pdo, 0);
    out.insert(out.end(), data.begin(), data.end());
    if (ch.flags & pdu_flag::kDdgst) {
      const uint32_t d = detail::crc32c(data.data(), data.size());
      out.insert(out.end(), reinterpret_cast<const uint8_t*>(&d), reinterpret_cast<const uint8_t*>(&d) + 4);
    }
  }
  const bool term = ch.type == PduType::h2c_term_req || ch.type == PduType::c2h_term_req;
  if (!term) REQUIRE(out.size() == ch.plen);  // a TermReq's data is appended by the caller
  return out;
}

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed + i * 13);
  return v;
}

Errc feed(PduReader& r, const std::vector<uint8_t>& bytes, Collector& c, size_t chunk) {
  for (size_t off = 0; off < bytes.size();) {
    const size_t n = std::min(chunk, bytes.size() - off);
    const auto [used, err] = r.consume(bytes.data() + off, n, c);
    if (err != Errc::ok) return err;
    REQUIRE(used == n);
    off += n;
  }
  return Errc::ok;
}

Negotiated digests(bool h, bool d, uint8_t pda = 0) { return Negotiated{h, d, pda}; }

}  // namespace

TEST_CASE("every host-received PDU round trips, with and without digests", "[pdu]") {
  for (auto n : {digests(false, false), digests(true, false), digests(false, true), digests(true, true), digests(true, true, 7)}) {
    for (size_t chunk : {size_t{1}, size_t{7}, size_t{100000}}) {
      std::vector<uint8_t> stream;
      IcResp icr;
      fill_ic_resp(icr, 0, n.hdgst, n.ddgst, 65536);
      auto w = wire(&icr, sizeof icr, {});
      stream.insert(stream.end(), w.begin(), w.end());
      CapsuleResp cr;
      Cqe cqe{0x11, 0x22, 3, 1, 42, status::kLbaOutOfRange.cqe_field()};
      fill_capsule_resp(cr, cqe, n);
      w = wire(&cr, sizeof cr, {});
      stream.insert(stream.end(), w.begin(), w.end());
      DataHeader dh;
      const auto payload = pattern(5000, 3);
      fill_c2h_data(dh, 42, 4096, 5000, true, true, n);
      w = wire(&dh, sizeof dh, payload);
      stream.insert(stream.end(), w.begin(), w.end());
      R2t r2;
      fill_r2t(r2, 9, 77, 8192, 65536, n);
      w = wire(&r2, sizeof r2, {});
      stream.insert(stream.end(), w.begin(), w.end());
      TermReq tr;
      const auto offending = pattern(24, 1);
      fill_term_req(tr, PduType::c2h_term_req, Fes::invalid_header_field, 2, 24);
      w = wire(&tr, sizeof tr, {});
      w.insert(w.end(), offending.begin(), offending.end());
      stream.insert(stream.end(), w.begin(), w.end());

      PduReader reader(Role::host, 1 << 20);
      Collector c;
      // The IC exchange happens before digests are on; switch after the first PDU.
      const auto ic = reader.consume(stream.data(), kIcLen, c);
      REQUIRE(ic.error == Errc::ok);
      REQUIRE(ic.bytes == kIcLen);
      reader.set_negotiated(n);
      std::vector<uint8_t> rest(stream.begin() + kIcLen, stream.end());
      REQUIRE(feed(reader, rest, c, chunk) == Errc::ok);
      REQUIRE(c.pdus.size() == 5);
      CHECK(reader.at_boundary());

      IcResp got_ic;
      std::memcpy(&got_ic, c.pdus[0].header.data(), sizeof got_ic);
      CHECK(got_ic.maxh2cdata == 65536u);
      CHECK(got_ic.digest == ((n.hdgst ? 1 : 0) | (n.ddgst ? 2 : 0)));
      CapsuleResp got_cr;
      std::memcpy(&got_cr, c.pdus[1].header.data(), sizeof got_cr);
      CHECK(got_cr.cqe.cid == 42);
      CHECK(got_cr.cqe.dw0 == 0x11u);
      CHECK(got_cr.cqe.status() == status::kLbaOutOfRange);
      DataHeader got_d;
      std::memcpy(&got_d, c.pdus[2].header.data(), sizeof got_d);
      CHECK(got_d.cccid == 42);
      CHECK(got_d.datao == 4096u);
      CHECK((got_d.ch.flags & pdu_flag::kSuccess) != 0);
      CHECK(c.pdus[2].data == payload);
      R2t got_r;
      std::memcpy(&got_r, c.pdus[3].header.data(), sizeof got_r);
      CHECK(got_r.ttag == 77);
      CHECK(got_r.r2tl == 65536u);
      TermReq got_t;
      std::memcpy(&got_t, c.pdus[4].header.data(), sizeof got_t);
      CHECK(got_t.fes == static_cast<uint16_t>(Fes::invalid_header_field));
      CHECK(c.pdus[4].header.size() == 48);
    }
  }
}

TEST_CASE("every controller-received PDU round trips", "[pdu]") {
  for (auto n : {digests(false, false), digests(true, true), digests(true, false, 3)}) {
    std::vector<uint8_t> stream;
    CapsuleCmd cc;
    Sqe sqe;
    prep_write(sqe, 1, 10, 2);
    sqe.cid = 5;
    const auto incap = pattern(8192, 9);
    set_sgl(sqe, sgl::kDataBlockOffset, 0, 8192);
    fill_capsule_cmd(cc, sqe, 8192, n);
    auto w = wire(&cc, sizeof cc, incap);
    stream.insert(stream.end(), w.begin(), w.end());
    CapsuleCmd nodata;
    prep_flush(sqe, 1);
    fill_capsule_cmd(nodata, sqe, 0, n);
    w = wire(&nodata, sizeof nodata, {});
    stream.insert(stream.end(), w.begin(), w.end());
    DataHeader h2c;
    const auto chunk = pattern(3000, 4);
    fill_h2c_data(h2c, 5, 12, 0, 3000, true, n);
    w = wire(&h2c, sizeof h2c, chunk);
    stream.insert(stream.end(), w.begin(), w.end());

    PduReader reader(Role::controller, 1 << 17);
    IcReq icq;
    fill_ic_req(icq, 0, n.hdgst, n.ddgst, 0);
    Collector c;
    auto icw = wire(&icq, sizeof icq, {});
    const auto ic = reader.consume(icw.data(), icw.size(), c);
    REQUIRE(ic.bytes == kIcLen);
    REQUIRE(ic.error == Errc::ok);
    reader.set_negotiated(n);
    REQUIRE(feed(reader, stream, c, 13) == Errc::ok);
    REQUIRE(c.pdus.size() == 4);
    CapsuleCmd got;
    std::memcpy(&got, c.pdus[1].header.data(), sizeof got);
    CHECK(got.sqe.cid == 5);
    CHECK(rw_slba(got.sqe) == 10u);
    CHECK(c.pdus[1].data == incap);
    CHECK(c.pdus[2].data.empty());
    CHECK(c.pdus[3].data == chunk);
    if (n.pda == 3) CHECK(got.ch.pdo == 80);  // 72 + 4 digest, aligned to 16
  }
}

TEST_CASE("malformed PDUs are refused with a reason, never read past", "[pdu]") {
  const Negotiated n = digests(true, true);
  auto resp_bytes = [&] {
    CapsuleResp cr;
    fill_capsule_resp(cr, Cqe{}, n);
    return wire(&cr, sizeof cr, {});
  };
  auto expect = [&](std::vector<uint8_t> bytes, Errc want, Role role = Role::host) {
    PduReader r(role, 4096);
    r.set_negotiated(n);
    Collector c;
    CHECK(feed(r, bytes, c, 5) == want);
    CHECK(c.pdus.empty());
    CHECK(r.last_check().err == want);
  };
  SECTION("unknown type") {
    auto b = resp_bytes();
    b[0] = 0x0b;
    expect(b, Errc::malformed_pdu);
  }
  SECTION("a type only the other end receives") {
    auto b = resp_bytes();
    expect(b, Errc::malformed_pdu, Role::controller);
  }
  SECTION("wrong HLEN") {
    auto b = resp_bytes();
    b[2] = 20;
    expect(b, Errc::malformed_pdu);
  }
  SECTION("PLEN shorter than the header") {
    auto b = resp_bytes();
    b[4] = 10;
    expect(b, Errc::malformed_pdu);
  }
  SECTION("header digest flag missing") {
    auto b = resp_bytes();
    b[1] = 0;
    expect(b, Errc::malformed_pdu);
  }
  SECTION("bad header digest") {
    auto b = resp_bytes();
    b[12] ^= 0xff;  // a CQE byte; the digest no longer matches
    expect(b, Errc::header_digest_error);
  }
  SECTION("bad data digest") {
    DataHeader d;
    fill_c2h_data(d, 1, 0, 100, true, false, n);
    auto b = wire(&d, sizeof d, pattern(100, 0));
    b[40] ^= 1;
    PduReader r(Role::host, 4096);
    r.set_negotiated(n);
    Collector c;
    CHECK(feed(r, b, c, 64) == Errc::data_digest_error);
    CHECK(c.pdus.empty());
  }
  SECTION("DATAL disagrees with PLEN") {
    DataHeader d;
    fill_c2h_data(d, 1, 0, 100, true, false, n);
    d.datal = 4000;
    expect(wire(&d, sizeof d, pattern(100, 0)), Errc::malformed_pdu);
  }
  SECTION("data longer than allowed") {
    DataHeader d;
    fill_c2h_data(d, 1, 0, 8192, true, false, n);
    expect(wire(&d, sizeof d, pattern(8192, 0)), Errc::malformed_pdu);
  }
  SECTION("PDO inside the header") {
    DataHeader d;
    fill_c2h_data(d, 1, 0, 100, true, false, n);
    auto b = wire(&d, sizeof d, pattern(100, 0));
    b[3] = 8;
    expect(b, Errc::malformed_pdu);
  }
  SECTION("R2T with a data segment") {
    R2t r2;
    fill_r2t(r2, 1, 1, 0, 10, n);
    r2.ch.plen += 8;
    auto b = std::vector<uint8_t>(reinterpret_cast<uint8_t*>(&r2), reinterpret_cast<uint8_t*>(&r2) + sizeof r2);
    expect(b, Errc::malformed_pdu);
  }
  SECTION("TermReq longer than the limit") {
    TermReq t;
    fill_term_req(t, PduType::c2h_term_req, Fes::sequence_error, 0, 24);
    t.ch.plen = 24 + 200;
    auto b = std::vector<uint8_t>(reinterpret_cast<uint8_t*>(&t), reinterpret_cast<uint8_t*>(&t) + sizeof t);
    expect(b, Errc::malformed_pdu);
  }
  SECTION("IC with a nonzero PFV") {
    IcResp icr;
    fill_ic_resp(icr, 0, false, false, 4096);
    icr.pfv = 1;
    PduReader r(Role::host, 4096);
    Collector c;
    auto b = std::vector<uint8_t>(reinterpret_cast<uint8_t*>(&icr), reinterpret_cast<uint8_t*>(&icr) + sizeof icr);
    CHECK(feed(r, b, c, 128) == Errc::unsupported);
  }
  SECTION("handler refusal stops the reader") {
    PduReader r(Role::host, 4096);
    r.set_negotiated(n);
    Collector c;
    c.reject = Errc::protocol_error;
    CHECK(feed(r, resp_bytes(), c, 100) == Errc::protocol_error);
  }
}

TEST_CASE("data offset honours digest and alignment", "[pdu]") {
  CHECK(data_offset(72, Negotiated{false, false, 0}) == 72u);
  CHECK(data_offset(72, Negotiated{true, false, 0}) == 76u);
  CHECK(data_offset(24, Negotiated{true, true, 31}) == 128u);
  CHECK(data_offset(24, Negotiated{false, false, 1}) == 24u);
}

// What recv_direct does with a large C2HData payload: the header and the first bytes through
// consume(), the rest written straight into data_room() and handed over with consume_placed().
TEST_CASE("C2HData received in place: the data lands once, its digest is checked, the PDU ends", "[pdu]") {
  for (bool ddgst : {false, true}) {
    const Negotiated n = digests(true, ddgst);
    DataHeader dh;
    const auto payload = pattern(20000, 5);
    fill_c2h_data(dh, 3, 0, static_cast<uint32_t>(payload.size()), true, false, n);
    std::vector<uint8_t> w = wire(&dh, sizeof dh, payload);
    const size_t data_at = dh.ch.pdo;
    const size_t first = data_at + 1000;  // the header and 1,000 bytes of data through consume()

    SECTION(std::string("data digest ") + (ddgst ? "on" : "off")) {
      PduReader reader(Role::host, 1 << 20);
      reader.set_negotiated(n);
      Collector c;
      CHECK(reader.data_room().empty());
      REQUIRE(reader.consume(w.data(), first, c).error == Errc::ok);
      std::span<uint8_t> room = reader.data_room();
      REQUIRE(room.size() == payload.size() - 1000);
      REQUIRE(room.data() == c.buf.data() + 1000);
      // Two receives in place, as the socket delivers them.
      std::memcpy(room.data(), w.data() + first, 7000);
      REQUIRE(reader.consume_placed(7000, c).error == Errc::ok);
      CHECK(c.pdus.empty());
      room = reader.data_room();
      REQUIRE(room.size() == payload.size() - 8000);
      std::memcpy(room.data(), w.data() + first + 7000, room.size());
      REQUIRE(reader.consume_placed(room.size(), c).error == Errc::ok);
      CHECK(reader.data_room().empty());
      if (ddgst) {
        CHECK(c.pdus.empty());  // the digest is still to come, through consume()
        const size_t rest = w.size() - (data_at + payload.size());
        REQUIRE(reader.consume(w.data() + data_at + payload.size(), rest, c).error == Errc::ok);
      }
      REQUIRE(c.pdus.size() == 1);
      CHECK(c.pdus[0].data == payload);
      CHECK(reader.at_boundary());
    }
    if (ddgst) {
      SECTION("a payload corrupted on the way in place fails its data digest") {
        PduReader reader(Role::host, 1 << 20);
        reader.set_negotiated(n);
        Collector c;
        REQUIRE(reader.consume(w.data(), first, c).error == Errc::ok);
        const std::span<uint8_t> room = reader.data_room();
        std::memcpy(room.data(), w.data() + first, room.size());
        room[100] ^= 0x40;
        REQUIRE(reader.consume_placed(room.size(), c).error == Errc::ok);
        const size_t rest = w.size() - (data_at + payload.size());
        CHECK(reader.consume(w.data() + data_at + payload.size(), rest, c).error == Errc::data_digest_error);
        CHECK(c.pdus.empty());
      }
    }
  }
}

// What recv_direct does between large payloads: each receive takes header_left() bytes, so it
// ends at a header's end (or a payload's start), never inside the next payload.
TEST_CASE("header_left() stops each receive at the end of the next header", "[pdu]") {
  for (bool hd : {false, true}) {
    for (bool dd : {false, true}) {
      INFO("header digest " << hd << ", data digest " << dd);
      const Negotiated n = digests(hd, dd);
      const uint32_t expected = static_cast<uint32_t>(kShortHlen + (hd ? kDigestLen : 0));
      // Two C2HData PDUs back to back, then a CapsuleResp.
      std::vector<uint8_t> stream;
      std::vector<size_t> payload_at;
      for (uint16_t cid : {1, 2}) {
        DataHeader dh;
        const auto payload = pattern(9000, cid);
        fill_c2h_data(dh, cid, 0, static_cast<uint32_t>(payload.size()), true, false, n);
        payload_at.push_back(stream.size() + dh.ch.pdo);
        const auto w = wire(&dh, sizeof dh, payload);
        stream.insert(stream.end(), w.begin(), w.end());
      }
      CapsuleResp cr;
      Cqe cqe{};
      cqe.cid = 7;
      fill_capsule_resp(cr, cqe, n);
      const auto w = wire(&cr, cr.ch.hlen, {});
      stream.insert(stream.end(), w.begin(), w.end());

      PduReader reader(Role::host, 1 << 20);
      reader.set_negotiated(n);
      Collector c;
      size_t at = 0;
      // At a boundary: exactly the first header; the payload is then all room.
      CHECK(reader.header_left(expected) == expected);
      REQUIRE(reader.consume(stream.data(), reader.header_left(expected), c).error == Errc::ok);
      at += expected;
      CHECK(at == payload_at[0]);
      CHECK(reader.header_left(expected) == 9000 + (dd ? kDigestLen : 0) + expected);
      REQUIRE(reader.data_room().size() == 9000);
      // 8,000 bytes placed; the rest, the digest and the next header in one receive.
      std::memcpy(reader.data_room().data(), stream.data() + at, 8000);
      REQUIRE(reader.consume_placed(8000, c).error == Errc::ok);
      at += 8000;
      const size_t left = reader.header_left(expected);
      CHECK(left == 1000 + (dd ? kDigestLen : 0) + expected);
      REQUIRE(reader.consume(stream.data() + at, left, c).error == Errc::ok);
      at += left;
      CHECK(at == payload_at[1]);
      CHECK(c.pdus.size() == 1);
      REQUIRE(reader.data_room().size() == 9000);
      std::memcpy(reader.data_room().data(), stream.data() + at, 9000);
      REQUIRE(reader.consume_placed(9000, c).error == Errc::ok);
      at += 9000;
      // Inside the digest (when there is one), a byte at a time: then the CapsuleResp's header.
      if (dd) {
        REQUIRE(reader.consume(stream.data() + at, 1, c).error == Errc::ok);
        ++at;
        CHECK(reader.header_left(expected) == kDigestLen - 1 + expected);
      }
      CHECK(reader.header_left(expected) == stream.size() - at);
      REQUIRE(reader.consume(stream.data() + at, stream.size() - at, c).error == Errc::ok);
      REQUIRE(c.pdus.size() == 3);
      CHECK(c.pdus[0].data == pattern(9000, 1));
      CHECK(c.pdus[1].data == pattern(9000, 2));
      CHECK(reader.at_boundary());
      CHECK(reader.header_left(expected) == expected);
    }
  }
}
