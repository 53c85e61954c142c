// NVMe/TCP pre-shared keys (NVMe TCP Transport Specification, "Pre-Shared Key" and "PSK
// Interchange Format"; TP 8011 and later):
//
//  * The configured PSK is exchanged as text "NVMeTLSkey-1:HH:<base64(key || CRC-32)>:", where HH
//    names the hash that turns it into a retained PSK (00: none, the configured PSK is the
//    retained PSK; 01: SHA-256, 32-byte key; 02: SHA-384, 48-byte key) and the CRC-32 (IEEE, as
//    gzip/zlib) of the key is appended little-endian before base64.
//  * Retained PSK = HKDF-Expand-Label(HKDF-Extract(0, configured), "HostNQN", hostnqn, L) with
//    L = length of the configured PSK and the hash HH (no transform for 00).
//  * TLS PSK = HKDF-Expand-Label(HKDF-Extract(0, retained), "nvme-tls-psk", context, L) with the
//    hash of the cipher suite (01: TLS_AES_128_GCM_SHA256, 02: TLS_AES_256_GCM_SHA384) and
//    L = its output size. For identity version 0 the context is the PSK identity
//    "NVMe0R0X <hostnqn> <subnqn>"; for version 1 it is "0X <digest>", where the digest is the
//    base64 of HMAC(retained, "<hostnqn> <subnqn> NVMe-over-Fabrics") and the identity is
//    "NVMe1R0X <hostnqn> <subnqn> <digest>". (This is what Linux's nvme-auth and libnvme compute,
//    so keys interoperate with nvme-cli and the kernel's tlshd handshake.)
//  * HKDF-Expand-Label is RFC 8446's: info = u16 L || u8 len || "tls13 " label || u8 len || context.
//
// All functions are pure (no global state) and safe from any thread.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "nvmeof/status.hpp"
#include "tls/tls_error.hpp"

namespace nvmeof::tls {

/// Hash identifier as the interchange form and the PSK identity write it ("00", "01", "02").
enum class PskHash : uint8_t { none = 0, sha256 = 1, sha384 = 2 };

/// The TLS 1.3 cipher suites NVMe/TCP allows. The suite's hash is the PSK identity's hash.
enum class CipherSuite : uint8_t { aes_128_gcm_sha256, aes_256_gcm_sha384 };

/// "TLS_AES_128_GCM_SHA256" / "TLS_AES_256_GCM_SHA384" (OpenSSL's and IANA's names).
const char* cipher_suite_name(CipherSuite s) noexcept;
/// The suite whose hash is `h` (sha256 -> AES-128, sha384 -> AES-256); none has no suite.
Result<CipherSuite> cipher_suite_for(PskHash h);
PskHash cipher_suite_hash(CipherSuite s) noexcept;
/// 32 for SHA-256, 48 for SHA-384, 0 for none.
size_t hash_size(PskHash h) noexcept;

/// Key bytes that are wiped (OPENSSL_cleanse) when destroyed or overwritten.
class SecretBytes {
 public:
  SecretBytes() = default;
  explicit SecretBytes(std::span<const uint8_t> b) : v_(b.begin(), b.end()) {}
  explicit SecretBytes(size_t n) : v_(n) {}
  SecretBytes(const SecretBytes& o) : v_(o.v_) {}
  SecretBytes(SecretBytes&& o) noexcept : v_(std::move(o.v_)) {}
  SecretBytes& operator=(const SecretBytes& o);
  SecretBytes& operator=(SecretBytes&& o) noexcept;
  ~SecretBytes();
  uint8_t* data() noexcept { return v_.data(); }
  const uint8_t* data() const noexcept { return v_.data(); }
  size_t size() const noexcept { return v_.size(); }
  bool empty() const noexcept { return v_.empty(); }
  std::span<const uint8_t> bytes() const noexcept { return {v_.data(), v_.size()}; }
  friend bool operator==(const SecretBytes& a, const SecretBytes& b) noexcept { return a.v_ == b.v_; }

