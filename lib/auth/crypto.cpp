#include "auth/crypto.hpp"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/dh.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/rand.h>

#include <cstring>

namespace nvmeof::auth {
namespace {

const char* md_name(HashId h) noexcept {
  switch (h) {
    case HashId::sha256: return "SHA256";
    case HashId::sha384: return "SHA384";
    case HashId::sha512: return "SHA512";
    default: return nullptr;
  }
}

// The failure `text` with OpenSSL's own reason appended when it queued one.
ErrorInfo failed(Errc code, std::string text) {
  const unsigned long e = ERR_get_error();
  if (e != 0) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    text += " (";
    text += buf;
    text += ")";
  }
  ERR_clear_error();
  return {make_error_code(code), std::move(text)};
}

struct PkeyCtxFree {
  void operator()(EVP_PKEY_CTX* c) const noexcept { EVP_PKEY_CTX_free(c); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* k) const noexcept { EVP_PKEY_free(k); }
};
using PkeyCtxPtr = std::unique_ptr<EVP_PKEY_CTX, PkeyCtxFree>;
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyFree>;

}  // namespace

size_t hash_length(HashId h) noexcept {
  switch (h) {
    case HashId::sha256: return 32;
    case HashId::sha384: return 48;
    case HashId::sha512: return 64;
    default: return 0;
  }
}

const char* hash_name(HashId h) noexcept {
  switch (h) {
    case HashId::none: return "none";
    case HashId::sha256: return "sha256";
    case HashId::sha384: return "sha384";
    case HashId::sha512: return "sha512";
  }
  return "unknown";
}

bool is_known_hash(uint8_t id) noexcept { return id >= 1 && id <= 3; }

size_t dh_length(DhGroup g) noexcept {
  switch (g) {
    case DhGroup::null: return 0;
    case DhGroup::ffdhe2048: return 256;
    case DhGroup::ffdhe3072: return 384;
    case DhGroup::ffdhe4096: return 512;
    case DhGroup::ffdhe6144: return 768;
    case DhGroup::ffdhe8192: return 1024;
  }
  return 0;
}

const char* dh_group_name(DhGroup g) noexcept {
  switch (g) {
    case DhGroup::null: return "null";
    case DhGroup::ffdhe2048: return "ffdhe2048";
    case DhGroup::ffdhe3072: return "ffdhe3072";
    case DhGroup::ffdhe4096: return "ffdhe4096";
    case DhGroup::ffdhe6144: return "ffdhe6144";
    case DhGroup::ffdhe8192: return "ffdhe8192";
  }
  return "unknown";
}

bool is_known_dh_group(uint8_t id) noexcept { return id <= 5; }

std::span<const uint8_t> as_bytes(std::string_view s) noexcept {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

Bytes digest(HashId h, std::span<const uint8_t> data) {
  const char* name = md_name(h);
  if (!name) return {};
  Bytes out(EVP_MAX_MD_SIZE);
  unsigned int len = 0;
  EVP_MD* md = EVP_MD_fetch(nullptr, name, nullptr);
  if (!md) return {};
  const bool ok = EVP_Digest(data.data(), data.size(), out.data(), &len, md, nullptr) == 1;
  EVP_MD_free(md);
  if (!ok) return {};
  out.resize(len);
  return out;
}

Bytes hmac(HashId h, std::span<const uint8_t> key, std::initializer_list<std::span<const uint8_t>> parts) {
  const char* name = md_name(h);
  if (!name) return {};
  EVP_MAC* mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  if (!mac) return {};
  EVP_MAC_CTX* ctx = EVP_MAC_CTX_new(mac);
  Bytes out;
  if (ctx) {
    OSSL_PARAM params[2] = {
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, const_cast<char*>(name), 0),
        OSSL_PARAM_construct_end()};
    // An empty key is legal HMAC input; OpenSSL wants a non-null pointer for it.
    static const uint8_t kNoKey = 0;
    bool ok = EVP_MAC_init(ctx, key.empty() ? &kNoKey : key.data(), key.size(), params) == 1;
    for (const auto& p : parts) {
      if (!ok) break;
      if (!p.empty()) ok = EVP_MAC_update(ctx, p.data(), p.size()) == 1;
    }
    size_t len = 0;
    out.resize(EVP_MAX_MD_SIZE);
    if (ok) ok = EVP_MAC_final(ctx, out.data(), &len, out.size()) == 1;
    out.resize(ok ? len : 0);
    EVP_MAC_CTX_free(ctx);
  }
  EVP_MAC_free(mac);
  return out;
}

bool random_bytes(std::span<uint8_t> out) noexcept {
  return out.empty() || RAND_bytes(out.data(), static_cast<int>(out.size())) == 1;
}

