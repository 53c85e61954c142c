// DH-HMAC-CHAP messages (NVMe Base Specification, authentication protocol messages) as they
// travel in the data of the fabrics Authentication Send and Receive commands. All multi-byte
// fields are little-endian. Decoders check every length: a message shorter than its fixed
// header, or than the lengths its header announces, is refused with what was wrong; bytes after
// the end of a message (the zero padding of an Authentication Receive buffer) are ignored.
// Threading: plain functions on values.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "auth/crypto.hpp"
#include "core/auth_command.hpp"
#include "nvmeof/command.hpp"
#include "nvmeof/status.hpp"

namespace nvmeof::auth {

/// The fabrics Authentication Send/Receive fctypes. Their SECP/SPSP fields, the commands
/// (prep_auth_send/receive) and the Connect response's AUTHREQ bits: core/auth_command.hpp.
inline constexpr uint8_t kFctypeAuthSend = fctype::kAuthenticationSend;
inline constexpr uint8_t kFctypeAuthReceive = fctype::kAuthenticationReceive;
/// The status of a command refused because its queue has not authenticated (SCT 1, SC 91h).
inline constexpr NvmeStatus kAuthRequired = NvmeStatus::make(Sct::command_specific, 0x91, true);

namespace msg {
inline constexpr uint8_t kTypeCommon = 0x00;
inline constexpr uint8_t kTypeDhchap = 0x01;
inline constexpr uint8_t kNegotiate = 0x00;
inline constexpr uint8_t kChallenge = 0x01;
inline constexpr uint8_t kReply = 0x02;
inline constexpr uint8_t kSuccess1 = 0x03;
inline constexpr uint8_t kSuccess2 = 0x04;
inline constexpr uint8_t kFailure2 = 0xf0;
inline constexpr uint8_t kFailure1 = 0xf1;
inline constexpr uint8_t kAuthIdDhchap = 0x01;  ///< protocol descriptor AUTHID
inline constexpr size_t kHeaderSize = 8;        ///< type, id, reserved, T_ID (and 2 more)
inline constexpr size_t kNegotiateSize = 8;     ///< plus 64 per protocol descriptor
inline constexpr size_t kDescriptorSize = 64;
inline constexpr size_t kMaxIds = 30;           ///< hash ids, then DH group ids, per descriptor
inline constexpr size_t kChallengeSize = 16;    ///< plus HL + DHVLEN
inline constexpr size_t kReplySize = 16;        ///< plus 2 HL + DHVLEN
inline constexpr size_t kSuccess1Size = 16;     ///< plus HL
inline constexpr size_t kSuccess2Size = 16;
inline constexpr size_t kFailureSize = 8;
/// Largest message: a Challenge or Reply with SHA-512 and ffdhe8192.
inline constexpr size_t kMaxMessageSize = kReplySize + 2 * 64 + 1024;
}  // namespace msg

/// Reason code explanations of AUTH_Failure1/2 (the reason code itself is 01h, "failed").
enum class FailureReason : uint8_t {
  none = 0,
  failed = 0x01,             ///< authentication failed (a wrong key)
  not_usable = 0x02,         ///< authentication protocol not usable
  concat_mismatch = 0x03,    ///< secure channel concatenation mismatch
  hash_unusable = 0x04,      ///< no hash function both support
  dhgroup_unusable = 0x05,   ///< no Diffie-Hellman group both support
  incorrect_payload = 0x06,  ///< a message with wrong contents or lengths
  incorrect_message = 0x07,  ///< a message out of sequence
};
const char* failure_reason_name(FailureReason r) noexcept;

struct Negotiate {
  uint16_t tid = 0;
  uint8_t sc_c = 0;             ///< secure channel concatenation (0: none)
  std::vector<uint8_t> hashes;  ///< the host's hash ids, preferred first (at most 30)
  std::vector<uint8_t> groups;  ///< the host's DH group ids, preferred first (at most 30)
};
struct Challenge {
  uint16_t tid = 0;
  uint8_t hash = 0;   ///< HashId
  uint8_t group = 0;  ///< DhGroup
  uint32_t seqnum = 0;
  Bytes c;            ///< C1, HL bytes
  Bytes dhv;          ///< the controller's DH public value; empty for the null group
};
struct Reply {
  uint16_t tid = 0;
  Bytes response;       ///< R1, HL bytes
  bool cvalid = false;  ///< `challenge` holds C2 (bidirectional)
  uint32_t seqnum = 0;  ///< S2; 0 when not bidirectional
  Bytes challenge;      ///< C2, HL bytes (encoded as zeros when !cvalid)
  Bytes dhv;            ///< the host's DH public value
};
struct Success1 {
  uint16_t tid = 0;
  uint8_t hl = 0;
  bool rvalid = false;
  Bytes response;  ///< R2 when rvalid
};
struct Success2 {
  uint16_t tid = 0;
};
struct Failure {
  uint16_t tid = 0;
  uint8_t id = msg::kFailure1;  ///< kFailure1 (from the controller) or kFailure2 (from the host)
  uint8_t rescode = 0x01;
  FailureReason reason = FailureReason::failed;
};

/// The AUTH_ID of a message (its second byte) after checking the common 8-byte header and
/// AUTH_TYPE. Errors: invalid_argument, its detail saying what is wrong.
Result<uint8_t> message_id(std::span<const uint8_t> m);

Bytes encode(const Negotiate& m);
Bytes encode(const Challenge& m);
Bytes encode(const Reply& m);
Bytes encode(const Success1& m);
Bytes encode(const Success2& m);
Bytes encode(const Failure& m);

/// Each refuses (Errc::invalid_argument, the detail says what) a message of another type or id,
/// one shorter than it declares, and fields out of range (HL not a hash length, HL that does
/// not match HASHID, DHVLEN not the group's length, more than 30 ids, no DH-HMAC-CHAP
/// protocol descriptor).
Result<Negotiate> decode_negotiate(std::span<const uint8_t> m);
Result<Challenge> decode_challenge(std::span<const uint8_t> m);
Result<Reply> decode_reply(std::span<const uint8_t> m);
Result<Success1> decode_success1(std::span<const uint8_t> m);
Result<Success2> decode_success2(std::span<const uint8_t> m);
/// Failure1 or Failure2 (either AUTH_TYPE, as peers differ).
Result<Failure> decode_failure(std::span<const uint8_t> m);

}  // namespace nvmeof::auth
