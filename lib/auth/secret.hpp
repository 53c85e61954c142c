// DH-HMAC-CHAP secrets in the interchange form that nvme-cli prints and Linux reads
// (`nvme gen-dhchap-key`, `nvme connect --dhchap-secret`):
//   DHHC-1:<hh>:<base64 of key || CRC-32(key), little-endian>:
// where <hh> names the hash that transforms the key before use (00 none, 01 SHA-256, 02
// SHA-384, 03 SHA-512) and the key is 32, 48 or 64 bytes (with a transform, exactly that
// hash's length). The transform (NVMe Base Specification, DH-HMAC-CHAP secret
// representation) is HMAC-hh(key, NQN || "NVMe-over-Fabrics"): the host NQN for a host's
// secret, the subsystem NQN for a controller's.
// Threading: plain functions on values.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "auth/crypto.hpp"
#include "nvmeof/status.hpp"

namespace nvmeof::auth {

struct Secret {
  HashId transform = HashId::none;
  Bytes key;  ///< 32, 48 or 64 bytes
};

/// Parses and validates the interchange form (surrounding white space is ignored, so the
/// contents of a key file may be passed as read). Errors: Errc::invalid_argument, with what
/// was wrong as the detail (not DHHC-1, unknown transform, bad base64, key length, CRC-32).
Result<Secret> parse_secret(std::string_view text);

/// Reads a file holding one secret (as nvme-cli writes it). Errors: the errno of open/read,
/// or parse_secret's.
Result<Secret> read_secret_file(const std::string& path);

/// The interchange form of `s` (CRC-32 appended, base64, trailing colon).
std::string format_secret(const Secret& s);

/// A new random secret, as `nvme gen-dhchap-key --hmac=<transform> --key-length=<key_len>
/// --nqn=<nqn>` makes one: `key_len` random bytes (32, 48 or 64; with a transform it must be
/// that hash's length), transformed once with `nqn` when a transform is named (nvme-cli's
/// generated keys are such a transformed value). Errors: invalid_argument (lengths),
/// unsupported (the random source failed).
Result<Secret> generate_secret(HashId transform, size_t key_len, std::string_view nqn);

/// The key DH-HMAC-CHAP uses: HMAC-transform(key, nqn || "NVMe-over-Fabrics"), or the key
/// itself when the transform is none.
Bytes transform_secret(const Secret& s, std::string_view nqn);

/// The CRC-32 (ISO-HDLC, as zlib and gzip) of `data`.
uint32_t crc32(std::span<const uint8_t> data) noexcept;

}  // namespace nvmeof::auth
