#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "core/crc32c.hpp"

using nvmeof::detail::crc32c;
using nvmeof::detail::crc32c_final;
using nvmeof::detail::crc32c_update;
using nvmeof::detail::kCrc32cSeed;

TEST_CASE("crc32c matches the published check values", "[crc32c]") {
  const std::string check = "123456789";
  CHECK(crc32c(check.data(), check.size()) == 0xe3069283u);
  // RFC 3720 B.4: 32 bytes of zeros and 32 bytes of 0xff.
  std::vector<uint8_t> zeros(32, 0), ones(32, 0xff), inc(32);
  for (int i = 0; i < 32; ++i) inc[static_cast<size_t>(i)] = static_cast<uint8_t>(i);
  CHECK(crc32c(zeros.data(), zeros.size()) == 0x8a9136aau);
  CHECK(crc32c(ones.data(), ones.size()) == 0x62a8ab43u);
  CHECK(crc32c(inc.data(), inc.size()) == 0x46dd794eu);
  CHECK(crc32c(nullptr, 0) == 0u);
}

TEST_CASE("crc32c can be computed in pieces", "[crc32c]") {
  std::vector<uint8_t> buf(10000);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<uint8_t>(i * 31 + 7);
  const uint32_t whole = crc32c(buf.data(), buf.size());
  for (size_t cut : {size_t{1}, size_t{3}, size_t{4096}, size_t{9999}}) {
    uint32_t s = crc32c_update(kCrc32cSeed, buf.data(), cut);
    s = crc32c_update(s, buf.data() + cut, buf.size() - cut);
    CHECK(crc32c_final(s) == whole);
  }
  buf[5000] ^= 1;
  CHECK(crc32c(buf.data(), buf.size()) != whole);
}
