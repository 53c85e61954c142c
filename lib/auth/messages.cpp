#include "auth/messages.hpp"

#include <algorithm>

namespace nvmeof::auth {
namespace {

uint16_t get16(std::span<const uint8_t> m, size_t at) noexcept {
  return static_cast<uint16_t>(m[at] | m[at + 1] << 8);
}
uint32_t get32(std::span<const uint8_t> m, size_t at) noexcept {
  return m[at] | m[at + 1] << 8 | m[at + 2] << 16 | static_cast<uint32_t>(m[at + 3]) << 24;
}
void put16(Bytes& m, size_t at, uint16_t v) noexcept {
  m[at] = static_cast<uint8_t>(v);
  m[at + 1] = static_cast<uint8_t>(v >> 8);
}
void put32(Bytes& m, size_t at, uint32_t v) noexcept {
  for (size_t i = 0; i < 4; ++i) m[at + i] = static_cast<uint8_t>(v >> (8 * i));
}

ErrorInfo bad(const char* what, std::string text) {
  return {make_error_code(Errc::invalid_argument), std::string(what) + ": " + std::move(text)};
}

Bytes header(size_t size, uint8_t type, uint8_t id, uint16_t tid) {
  Bytes m(size, 0);
  m[0] = type;
  m[1] = id;
  put16(m, 4, tid);
  return m;
}

// Checks size, type and id of a DH-HMAC-CHAP message; the reason when it is not one.
Result<void> expect(std::span<const uint8_t> m, size_t fixed, uint8_t id, const char* what) {
  if (m.size() < fixed)
    return bad(what, std::to_string(m.size()) + " bytes, shorter than its " + std::to_string(fixed) +
                         "-byte header");
  if (m[0] != msg::kTypeDhchap || m[1] != id)
    return bad(what, "AUTH_TYPE " + std::to_string(m[0]) + " AUTH_ID " + std::to_string(m[1]) +
                         " is another message");
  return {};
}

bool hl_valid(uint8_t hl) noexcept { return hl == 32 || hl == 48 || hl == 64; }

}  // namespace

const char* failure_reason_name(FailureReason r) noexcept {
  switch (r) {
    case FailureReason::none: return "none";
    case FailureReason::failed: return "authentication failed";
    case FailureReason::not_usable: return "authentication protocol not usable";
    case FailureReason::concat_mismatch: return "secure channel concatenation mismatch";
    case FailureReason::hash_unusable: return "hash function not usable";
    case FailureReason::dhgroup_unusable: return "DH group not usable";
    case FailureReason::incorrect_payload: return "incorrect payload";
    case FailureReason::incorrect_message: return "incorrect protocol message";
  }
  return "unknown reason";
}

Result<uint8_t> message_id(std::span<const uint8_t> m) {
  if (m.size() < msg::kHeaderSize)
    return bad("authentication message", std::to_string(m.size()) + " bytes, shorter than 8");
  if (m[0] != msg::kTypeCommon && m[0] != msg::kTypeDhchap)
    return bad("authentication message", "unknown AUTH_TYPE " + std::to_string(m[0]));
  return m[1];
}

Bytes encode(const Negotiate& n) {
  Bytes m = header(msg::kNegotiateSize + msg::kDescriptorSize, msg::kTypeCommon, msg::kNegotiate, n.tid);
  m[6] = n.sc_c;
  m[7] = 1;  // NAPD
  const size_t d = msg::kNegotiateSize;
  const size_t nh = std::min(n.hashes.size(), msg::kMaxIds);
  const size_t ng = std::min(n.groups.size(), msg::kMaxIds);
  m[d] = msg::kAuthIdDhchap;
  m[d + 2] = static_cast<uint8_t>(nh);
  m[d + 3] = static_cast<uint8_t>(ng);
  std::copy_n(n.hashes.begin(), nh, m.begin() + static_cast<ptrdiff_t>(d + 4));
  std::copy_n(n.groups.begin(), ng, m.begin() + static_cast<ptrdiff_t>(d + 4 + msg::kMaxIds));
  return m;
}

Result<Negotiate> decode_negotiate(std::span<const uint8_t> m) {
  constexpr const char* kWhat = "AUTH_Negotiate";
  if (m.size() < msg::kNegotiateSize)
    return bad(kWhat, std::to_string(m.size()) + " bytes, shorter than its 8-byte header");
  if (m[0] != msg::kTypeCommon || m[1] != msg::kNegotiate)
    return bad(kWhat, "AUTH_TYPE/AUTH_ID is another message");
  Negotiate n;
  n.tid = get16(m, 4);
  n.sc_c = m[6];
  const size_t napd = m[7];
  if (napd == 0) return bad(kWhat, "no protocol descriptor (NAPD 0)");
  if (m.size() < msg::kNegotiateSize + napd * msg::kDescriptorSize)
    return bad(kWhat, std::to_string(m.size()) + " bytes, NAPD " + std::to_string(napd) +
                               " needs " + std::to_string(msg::kNegotiateSize + napd * msg::kDescriptorSize));
  for (size_t i = 0; i < napd; ++i) {
    const size_t d = msg::kNegotiateSize + i * msg::kDescriptorSize;
    if (m[d] != msg::kAuthIdDhchap) continue;
    const size_t halen = m[d + 2];
    const size_t dhlen = m[d + 3];
    if (halen > msg::kMaxIds || dhlen > msg::kMaxIds)
      return bad(kWhat, "HALEN " + std::to_string(halen) + " or DHLEN " + std::to_string(dhlen) +
                                 " above 30");
    n.hashes.assign(m.begin() + static_cast<ptrdiff_t>(d + 4),
                    m.begin() + static_cast<ptrdiff_t>(d + 4 + halen));
    n.groups.assign(m.begin() + static_cast<ptrdiff_t>(d + 4 + msg::kMaxIds),
                    m.begin() + static_cast<ptrdiff_t>(d + 4 + msg::kMaxIds + dhlen));
    return n;
  }
  return bad(kWhat, "no DH-HMAC-CHAP protocol descriptor");
}

Bytes encode(const Challenge& c) {
  Bytes m = header(msg::kChallengeSize + c.c.size() + c.dhv.size(), msg::kTypeDhchap, msg::kChallenge, c.tid);
  m[6] = static_cast<uint8_t>(c.c.size());
  m[8] = c.hash;
  m[9] = c.group;
  put16(m, 10, static_cast<uint16_t>(c.dhv.size()));
  put32(m, 12, c.seqnum);
  std::copy(c.c.begin(), c.c.end(), m.begin() + msg::kChallengeSize);
  std::copy(c.dhv.begin(), c.dhv.end(), m.begin() + static_cast<ptrdiff_t>(msg::kChallengeSize + c.c.size()));
  return m;
}

Result<Challenge> decode_challenge(std::span<const uint8_t> m) {
  constexpr const char* kWhat = "DH-HMAC-CHAP_Challenge";
  if (auto e = expect(m, msg::kChallengeSize, msg::kChallenge, kWhat); !e) return e.failure();
  Challenge c;
  c.tid = get16(m, 4);
  const uint8_t hl = m[6];
  c.hash = m[8];
  c.group = m[9];
  const size_t dhvlen = get16(m, 10);
  c.seqnum = get32(m, 12);
  if (!hl_valid(hl)) return bad(kWhat, "HL " + std::to_string(hl) + " is no hash length");
  if (is_known_hash(c.hash) && hash_length(static_cast<HashId>(c.hash)) != hl)
    return bad(kWhat, "HL " + std::to_string(hl) + " does not match HASHID " + std::to_string(c.hash));
  if (is_known_dh_group(c.group) && dhvlen != dh_length(static_cast<DhGroup>(c.group)))
    return bad(kWhat, "DHVLEN " + std::to_string(dhvlen) + " does not match DHGID " +
                               std::to_string(c.group));
  if (m.size() < msg::kChallengeSize + hl + dhvlen)
    return bad(kWhat, std::to_string(m.size()) + " bytes, HL and DHVLEN need " +
                               std::to_string(msg::kChallengeSize + hl + dhvlen));
  const auto* p = m.data() + msg::kChallengeSize;
  c.c.assign(p, p + hl);
  c.dhv.assign(p + hl, p + hl + dhvlen);
  return c;
}

Bytes encode(const Reply& r) {
  const size_t hl = r.response.size();
  Bytes m = header(msg::kReplySize + 2 * hl + r.dhv.size(), msg::kTypeDhchap, msg::kReply, r.tid);
  m[6] = static_cast<uint8_t>(hl);
  m[8] = r.cvalid ? 1 : 0;
  put16(m, 10, static_cast<uint16_t>(r.dhv.size()));
  put32(m, 12, r.seqnum);
  auto out = m.begin() + msg::kReplySize;
  std::copy(r.response.begin(), r.response.end(), out);
  if (r.cvalid) std::copy_n(r.challenge.begin(), std::min(hl, r.challenge.size()), out + static_cast<ptrdiff_t>(hl));
  std::copy(r.dhv.begin(), r.dhv.end(), out + static_cast<ptrdiff_t>(2 * hl));
  return m;
}

Result<Reply> decode_reply(std::span<const uint8_t> m) {
  constexpr const char* kWhat = "DH-HMAC-CHAP_Reply";
  if (auto e = expect(m, msg::kReplySize, msg::kReply, kWhat); !e) return e.failure();
  Reply r;
  r.tid = get16(m, 4);
  const uint8_t hl = m[6];
  r.cvalid = m[8] != 0;
  const size_t dhvlen = get16(m, 10);
  r.seqnum = get32(m, 12);
  if (!hl_valid(hl)) return bad(kWhat, "HL " + std::to_string(hl) + " is no hash length");
  if (m[8] > 1) return bad(kWhat, "CVALID " + std::to_string(m[8]));
  if (m.size() < msg::kReplySize + 2u * hl + dhvlen)
    return bad(kWhat, std::to_string(m.size()) + " bytes, HL and DHVLEN need " +
                               std::to_string(msg::kReplySize + 2u * hl + dhvlen));
  const auto* p = m.data() + msg::kReplySize;
  r.response.assign(p, p + hl);
  if (r.cvalid) r.challenge.assign(p + hl, p + 2 * hl);
  r.dhv.assign(p + 2 * hl, p + 2 * hl + dhvlen);
  return r;
}

Bytes encode(const Success1& s) {
  Bytes m = header(msg::kSuccess1Size + s.hl, msg::kTypeDhchap, msg::kSuccess1, s.tid);
  m[6] = s.hl;
  m[8] = s.rvalid ? 1 : 0;
  if (s.rvalid)
    std::copy_n(s.response.begin(), std::min<size_t>(s.hl, s.response.size()), m.begin() + msg::kSuccess1Size);
  return m;
}

Result<Success1> decode_success1(std::span<const uint8_t> m) {
  constexpr const char* kWhat = "DH-HMAC-CHAP_Success1";
  if (auto e = expect(m, msg::kSuccess1Size, msg::kSuccess1, kWhat); !e) return e.failure();
  Success1 s;
  s.tid = get16(m, 4);
  s.hl = m[6];
  s.rvalid = m[8] != 0;
  if (m[8] > 1) return bad(kWhat, "RVALID " + std::to_string(m[8]));
  if (s.rvalid) {
    if (!hl_valid(s.hl)) return bad(kWhat, "HL " + std::to_string(s.hl) + " is no hash length");
    if (m.size() < msg::kSuccess1Size + s.hl)
      return bad(kWhat, std::to_string(m.size()) + " bytes, HL needs " +
                                 std::to_string(msg::kSuccess1Size + s.hl));
    s.response.assign(m.begin() + msg::kSuccess1Size, m.begin() + msg::kSuccess1Size + s.hl);
  }
  return s;
}

Bytes encode(const Success2& s) { return header(msg::kSuccess2Size, msg::kTypeDhchap, msg::kSuccess2, s.tid); }

Result<Success2> decode_success2(std::span<const uint8_t> m) {
  if (auto e = expect(m, msg::kSuccess2Size, msg::kSuccess2, "DH-HMAC-CHAP_Success2"); !e) return e.failure();
  return Success2{get16(m, 4)};
}

Bytes encode(const Failure& f) {
  Bytes m = header(msg::kFailureSize, msg::kTypeCommon, f.id, f.tid);
  m[6] = f.rescode;
  m[7] = static_cast<uint8_t>(f.reason);
  return m;
}

Result<Failure> decode_failure(std::span<const uint8_t> m) {
  constexpr const char* kWhat = "AUTH_Failure";
  if (m.size() < msg::kFailureSize)
    return bad(kWhat, std::to_string(m.size()) + " bytes, shorter than 8");
  if ((m[0] != msg::kTypeCommon && m[0] != msg::kTypeDhchap) ||
      (m[1] != msg::kFailure1 && m[1] != msg::kFailure2))
    return bad(kWhat, "AUTH_TYPE/AUTH_ID is another message");
  Failure f;
  f.id = m[1];
  f.tid = get16(m, 4);
  f.rescode = m[6];
  f.reason = static_cast<FailureReason>(m[7]);
  return f;
}

}  // namespace nvmeof::auth
