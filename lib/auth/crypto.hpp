// The cryptography DH-HMAC-CHAP needs, all of it OpenSSL 3 (libcrypto): hashes and HMAC
// (EVP_MD, EVP_MAC), random bytes, and finite-field Diffie-Hellman in the RFC 7919 groups
// (EVP_PKEY "DH" with the group's name). Nothing here is written by hand.
// Threading: every function is reentrant; a DhKey belongs to one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "nvmeof/status.hpp"

namespace nvmeof::auth {

using Bytes = std::vector<uint8_t>;

/// Hash function identifiers (NVMe Base Specification, DH-HMAC-CHAP hash function identifier;
/// the same numbers name the transformation in a secret's `DHHC-1:0X:`).
enum class HashId : uint8_t { none = 0, sha256 = 1, sha384 = 2, sha512 = 3 };

/// Diffie-Hellman group identifiers (the DHGID of DH-HMAC-CHAP).
enum class DhGroup : uint8_t {
  null = 0,
  ffdhe2048 = 1,
  ffdhe3072 = 2,
  ffdhe4096 = 3,
  ffdhe6144 = 4,
  ffdhe8192 = 5,
};

/// Digest length in bytes (32, 48, 64); 0 for HashId::none or an unknown id.
size_t hash_length(HashId h) noexcept;
/// "sha256", ...; "none"; "unknown" for an id not defined.
const char* hash_name(HashId h) noexcept;
bool is_known_hash(uint8_t id) noexcept;
/// Public value and shared secret length in bytes (256 ... 1024); 0 for the null group.
size_t dh_length(DhGroup g) noexcept;
/// "null", "ffdhe2048", ...; "unknown" for an id not defined.
const char* dh_group_name(DhGroup g) noexcept;
bool is_known_dh_group(uint8_t id) noexcept;

/// H(data). Empty on an unknown hash or an OpenSSL failure.
Bytes digest(HashId h, std::span<const uint8_t> data);

/// HMAC-H(key, part_0 || part_1 || ...). Empty on an unknown hash or an OpenSSL failure.
Bytes hmac(HashId h, std::span<const uint8_t> key, std::initializer_list<std::span<const uint8_t>> parts);

/// Bytes from OpenSSL's CSPRNG; false if it failed.
bool random_bytes(std::span<uint8_t> out) noexcept;

/// Constant-time equality of two byte strings of the same length (false when lengths differ).
bool equal_secret(std::span<const uint8_t> a, std::span<const uint8_t> b) noexcept;

std::span<const uint8_t> as_bytes(std::string_view s) noexcept;

/// An ephemeral Diffie-Hellman key pair in one of the ffdhe groups.
class DhKey {
 public:
  /// Generates a key pair. Errors: unsupported when OpenSSL refuses, invalid_argument for the
  /// null group; the detail says which.
  static Result<std::unique_ptr<DhKey>> generate(DhGroup g);
  ~DhKey();
  DhKey(const DhKey&) = delete;
  DhKey& operator=(const DhKey&) = delete;

  DhGroup group() const noexcept { return group_; }
  /// g^x mod p, big-endian, padded to dh_length(group).
  const Bytes& public_value() const noexcept { return public_; }
  /// (peer)^x mod p, big-endian, padded to dh_length(group). Errors: invalid_argument when the
  /// peer value has the wrong length or is not a valid public value of the group, unsupported
  /// when OpenSSL fails to derive; the detail says which.
  Result<Bytes> shared_secret(std::span<const uint8_t> peer) const;

 private:
  DhKey(DhGroup g, void* pkey, Bytes pub) : group_(g), pkey_(pkey), public_(std::move(pub)) {}
  DhGroup group_;
  void* pkey_;  // EVP_PKEY*
  Bytes public_;
};

}  // namespace nvmeof::auth
