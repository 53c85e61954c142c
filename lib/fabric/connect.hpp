// The host side of Fabrics Connect, written once for every transport (NVMe over Fabrics 1.1,
// 3.3): the Connect command and its 1024-byte data, the response (CNTLID, AUTHREQ), and the
// post-connect step where in-band authentication (DH-HMAC-CHAP, NVMe Base 2.0, 8.13) runs.
//
// A transport supplies a CommandChannel over its just-connected queue (TCP: the set-up socket,
// before the reactor takes it over; RDMA: the queue pair's own completions, polled) and calls
// connect_queue(); it gets the CNTLID back, or the library error of whatever failed, with one
// log line naming the cause.
//
// Plugging in authentication. The transport's QpConfig carries a fabric::Authenticator
// (`authenticate`). After a successful Connect, post_connect() calls it with the channel and a
// PostConnect context (hostnqn, subnqn, qid, cntlid, the Connect response, the deadline and the
// log label) when it is set, whether or not the controller asked (a host may also authenticate
// unasked); without it, a response with AUTHREQ.ATR or AUTHREQ.ASCR set fails the connection
// with Errc::authentication_required ("authentication required but no key configured"). A
// DH-HMAC-CHAP host state machine is such an Authenticator: it exchanges its messages with
// auth_send() (Authentication Send, fctype 05h) and auth_receive() (Authentication Receive,
// fctype 06h), both with SECP E9h, SPSP0 01h, SPSP1 01h and TL/AL in CDW11, on the very queue
// being set up (admin and every I/O queue alike), and returns success when the transaction
// succeeded (the queue then goes live) or the reason it did not, its detail saying what went
// wrong (the transport closes the queue and connect() fails with it).
//
// Threading: everything here runs on the connecting thread, blocking up to the deadline.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "core/auth_command.hpp"
#include "nvmeof/command.hpp"
#include "nvmeof/status.hpp"

namespace nvmeof::fabric {

using Clock = std::chrono::steady_clock;

inline constexpr uint16_t kAdminCntlid = 0xffff;  ///< dynamic controller (admin Connect)
inline constexpr size_t kConnectDataLen = 1024;
inline constexpr size_t kNqnMaxLen = 223;  ///< bytes of an NQN, without its terminating NUL

// The AUTHREQ bits (kAuthReqAtr, kAuthReqAscr) and prep_auth_send/receive: core/auth_command.hpp.

/// What a queue's Connect says.
struct ConnectParams {
  uint16_t qid = 0;
  uint32_t depth = 32;       ///< commands the queue holds; SQSIZE = depth - 1 (1..65536)
  uint32_t kato_ms = 0;      ///< admin queue only
  uint16_t cntlid = kAdminCntlid;  ///< kAdminCntlid for the admin queue, else the admin's CNTLID
  std::string_view subnqn;
  std::string_view hostnqn;
  std::array<uint8_t, 16> hostid{};
  /// CATTR bit 2: the host asks the controller not to report SQ head pointers. A host that never
  /// reads SQHD loses nothing, and NVMe/TCP controllers then end a read with a SUCCESS-flagged
  /// C2HData instead of sending a CapsuleResp after it. A controller that cannot refuses the
  /// Connect with Connect Invalid Parameters.
  bool disable_sq_flow_control = false;
};

/// Fills the Connect command (without its data pointer: the transport sets the SGL) and its
/// 1024-byte data (host id, cntlid, subnqn, hostnqn). invalid_argument when depth is out of
/// range, subnqn is empty or an NQN is longer than kNqnMaxLen.
Result<void> build_connect(const ConnectParams& p, Sqe& cmd,
                           std::array<uint8_t, kConnectDataLen>& data);

/// The Connect response.
struct ConnectResponse {
  uint16_t cntlid = 0;
  bool auth_required = false;            ///< AUTHREQ.ATR
  bool secure_channel_required = false;  ///< AUTHREQ.ASCR
  uint32_t dw0 = 0;
};

/// Parses a Connect completion: its status as the library's error (an nvme_category() code,
/// e.g. Connect Invalid Parameters or Connect Invalid Host), else CNTLID and AUTHREQ.
Result<ConnectResponse> parse_connect_response(const Cqe& cqe);

/// A synchronous command channel over one just-connected queue (before it goes live): one
/// fabrics command at a time.
class CommandChannel {
 public:
  virtual ~CommandChannel() = default;
  /// Sends `cmd` (the channel sets CID and the data pointer) with the bytes of `out` as its data
  /// (host to controller), or with `in` as the buffer its data lands in (controller to host; at
  /// most in.size() bytes), at most one of them non-empty, and waits up to `deadline` for its
  /// completion. Returns the completion whatever its status; an error only when the queue
  /// itself failed: timeout, connection_closed / connection_reset, protocol_error or a PDU error
  /// (the queue is then unusable), invalid_argument when the data cannot be moved (both
  /// directions, or more than this channel can carry: NVMe/TCP sends at most the queue's
  /// in-capsule size and takes no R2T during set-up). The channel logs one line naming the
  /// cause of every error it returns.
  virtual Result<Cqe> execute(const Sqe& cmd, std::span<const uint8_t> out,
                              std::span<uint8_t> in, Clock::time_point deadline) = 0;

 protected:
  CommandChannel() = default;
  CommandChannel(const CommandChannel&) = default;
  CommandChannel& operator=(const CommandChannel&) = default;
};

/// What post_connect() tells the authenticator.
struct PostConnect {
  std::string_view hostnqn;
  std::string_view subnqn;
  uint16_t qid = 0;
  uint16_t cntlid = 0;         ///< from the Connect response (the admin's on an I/O queue)
  ConnectResponse response;    ///< AUTHREQ bits and raw DW0
  Clock::time_point deadline;  ///< the end of the queue's connect timeout
  std::string_view label;      ///< "tcp 127.0.0.1:4420 qid 1": the prefix of log lines
};

/// Runs after Connect on each queue; success lets the queue go live.
using Authenticator = std::function<Result<void>(CommandChannel&, const PostConnect&)>;

/// The post-connect step: `auth` when set; otherwise nothing, unless the controller asked for
/// authentication (ATR or ASCR), which fails with Errc::authentication_required.
Result<void> post_connect(CommandChannel& ch, const PostConnect& ctx, const Authenticator& auth);

/// Sends one authentication message on the queue. Errors: the channel's, or the command's
/// status as an nvme_category() code.
Result<void> auth_send(CommandChannel& ch, std::span<const uint8_t> msg,
                       Clock::time_point deadline);
/// Receives one authentication message (AL = buf.size()) into `buf`. Errors as auth_send().
Result<void> auth_receive(CommandChannel& ch, std::span<uint8_t> buf,
                          Clock::time_point deadline);

/// Connect on a just-connected queue, then post_connect(): the response, or the error (a log
/// line names it, prefixed with `label`: the channel's, or one from here, which is also the
/// error's detail).
Result<ConnectResponse> connect_queue(CommandChannel& ch, const ConnectParams& p,
                                      const Authenticator& auth, Clock::time_point deadline,
                                      std::string_view label);

}  // namespace nvmeof::fabric