 private:
  void wipe() noexcept;
  std::vector<uint8_t> v_;
};

/// A configured PSK: its bytes and the hash that derives the retained PSK from it.
struct ConfiguredPsk {
  PskHash hash = PskHash::none;
  SecretBytes key;  ///< 32 or 48 bytes (01: 32, 02: 48, 00: either)
};

/// Parses "NVMeTLSkey-1:HH:<base64>:" (a trailing newline is accepted).
/// Errors: bad_key_format (prefix, HH field, base64, missing final ':'), unsupported_hash (HH not
/// 00/01/02), bad_key_length (decoded key not 32/48 or not the one HH allows), bad_key_crc.
Result<ConfiguredPsk> parse_interchange(std::string_view text);
/// The interchange text of `psk`. Errors: unsupported_hash, bad_key_length.
Result<std::string> format_interchange(const ConfiguredPsk& psk);
/// A new random configured PSK for `hash` (RAND_bytes). `key_len` 0 picks the hash's size
/// (32 for none). Errors: bad_key_length, crypto_failure.
Result<ConfiguredPsk> generate_psk(PskHash hash, size_t key_len = 0);

/// The retained PSK of `psk` for the host `hostnqn` (a copy of the key when hash is none).
/// Errors: bad_nqn, bad_key_length, crypto_failure.
Result<SecretBytes> derive_retained_psk(const ConfiguredPsk& psk, std::string_view hostnqn);

/// RFC 8446 HKDF-Expand-Label(HKDF-Extract(0, ikm), label, context, out_len) with hash `h`
/// (sha256 or sha384), through OpenSSL's EVP_KDF "HKDF". Errors: unsupported_hash, crypto_failure.
Result<SecretBytes> hkdf_extract_expand_label(PskHash h, std::span<const uint8_t> ikm,
                                              std::string_view label, std::string_view context,
                                              size_t out_len);

/// PSK identity version: 0 "NVMe0R0X host sub", 1 "NVMe1R0X host sub digest" (TP 8018).
enum class IdentityVersion : uint8_t { v0 = 0, v1 = 1 };

/// The PSK digest of identity version 1: base64(HMAC-hash(retained, "host sub NVMe-over-Fabrics")).
Result<std::string> psk_digest(PskHash cipher_hash, std::span<const uint8_t> retained,
                               std::string_view hostnqn, std::string_view subnqn);
/// "NVMe0R0X <hostnqn> <subnqn>" (v0) or "NVMe1R0X <hostnqn> <subnqn> <digest>" (v1, the digest
/// computed from `retained`). Errors: bad_nqn, unsupported_hash, crypto_failure.
Result<std::string> psk_identity(IdentityVersion v, PskHash cipher_hash,
                                 std::span<const uint8_t> retained, std::string_view hostnqn,
                                 std::string_view subnqn);

/// What one TLS connection needs: the identity the client offers, the key both sides use and
/// the one cipher suite that key belongs to.
struct TlsPsk {
  std::string identity;
  SecretBytes key;
  CipherSuite suite = CipherSuite::aes_128_gcm_sha256;
};

/// The TLS PSK for (hostnqn, subnqn) from a retained PSK. `cipher_hash` none picks the hash of
/// the retained PSK's length (32: SHA-256, 48: SHA-384), as Linux does for an untransformed key.
/// Errors: bad_nqn, unsupported_hash, bad_key_length, crypto_failure.
Result<TlsPsk> derive_tls_psk(std::span<const uint8_t> retained, PskHash cipher_hash,
                              std::string_view hostnqn, std::string_view subnqn,
                              IdentityVersion v = IdentityVersion::v0);
/// Both steps from the configured PSK: retained PSK for hostnqn, then the TLS PSK.
Result<TlsPsk> derive_tls_psk(const ConfiguredPsk& configured, std::string_view hostnqn,
                              std::string_view subnqn, IdentityVersion v = IdentityVersion::v0);

/// Lower-case hex of `b` (for openssl's -psk argument and logs of non-secret values).
std::string to_hex(std::span<const uint8_t> b);

}  // namespace nvmeof::tls
