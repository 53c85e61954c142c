// Errors of the TLS layer (category "nvmeof-tls"): key parsing, key derivation and the TLS 1.3
// PSK handshake. Returned as std::error_code through nvmeof::Result, like every control path.
#pragma once

#include <system_error>

namespace nvmeof::tls {

enum class TlsErrc {
  ok = 0,
  bad_key_format = 1,  ///< not "NVMeTLSkey-1:HH:<base64>:" (prefix, field, base64 or length)
  bad_key_crc,         ///< the CRC-32 appended to the key does not match it
  unsupported_hash,    ///< a hash field other than 00, 01, 02 (or 00 where a hash is needed)
  bad_key_length,      ///< a key length the hash does not allow (01: 32 bytes, 02: 48 bytes)
  bad_nqn,             ///< an empty NQN or one longer than 223 bytes
  crypto_failure,      ///< OpenSSL refused an operation (HKDF, HMAC, random bytes, context)
  psk_mismatch,        ///< both sides know the identity but hold different keys (binder failed)
  unknown_identity,    ///< the server holds no key for the identity the client offered
  no_shared_cipher,    ///< the two sides allow no common cipher suite for the PSK
  handshake_rejected,  ///< the peer aborted the handshake with an alert (reason is the peer's)
  handshake_failed,    ///< any other handshake failure (OpenSSL's reason in the log text)
  peer_closed,         ///< the peer closed the connection (before or after the handshake)
  handshake_timeout,   ///< the handshake did not finish before its deadline
  record_error,        ///< a TLS record failed to decrypt or verify after the handshake
  not_established,     ///< data offered before the handshake finished
  io_error,            ///< the socket failed (blocking helper only)
  ktls_unavailable,    ///< kernel TLS cannot take this connection (no ULP, keys refused, data buffered)
};

const std::error_category& tls_category() noexcept;
inline std::error_code make_error_code(TlsErrc e) noexcept {
  return {static_cast<int>(e), tls_category()};
}

}  // namespace nvmeof::tls

namespace std {
template <>
struct is_error_code_enum<nvmeof::tls::TlsErrc> : true_type {};
}  // namespace std
