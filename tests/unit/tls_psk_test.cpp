// lib/tls key handling: the NVMe PSK interchange form, the retained and TLS PSK derivations and
// the PSK identities; second computations through the openssl command line and nvme-cli.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

#include "../common/tool_process.hpp"
#include "tls/psk.hpp"

using namespace nvmeof::tls;
using nvmeof::test::run_command;

namespace {

constexpr const char* kHost = "nqn.2014-08.org.nvmexpress:uuid:0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0";
constexpr const char* kSub = "nqn.2024-01.io.nvmeof:tls-test";

SecretBytes pattern_key(size_t n) {
  SecretBytes k(n);
  for (size_t i = 0; i < n; ++i) k.data()[i] = static_cast<uint8_t>(i * 7 + 3);
  return k;
}

bool have(const char* path) { return ::access(path, X_OK) == 0; }

// "AB:CD:..." (openssl kdf/mac output) to "abcd...".
std::string plain_hex(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (std::isxdigit(static_cast<unsigned char>(c))) out.push_back(static_cast<char>(std::tolower(c)));
    if (c == '\n') break;
  }
  return out;
}

std::string info_hex(size_t len, const std::string& label, const std::string& context) {
  const std::string l = "tls13 " + label;
  std::string info;
  info.reserve(4 + l.size() + context.size());
  info += static_cast<char>(len >> 8);
  info += static_cast<char>(len & 0xff);
  info += static_cast<char>(l.size());
  info += l;
  info += static_cast<char>(context.size());
  info += context;
  return to_hex({reinterpret_cast<const uint8_t*>(info.data()), info.size()});
}

// HKDF-Extract-and-Expand through `openssl kdf` (a second implementation path: the CLI builds the
// HKDF info we pass in hex ourselves, from RFC 8446's HkdfLabel layout).
std::string openssl_kdf(const char* md, const SecretBytes& key, size_t len, const std::string& info) {
  const auto r = run_command("openssl kdf -keylen " + std::to_string(len) + " -kdfopt digest:" + md +
                             " -kdfopt hexkey:" + to_hex(key.bytes()) + " -kdfopt hexinfo:" + info +
                             " HKDF");
  REQUIRE(r.exit_code == 0);
  return plain_hex(r.output);
}

}  // namespace

TEST_CASE("interchange form round-trips for every hash and length", "[tls][psk]") {
  for (auto [hash, len] : {std::pair{PskHash::none, size_t{32}}, std::pair{PskHash::none, size_t{48}},
                           std::pair{PskHash::sha256, size_t{32}}, std::pair{PskHash::sha384, size_t{48}}}) {
    ConfiguredPsk p{hash, pattern_key(len)};
    auto text = format_interchange(p);
    REQUIRE(text);
    CHECK(text->rfind("NVMeTLSkey-1:0" + std::to_string(static_cast<int>(hash)) + ":", 0) == 0);
    CHECK(text->back() == ':');
    CHECK(text->size() == 13 + 3 + (len == 32 ? 48 : 72) + 1);
    auto back = parse_interchange(*text + "\n");
    REQUIRE(back);
    CHECK(back->hash == hash);
    CHECK(back->key == p.key);
  }
}

TEST_CASE("interchange form errors are specific", "[tls][psk]") {
  auto good = format_interchange({PskHash::sha256, pattern_key(32)});
  REQUIRE(good);
  const std::string g = *good;
  auto err = [](const std::string& t) { return parse_interchange(t).error(); };
  CHECK(err("") == TlsErrc::bad_key_format);
  CHECK(err("NVMeTLSkey-2" + g.substr(12)) == TlsErrc::bad_key_format);
  CHECK(err(g.substr(0, g.size() - 1)) == TlsErrc::bad_key_format);        // no final ':'
  CHECK(err("NVMeTLSkey-1:03:" + g.substr(16)) == TlsErrc::unsupported_hash);
  CHECK(err("NVMeTLSkey-1:x1:" + g.substr(16)) == TlsErrc::bad_key_format);
  std::string bad_char = g;
  bad_char[20] = '*';
  CHECK(err(bad_char) == TlsErrc::bad_key_format);
  // A 32-byte key under hash 02 (which needs 48 bytes).
  CHECK(err("NVMeTLSkey-1:02:" + g.substr(16)) == TlsErrc::bad_key_length);
  // One bit of the key changed: the CRC no longer matches.
  std::string flipped = g;
  flipped[16] = flipped[16] == 'A' ? 'B' : 'A';
  CHECK(err(flipped) == TlsErrc::bad_key_crc);
  // 16 bytes + CRC: base64 of 20 bytes is well formed but too short.
  auto short_key = format_interchange({PskHash::none, pattern_key(16)});
  CHECK(short_key.error() == TlsErrc::bad_key_length);
  CHECK(err("NVMeTLSkey-1:01:AAAAAAAAAAAAAAAAAAAAAAAAAAAA:") == TlsErrc::bad_key_length);
  CHECK(format_interchange({PskHash::sha384, pattern_key(32)}).error() == TlsErrc::bad_key_length);
}

