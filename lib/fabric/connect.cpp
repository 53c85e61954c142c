#include "fabric/connect.hpp"

#include <nvme/types.h>

#include <cstring>
#include <string>

#include "core/fabrics_command.hpp"
#include "core/log.hpp"

namespace nvmeof::fabric {
namespace {

ErrorInfo logged(std::string_view label, std::error_code ec, std::string why) {
  nvmeof::detail::log_warning("nvmeof: %.*s: %s\n", static_cast<int>(label.size()), label.data(),
                              why.c_str());
  return {ec, std::move(why)};
}

Result<void> status_error(const Result<Cqe>& r) {
  if (!r) return r.failure();
  const NvmeStatus st = r.value().status();
  if (st.is_success()) return {};
  return make_error_code(st);
}

}  // namespace

Result<void> build_connect(const ConnectParams& p, Sqe& cmd,
                           std::array<uint8_t, kConnectDataLen>& data) {
  if (p.depth < 1 || p.depth > 65536 || p.subnqn.empty() || p.subnqn.size() > kNqnMaxLen ||
      p.hostnqn.size() > kNqnMaxLen)
    return make_error_code(Errc::invalid_argument);
  nvmf_connect_data d{};
  static_assert(sizeof d == kConnectDataLen);
  std::memcpy(d.hostid, p.hostid.data(), sizeof d.hostid);
  d.cntlid = p.cntlid;
  std::memcpy(d.subsysnqn, p.subnqn.data(), p.subnqn.size());
  std::memcpy(d.hostnqn, p.hostnqn.data(), p.hostnqn.size());
  std::memcpy(data.data(), &d, sizeof d);
  prep_connect(cmd, p.qid, static_cast<uint16_t>(p.depth - 1), p.kato_ms,
               p.disable_sq_flow_control ? kConnectDisableSqFlowControl : 0);
  return {};
}

Result<ConnectResponse> parse_connect_response(const Cqe& cqe) {
  const NvmeStatus st = cqe.status();
  if (!st.is_success()) return make_error_code(st);
  ConnectResponse r;
  r.dw0 = cqe.dw0;
  r.cntlid = static_cast<uint16_t>(cqe.dw0 & 0xffff);
  r.auth_required = (cqe.dw0 & kAuthReqAtr) != 0;
  r.secure_channel_required = (cqe.dw0 & kAuthReqAscr) != 0;
  return r;
}

Result<void> post_connect(CommandChannel& ch, const PostConnect& ctx, const Authenticator& auth) {
  if (auth) return auth(ch, ctx);
  if (ctx.response.auth_required || ctx.response.secure_channel_required)
    return make_error_code(Errc::authentication_required);
  return {};
}

Result<void> auth_send(CommandChannel& ch, std::span<const uint8_t> msg,
                       Clock::time_point deadline) {
  if (msg.empty()) return make_error_code(Errc::invalid_argument);
  Sqe c;
  prep_auth_send(c, static_cast<uint32_t>(msg.size()));
  return status_error(ch.execute(c, msg, {}, deadline));
}

Result<void> auth_receive(CommandChannel& ch, std::span<uint8_t> buf,
                          Clock::time_point deadline) {
  if (buf.empty()) return make_error_code(Errc::invalid_argument);
  Sqe c;
  prep_auth_receive(c, static_cast<uint32_t>(buf.size()));
  return status_error(ch.execute(c, {}, buf, deadline));
}

Result<ConnectResponse> connect_queue(CommandChannel& ch, const ConnectParams& p,
                                      const Authenticator& auth, Clock::time_point deadline,
                                      std::string_view label) {
  Sqe cmd;
  std::array<uint8_t, kConnectDataLen> data;
  if (auto built = build_connect(p, cmd, data); !built)
    return logged(label, built.error(), "invalid Connect: queue depth " + std::to_string(p.depth) +
                                 ", or an NQN empty or longer than 223 bytes");
  auto cqe = ch.execute(cmd, data, {}, deadline);
  if (!cqe) return cqe.error();  // the channel logged why
  auto rsp = parse_connect_response(cqe.value());
  if (!rsp) return logged(label, rsp.error(), "Connect rejected: " + to_string(cqe.value().status()));
  const PostConnect ctx{p.hostnqn, p.subnqn, p.qid, rsp.value().cntlid, rsp.value(), deadline, label};
  if (auto done = post_connect(ch, ctx, auth); !done) {
    const std::error_code ec = done.error();
    if (ec == make_error_code(Errc::authentication_required))
      return logged(label, ec, "the controller requires authentication (DH-HMAC-CHAP) but no key is configured");
    return logged(label, ec, "authentication failed: " + done.message());
  }
  return rsp;
}

}  // namespace nvmeof::fabric
