#include "tls/tls_error.hpp"

#include <string>

namespace nvmeof::tls {
namespace {

class TlsCategory final : public std::error_category {
 public:
  const char* name() const noexcept override { return "nvmeof-tls"; }
  std::string message(int v) const override {
    switch (static_cast<TlsErrc>(v)) {
      case TlsErrc::ok: return "success";
      case TlsErrc::bad_key_format: return "not a PSK in the NVMeTLSkey-1 interchange format";
      case TlsErrc::bad_key_crc: return "PSK interchange CRC-32 mismatch";
      case TlsErrc::unsupported_hash: return "unsupported PSK hash (00, 01 or 02)";
      case TlsErrc::bad_key_length: return "PSK length does not match its hash (01: 32, 02: 48)";
      case TlsErrc::bad_nqn: return "invalid NQN for PSK derivation";
      case TlsErrc::crypto_failure: return "OpenSSL operation failed";
      case TlsErrc::psk_mismatch: return "TLS handshake failed: the PSKs differ";
      case TlsErrc::unknown_identity: return "TLS handshake failed: unknown PSK identity";
      case TlsErrc::no_shared_cipher: return "TLS handshake failed: no shared cipher suite";
      case TlsErrc::handshake_rejected: return "TLS handshake rejected by the peer";
      case TlsErrc::handshake_failed: return "TLS handshake failed";
      case TlsErrc::peer_closed: return "TLS peer closed the connection";
      case TlsErrc::handshake_timeout: return "TLS handshake timed out";
      case TlsErrc::record_error: return "TLS record failed to decrypt";
      case TlsErrc::not_established: return "TLS session not established";
      case TlsErrc::io_error: return "TLS socket I/O failed";
      case TlsErrc::ktls_unavailable: return "kernel TLS unavailable for this connection";
    }
    return "unknown TLS error " + std::to_string(v);
  }
};

}  // namespace

const std::error_category& tls_category() noexcept {
  static const TlsCategory c;
  return c;
}

}  // namespace nvmeof::tls