TEST_CASE("generated keys have the hash's size and differ", "[tls][psk]") {
  auto a = generate_psk(PskHash::sha256);
  auto b = generate_psk(PskHash::sha256);
  auto c = generate_psk(PskHash::sha384);
  REQUIRE(a);
  REQUIRE(b);
  REQUIRE(c);
  CHECK(a->key.size() == 32);
  CHECK(c->key.size() == 48);
  CHECK_FALSE(a->key == b->key);
  CHECK(generate_psk(PskHash::sha256, 48).error() == TlsErrc::bad_key_length);
  CHECK(generate_psk(PskHash::none, 48)->key.size() == 48);
}

TEST_CASE("identity strings follow NVMe/TCP's formats", "[tls][psk]") {
  const SecretBytes k = pattern_key(32);
  auto v0 = psk_identity(IdentityVersion::v0, PskHash::sha256, k.bytes(), kHost, kSub);
  REQUIRE(v0);
  CHECK(*v0 == std::string("NVMe0R01 ") + kHost + " " + kSub);
  auto v0b = psk_identity(IdentityVersion::v0, PskHash::sha384, k.bytes(), kHost, kSub);
  CHECK(*v0b == std::string("NVMe0R02 ") + kHost + " " + kSub);
  auto v1 = psk_identity(IdentityVersion::v1, PskHash::sha256, k.bytes(), kHost, kSub);
  REQUIRE(v1);
  auto d = psk_digest(PskHash::sha256, k.bytes(), kHost, kSub);
  REQUIRE(d);
  CHECK(d->size() == 44);  // base64 of a 32-byte HMAC
  CHECK(*v1 == std::string("NVMe1R01 ") + kHost + " " + kSub + " " + *d);
  CHECK(psk_digest(PskHash::sha384, pattern_key(48).bytes(), kHost, kSub)->size() == 64);
  CHECK(psk_identity(IdentityVersion::v0, PskHash::none, k.bytes(), kHost, kSub).error() ==
        TlsErrc::unsupported_hash);
  CHECK(psk_identity(IdentityVersion::v0, PskHash::sha256, k.bytes(), "", kSub).error() == TlsErrc::bad_nqn);
  CHECK(psk_identity(IdentityVersion::v0, PskHash::sha256, k.bytes(), kHost, std::string(224, 'n')).error() ==
        TlsErrc::bad_nqn);
}

TEST_CASE("derivations depend on every input", "[tls][psk]") {
  const ConfiguredPsk p{PskHash::sha256, pattern_key(32)};
  auto r1 = derive_retained_psk(p, kHost);
  auto r2 = derive_retained_psk(p, "nqn.2014-08.org.nvmexpress:uuid:other");
  REQUIRE(r1);
  REQUIRE(r2);
  CHECK(r1->size() == 32);
  CHECK_FALSE(*r1 == *r2);
  CHECK_FALSE(*r1 == p.key);
  // Hash 00: the configured PSK is the retained PSK.
  const ConfiguredPsk none{PskHash::none, pattern_key(48)};
  CHECK(*derive_retained_psk(none, kHost) == none.key);
  auto t1 = derive_tls_psk(p, kHost, kSub);
  auto t2 = derive_tls_psk(p, kHost, "nqn.2024-01.io.nvmeof:other");
  REQUIRE(t1);
  REQUIRE(t2);
  CHECK(t1->suite == CipherSuite::aes_128_gcm_sha256);
  CHECK_FALSE(t1->key == t2->key);
  auto t48 = derive_tls_psk(none, kHost, kSub);
  REQUIRE(t48);
  CHECK(t48->suite == CipherSuite::aes_256_gcm_sha384);
  CHECK(t48->key.size() == 48);
  CHECK(t48->identity.rfind("NVMe0R02 ", 0) == 0);
  auto tv1 = derive_tls_psk(p, kHost, kSub, IdentityVersion::v1);
  REQUIRE(tv1);
  CHECK_FALSE(tv1->key == t1->key);
}

