#include "auth/dhchap.hpp"

#include <algorithm>

namespace nvmeof::auth {
namespace {

constexpr std::string_view kHostRole = "HostHost";
constexpr std::string_view kControllerRole = "Controller";

Bytes augmented(HashId h, const Bytes& session_hash, const Bytes& challenge) {
  if (session_hash.empty()) return challenge;
  return hmac(h, session_hash, {challenge});
}

uint32_t nonzero_random32() {
  uint32_t v = 0;
  while (v == 0) {
    uint8_t b[4];
    if (!random_bytes(b)) return 1;
    v = b[0] | b[1] << 8 | b[2] << 16 | static_cast<uint32_t>(b[3]) << 24;
  }
  return v;
}

Step send(Bytes out) {
  Step s;
  s.kind = StepKind::send;
  s.out = std::move(out);
  return s;
}

Step done(Bytes out) {
  Step s;
  s.kind = StepKind::done;
  s.out = std::move(out);
  return s;
}

}  // namespace

Bytes dhchap_response(HashId h, std::span<const uint8_t> key, std::span<const uint8_t> challenge,
                      uint32_t seqnum, uint16_t tid, std::string_view role, std::string_view nqn_first,
                      std::string_view nqn_second) {
  const uint8_t s[4] = {static_cast<uint8_t>(seqnum), static_cast<uint8_t>(seqnum >> 8),
                        static_cast<uint8_t>(seqnum >> 16), static_cast<uint8_t>(seqnum >> 24)};
  const uint8_t t[2] = {static_cast<uint8_t>(tid), static_cast<uint8_t>(tid >> 8)};
  const uint8_t zero[1] = {0};  // SC_C (no secure channel), then the NQN separator
  return hmac(h, key, {challenge, s, t, zero, as_bytes(role), as_bytes(nqn_first), zero, as_bytes(nqn_second)});
}

// ---------------------------------------------------------------------------------- host

HostAuth::HostAuth(HostAuthConfig cfg) : cfg_(std::move(cfg)) {}
HostAuth::~HostAuth() = default;

Step HostAuth::fail(FailureReason r, std::string error, bool tell_peer) {
  state_ = State::finished;
  Step s;
  s.kind = StepKind::failed;
  s.reason = r;
  s.error = std::move(error);
  if (tell_peer) s.out = encode(Failure{cfg_.tid, msg::kFailure2, 0x01, r});
  return s;
}

Step HostAuth::start() {
  if (cfg_.host_secret.key.empty()) return fail(FailureReason::failed, "no host secret", false);
  Negotiate n;
  n.tid = cfg_.tid;
  for (HashId h : cfg_.hashes) n.hashes.push_back(static_cast<uint8_t>(h));
  for (DhGroup g : cfg_.groups) n.groups.push_back(static_cast<uint8_t>(g));
  if (n.hashes.empty() || n.groups.empty()) return fail(FailureReason::not_usable, "nothing to offer", false);
  state_ = State::await_challenge;
  return send(encode(n));
}

Step HostAuth::on_message(std::span<const uint8_t> m) {
  auto id = message_id(m);
  if (!id) return fail(FailureReason::incorrect_payload, id.message(), state_ != State::finished);
  if (*id == msg::kFailure1) {
    auto f = decode_failure(m);
    if (!f) return fail(FailureReason::incorrect_payload, f.message(), false);
    return fail(f->reason, std::string("the controller refused us: ") + failure_reason_name(f->reason), false);
  }
  switch (state_) {
    case State::await_challenge:
      if (*id == msg::kChallenge) return on_challenge(m);
      break;
    case State::await_success1:
      if (*id == msg::kSuccess1) return on_success1(m);
      break;
    default: return fail(FailureReason::incorrect_message, "message after the transaction ended", false);
  }
  return fail(FailureReason::incorrect_message,
              "unexpected authentication message (AUTH_ID " + std::to_string(*id) + ")", true);
}

Step HostAuth::on_challenge(std::span<const uint8_t> m) {
  auto c = decode_challenge(m);
  if (!c) return fail(FailureReason::incorrect_payload, c.message(), true);
  if (c->tid != cfg_.tid)
    return fail(FailureReason::incorrect_payload, "Challenge of transaction " + std::to_string(c->tid), true);
  const auto hash = static_cast<HashId>(c->hash);
  const auto group = static_cast<DhGroup>(c->group);
  if (std::find(cfg_.hashes.begin(), cfg_.hashes.end(), hash) == cfg_.hashes.end() || !is_known_hash(c->hash))
    return fail(FailureReason::hash_unusable, "Challenge names hash " + std::to_string(c->hash) + ", not offered", true);
  if (std::find(cfg_.groups.begin(), cfg_.groups.end(), group) == cfg_.groups.end() || !is_known_dh_group(c->group))
    return fail(FailureReason::dhgroup_unusable, "Challenge names DH group " + std::to_string(c->group) + ", not offered", true);
  hash_ = hash;
  group_ = group;
  Reply r;
  r.tid = cfg_.tid;
  if (group != DhGroup::null) {
    auto key = DhKey::generate(group);
    if (!key) return fail(FailureReason::dhgroup_unusable, key.message(), true);
    auto z = (*key)->shared_secret(c->dhv);
    if (!z) return fail(FailureReason::dhgroup_unusable, z.message(), true);
    session_hash_ = digest(hash, *z);
    r.dhv = (*key)->public_value();
  }
  const Bytes kh = transform_secret(cfg_.host_secret, cfg_.hostnqn);
  r.response = dhchap_response(hash, kh, augmented(hash, session_hash_, c->c), c->seqnum, cfg_.tid,
                               kHostRole, cfg_.hostnqn, cfg_.subnqn);
  if (r.response.size() != hash_length(hash) || kh.empty())
    return fail(FailureReason::failed, "computing the response failed", true);
  if (cfg_.ctrl_secret) {
    c2_.resize(hash_length(hash));
    if (!random_bytes(c2_)) return fail(FailureReason::failed, "the random source failed", true);
    s2_ = nonzero_random32();
    r.cvalid = true;
    r.seqnum = s2_;
    r.challenge = c2_;
  }
  state_ = State::await_success1;
  return send(encode(r));
}

Step HostAuth::on_success1(std::span<const uint8_t> m) {
  auto s = decode_success1(m);
  if (!s) return fail(FailureReason::incorrect_payload, s.message(), true);
  if (s->tid != cfg_.tid)
    return fail(FailureReason::incorrect_payload, "Success1 of transaction " + std::to_string(s->tid), true);
  if (s->hl != hash_length(hash_))
    return fail(FailureReason::incorrect_payload, "Success1 HL " + std::to_string(s->hl), true);
  state_ = State::finished;
  if (!cfg_.ctrl_secret) return done({});
  if (!s->rvalid) return fail(FailureReason::failed, "the controller did not answer our challenge", true);
  const Bytes kc = transform_secret(*cfg_.ctrl_secret, cfg_.subnqn);
  const Bytes want = dhchap_response(hash_, kc, augmented(hash_, session_hash_, c2_), s2_, cfg_.tid,
                                     kControllerRole, cfg_.subnqn, cfg_.hostnqn);
  if (want.empty() || !equal_secret(want, s->response))
    return fail(FailureReason::failed, "the controller's response is wrong (controller key mismatch)", true);
  return done(encode(Success2{cfg_.tid}));
}

// ---------------------------------------------------------------------------- controller

ControllerAuth::ControllerAuth(ControllerAuthConfig cfg) : cfg_(std::move(cfg)) {}
ControllerAuth::~ControllerAuth() = default;

Step ControllerAuth::fail(FailureReason r, std::string error) {
  state_ = State::failed;
  dh_.reset();
  Step s;
  s.kind = StepKind::failed;
  s.reason = r;
  s.error = std::move(error);
  s.out = encode(Failure{tid_, msg::kFailure1, 0x01, r});
  return s;
}

Step ControllerAuth::on_message(std::span<const uint8_t> m) {
  auto id = message_id(m);
  if (!id) return fail(FailureReason::incorrect_payload, id.message());
  if (m[0] == msg::kTypeCommon && *id == msg::kNegotiate) return on_negotiate(m);
  if (*id == msg::kFailure2) {
    auto f = decode_failure(m);
    state_ = State::failed;
    Step s;
    s.kind = StepKind::failed;
    s.reason = f ? f->reason : FailureReason::incorrect_payload;
    s.error = f ? std::string("the host refused us: ") + failure_reason_name(f->reason) : f.message();
    return s;
  }
  if (state_ == State::await_reply && *id == msg::kReply) return on_reply(m);
  if (state_ == State::await_success2 && *id == msg::kSuccess2) return on_success2(m);
  return fail(FailureReason::incorrect_message,
              "unexpected authentication message (AUTH_ID " + std::to_string(*id) + ")");
}

Step ControllerAuth::on_negotiate(std::span<const uint8_t> m) {
  state_ = State::await_negotiate;
  dh_.reset();
  auto n = decode_negotiate(m);
  if (!n) return fail(FailureReason::incorrect_payload, n.message());
  tid_ = n->tid;
  if (n->sc_c != 0) return fail(FailureReason::concat_mismatch, "secure channel concatenation is not supported");
  hash_ = HashId::none;
  for (uint8_t h : n->hashes) {
    if (is_known_hash(h) &&
        std::find(cfg_.hashes.begin(), cfg_.hashes.end(), static_cast<HashId>(h)) != cfg_.hashes.end()) {
      hash_ = static_cast<HashId>(h);
      break;
    }
  }
  if (hash_ == HashId::none) return fail(FailureReason::hash_unusable, "no hash function in common");
  bool found = false;
  for (uint8_t g : n->groups) {
    if (is_known_dh_group(g) &&
        std::find(cfg_.groups.begin(), cfg_.groups.end(), static_cast<DhGroup>(g)) != cfg_.groups.end()) {
      group_ = static_cast<DhGroup>(g);
      found = true;
      break;
    }
  }
  if (!found) return fail(FailureReason::dhgroup_unusable, "no DH group in common");
  Challenge c;
  c.tid = tid_;
  c.hash = static_cast<uint8_t>(hash_);
  c.group = static_cast<uint8_t>(group_);
  s1_ = nonzero_random32();
  c.seqnum = s1_;
  c1_.resize(hash_length(hash_));
  if (!random_bytes(c1_)) return fail(FailureReason::failed, "the random source failed");
  c.c = c1_;
  if (group_ != DhGroup::null) {
    auto key = DhKey::generate(group_);
    if (!key) return fail(FailureReason::dhgroup_unusable, key.message());
    dh_ = std::move(*key);
    c.dhv = dh_->public_value();
  }
  state_ = State::await_reply;
  return send(encode(c));
}

Step ControllerAuth::on_reply(std::span<const uint8_t> m) {
  auto r = decode_reply(m);
  if (!r) return fail(FailureReason::incorrect_payload, r.message());
  if (r->tid != tid_) return fail(FailureReason::incorrect_payload, "Reply of transaction " + std::to_string(r->tid));
  if (r->response.size() != hash_length(hash_))
    return fail(FailureReason::incorrect_payload, "Reply HL " + std::to_string(r->response.size()));
  Bytes session_hash;
  if (group_ != DhGroup::null) {
    if (r->dhv.empty()) return fail(FailureReason::incorrect_payload, "Reply without a DH value");
    auto z = dh_->shared_secret(r->dhv);
    if (!z) return fail(FailureReason::dhgroup_unusable, z.message());
    session_hash = digest(hash_, *z);
  } else if (!r->dhv.empty()) {
    return fail(FailureReason::incorrect_payload, "Reply with a DH value in the null group");
  }
  dh_.reset();
  const Bytes kh = transform_secret(cfg_.host_secret, cfg_.hostnqn);
  const Bytes want = dhchap_response(hash_, kh, augmented(hash_, session_hash, c1_), s1_, tid_, kHostRole,
                                     cfg_.hostnqn, cfg_.subnqn);
  if (kh.empty() || want.empty() || !equal_secret(want, r->response))
    return fail(FailureReason::failed, "the host's response is wrong (host key mismatch)");
  Success1 s;
  s.tid = tid_;
  s.hl = static_cast<uint8_t>(hash_length(hash_));
  // SEQNUM 0 with a challenge asks for no controller authentication (it only feeds a PSK).
  if (r->cvalid && r->seqnum != 0) {
    if (!cfg_.ctrl_secret) return fail(FailureReason::failed, "bidirectional authentication without a controller key");
    const Bytes kc = transform_secret(*cfg_.ctrl_secret, cfg_.subnqn);
    s.rvalid = true;
    s.response = dhchap_response(hash_, kc, augmented(hash_, session_hash, r->challenge), r->seqnum, tid_,
                                 kControllerRole, cfg_.subnqn, cfg_.hostnqn);
    if (s.response.empty()) return fail(FailureReason::failed, "computing the response failed");
    state_ = State::await_success2;
    return send(encode(s));
  }
  state_ = State::authenticated;
  return done(encode(s));
}

Step ControllerAuth::on_success2(std::span<const uint8_t> m) {
  auto s = decode_success2(m);
  if (!s) return fail(FailureReason::incorrect_payload, s.message());
  if (s->tid != tid_) return fail(FailureReason::incorrect_payload, "Success2 of transaction " + std::to_string(s->tid));
  state_ = State::authenticated;
  return done({});
}

}  // namespace nvmeof::auth
