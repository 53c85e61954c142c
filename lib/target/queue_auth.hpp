// DH-HMAC-CHAP on one queue of the embedded target: the controller's machine (auth/dhchap.hpp)
// behind the fabrics Authentication Send (05h) and Receive (06h) commands. A queue whose host
// has a key in its subsystem's host entry (TargetSubsystem::hosts) gets AUTHREQ.ATR in its
// Connect response and executes nothing but these two commands (and Disconnect) until the
// transaction succeeds; everything else completes with Authentication Required (SCT 1, SC
// 91h, DNR), as Linux nvmet answers. A Failure1 is handed to the host's next Authentication
// Receive, after which the queue ends; a Failure2 from the host ends it at once.
// Threading: owned by the queue's connection thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "auth/dhchap.hpp"
#include "nvmeof/command.hpp"
#include "nvmeof/status.hpp"
#include "nvmeof/target.hpp"

namespace nvmeof::target {

/// The host entry of `hostnqn` in subsystem `subnqn`, or nullptr.
const TargetHost* find_host_entry(const TargetOptions& opts, const std::string& subnqn,
                                  const std::string& hostnqn) noexcept;

/// Checks every key of every host entry (Target::start refuses bad ones). invalid_argument, its
/// detail naming the host and the fault, for a key that does not parse or a controller key
/// without a host key.
Result<void> valid_host_keys(const TargetOptions& opts);

class QueueAuth {
 public:
  /// For a host entry with a dhchap_key. invalid_argument, the detail saying why, when a key
  /// does not parse or the hash or DH group is unknown.
  static Result<std::unique_ptr<QueueAuth>> create(const TargetHost& host, const std::string& subnqn);

  bool authenticated() const noexcept { return authenticated_; }

  struct Outcome {
    NvmeStatus status;  ///< the command's completion status
    bool end_queue = false;  ///< the transaction failed: the queue ends once this completes
    std::string log;   ///< a line worth logging (a success or a failure), else empty
  };
  /// An Authentication Send with `data` (the bytes the host transferred).
  Outcome on_send(const Sqe& c, std::span<const uint8_t> data);
  /// An Authentication Receive whose buffer holds `xfer_len` bytes: `out` gets the message,
  /// zero-padded to min(AL, xfer_len).
  Outcome on_receive(const Sqe& c, uint32_t xfer_len, auth::Bytes& out);

 private:
  explicit QueueAuth(auth::ControllerAuthConfig cfg) : machine_(std::move(cfg)) {}

  auth::ControllerAuth machine_;
  bool authenticated_ = false;
  bool have_pending_ = false;      // a message waits for the host's Authentication Receive
  auth::Step pending_;
};

}  // namespace nvmeof::target
