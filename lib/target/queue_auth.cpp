#include "target/queue_auth.hpp"

#include "auth/messages.hpp"

namespace nvmeof::target {
namespace {

NvmeStatus check_fields(const Sqe& c, uint32_t length) {
  const uint8_t secp = static_cast<uint8_t>(c.cdw10 >> 24);
  const uint8_t spsp1 = static_cast<uint8_t>(c.cdw10 >> 16);
  const uint8_t spsp0 = static_cast<uint8_t>(c.cdw10 >> 8);
  if (secp != kAuthSecpDhchap || spsp0 != kAuthSpsp0 || spsp1 != kAuthSpsp1 || length == 0)
    return status::kInvalidField;
  return status::kSuccess;
}

QueueAuth::Outcome with_status(NvmeStatus st) {
  QueueAuth::Outcome o;
  o.status = st;
  return o;
}

std::string describe(const auth::Step& s) {
  return std::string(auth::failure_reason_name(s.reason)) + (s.error.empty() ? "" : ": " + s.error);
}

}  // namespace

const TargetHost* find_host_entry(const TargetOptions& opts, const std::string& subnqn,
                                  const std::string& hostnqn) noexcept {
  for (const auto& s : opts.subsystems) {
    if (s.nqn != subnqn) continue;
    for (const auto& h : s.hosts)
      if (h.nqn == hostnqn) return &h;
  }
  return nullptr;
}

Result<void> valid_host_keys(const TargetOptions& opts) {
  for (const auto& s : opts.subsystems) {
    for (const auto& h : s.hosts) {
      if (h.dhchap_key.empty()) {
        if (h.dhchap_ctrl_key.empty()) continue;
        return {Errc::invalid_argument, "host " + h.nqn + ": a controller key without a host key"};
      }
      if (auto a = QueueAuth::create(h, s.nqn); !a) return {a.error(), "host " + h.nqn + ": " + a.message()};
    }
  }
  return {};
}

Result<std::unique_ptr<QueueAuth>> QueueAuth::create(const TargetHost& host, const std::string& subnqn) {
  auth::ControllerAuthConfig cfg;
  cfg.hostnqn = host.nqn;
  cfg.subnqn = subnqn;
  auto hk = auth::parse_secret(host.dhchap_key);
  if (!hk) return hk.failure();
  cfg.host_secret = std::move(*hk);
  if (!host.dhchap_ctrl_key.empty()) {
    auto ck = auth::parse_secret(host.dhchap_ctrl_key);
    if (!ck) return ck.failure();
    cfg.ctrl_secret = std::move(*ck);
  }
  if (!host.dhchap_hash.empty()) {
    cfg.hashes.clear();
    for (auto h : {auth::HashId::sha256, auth::HashId::sha384, auth::HashId::sha512})
      if (host.dhchap_hash == auth::hash_name(h)) cfg.hashes.push_back(h);
    if (cfg.hashes.empty())
      return {Errc::invalid_argument,
              "unknown DH-HMAC-CHAP hash '" + host.dhchap_hash + "' (sha256, sha384 or sha512)"};
  }
  if (!host.dhchap_dhgroup.empty()) {
    cfg.groups.clear();
    for (auto g : {auth::DhGroup::null, auth::DhGroup::ffdhe2048, auth::DhGroup::ffdhe3072,
                   auth::DhGroup::ffdhe4096, auth::DhGroup::ffdhe6144, auth::DhGroup::ffdhe8192})
      if (host.dhchap_dhgroup == auth::dh_group_name(g)) cfg.groups.push_back(g);
    if (cfg.groups.empty())
      return {Errc::invalid_argument,
              "unknown DH group '" + host.dhchap_dhgroup + "' (null, ffdhe2048 ... ffdhe8192)"};
  }
  return std::unique_ptr<QueueAuth>(new QueueAuth(std::move(cfg)));
}

QueueAuth::Outcome QueueAuth::on_send(const Sqe& c, std::span<const uint8_t> data) {
  const uint32_t tl = c.cdw11;
  if (auto st = check_fields(c, tl); !st.is_success()) return with_status(st);
  if (data.size() < tl) return with_status(status::kInvalidField);
  auth::Step step = machine_.on_message(data.first(tl));
  Outcome o = with_status(status::kSuccess);
  if (step.kind == auth::StepKind::failed) {
    authenticated_ = false;
    if (step.out.empty()) {
      // The host's Failure2: nothing more to say.
      o.end_queue = true;
      o.log = "authentication failed (host sent Failure2): " + describe(step);
      have_pending_ = false;
      return o;
    }
  }
  if (step.kind == auth::StepKind::done && step.out.empty()) {
    authenticated_ = true;  // the bidirectional Success2
    o.log = "authenticated (bidirectional)";
    have_pending_ = false;
    return o;
  }
  pending_ = std::move(step);
  have_pending_ = true;
  return o;
}

QueueAuth::Outcome QueueAuth::on_receive(const Sqe& c, uint32_t xfer_len, auth::Bytes& out) {
  const uint32_t al = c.cdw11;
  if (auto st = check_fields(c, al); !st.is_success()) return with_status(st);
  const size_t len = std::min<size_t>(al, xfer_len);
  Outcome o = with_status(status::kSuccess);
  if (!have_pending_) {
    // Nothing asked for a message: the host is out of step.
    pending_.kind = auth::StepKind::failed;
    pending_.reason = auth::FailureReason::incorrect_message;
    pending_.out = auth::encode(auth::Failure{machine_.tid(), auth::msg::kFailure1, 0x01, pending_.reason});
    o.log = "authentication failed: Authentication Receive with no message due";
  } else if (pending_.out.size() > len) {
    pending_.kind = auth::StepKind::failed;
    pending_.reason = auth::FailureReason::incorrect_payload;
    pending_.out = auth::encode(auth::Failure{machine_.tid(), auth::msg::kFailure1, 0x01, pending_.reason});
    o.log = "authentication failed: Authentication Receive of " + std::to_string(len) + " bytes";
  }
  have_pending_ = false;
  out = pending_.out;
  out.resize(len, 0);
  if (pending_.kind == auth::StepKind::done) {
    authenticated_ = true;
    o.log = "authenticated";
  } else if (pending_.kind == auth::StepKind::failed) {
    authenticated_ = false;
    o.end_queue = true;
    if (o.log.empty()) o.log = "authentication failed, Failure1 sent: " + describe(pending_);
  }
  return o;
}

}  // namespace nvmeof::target
