// The template body of PduReader::consume (included by pdu.hpp only).
#pragma once

#include <algorithm>

#include "core/crc32c.hpp"

namespace nvmeof::tcp {

template <class Handler>
PduReader::Consumed PduReader::consume(const uint8_t* p, size_t n, Handler& h, ConsumeUntil until) noexcept {
  size_t used = 0;
  Errc err = Errc::ok;
  while (used < n) {
    const size_t avail = n - used;
    switch (phase_) {
      case Phase::common: {
        const size_t take = std::min<size_t>(sizeof(CommonHeader) - got_, avail);
        std::memcpy(hdr_ + got_, p + used, take);
        got_ += static_cast<uint32_t>(take);
        used += take;
        if (got_ < sizeof(CommonHeader)) return {used, err};
        CommonHeader ch;
        std::memcpy(&ch, hdr_, sizeof ch);
        check_ = check_common_header(ch, role_, neg_, max_data_);
        if (check_.err != Errc::ok) {
          err = check_.err;
          return {used, err};
        }
        phase_ = Phase::header;
        break;
      }
      case Phase::header: {
        // A TermReq's data (the offending header) is kept with the header itself.
        const uint32_t want = check_.header_total;
        const size_t take = std::min<size_t>(want - got_, avail);
        std::memcpy(hdr_ + got_, p + used, take);
        got_ += static_cast<uint32_t>(take);
        used += take;
        if (got_ < want) return {used, err};
        if ((err = finish_header()) != Errc::ok) return {used, err};
        dst_ = nullptr;
        if ((err = h.on_header(hdr_, check_, dst_)) != Errc::ok) {
          fail(err, Fes::invalid_header_field, 0, "rejected by handler");
          return {used, err};
        }
        crc_ = detail::kCrc32cSeed;
        got_ = 0;
        phase_ = check_.pad_len ? Phase::pad : (check_.data_len ? Phase::data : Phase::common);
        if (phase_ == Phase::common) {
          if ((err = h.on_pdu(hdr_, check_)) != Errc::ok || until == ConsumeUntil::pdu_end) return {used, err};
        }
        break;
      }
      case Phase::pad: {
        const size_t take = std::min<size_t>(check_.pad_len - got_, avail);
        got_ += static_cast<uint32_t>(take);
        used += take;
        if (got_ < check_.pad_len) return {used, err};
        got_ = 0;
        phase_ = Phase::data;
        break;
      }
      case Phase::data: {
        const size_t take = std::min<size_t>(check_.data_len - got_, avail);
        if (dst_) std::memcpy(dst_ + got_, p + used, take);
        if (check_.has_ddgst) crc_ = detail::crc32c_update(crc_, p + used, take);
        got_ += static_cast<uint32_t>(take);
        used += take;
        if (got_ < check_.data_len) return {used, err};
        got_ = 0;
        if (check_.has_ddgst) {
          phase_ = Phase::ddgst;
          break;
        }
        phase_ = Phase::common;
        if ((err = h.on_pdu(hdr_, check_)) != Errc::ok || until == ConsumeUntil::pdu_end) return {used, err};
        break;
      }
      case Phase::ddgst: {
        const size_t take = std::min<size_t>(kDigestLen - got_, avail);
        std::memcpy(dgst_ + got_, p + used, take);
        got_ += static_cast<uint32_t>(take);
        used += take;
        if (got_ < kDigestLen) return {used, err};
        uint32_t want;
        std::memcpy(&want, dgst_, sizeof want);
        got_ = 0;
        phase_ = Phase::common;
        if (want != detail::crc32c_final(crc_)) {
          err = fail(Errc::data_digest_error, Fes::none, 0, "data digest mismatch");
          return {used, err};
        }
        if ((err = h.on_pdu(hdr_, check_)) != Errc::ok || until == ConsumeUntil::pdu_end) return {used, err};
        break;
      }
    }
  }
  return {used, err};
}

template <class Handler>
PduReader::Consumed PduReader::consume_placed(size_t n, Handler& h) noexcept {
  if (check_.has_ddgst) crc_ = detail::crc32c_update(crc_, dst_ + got_, n);
  got_ += static_cast<uint32_t>(n);
  if (got_ < check_.data_len) return {n, Errc::ok};
  got_ = 0;
  if (check_.has_ddgst) {
    phase_ = Phase::ddgst;
    return {n, Errc::ok};
  }
  phase_ = Phase::common;
  return {n, h.on_pdu(hdr_, check_)};
}

}  // namespace nvmeof::tcp
