// Status and error types shared by every layer.
//
// Errors follow two conventions, and only two:
//  * The hot path (submit, completions, PDU handling on a reactor) returns -errno or a small
//    enum, and hands a completion's NvmeStatus (the raw 15-bit status field, CQE DW3 bits 31:17)
//    to the caller untouched. A failed transport completes outstanding commands with the NVMe
//    "host pathing error" (SCT 3h, SC 70h), the status Linux uses for the same case.
//  * The control path (connect, authentication, identify, discovery, key and message parsing,
//    setting up a control plane) returns Result<T>, an expected-like type: no bare
//    std::error_code return, no text out-parameter, no constructor that throws. Its codes come
//    from three categories: errno (std::system_category), NVMe status (nvme_category(), value =
//    raw status) and the library's own conditions (Errc). A failure may carry a detail text
//    beside its code (what exactly was wrong, for logs and users), which message() gives in
//    place of the code's own message.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <system_error>
#include <type_traits>
#include <utility>
#include <variant>
#include "nvmeof/export.h"

NVMEOF_API_BEGIN  // every declaration below is public API (default visibility)
namespace nvmeof {

/// Status Code Type (SCT) of an NVMe completion.
enum class Sct : uint8_t {
  generic = 0,
  command_specific = 1,
  media = 2,
  path = 3,
  vendor = 7,
};

/// The raw status field of a completion without the phase bit:
/// bits 7:0 SC, 10:8 SCT, 12:11 CRD, 13 More, 14 DNR.
struct NvmeStatus {
  uint16_t raw = 0;

  static constexpr NvmeStatus make(Sct sct, uint8_t sc, bool dnr_bit = false) noexcept {
    return NvmeStatus{static_cast<uint16_t>((static_cast<unsigned>(sct) << 8) | sc |
                                            (dnr_bit ? (1u << 14) : 0u))};
  }
  /// Rebuilds the status from CQE DW3 bits 31:16 (phase bit in bit 0 is dropped).
  static constexpr NvmeStatus from_cqe_field(uint16_t field) noexcept {
    return NvmeStatus{static_cast<uint16_t>(field >> 1)};
  }
  constexpr uint16_t cqe_field() const noexcept { return static_cast<uint16_t>(raw << 1); }

  constexpr uint8_t sc() const noexcept { return raw & 0xff; }
  constexpr Sct sct() const noexcept { return static_cast<Sct>((raw >> 8) & 0x7); }
  /// Command Retry Delay index (0: retry at once, 1..3: CRDT1..3 of Identify Controller).
  constexpr uint8_t crd() const noexcept { return (raw >> 11) & 0x3; }
  constexpr bool more() const noexcept { return (raw >> 13) & 1; }
  constexpr bool dnr() const noexcept { return (raw >> 14) & 1; }
  constexpr bool is_success() const noexcept { return (raw & 0x7ff) == 0; }
  /// Status code and type only (no CRD/More/DNR), for comparisons.
  constexpr uint16_t code() const noexcept { return raw & 0x7ff; }

