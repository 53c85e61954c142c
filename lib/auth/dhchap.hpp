// DH-HMAC-CHAP (NVMe Base Specification, in-band authentication) as two transport-agnostic
// state machines: the host's and the controller's. Each is fed the bytes of the message it
// received and answers with a Step: a message to send (then wait for the next one), done, or
// failed with a reason; done and failed may carry one last message to send. Any transport can
// drive them: the messages are the data of the fabrics Authentication Send/Receive commands.
//
// The transaction (host -> controller unless noted):
//   AUTH_Negotiate (T_ID, the host's hash and DH group ids)
//   <- DH-HMAC-CHAP_Challenge (chosen hash and group, S1, C1, the controller's g^y mod p)
//   DH-HMAC-CHAP_Reply (R1, S2 and C2 when bidirectional, the host's g^x mod p)
//   <- DH-HMAC-CHAP_Success1 (R2 when bidirectional)     or <- AUTH_Failure1
//   DH-HMAC-CHAP_Success2 (bidirectional, R2 verified)   or AUTH_Failure2
// with, Kh and Kc the transformed host and controller secrets (secret.hpp) and Z = g^xy mod p:
//   Ca = HMAC(H(Z), C) with a DH group, else Ca = C
//   R1 = HMAC(Kh, Ca1 || S1 || T_ID || 00h || "HostHost" || host NQN || 00h || subsystem NQN)
//   R2 = HMAC(Kc, Ca2 || S2 || T_ID || 00h || "Controller" || subsystem NQN || 00h || host NQN)
// (S as 4, T_ID as 2 little-endian bytes; H and HMAC with the negotiated hash).
//
// Threading: a machine belongs to one thread at a time; the machines share nothing.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "auth/crypto.hpp"
#include "auth/messages.hpp"
#include "auth/secret.hpp"
#include "nvmeof/status.hpp"

namespace nvmeof::auth {

enum class StepKind : uint8_t {
  send,    ///< send `out`, then feed the peer's next message
  done,    ///< authenticated; send `out` first when it is not empty
  failed,  ///< failed (`reason`, `error`); send `out` (a Failure message) first when not empty
};

struct Step {
  StepKind kind = StepKind::failed;
  Bytes out;
  FailureReason reason = FailureReason::none;
  std::string error;  ///< what went wrong, for a log line
};

/// What the host authenticates with.
struct HostAuthConfig {
  std::string hostnqn;
  std::string subnqn;
  Secret host_secret;
  /// Set: bidirectional, the controller must prove it holds this secret too.
  std::optional<Secret> ctrl_secret;
  /// Offered in this order (the controller picks; preferred first).
  std::vector<HashId> hashes{HashId::sha256, HashId::sha384, HashId::sha512};
  std::vector<DhGroup> groups{DhGroup::null,      DhGroup::ffdhe2048, DhGroup::ffdhe3072,
                              DhGroup::ffdhe4096, DhGroup::ffdhe6144, DhGroup::ffdhe8192};
  /// The transaction id (T_ID); any value, e.g. a per-controller counter.
  uint16_t tid = 0;
};

/// The host's side: start() gives AUTH_Negotiate; feed the Challenge and then Success1 (or a
/// Failure1) as they come.
class HostAuth {
 public:
  explicit HostAuth(HostAuthConfig cfg);
  ~HostAuth();
  HostAuth(const HostAuth&) = delete;
  HostAuth& operator=(const HostAuth&) = delete;

  Step start();
  Step on_message(std::span<const uint8_t> m);
  /// The negotiated hash and group, once the Challenge was accepted.
  HashId hash() const noexcept { return hash_; }
  DhGroup group() const noexcept { return group_; }

 private:
  enum class State : uint8_t { idle, await_challenge, await_success1, finished };
  Step on_challenge(std::span<const uint8_t> m);
  Step on_success1(std::span<const uint8_t> m);
  Step fail(FailureReason r, std::string error, bool tell_peer);