bool equal_secret(std::span<const uint8_t> a, std::span<const uint8_t> b) noexcept {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

Result<std::unique_ptr<DhKey>> DhKey::generate(DhGroup g) {
  if (g == DhGroup::null || dh_length(g) == 0) {
    return failed(Errc::invalid_argument, "no Diffie-Hellman key in the null group");
  }
  PkeyCtxPtr ctx(EVP_PKEY_CTX_new_from_name(nullptr, "DH", nullptr));
  if (!ctx || EVP_PKEY_keygen_init(ctx.get()) != 1) {
    return failed(Errc::unsupported, "OpenSSL has no DH key generation");
  }
  // An exponent of twice the group's security strength (RFC 7919, 5.2: 225 bits for ffdhe2048
  // up to 400 for ffdhe8192) rather than one as long as the prime: the same strength, a
  // fraction of the modular exponentiation.
  static constexpr int kPrivBits[] = {0, 225, 275, 325, 375, 400};
  int priv_bits = kPrivBits[static_cast<size_t>(g) < std::size(kPrivBits) ? static_cast<size_t>(g) : 0];
  OSSL_PARAM params[3] = {
      OSSL_PARAM_construct_utf8_string(OSSL_PKEY_PARAM_GROUP_NAME,
                                       const_cast<char*>(dh_group_name(g)), 0),
      OSSL_PARAM_construct_int(OSSL_PKEY_PARAM_DH_PRIV_LEN, &priv_bits),
      OSSL_PARAM_construct_end()};
  EVP_PKEY* raw = nullptr;
  if (EVP_PKEY_CTX_set_params(ctx.get(), params) != 1 || EVP_PKEY_generate(ctx.get(), &raw) != 1) {
    return failed(Errc::unsupported, std::string("OpenSSL could not generate a key in ") + dh_group_name(g));
  }
  PkeyPtr pkey(raw);
  // The encoded public key of a DH key is g^x mod p, big-endian, padded to the size of p.
  unsigned char* enc = nullptr;
  const size_t n = EVP_PKEY_get1_encoded_public_key(pkey.get(), &enc);
  if (n != dh_length(g)) {
    OPENSSL_free(enc);
    return failed(Errc::unsupported, "OpenSSL returned a public value of unexpected length");
  }
  Bytes pub(enc, enc + n);
  OPENSSL_free(enc);
  return std::unique_ptr<DhKey>(new DhKey(g, pkey.release(), std::move(pub)));
}

DhKey::~DhKey() { EVP_PKEY_free(static_cast<EVP_PKEY*>(pkey_)); }

Result<Bytes> DhKey::shared_secret(std::span<const uint8_t> peer) const {
  const size_t len = dh_length(group_);
  if (peer.size() != len) {
    return failed(Errc::invalid_argument, "Diffie-Hellman value of " + std::to_string(peer.size()) + " bytes, " +
                     dh_group_name(group_) + " needs " + std::to_string(len));
  }
  auto* own = static_cast<EVP_PKEY*>(pkey_);
  PkeyPtr peer_key(EVP_PKEY_new());
  if (!peer_key || EVP_PKEY_copy_parameters(peer_key.get(), own) != 1 ||
      EVP_PKEY_set1_encoded_public_key(peer_key.get(), peer.data(), peer.size()) != 1) {
    return failed(Errc::invalid_argument, "the peer's Diffie-Hellman value is not usable");
  }
  PkeyCtxPtr ctx(EVP_PKEY_CTX_new_from_pkey(nullptr, own, nullptr));
  // The range check refuses 0, 1, p-1 and values of p or more. The ffdhe primes are safe
  // primes, for which that is sufficient (RFC 7919, 5.1); the full check (y^q mod p) would add
  // a modular exponentiation per side per queue (about 10 ms for ffdhe2048 here).
  PkeyCtxPtr check(EVP_PKEY_CTX_new_from_pkey(nullptr, peer_key.get(), nullptr));
  if (!ctx || !check || EVP_PKEY_public_check_quick(check.get()) != 1) {
    return failed(Errc::invalid_argument, "the peer's Diffie-Hellman value is not a valid public value of the group");
  }
  size_t out_len = 0;
  if (EVP_PKEY_derive_init(ctx.get()) != 1 || EVP_PKEY_CTX_set_dh_pad(ctx.get(), 1) != 1 ||
      // Checked above; EVP_PKEY_derive_set_peer would run the full check again.
      EVP_PKEY_derive_set_peer_ex(ctx.get(), peer_key.get(), 0) != 1 ||
      EVP_PKEY_derive(ctx.get(), nullptr, &out_len) != 1) {
    return failed(Errc::unsupported, "Diffie-Hellman derivation failed");
  }
  Bytes out(out_len);
  if (EVP_PKEY_derive(ctx.get(), out.data(), &out_len) != 1 || out_len != len) {
    return failed(Errc::unsupported, "Diffie-Hellman derivation failed");
  }
  return out;
}

}  // namespace nvmeof::auth
