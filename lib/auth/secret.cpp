#include "auth/secret.hpp"

#include <isa-l/crc.h>
#include <openssl/evp.h>

#include <cerrno>
#include <iterator>

#include "core/key_text.hpp"

namespace nvmeof::auth {
namespace {

constexpr std::string_view kPrefix = "DHHC-1:";
constexpr std::string_view kTransformSuffix = "NVMe-over-Fabrics";

ErrorInfo bad(std::string text) {
  return {make_error_code(Errc::invalid_argument), "DH-HMAC-CHAP secret: " + std::move(text)};
}

bool valid_key_length(size_t n) noexcept { return n == 32 || n == 48 || n == 64; }

}  // namespace

uint32_t crc32(std::span<const uint8_t> data) noexcept {
  return crc32_gzip_refl(0, data.data(), data.size());
}

Result<Secret> parse_secret(std::string_view text) {
  constexpr std::string_view kSpace = " \t\r\n";
  const size_t first = text.find_first_not_of(kSpace);
  if (first == std::string_view::npos) return bad("empty");
  text = text.substr(first, text.find_last_not_of(kSpace) - first + 1);
  if (text.substr(0, kPrefix.size()) != kPrefix) return bad("does not start with DHHC-1:");
  text.remove_prefix(kPrefix.size());
  if (text.size() < 3 || text[2] != ':') return bad("no two-digit transform after DHHC-1:");
  const std::string_view hh = text.substr(0, 2);
  Secret s;
  if (hh == "00") s.transform = HashId::none;
  else if (hh == "01") s.transform = HashId::sha256;
  else if (hh == "02") s.transform = HashId::sha384;
  else if (hh == "03") s.transform = HashId::sha512;
  else return bad("unknown transform " + std::string(hh) + " (00, 01, 02 or 03)");
  text.remove_prefix(3);
  if (text.empty() || text.back() != ':') return bad("does not end with ':'");
  text.remove_suffix(1);
  if (text.find(':') != std::string_view::npos) return bad("more than four fields");
  // base64 of 36, 52 or 68 bytes is 48, 72 or 92 characters.
  if (text.size() % 4 != 0 || text.size() < 48 || text.size() > 92)
    return bad("base64 part of " + std::to_string(text.size()) +
                        " characters (48, 72 or 92 for a 32, 48 or 64 byte key)");
  Bytes raw(text.size() / 4 * 3);
  const std::string b64(text);
  const int n = EVP_DecodeBlock(raw.data(), reinterpret_cast<const unsigned char*>(b64.data()),
                                static_cast<int>(b64.size()));
  if (n < 0) return bad("not valid base64");
  // EVP_DecodeBlock counts the bytes the '=' padding stands for.
  size_t len = static_cast<size_t>(n);
  if (b64.back() == '=') --len;
  if (b64.size() >= 2 && b64[b64.size() - 2] == '=') --len;
  raw.resize(len);
  if (len < 4 || !valid_key_length(len - 4))
    return bad("key of " + std::to_string(len < 4 ? 0 : len - 4) + " bytes (32, 48 or 64)");
  const size_t key_len = len - 4;
  if (s.transform != HashId::none && key_len != hash_length(s.transform))
    return bad("key of " + std::to_string(key_len) + " bytes for transform " +
                        hash_name(s.transform) + " (needs " +
                        std::to_string(hash_length(s.transform)) + ")");
  const uint32_t want = raw[key_len] | raw[key_len + 1] << 8 | raw[key_len + 2] << 16 |
                        static_cast<uint32_t>(raw[key_len + 3]) << 24;
  raw.resize(key_len);
  if (crc32(raw) != want) return bad("CRC-32 mismatch (the key is corrupted)");
  s.key = std::move(raw);
  return s;
}

Result<Secret> read_secret_file(const std::string& path) {
  auto text = nvmeof::detail::read_key_text("@" + path);
  if (!text) return {text.error(), "DH-HMAC-CHAP secret file " + path + ": cannot open"};
  return parse_secret(*text);
}

std::string format_secret(const Secret& s) {
  Bytes raw = s.key;
  const uint32_t c = crc32(s.key);
  for (int i = 0; i < 4; ++i) raw.push_back(static_cast<uint8_t>(c >> (8 * i)));
  std::string b64(4 * ((raw.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(b64.data()), raw.data(),
                                static_cast<int>(raw.size()));
  b64.resize(n > 0 ? static_cast<size_t>(n) : 0);
  std::string out(kPrefix);
  out += '0';
  out += static_cast<char>('0' + static_cast<int>(s.transform));
  out += ':';
  out += b64;
  out += ':';
  return out;
}

Result<Secret> generate_secret(HashId transform, size_t key_len, std::string_view nqn) {
  if (!valid_key_length(key_len)) return bad("key length must be 32, 48 or 64");
  if (transform != HashId::none && key_len != hash_length(transform))
    return bad(std::string("a key transformed by ") + hash_name(transform) + " has " +
                        std::to_string(hash_length(transform)) + " bytes");
  Secret s;
  s.transform = transform;
  s.key.resize(key_len);
  if (!random_bytes(s.key))
    return {Errc::unsupported, "DH-HMAC-CHAP secret: the random source failed"};
  if (transform != HashId::none) s.key = transform_secret(s, nqn);
  return s;
}

Bytes transform_secret(const Secret& s, std::string_view nqn) {
  if (s.transform == HashId::none) return s.key;
  return hmac(s.transform, s.key, {as_bytes(nqn), as_bytes(kTransformSuffix)});
}

}  // namespace nvmeof::auth
