// run_host_authentication: the host machine over a caller's Authentication Send/Receive. A
// file of its own because it logs through core's log (the host library's), which the embedded
// target's library does not carry; the target uses only the machines.
#include "auth/dhchap.hpp"
#include "core/log.hpp"

namespace nvmeof::auth {

Result<void> run_host_authentication(const HostAuthConfig& cfg, uint16_t qid, uint16_t cntlid,
                                     const AuthSend& send_fn, const AuthReceive& receive_fn) {
  HostAuth host(cfg);
  Step step = host.start();
  auto failed = [&](std::string text, std::error_code ec) -> Result<void> {
    detail::log_warning("DH-HMAC-CHAP: %s qid %u cntlid %u: %s", cfg.subnqn.c_str(), qid, cntlid, text.c_str());
    return {ec, std::move(text)};
  };
  while (step.kind == StepKind::send) {
    if (auto r = send_fn(step.out); !r) return failed("Authentication Send failed: " + r.error().message(), r.error());
    auto got = receive_fn(kAuthReceiveLength);
    if (!got) return failed("Authentication Receive failed: " + got.error().message(), got.error());
    step = host.on_message(*got);
  }
  if (!step.out.empty()) {
    auto r = send_fn(step.out);
    if (step.kind == StepKind::done && !r)
      return failed("Authentication Send (Success2) failed: " + r.error().message(), r.error());
  }
  if (step.kind == StepKind::done) return {};
  return failed(step.error, Errc::authentication_failed);
}

}  // namespace nvmeof::auth