  friend constexpr bool operator==(NvmeStatus a, NvmeStatus b) noexcept { return a.raw == b.raw; }
};

namespace status {
inline constexpr NvmeStatus kSuccess{};
inline constexpr NvmeStatus kInvalidOpcode = NvmeStatus::make(Sct::generic, 0x01, true);
inline constexpr NvmeStatus kInvalidField = NvmeStatus::make(Sct::generic, 0x02, true);
inline constexpr NvmeStatus kDataTransferError = NvmeStatus::make(Sct::generic, 0x04);
inline constexpr NvmeStatus kInternalError = NvmeStatus::make(Sct::generic, 0x06);
inline constexpr NvmeStatus kAbortRequested = NvmeStatus::make(Sct::generic, 0x07);
inline constexpr NvmeStatus kInvalidNamespace = NvmeStatus::make(Sct::generic, 0x0b, true);
inline constexpr NvmeStatus kCommandSequenceError = NvmeStatus::make(Sct::generic, 0x0c, true);
inline constexpr NvmeStatus kSglInvalidType = NvmeStatus::make(Sct::generic, 0x11, true);
/// Command Interrupted: not done, and worth trying again (no DNR).
inline constexpr NvmeStatus kCommandInterrupted = NvmeStatus::make(Sct::generic, 0x21);
inline constexpr NvmeStatus kLbaOutOfRange = NvmeStatus::make(Sct::generic, 0x80, true);
inline constexpr NvmeStatus kNamespaceNotReady = NvmeStatus::make(Sct::generic, 0x82);
inline constexpr NvmeStatus kConnectInvalidParameters =
    NvmeStatus::make(Sct::command_specific, 0x82, true);
inline constexpr NvmeStatus kConnectInvalidHost =
    NvmeStatus::make(Sct::command_specific, 0x84, true);
inline constexpr NvmeStatus kAnaPersistentLoss = NvmeStatus::make(Sct::path, 0x01);
inline constexpr NvmeStatus kAnaInaccessible = NvmeStatus::make(Sct::path, 0x02);
inline constexpr NvmeStatus kAnaTransition = NvmeStatus::make(Sct::path, 0x03);
/// Completion of a command whose queue pair failed before the controller answered.
inline constexpr NvmeStatus kHostPathError = NvmeStatus::make(Sct::path, 0x70);
}  // namespace status

/// A short human-readable name of an NVMe status, e.g. "generic/lba-out-of-range (0x0080, dnr)".
std::string to_string(NvmeStatus s);

/// The library's own error conditions (category "nvmeof").
enum class Errc {
  ok = 0,
  invalid_argument = 1,   ///< a parameter out of range or malformed
  timeout,                ///< an operation did not finish before its deadline
  connection_refused,     ///< the peer refused or could not be reached
  connection_closed,      ///< the peer closed the connection
  connection_reset,       ///< the connection was reset (or reset by fault injection)
  malformed_pdu,          ///< a PDU with an unknown type, wrong length or bad field
  header_digest_error,    ///< a PDU header digest (CRC32C) did not match
  data_digest_error,      ///< a PDU data digest (CRC32C) did not match
  protocol_error,         ///< a sequence the protocol forbids (unexpected PDU, unknown CID, ...)
  peer_terminated,        ///< the peer sent a termination request (C2HTermReq/H2CTermReq)
  controller_fatal,       ///< CSTS.CFS set or the controller never became ready
  short_data,             ///< a log page or identify buffer shorter than its own header says
  queue_full,             ///< no free command slot
  not_connected,          ///< the queue pair or controller is not connected
  no_path,                ///< no usable path to the namespace before no_path_timeout
  namespace_mismatch,     ///< paths disagree on the namespace identity
  unsupported,            ///< the peer or the machine lacks a needed feature
  keep_alive_timeout,     ///< no command arrived within the keep-alive timeout
  authentication_failed,  ///< DH-HMAC-CHAP failed: a wrong key, or no hash or DH group in common
  authentication_required,  ///< the controller requires in-band authentication, no key is set
  tls_handshake_failed,   ///< NVMe/TCP TLS: the controller refused the PSK (key, identity) or suite
  tls_not_offered,        ///< NVMe/TCP TLS: the port answered the ClientHello in plaintext or closed
  tls_required,           ///< a plaintext connection closed right after its ICReq: the port requires TLS
};

const std::error_category& nvmeof_category() noexcept;
/// Category whose values are raw NvmeStatus values.
const std::error_category& nvme_category() noexcept;

inline std::error_code make_error_code(Errc e) noexcept {
  return {static_cast<int>(e), nvmeof_category()};
}
inline std::error_code make_error_code(NvmeStatus s) noexcept {
  return {static_cast<int>(s.raw), nvme_category()};
}
inline std::error_code errno_code(int err) noexcept { return {err, std::system_category()}; }

/// Why a control-path operation failed: the error code callers branch on and, optionally, a text
/// for people (a log line, a tool's error message) that says more than the code's message. The
/// text sits behind one shared, immutable pointer rather than in a std::string, so a Result is
/// only an error code and a pointer larger than its value, copies cheaply, and allocates only
/// when a failure has something to say.
struct ErrorInfo {
  std::error_code ec;
  std::shared_ptr<const std::string> detail;  ///< null when the code says it all

  ErrorInfo() = default;
  ErrorInfo(std::error_code c) : ec(c) {}  // NOLINT: implicit by design
  ErrorInfo(std::error_code c, std::string text)
      : ec(c), detail(text.empty() ? nullptr : std::make_shared<const std::string>(std::move(text))) {}
  const std::string& text() const noexcept {
    static const std::string kNone;
    return detail ? *detail : kNone;
  }
  std::string message() const { return detail ? *detail : ec.message(); }
};

/// Result<T>: a value or an error (expected-like), the error optionally with a detail text.
/// Result<void> carries only an error.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(std::error_code ec) : v_(ErrorInfo{ec}) {}     // NOLINT
  Result(Errc e) : v_(ErrorInfo{make_error_code(e)}) {}  // NOLINT
  Result(std::error_code ec, std::string detail) : v_(ErrorInfo{ec, std::move(detail)}) {}
  Result(Errc e, std::string detail) : v_(ErrorInfo{make_error_code(e), std::move(detail)}) {}
  Result(ErrorInfo e) : v_(std::move(e)) {}  // NOLINT: passes another Result's failure on

  bool has_value() const noexcept { return v_.index() == 0; }
  explicit operator bool() const noexcept { return has_value(); }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  std::error_code error() const noexcept {
    return has_value() ? std::error_code{} : std::get<1>(v_).ec;
  }
  /// The detail text of a failure; empty on success or when the failure has none.
  const std::string& detail() const noexcept {
    static const std::string kNone;
    return has_value() ? kNone : std::get<1>(v_).text();
  }
  /// The detail text when there is one, else the error code's message; empty on success.
  std::string message() const { return has_value() ? std::string{} : std::get<1>(v_).message(); }
  /// The failure (code and detail), to return from a caller of another Result type.
  ErrorInfo failure() const { return has_value() ? ErrorInfo{} : std::get<1>(v_); }

 private:
  std::variant<T, ErrorInfo> v_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(std::error_code ec) : e_(ec) {}     // NOLINT
  Result(Errc e) : e_(make_error_code(e)) {}  // NOLINT
  Result(std::error_code ec, std::string detail) : e_(ec, std::move(detail)) {}
  Result(Errc e, std::string detail) : e_(make_error_code(e), std::move(detail)) {}
  Result(ErrorInfo e) : e_(std::move(e)) {}  // NOLINT
  bool has_value() const noexcept { return !e_.ec; }
  explicit operator bool() const noexcept { return has_value(); }
  std::error_code error() const noexcept { return e_.ec; }
  const std::string& detail() const noexcept { return e_.text(); }
  std::string message() const { return has_value() ? std::string{} : e_.message(); }
  ErrorInfo failure() const { return e_; }

 private:
  ErrorInfo e_;
};

}  // namespace nvmeof

NVMEOF_API_END

namespace std {
template <>
struct is_error_code_enum<nvmeof::Errc> : true_type {};
}  // namespace std
