// Blocking set-up of an NVMe/TCP connection: TCP connect, the TLS handshake (QpConfig::tls),
// ICReq/ICResp, Fabrics Connect (and its post-connect step), the last three inside TLS then.
// Used by QueuePair::connect on the caller's thread before the reactor takes the socket over.
#pragma once

#include <memory>
#include <string>

#include "nvmeof/status.hpp"
#include "transport/tcp/queue_pair.hpp"

namespace nvmeof::tcp::detail {

struct Connected {
  int fd = -1;  ///< non-blocking, TCP_NODELAY; the caller owns it
  Session session;
  /// The established TLS session (null without TLS); it may hold received bytes already.
  std::unique_ptr<tls::Session> tls;
};

/// "tcp 127.0.0.1:4420 qid 1" ("[::1]:4420" for IPv6 literals).
std::string make_label(const QpConfig& cfg);

/// Runs the whole set-up within cfg.connect_timeout and logs one line naming the cause when it
/// fails. Errors: see QueuePair::connect.
Result<Connected> handshake(const QpConfig& cfg, const std::string& label);

/// The library error for a socket errno seen on an established connection.
std::error_code socket_error(int err) noexcept;

}  // namespace nvmeof::tcp::detail
