#include "tls/psk.hpp"

#include <isa-l/crc.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/params.h>
#include <openssl/rand.h>

#include <memory>

namespace nvmeof::tls {
namespace {

constexpr std::string_view kPrefix = "NVMeTLSkey-1:";
// NVMe Base Specification: an NQN is at most 223 bytes (NVMF_NQN_SIZE - 1).
constexpr size_t kMaxNqn = 223;

const char* digest_name(PskHash h) noexcept {
  switch (h) {
    case PskHash::sha256: return "SHA256";
    case PskHash::sha384: return "SHA384";
    case PskHash::none: break;
  }
  return nullptr;
}

bool valid_nqn(std::string_view nqn) noexcept { return !nqn.empty() && nqn.size() <= kMaxNqn; }

bool key_length_allowed(PskHash h, size_t n) noexcept {
  switch (h) {
    case PskHash::none: return n == 32 || n == 48;
    case PskHash::sha256: return n == 32;
    case PskHash::sha384: return n == 48;
  }
  return false;
}

uint32_t crc32_ieee(std::span<const uint8_t> b) noexcept {
  // crc32_gzip_refl applies the initial and final inversion itself: seed 0 gives zlib's crc32.
  return crc32_gzip_refl(0, b.data(), b.size());
}

std::string base64(std::span<const uint8_t> b) {
  std::string out(4 * ((b.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()), b.data(),
                                static_cast<int>(b.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

struct KdfDeleter {
  void operator()(EVP_KDF* k) const noexcept { EVP_KDF_free(k); }
  void operator()(EVP_KDF_CTX* c) const noexcept { EVP_KDF_CTX_free(c); }
  void operator()(EVP_MAC* m) const noexcept { EVP_MAC_free(m); }
  void operator()(EVP_MAC_CTX* c) const noexcept { EVP_MAC_CTX_free(c); }
};

}  // namespace

SecretBytes& SecretBytes::operator=(const SecretBytes& o) {
  if (this != &o) {
    wipe();
    v_ = o.v_;
  }
  return *this;
}
SecretBytes& SecretBytes::operator=(SecretBytes&& o) noexcept {
  if (this != &o) {
    wipe();
    v_ = std::move(o.v_);
  }
  return *this;
}
SecretBytes::~SecretBytes() { wipe(); }
void SecretBytes::wipe() noexcept {
  if (!v_.empty()) OPENSSL_cleanse(v_.data(), v_.size());
}

const char* cipher_suite_name(CipherSuite s) noexcept {
  return s == CipherSuite::aes_256_gcm_sha384 ? "TLS_AES_256_GCM_SHA384" : "TLS_AES_128_GCM_SHA256";
}
Result<CipherSuite> cipher_suite_for(PskHash h) {
  switch (h) {
    case PskHash::sha256: return CipherSuite::aes_128_gcm_sha256;
    case PskHash::sha384: return CipherSuite::aes_256_gcm_sha384;
    case PskHash::none: break;
  }
  return make_error_code(TlsErrc::unsupported_hash);
}
PskHash cipher_suite_hash(CipherSuite s) noexcept {
  return s == CipherSuite::aes_256_gcm_sha384 ? PskHash::sha384 : PskHash::sha256;
}
size_t hash_size(PskHash h) noexcept {
  return h == PskHash::sha256 ? 32 : h == PskHash::sha384 ? 48 : 0;
}

std::string to_hex(std::span<const uint8_t> b) {
  static const char* const kDigits = "0123456789abcdef";
  std::string s;
  s.reserve(b.size() * 2);
  for (uint8_t c : b) {
    s.push_back(kDigits[c >> 4]);
    s.push_back(kDigits[c & 0xf]);
  }
  return s;
}

Result<ConfiguredPsk> parse_interchange(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.remove_suffix(1);
  if (text.substr(0, kPrefix.size()) != kPrefix) return make_error_code(TlsErrc::bad_key_format);
  text.remove_prefix(kPrefix.size());
  if (text.size() < 4 || text[2] != ':' || text.back() != ':') {
    return make_error_code(TlsErrc::bad_key_format);
  }
  const char h0 = text[0], h1 = text[1];
  if (h0 < '0' || h0 > '9' || h1 < '0' || h1 > '9') return make_error_code(TlsErrc::bad_key_format);
  const int hv = (h0 - '0') * 10 + (h1 - '0');
  if (hv > 2) return make_error_code(TlsErrc::unsupported_hash);
  const auto hash = static_cast<PskHash>(hv);

  const std::string_view b64 = text.substr(3, text.size() - 4);
  // 32 + 4 or 48 + 4 bytes: 48 or 72 base64 characters; anything else is malformed or the wrong
  // length, told apart after decoding.
  if (b64.empty() || b64.size() % 4 != 0 || b64.size() > 128) {
    return make_error_code(TlsErrc::bad_key_format);
  }
  for (char c : b64) {
    const bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                    c == '+' || c == '/' || c == '=';
    if (!ok) return make_error_code(TlsErrc::bad_key_format);
  }
  size_t pad = 0;
  while (pad < 2 && b64[b64.size() - 1 - pad] == '=') ++pad;
  if (b64.find('=') < b64.size() - pad) return make_error_code(TlsErrc::bad_key_format);
  SecretBytes raw(b64.size() / 4 * 3);
  const int n = EVP_DecodeBlock(raw.data(), reinterpret_cast<const unsigned char*>(b64.data()),
                                static_cast<int>(b64.size()));
  if (n < 0 || static_cast<size_t>(n) < pad + 4) return make_error_code(TlsErrc::bad_key_format);
  const size_t total = static_cast<size_t>(n) - pad;
  const size_t key_len = total - 4;
  if (!key_length_allowed(hash, key_len)) return make_error_code(TlsErrc::bad_key_length);

  const std::span<const uint8_t> key(raw.data(), key_len);
  const uint8_t* c = raw.data() + key_len;
  const uint32_t stored = uint32_t{c[0]} | uint32_t{c[1]} << 8 | uint32_t{c[2]} << 16 |
                          uint32_t{c[3]} << 24;
  if (stored != crc32_ieee(key)) return make_error_code(TlsErrc::bad_key_crc);
  return ConfiguredPsk{hash, SecretBytes(key)};
}

Result<std::string> format_interchange(const ConfiguredPsk& psk) {
  if (static_cast<uint8_t>(psk.hash) > 2) return make_error_code(TlsErrc::unsupported_hash);
  if (!key_length_allowed(psk.hash, psk.key.size())) return make_error_code(TlsErrc::bad_key_length);
  SecretBytes raw(psk.key.size() + 4);
  std::copy(psk.key.data(), psk.key.data() + psk.key.size(), raw.data());
  const uint32_t crc = crc32_ieee(psk.key.bytes());
  for (int i = 0; i < 4; ++i) raw.data()[psk.key.size() + static_cast<size_t>(i)] = static_cast<uint8_t>(crc >> (8 * i));
  std::string out(kPrefix);
  out += '0';
  out += static_cast<char>('0' + static_cast<int>(psk.hash));
  out += ':';
  std::string b = base64(raw.bytes());
  out += b;
  OPENSSL_cleanse(b.data(), b.size());
  out += ':';
  return out;
}

Result<ConfiguredPsk> generate_psk(PskHash hash, size_t key_len) {
  if (static_cast<uint8_t>(hash) > 2) return make_error_code(TlsErrc::unsupported_hash);
  if (key_len == 0) key_len = hash == PskHash::none ? 32 : hash_size(hash);
  if (!key_length_allowed(hash, key_len)) return make_error_code(TlsErrc::bad_key_length);
  ConfiguredPsk p{hash, SecretBytes(key_len)};
  if (RAND_bytes(p.key.data(), static_cast<int>(key_len)) != 1) {
    return make_error_code(TlsErrc::crypto_failure);
  }
  return p;
}

Result<SecretBytes> hkdf_extract_expand_label(PskHash h, std::span<const uint8_t> ikm,
                                              std::string_view label, std::string_view context,
                                              size_t out_len) {
  const char* md = digest_name(h);
  if (md == nullptr) return make_error_code(TlsErrc::unsupported_hash);
  const std::string full_label = "tls13 " + std::string(label);
  if (full_label.size() > 255 || context.size() > 255 || out_len > 0xffff || out_len == 0) {
    return make_error_code(TlsErrc::crypto_failure);
  }
  std::vector<uint8_t> info;
  info.reserve(4 + full_label.size() + context.size());
  info.push_back(static_cast<uint8_t>(out_len >> 8));
  info.push_back(static_cast<uint8_t>(out_len));
  info.push_back(static_cast<uint8_t>(full_label.size()));
  info.insert(info.end(), full_label.begin(), full_label.end());
  info.push_back(static_cast<uint8_t>(context.size()));
  info.insert(info.end(), context.begin(), context.end());

  std::unique_ptr<EVP_KDF, KdfDeleter> kdf(EVP_KDF_fetch(nullptr, OSSL_KDF_NAME_HKDF, nullptr));
  if (!kdf) return make_error_code(TlsErrc::crypto_failure);
  std::unique_ptr<EVP_KDF_CTX, KdfDeleter> ctx(EVP_KDF_CTX_new(kdf.get()));
  if (!ctx) return make_error_code(TlsErrc::crypto_failure);
  // No salt: HKDF-Extract(0, ikm) is HMAC keyed with HashLen zero bytes, which is what HMAC
  // does with an empty key (RFC 5869 2.2).
  int mode = EVP_KDF_HKDF_MODE_EXTRACT_AND_EXPAND;
  const OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, const_cast<char*>(md), 0),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, const_cast<uint8_t*>(ikm.data()),
                                        ikm.size()),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, info.data(), info.size()),
      OSSL_PARAM_construct_int(OSSL_KDF_PARAM_MODE, &mode),
      OSSL_PARAM_construct_end(),
  };
  SecretBytes out(out_len);
  if (EVP_KDF_derive(ctx.get(), out.data(), out_len, params) != 1) {
    return make_error_code(TlsErrc::crypto_failure);
  }
  return out;
}

Result<SecretBytes> derive_retained_psk(const ConfiguredPsk& psk, std::string_view hostnqn) {
  if (!valid_nqn(hostnqn)) return make_error_code(TlsErrc::bad_nqn);
  if (!key_length_allowed(psk.hash, psk.key.size())) return make_error_code(TlsErrc::bad_key_length);
  if (psk.hash == PskHash::none) return psk.key;
  return hkdf_extract_expand_label(psk.hash, psk.key.bytes(), "HostNQN", hostnqn, psk.key.size());
}

Result<std::string> psk_digest(PskHash cipher_hash, std::span<const uint8_t> retained,
                               std::string_view hostnqn, std::string_view subnqn) {
  const char* md = digest_name(cipher_hash);
  if (md == nullptr) return make_error_code(TlsErrc::unsupported_hash);
  if (!valid_nqn(hostnqn) || !valid_nqn(subnqn)) return make_error_code(TlsErrc::bad_nqn);
  std::unique_ptr<EVP_MAC, KdfDeleter> mac(EVP_MAC_fetch(nullptr, OSSL_MAC_NAME_HMAC, nullptr));
  if (!mac) return make_error_code(TlsErrc::crypto_failure);
  std::unique_ptr<EVP_MAC_CTX, KdfDeleter> ctx(EVP_MAC_CTX_new(mac.get()));
  if (!ctx) return make_error_code(TlsErrc::crypto_failure);
  const OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, const_cast<char*>(md), 0),
      OSSL_PARAM_construct_end(),
  };
  const std::string msg = std::string(hostnqn) + ' ' + std::string(subnqn) + " NVMe-over-Fabrics";
  uint8_t out[EVP_MAX_MD_SIZE];
  size_t out_len = 0;
  if (EVP_MAC_init(ctx.get(), retained.data(), retained.size(), params) != 1 ||
      EVP_MAC_update(ctx.get(), reinterpret_cast<const uint8_t*>(msg.data()), msg.size()) != 1 ||
      EVP_MAC_final(ctx.get(), out, &out_len, sizeof out) != 1) {
    return make_error_code(TlsErrc::crypto_failure);
  }
  return base64({out, out_len});
}