TEST_CASE("HKDF derivations match the openssl command line", "[tls][psk][interop]") {
  if (!have("/usr/bin/openssl")) {
    WARN("openssl command not installed: second HKDF computation skipped");
    return;
  }
  for (auto [hash, md, len] : {std::tuple{PskHash::sha256, "SHA256", size_t{32}},
                               std::tuple{PskHash::sha384, "SHA384", size_t{48}}}) {
    const ConfiguredPsk p{hash, pattern_key(len)};
    auto retained = derive_retained_psk(p, kHost);
    REQUIRE(retained);
    CHECK(to_hex(retained->bytes()) == openssl_kdf(md, p.key, len, info_hex(len, "HostNQN", kHost)));

    auto tls = derive_tls_psk(retained->bytes(), hash, kHost, kSub);
    REQUIRE(tls);
    CHECK(to_hex(tls->key.bytes()) ==
          openssl_kdf(md, *retained, len, info_hex(len, "nvme-tls-psk", tls->identity)));

    // Version 1: the digest is an HMAC the openssl mac command computes too.
    auto d = psk_digest(hash, retained->bytes(), kHost, kSub);
    REQUIRE(d);
    const auto mac = run_command(std::string("printf '%s' '") + kHost + " " + kSub +
                                 " NVMe-over-Fabrics' | openssl mac -digest " + md + " -macopt hexkey:" +
                                 to_hex(retained->bytes()) + " -binary HMAC | base64 -w0");
    REQUIRE(mac.exit_code == 0);
    CHECK(mac.output == *d);
  }
}

TEST_CASE("interchange keys interoperate with nvme-cli", "[tls][psk][interop]") {
  if (!have("/usr/sbin/nvme")) {
    WARN("nvme-cli not installed: interop with nvme gen-tls-key/check-tls-key skipped");
    return;
  }
  for (int hmac : {1, 2}) {
    // nvme-cli's key is read by us ...
    auto gen = run_command("/usr/sbin/nvme gen-tls-key --hmac=" + std::to_string(hmac));
    REQUIRE(gen.exit_code == 0);
    const std::string line = gen.output.substr(0, gen.output.find('\n'));
    auto parsed = parse_interchange(line);
    REQUIRE(parsed);
    CHECK(static_cast<int>(parsed->hash) == hmac);
    CHECK(parsed->key.size() == (hmac == 1 ? 32u : 48u));
    // ... and written back identically.
    CHECK(*format_interchange(*parsed) == line);

    // Our key is accepted by nvme-cli (2.3 checks prefix, hash, length and CRC).
    auto ours = generate_psk(static_cast<PskHash>(hmac));
    REQUIRE(ours);
    const std::string text = *format_interchange(*ours);
    auto check = run_command("/usr/sbin/nvme check-tls-key --key=" + text);
    CHECK(check.exit_code == 0);
    CHECK(check.output.find("Key is valid (HMAC " + std::to_string(hmac)) != std::string::npos);
    // And a key we reject for its CRC, nvme-cli rejects too.
    std::string flipped = text;
    flipped[16] = flipped[16] == 'A' ? 'B' : 'A';
    CHECK(parse_interchange(flipped).error() == TlsErrc::bad_key_crc);
    CHECK(run_command("/usr/sbin/nvme check-tls-key --key=" + flipped).exit_code != 0);
  }
}
