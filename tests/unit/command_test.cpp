#include <catch2/catch.hpp>

#include "core/fabrics_command.hpp"

using namespace nvmeof;

TEST_CASE("read and write prep fill SLBA and a 0's based NLB", "[command]") {
  Sqe c;
  std::memset(&c, 0xab, sizeof c);
  prep_read(c, 7, 0x1'2345'6789ull, 8);
  CHECK(c.opcode == opcode::kRead);
  CHECK(c.nsid == 7u);
  CHECK(c.cdw10 == 0x23456789u);
  CHECK(c.cdw11 == 0x1u);
  CHECK(c.cdw12 == 7u);
  CHECK(c.flags == 0);
  CHECK(c.cdw13 == 0u);
  CHECK(rw_slba(c) == 0x1'2345'6789ull);
  CHECK(rw_nlb(c) == 8u);
  CHECK(is_controller_to_host(c));
  prep_write(c, 1, 0, 65536);
  CHECK(c.opcode == opcode::kWrite);
  CHECK(c.cdw12 == 0xffffu);
  CHECK(rw_nlb(c) == 65536u);
  CHECK(is_host_to_controller(c));
}

TEST_CASE("admin and fabrics prep helpers", "[command]") {
  Sqe c;
  prep_identify(c, cns::kController, 0, 3);
  CHECK(c.opcode == opcode::kIdentify);
  CHECK(c.cdw10 == (1u | (3u << 16)));
  prep_get_log_page(c, log_page::kAna, 0xffffffff, 4096, 8);
  CHECK((c.cdw10 & 0xff) == 0x0cu);
  CHECK((c.cdw10 >> 16) == 1023u);
  CHECK(c.cdw12 == 8u);
  prep_connect(c, 5, 127, 5000);
  CHECK(c.opcode == opcode::kFabrics);
  CHECK(fabrics_type(c) == fctype::kConnect);
  CHECK((c.cdw10 >> 16) == 5u);
  CHECK((c.cdw11 & 0xffff) == 127u);
  CHECK(c.cdw12 == 5000u);
  CHECK(is_host_to_controller(c));
  prep_property_set(c, prop::kCc, 0x460001, false);
  CHECK(fabrics_type(c) == fctype::kPropertySet);
  CHECK(c.cdw11 == prop::kCc);
  CHECK(c.cdw12 == 0x460001u);
  prep_dsm(c, 1, 3, kDsmDeallocate);
  CHECK(c.cdw10 == 2u);
  CHECK(c.cdw11 == 4u);
}

TEST_CASE("SGL descriptors round trip", "[command]") {
  Sqe c;
  prep_write(c, 1, 0, 1);
  set_sgl(c, sgl::kDataBlockOffset, 0, 4096);
  CHECK((c.flags & 0xc0) == sgl::kPsdtSgl);
  CHECK(sgl_id(c) == 0x01);
  CHECK(sgl_length(c) == 4096u);
  set_sgl(c, sgl::kTransportDataBlock, 0, 1u << 20);
  CHECK(sgl_id(c) == 0x5a);
  CHECK(sgl_length(c) == (1u << 20));
  CHECK(sgl_address(c) == 0u);
}

TEST_CASE("status fields decode", "[status]") {
  NvmeStatus s = NvmeStatus::make(Sct::path, 0x02);
  CHECK(s.sct() == Sct::path);
  CHECK(s.sc() == 0x02);
  CHECK_FALSE(s.dnr());
  CHECK_FALSE(s.is_success());
  NvmeStatus r = NvmeStatus::from_cqe_field(static_cast<uint16_t>((1u << 15) | (2u << 12) | (0x80u << 1) | 1u));
  CHECK(r.dnr());
  CHECK(r.crd() == 2);
  CHECK(r.sc() == 0x80);
  CHECK(r.cqe_field() >> 1 == r.raw);
  CHECK(to_string(status::kLbaOutOfRange).find("lba-out-of-range") != std::string::npos);
  CHECK(to_string(status::kHostPathError).find("host-pathing-error") != std::string::npos);
  std::error_code ec = make_error_code(status::kAnaInaccessible);
  CHECK(ec.category().name() == std::string("nvme"));
  CHECK(ec.message().find("ana-inaccessible") != std::string::npos);
  std::error_code e2 = nvmeof::Errc::malformed_pdu;
  CHECK(e2.message() == "malformed PDU");
}

TEST_CASE("Result carries a value or an error", "[status]") {
  Result<int> ok = 5;
  REQUIRE(ok);
  CHECK(*ok == 5);
  Result<int> bad = Errc::timeout;
  CHECK_FALSE(bad);
  CHECK(bad.error() == make_error_code(Errc::timeout));
  Result<void> v;
  CHECK(v);
  Result<void> vb = errno_code(ECONNREFUSED);
  CHECK(vb.error().value() == ECONNREFUSED);
}

TEST_CASE("prep_cross_controller_reset names the controller by CNTLID, CIU and CIRN", "[command][ccr]") {
  Sqe c;
  prep_cross_controller_reset(c, 0x1234, 0xab, 0x1122334455667788ull);
  CHECK(c.opcode == 0x38);
  CHECK(c.nsid == 0);
  CHECK(c.cdw10 == (0x1234u | (0xabu << 16)));
  CHECK(c.cdw12 == 0x55667788u);
  CHECK(c.cdw13 == 0x11223344u);
}
