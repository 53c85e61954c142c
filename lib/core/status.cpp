#include "nvmeof/status.hpp"

#include <cstdio>

namespace nvmeof {
namespace {

const char* generic_name(uint8_t sc) {
  switch (sc) {
    case 0x00: return "success";
    case 0x01: return "invalid-opcode";
    case 0x02: return "invalid-field";
    case 0x03: return "cid-conflict";
    case 0x04: return "data-transfer-error";
    case 0x06: return "internal-error";
    case 0x07: return "abort-requested";
    case 0x08: return "abort-sq-deleted";
    case 0x0b: return "invalid-namespace";
    case 0x0c: return "command-sequence-error";
    case 0x0d: return "sgl-invalid-last";
    case 0x0e: return "sgl-invalid-count";
    case 0x0f: return "sgl-invalid-data-length";
    case 0x11: return "sgl-invalid-type";
    case 0x21: return "command-interrupted";
    case 0x80: return "lba-out-of-range";
    case 0x81: return "capacity-exceeded";
    case 0x82: return "namespace-not-ready";
    default: return nullptr;
  }
}

const char* command_specific_name(uint8_t sc) {
  switch (sc) {
    case 0x01: return "invalid-queue-id";
    case 0x02: return "invalid-queue-size";
    case 0x05: return "async-event-limit-exceeded";
    case 0x09: return "invalid-log-page";
    case 0x80: return "connect-incompatible-format";
    case 0x81: return "connect-controller-busy";
    case 0x82: return "connect-invalid-parameters";
    case 0x83: return "connect-restart-discovery";
    case 0x84: return "connect-invalid-host";
    default: return nullptr;
  }
}

const char* path_name(uint8_t sc) {
  switch (sc) {
    case 0x00: return "internal-path-error";
    case 0x01: return "ana-persistent-loss";
    case 0x02: return "ana-inaccessible";
    case 0x03: return "ana-transition";
    case 0x60: return "controller-pathing-error";
    case 0x70: return "host-pathing-error";
    case 0x71: return "aborted-by-host";
    default: return nullptr;
  }
}

class NvmeofCategory final : public std::error_category {
 public:
  const char* name() const noexcept override { return "nvmeof"; }
  std::string message(int v) const override {
    switch (static_cast<Errc>(v)) {
      case Errc::ok: return "success";
      case Errc::invalid_argument: return "invalid argument";
      case Errc::timeout: return "timed out";
      case Errc::connection_refused: return "connection refused or peer unreachable";
      case Errc::connection_closed: return "connection closed by peer";
      case Errc::connection_reset: return "connection reset";
      case Errc::malformed_pdu: return "malformed PDU";
      case Errc::header_digest_error: return "PDU header digest mismatch";
      case Errc::data_digest_error: return "PDU data digest mismatch";
      case Errc::protocol_error: return "protocol error";
      case Errc::peer_terminated: return "peer terminated the connection (TermReq)";
      case Errc::controller_fatal: return "controller fatal status or not ready";
      case Errc::short_data: return "data shorter than its header declares";
      case Errc::queue_full: return "queue full";
      case Errc::not_connected: return "not connected";
      case Errc::no_path: return "no usable path";
      case Errc::namespace_mismatch: return "paths disagree on the namespace identity";
      case Errc::unsupported: return "not supported";
      case Errc::keep_alive_timeout: return "keep-alive timeout";
      case Errc::authentication_failed: return "authentication failed";
      case Errc::authentication_required: return "authentication required but no key configured";
      case Errc::tls_handshake_failed: return "TLS handshake failed (PSK refused)";
      case Errc::tls_not_offered: return "the port does not offer TLS";
      case Errc::tls_required: return "the port requires TLS but no TLS PSK is configured";
    }
    return "unknown nvmeof error " + std::to_string(v);
  }
};

class NvmeCategory final : public std::error_category {
 public:
  const char* name() const noexcept override { return "nvme"; }
  std::string message(int v) const override {
    const NvmeStatus st{static_cast<uint16_t>(v)};
    std::string m = "NVMe status " + to_string(st);
    // The Connect statuses a user can act on get a plain explanation.
    if (st.sct() == Sct::command_specific && st.sc() == 0x84)
      m += ": host not allowed: the subsystem does not allow this host NQN (not on its allow list)";
    return m;
  }
};

}  // namespace

std::string to_string(NvmeStatus s) {
  const char* type = "vendor";
  const char* name = nullptr;
  switch (s.sct()) {
    case Sct::generic: type = "generic"; name = generic_name(s.sc()); break;
    case Sct::command_specific: type = "command-specific"; name = command_specific_name(s.sc()); break;
    case Sct::media: type = "media"; break;
    case Sct::path: type = "path"; name = path_name(s.sc()); break;
    default: break;
  }
  char buf[96];
  std::snprintf(buf, sizeof buf, "%s/%s (0x%04x%s)", type, name ? name : "unknown", s.raw,
                s.dnr() ? ", dnr" : "");
  return buf;
}

const std::error_category& nvmeof_category() noexcept {
  static const NvmeofCategory c;
  return c;
}
const std::error_category& nvme_category() noexcept {
  static const NvmeCategory c;
  return c;
}

}  // namespace nvmeof