  HostAuthConfig cfg_;
  State state_ = State::idle;
  HashId hash_ = HashId::none;
  DhGroup group_ = DhGroup::null;
  Bytes session_hash_;  // H(Z); empty with the null group
  Bytes c2_;
  uint32_t s2_ = 0;
};

/// What the controller checks a host with.
struct ControllerAuthConfig {
  std::string hostnqn;
  std::string subnqn;
  Secret host_secret;
  /// Set: a host asking for bidirectional authentication gets R2 made with this. A host that
  /// asks for it while this is unset fails.
  std::optional<Secret> ctrl_secret;
  /// What the controller accepts; it picks the host's most preferred one among these.
  std::vector<HashId> hashes{HashId::sha256, HashId::sha384, HashId::sha512};
  std::vector<DhGroup> groups{DhGroup::null,      DhGroup::ffdhe2048, DhGroup::ffdhe3072,
                              DhGroup::ffdhe4096, DhGroup::ffdhe6144, DhGroup::ffdhe8192};
};

/// The controller's side: feed each message the host sends (Authentication Send data); the
/// Step's `out` is what the host's next Authentication Receive returns. A Negotiate at any
/// time starts a new transaction (re-authentication).
class ControllerAuth {
 public:
  explicit ControllerAuth(ControllerAuthConfig cfg);
  ~ControllerAuth();
  ControllerAuth(const ControllerAuth&) = delete;
  ControllerAuth& operator=(const ControllerAuth&) = delete;

  Step on_message(std::span<const uint8_t> m);
  uint16_t tid() const noexcept { return tid_; }
  HashId hash() const noexcept { return hash_; }
  DhGroup group() const noexcept { return group_; }
  /// True once a host authenticated (and, bidirectional, accepted our response).
  bool authenticated() const noexcept { return state_ == State::authenticated; }

 private:
  enum class State : uint8_t { await_negotiate, await_reply, await_success2, authenticated, failed };
  Step on_negotiate(std::span<const uint8_t> m);
  Step on_reply(std::span<const uint8_t> m);
  Step on_success2(std::span<const uint8_t> m);
  Step fail(FailureReason r, std::string error);

  ControllerAuthConfig cfg_;
  State state_ = State::await_negotiate;
  uint16_t tid_ = 0;
  HashId hash_ = HashId::none;
  DhGroup group_ = DhGroup::null;
  uint32_t s1_ = 0;
  Bytes c1_;
  std::unique_ptr<DhKey> dh_;
};

/// R1 or R2 as the header comment says; `challenge` already augmented. Empty on a hash error.
Bytes dhchap_response(HashId h, std::span<const uint8_t> key, std::span<const uint8_t> challenge,
                      uint32_t seqnum, uint16_t tid, std::string_view role, std::string_view nqn_first,
                      std::string_view nqn_second);

/// Sends `bytes` as the data of one Authentication Send.
using AuthSend = std::function<Result<void>(std::span<const uint8_t> bytes)>;
/// Issues one Authentication Receive with an allocation length of `max_len` and returns the
/// data (it may be zero-padded to `max_len`).
using AuthReceive = std::function<Result<Bytes>(size_t max_len)>;

/// The Authentication Receive allocation length run_host_authentication uses.
inline constexpr size_t kAuthReceiveLength = 4096;

/// Runs a whole DH-HMAC-CHAP transaction on one queue (admin or I/O) of a controller whose
/// Connect response asked for it (DW0 & kAuthReqAtr), over the caller's transport:
/// after a successful return the queue is authenticated. `qid` and `cntlid` only name the
/// queue in the log line a failure writes. Errors: Errc::authentication_failed (the controller
/// refused us with a Failure1, or we refused it: a wrong controller response, an unusable
/// hash or group, a malformed message; we then sent Failure2), or whatever `send` or
/// `receive` returned (timeouts and closed connections are theirs); the detail is a one-line
/// reason.
Result<void> run_host_authentication(const HostAuthConfig& cfg, uint16_t qid, uint16_t cntlid,
                                     const AuthSend& send, const AuthReceive& receive);

}  // namespace nvmeof::auth
