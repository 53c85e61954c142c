#include "transport/tcp/pdu.hpp"

#include "core/crc32c.hpp"

namespace nvmeof::tcp {
namespace {

void fill_common(CommonHeader& ch, PduType t, uint8_t hlen, uint32_t data_len,
                 const Negotiated& n, bool digests_allowed) {
  ch.type = t;
  ch.flags = 0;
  ch.hlen = hlen;
  ch.pdo = 0;
  uint32_t plen = hlen;
  if (digests_allowed && n.hdgst) {
    ch.flags |= pdu_flag::kHdgst;
    plen += kDigestLen;
  }
  if (data_len) {
    const uint32_t pdo = digests_allowed ? data_offset(hlen, n) : hlen;
    ch.pdo = static_cast<uint8_t>(pdo);
    plen = pdo + data_len;
    if (digests_allowed && n.ddgst) {
      ch.flags |= pdu_flag::kDdgst;
      plen += kDigestLen;
    }
  }
  ch.plen = plen;
}

// Fixed header length of each PDU type, 0 for a type this receiver must never see.
uint8_t expected_hlen(PduType t, Role receiver) {
  switch (t) {
    case PduType::ic_req: return receiver == Role::controller ? kIcLen : 0;
    case PduType::ic_resp: return receiver == Role::host ? kIcLen : 0;
    case PduType::h2c_term_req: return receiver == Role::controller ? kShortHlen : 0;
    case PduType::c2h_term_req: return receiver == Role::host ? kShortHlen : 0;
    case PduType::capsule_cmd: return receiver == Role::controller ? kCapsuleCmdHlen : 0;
    case PduType::capsule_resp: return receiver == Role::host ? kShortHlen : 0;
    case PduType::h2c_data: return receiver == Role::controller ? kShortHlen : 0;
    case PduType::c2h_data: return receiver == Role::host ? kShortHlen : 0;
    case PduType::r2t: return receiver == Role::host ? kShortHlen : 0;
  }
  return 0;
}

bool carries_data(PduType t) {
  return t == PduType::capsule_cmd || t == PduType::h2c_data || t == PduType::c2h_data;
}

}  // namespace

size_t fill_ic_req(IcReq& p, uint8_t hpda, bool hdgst, bool ddgst, uint32_t maxr2t) noexcept {
  std::memset(&p, 0, sizeof p);
  fill_common(p.ch, PduType::ic_req, kIcLen, 0, {}, false);
  p.pfv = 0;
  p.hpda = hpda;
  p.digest = static_cast<uint8_t>((hdgst ? ic_digest::kHeader : 0) | (ddgst ? ic_digest::kData : 0));
  p.maxr2t = maxr2t;
  return kIcLen;
}

size_t fill_ic_resp(IcResp& p, uint8_t cpda, bool hdgst, bool ddgst, uint32_t maxh2cdata) noexcept {
  std::memset(&p, 0, sizeof p);
  fill_common(p.ch, PduType::ic_resp, kIcLen, 0, {}, false);
  p.pfv = 0;
  p.cpda = cpda;
  p.digest = static_cast<uint8_t>((hdgst ? ic_digest::kHeader : 0) | (ddgst ? ic_digest::kData : 0));
  p.maxh2cdata = maxh2cdata;
  return kIcLen;
}

size_t fill_capsule_cmd(CapsuleCmd& p, const Sqe& sqe, uint32_t data_len,
                        const Negotiated& n) noexcept {
  fill_common(p.ch, PduType::capsule_cmd, kCapsuleCmdHlen, data_len, n, true);
  p.sqe = sqe;
  return kCapsuleCmdHlen;
}

size_t fill_capsule_resp(CapsuleResp& p, const Cqe& cqe, const Negotiated& n) noexcept {
  fill_common(p.ch, PduType::capsule_resp, kShortHlen, 0, n, true);
  p.cqe = cqe;
  return kShortHlen;
}

size_t fill_h2c_data(DataHeader& p, uint16_t cccid, uint16_t ttag, uint32_t datao, uint32_t datal,
                     bool last, const Negotiated& n) noexcept {
  std::memset(&p, 0, sizeof p);
  fill_common(p.ch, PduType::h2c_data, kShortHlen, datal, n, true);
  if (last) p.ch.flags |= pdu_flag::kLastPdu;
  p.cccid = cccid;
  p.ttag = ttag;
  p.datao = datao;
  p.datal = datal;
  return kShortHlen;
}

size_t fill_c2h_data(DataHeader& p, uint16_t cccid, uint32_t datao, uint32_t datal, bool last,
                     bool success, const Negotiated& n) noexcept {
  std::memset(&p, 0, sizeof p);
  fill_common(p.ch, PduType::c2h_data, kShortHlen, datal, n, true);
  if (last) p.ch.flags |= pdu_flag::kLastPdu;
  if (last && success) p.ch.flags |= pdu_flag::kSuccess;
  p.cccid = cccid;
  p.datao = datao;
  p.datal = datal;
  return kShortHlen;
}

size_t fill_r2t(R2t& p, uint16_t cccid, uint16_t ttag, uint32_t r2to, uint32_t r2tl,
                const Negotiated& n) noexcept {
  std::memset(&p, 0, sizeof p);
  fill_common(p.ch, PduType::r2t, kShortHlen, 0, n, true);
  p.cccid = cccid;
  p.ttag = ttag;
  p.r2to = r2to;
  p.r2tl = r2tl;
  return kShortHlen;
}

size_t fill_term_req(TermReq& p, PduType type, Fes fes, uint32_t fei, uint32_t offending_len) noexcept {
  std::memset(&p, 0, sizeof p);
  const uint32_t kept = offending_len > kMaxTermReqData ? kMaxTermReqData : offending_len;
  p.ch.type = type;
  p.ch.hlen = kShortHlen;
  p.ch.pdo = 0;
  p.ch.plen = kShortHlen + kept;
  p.fes = static_cast<uint16_t>(fes);
  std::memcpy(p.fei, &fei, sizeof fei);
  return kShortHlen;
}

uint32_t header_digest(const void* hdr, size_t hlen) noexcept { return detail::crc32c(hdr, hlen); }

HeaderCheck check_common_header(const CommonHeader& ch, Role receiver, const Negotiated& n,
                                uint32_t max_data) noexcept {
  HeaderCheck hc;
  auto bad = [&hc](Errc e, Fes fes, uint32_t fei, const char* what) {
    hc.err = e;
    hc.fes = fes;
    hc.fei = fei;
    hc.what = what;
    return hc;
  };
  const uint8_t want_hlen = expected_hlen(ch.type, receiver);
  if (want_hlen == 0) return bad(Errc::malformed_pdu, Fes::invalid_header_field, 0, "unexpected PDU type");
  if (ch.hlen != want_hlen) return bad(Errc::malformed_pdu, Fes::invalid_header_field, 2, "wrong HLEN");

  const bool term = ch.type == PduType::h2c_term_req || ch.type == PduType::c2h_term_req;
  const bool ic = ch.type == PduType::ic_req || ch.type == PduType::ic_resp;
  if (term) {
    if (ch.plen < ch.hlen || ch.plen > ch.hlen + kMaxTermReqData)
      return bad(Errc::malformed_pdu, Fes::invalid_header_field, 4, "TermReq PLEN out of range");
    hc.header_total = ch.plen;  // keep the offending header with ours
    return hc;
  }
  if (ic) {
    if (ch.plen != kIcLen) return bad(Errc::malformed_pdu, Fes::invalid_header_field, 4, "IC PLEN is not 128");
    hc.header_total = kIcLen;
    return hc;
  }

  const bool hd = (ch.flags & pdu_flag::kHdgst) != 0;
  const bool dd = (ch.flags & pdu_flag::kDdgst) != 0;
  if (hd != n.hdgst) return bad(Errc::malformed_pdu, Fes::invalid_header_field, 1, "HDGSTF does not match negotiation");
  if (dd && !n.ddgst) return bad(Errc::malformed_pdu, Fes::invalid_header_field, 1, "DDGSTF set but not negotiated");
  hc.header_total = ch.hlen + (hd ? kDigestLen : 0);
  if (ch.plen < hc.header_total) return bad(Errc::malformed_pdu, Fes::invalid_header_field, 4, "PLEN shorter than header");
  if (ch.plen == hc.header_total) {
    if (dd) return bad(Errc::malformed_pdu, Fes::invalid_header_field, 1, "DDGSTF on a PDU without data");
    return hc;
  }
  if (!carries_data(ch.type)) return bad(Errc::malformed_pdu, Fes::invalid_header_field, 4, "PLEN too long for a PDU without data");
  if (n.ddgst && !dd) return bad(Errc::malformed_pdu, Fes::invalid_header_field, 1, "DDGSTF missing on data");
  if (ch.pdo < hc.header_total || ch.pdo > ch.plen)
    return bad(Errc::malformed_pdu, Fes::invalid_header_field, 3, "PDO out of range");
  const uint32_t tail = dd ? kDigestLen : 0;
  if (ch.plen < ch.pdo + tail + 1u) return bad(Errc::malformed_pdu, Fes::invalid_header_field, 4, "PLEN leaves no data");
  hc.pad_len = ch.pdo - hc.header_total;
  hc.data_len = ch.plen - ch.pdo - tail;
  hc.has_ddgst = dd;
  if (hc.data_len > max_data) return bad(Errc::malformed_pdu, Fes::data_out_of_range, 4, "data longer than allowed");
  return hc;
}

Errc PduReader::finish_header() noexcept {
  CommonHeader ch;
  std::memcpy(&ch, hdr_, sizeof ch);
  if (ch.flags & pdu_flag::kHdgst) {
    uint32_t want;
    std::memcpy(&want, hdr_ + ch.hlen, sizeof want);
    if (want != header_digest(hdr_, ch.hlen))
      return fail(Errc::header_digest_error, Fes::header_digest_error, 0, "header digest mismatch");
  }
  // Type-specific fields that bound memory accesses are checked here, before any handler runs.
  if (ch.type == PduType::h2c_data || ch.type == PduType::c2h_data) {
    DataHeader d;
    std::memcpy(&d, hdr_, sizeof d);
    if (d.datal != check_.data_len)
      return fail(Errc::malformed_pdu, Fes::invalid_header_field, 16, "DATAL does not match PLEN");
  }
  if (ch.type == PduType::ic_req || ch.type == PduType::ic_resp) {
    uint16_t pfv;
    std::memcpy(&pfv, hdr_ + 8, sizeof pfv);
    if (pfv != 0) return fail(Errc::unsupported, Fes::unsupported_parameter, 8, "unsupported PFV");
  }
  return Errc::ok;
}

const char* to_string(PduType t) noexcept {
  switch (t) {
    case PduType::ic_req: return "ICReq";
    case PduType::ic_resp: return "ICResp";
    case PduType::h2c_term_req: return "H2CTermReq";
    case PduType::c2h_term_req: return "C2HTermReq";
    case PduType::capsule_cmd: return "CapsuleCmd";
    case PduType::capsule_resp: return "CapsuleResp";
    case PduType::h2c_data: return "H2CData";
    case PduType::c2h_data: return "C2HData";
    case PduType::r2t: return "R2T";
  }
  return "unknown";
}

}  // namespace nvmeof::tcp