Result<std::string> psk_identity(IdentityVersion v, PskHash cipher_hash,
                                 std::span<const uint8_t> retained, std::string_view hostnqn,
                                 std::string_view subnqn) {
  if (cipher_hash != PskHash::sha256 && cipher_hash != PskHash::sha384) {
    return make_error_code(TlsErrc::unsupported_hash);
  }
  if (!valid_nqn(hostnqn) || !valid_nqn(subnqn)) return make_error_code(TlsErrc::bad_nqn);
  std::string id = v == IdentityVersion::v1 ? "NVMe1R0" : "NVMe0R0";
  id += static_cast<char>('0' + static_cast<int>(cipher_hash));
  id += ' ';
  id += hostnqn;
  id += ' ';
  id += subnqn;
  if (v == IdentityVersion::v1) {
    auto d = psk_digest(cipher_hash, retained, hostnqn, subnqn);
    if (!d) return d.error();
    id += ' ';
    id += *d;
  }
  return id;
}

Result<TlsPsk> derive_tls_psk(std::span<const uint8_t> retained, PskHash cipher_hash,
                              std::string_view hostnqn, std::string_view subnqn,
                              IdentityVersion v) {
  if (retained.size() != 32 && retained.size() != 48) return make_error_code(TlsErrc::bad_key_length);
  if (cipher_hash == PskHash::none) {
    cipher_hash = retained.size() == 48 ? PskHash::sha384 : PskHash::sha256;
  }
  auto suite = cipher_suite_for(cipher_hash);
  if (!suite) return suite.error();
  auto id = psk_identity(v, cipher_hash, retained, hostnqn, subnqn);
  if (!id) return id.error();
  std::string context;
  if (v == IdentityVersion::v0) {
    context = *id;
  } else {
    // Version 1 binds the key to the hash and the digest, not to the whole identity string.
    auto d = psk_digest(cipher_hash, retained, hostnqn, subnqn);
    if (!d) return d.error();
    context.reserve(3 + d->size());
    context += '0';
    context += static_cast<char>('0' + static_cast<int>(cipher_hash));
    context += ' ';
    context += *d;
  }
  auto key = hkdf_extract_expand_label(cipher_hash, retained, "nvme-tls-psk", context,
                                       hash_size(cipher_hash));
  if (!key) return key.error();
  return TlsPsk{std::move(*id), std::move(*key), *suite};
}

Result<TlsPsk> derive_tls_psk(const ConfiguredPsk& configured, std::string_view hostnqn,
                              std::string_view subnqn, IdentityVersion v) {
  auto retained = derive_retained_psk(configured, hostnqn);
  if (!retained) return retained.error();
  return derive_tls_psk(retained->bytes(), configured.hash, hostnqn, subnqn, v);
}

}  // namespace nvmeof::tls
