// NVMe/TCP PDU layouts (NVMe/TCP Transport Specification 1.0) and the codec both ends share:
// fill helpers for every PDU, header validation, digests and an incremental receiver.
// Pure functions and plain data; no I/O here. The receiver never writes past the buffers it is
// given and names the offending field of a bad PDU (the FES/FEI a TermReq carries).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "nvmeof/command.hpp"
#include "nvmeof/status.hpp"

namespace nvmeof::tcp {

enum class PduType : uint8_t {
  ic_req = 0x00,
  ic_resp = 0x01,
  h2c_term_req = 0x02,
  c2h_term_req = 0x03,
  capsule_cmd = 0x04,
  capsule_resp = 0x05,
  h2c_data = 0x06,
  c2h_data = 0x07,
  r2t = 0x09,
};

namespace pdu_flag {
inline constexpr uint8_t kHdgst = 0x01;
inline constexpr uint8_t kDdgst = 0x02;
inline constexpr uint8_t kLastPdu = 0x04;  // H2CData / C2HData
inline constexpr uint8_t kSuccess = 0x08;  // C2HData: no CapsuleResp follows
}  // namespace pdu_flag

/// Fatal Error Status of a termination request.
enum class Fes : uint16_t {
  none = 0,
  invalid_header_field = 0x01,
  sequence_error = 0x02,
  header_digest_error = 0x03,
  data_out_of_range = 0x04,
  r2t_limit_exceeded = 0x05,
  unsupported_parameter = 0x06,
};

inline constexpr size_t kDigestLen = 4;
inline constexpr size_t kIcLen = 128;
inline constexpr size_t kCapsuleCmdHlen = 72;
inline constexpr size_t kShortHlen = 24;  // CapsuleResp, H2C/C2HData, R2T, TermReq
inline constexpr size_t kMaxHeaderLen = 128 + kDigestLen;
inline constexpr size_t kMaxTermReqData = 152;

struct CommonHeader {
  PduType type;
  uint8_t flags;
  uint8_t hlen;
  uint8_t pdo;
  uint32_t plen;
};
static_assert(sizeof(CommonHeader) == 8);

struct IcReq {
  CommonHeader ch;
  uint16_t pfv;
  uint8_t hpda;
  uint8_t digest;  ///< bit 0 header digest, bit 1 data digest
  uint32_t maxr2t;  ///< 0's based
  uint8_t rsvd[112];
};
static_assert(sizeof(IcReq) == kIcLen);

struct IcResp {
  CommonHeader ch;
  uint16_t pfv;
  uint8_t cpda;
  uint8_t digest;
  uint32_t maxh2cdata;
  uint8_t rsvd[112];
};
static_assert(sizeof(IcResp) == kIcLen);

namespace ic_digest {
inline constexpr uint8_t kHeader = 0x01;
inline constexpr uint8_t kData = 0x02;
}  // namespace ic_digest

struct CapsuleCmd {
  CommonHeader ch;
  Sqe sqe;
};
static_assert(sizeof(CapsuleCmd) == kCapsuleCmdHlen);

struct CapsuleResp {
  CommonHeader ch;
  Cqe cqe;
};
static_assert(sizeof(CapsuleResp) == kShortHlen);

/// H2CData and C2HData share one layout (ttag is reserved in C2HData).
struct DataHeader {
  CommonHeader ch;
  uint16_t cccid;
  uint16_t ttag;
  uint32_t datao;
  uint32_t datal;
  uint32_t rsvd;
};
static_assert(sizeof(DataHeader) == kShortHlen);

struct R2t {
  CommonHeader ch;
  uint16_t cccid;
  uint16_t ttag;
  uint32_t r2to;
  uint32_t r2tl;
  uint32_t rsvd;
};
static_assert(sizeof(R2t) == kShortHlen);

/// H2CTermReq / C2HTermReq header; FEI sits unaligned at byte 10, so it is kept as bytes.
struct TermReq {
  CommonHeader ch;
  uint16_t fes;
  uint8_t fei[4];
  uint8_t rsvd[10];
};
static_assert(sizeof(TermReq) == kShortHlen);

/// Which end is receiving: decides which PDU types are legal.
enum class Role : uint8_t { host, controller };

/// Digest and alignment settings agreed at ICReq/ICResp time.
struct Negotiated {
  bool hdgst = false;
  bool ddgst = false;
  uint8_t pda = 0;  ///< data alignment the *receiver* asked for (0's based dwords): CPDA or HPDA
};

/// Offset of the data in a PDU with header length `hlen`: after the header digest, rounded up
/// to the (pda + 1) * 4 byte alignment the receiver asked for.
inline constexpr uint32_t data_offset(uint32_t hlen, const Negotiated& n) noexcept {
  uint32_t off = hlen + (n.hdgst ? kDigestLen : 0);
  const uint32_t align = (static_cast<uint32_t>(n.pda) + 1) * 4;
  if (n.pda != 0) off = (off + align - 1) / align * align;
  return off;
}

/// Fill helpers: each writes a complete header (without digests) and returns hlen. `data_len`
/// is the length of the data that will follow; plen and pdo are computed from it.
size_t fill_ic_req(IcReq& p, uint8_t hpda, bool hdgst, bool ddgst, uint32_t maxr2t) noexcept;
size_t fill_ic_resp(IcResp& p, uint8_t cpda, bool hdgst, bool ddgst, uint32_t maxh2cdata) noexcept;
size_t fill_capsule_cmd(CapsuleCmd& p, const Sqe& sqe, uint32_t data_len,
                        const Negotiated& n) noexcept;
size_t fill_capsule_resp(CapsuleResp& p, const Cqe& cqe, const Negotiated& n) noexcept;
size_t fill_h2c_data(DataHeader& p, uint16_t cccid, uint16_t ttag, uint32_t datao, uint32_t datal,
                     bool last, const Negotiated& n) noexcept;
size_t fill_c2h_data(DataHeader& p, uint16_t cccid, uint32_t datao, uint32_t datal, bool last,
                     bool success, const Negotiated& n) noexcept;
size_t fill_r2t(R2t& p, uint16_t cccid, uint16_t ttag, uint32_t r2to, uint32_t r2tl,
                const Negotiated& n) noexcept;
/// A termination request; `offending`/`offending_len` (at most 152 bytes kept) is the header
/// that caused it. Returns hlen; plen = hlen + kept bytes.
size_t fill_term_req(TermReq& p, PduType type, Fes fes, uint32_t fei, uint32_t offending_len) noexcept;

/// Header digest of a header of `hlen` bytes.
uint32_t header_digest(const void* hdr, size_t hlen) noexcept;

/// The verdict on one received header.
struct HeaderCheck {
  Errc err = Errc::ok;
  Fes fes = Fes::none;
  uint32_t fei = 0;          ///< byte offset of the offending field
  uint32_t data_len = 0;     ///< bytes of data the PDU carries
  uint32_t pad_len = 0;      ///< bytes between the header (digest) and the data
  uint32_t header_total = 0; ///< hlen plus the header digest when present
  bool has_ddgst = false;
  const char* what = "";     ///< a short reason for logs
};

/// Validates the common header of a received PDU before its variable part is read.
/// `max_data` bounds the data any PDU may carry (e.g. MAXH2CDATA, or the host's largest read).
HeaderCheck check_common_header(const CommonHeader& ch, Role receiver, const Negotiated& n,
                                uint32_t max_data) noexcept;

const char* to_string(PduType t) noexcept;

/// Where consume() may stop besides the end of its input.
enum class ConsumeUntil : uint8_t {
  input_end,  ///< everything given, however many PDUs that is
  pdu_end,    ///< also right after a PDU completes (on_pdu returned), so that the caller can
              ///< decide before each PDU whether to take it
};

/// Incremental PDU receiver. Feed it whatever the socket returned; it calls the handler:
///   Errc on_header(const uint8_t* hdr, const HeaderCheck& hc, uint8_t*& data_dst)
///       the full header arrived (digest verified). For PDUs with data, set data_dst to a buffer
///       of at least hc.data_len bytes (nullptr discards the data) or return an error.
///   Errc on_pdu(const uint8_t* hdr, const HeaderCheck& hc)
///       the whole PDU arrived, data digest verified.
/// consume() returns the bytes used, and an error when it stopped early (the connection must then
/// be failed). The header bytes stay valid until the next consume(). With ConsumeUntil::pdu_end it
/// returns after at most one on_pdu call.
class PduReader {
 public:
  PduReader(Role receiver, uint32_t max_data) noexcept : role_(receiver), max_data_(max_data) {}
  void set_negotiated(const Negotiated& n) noexcept { neg_ = n; }
  void set_max_data(uint32_t m) noexcept { max_data_ = m; }
  const Negotiated& negotiated() const noexcept { return neg_; }
  /// The last failure's details (FES/FEI for a termination request, reason for logs).
  const HeaderCheck& last_check() const noexcept { return check_; }
  const uint8_t* header() const noexcept { return hdr_; }
  /// True between PDUs (no partial PDU buffered): a peer closing here closed cleanly.
  bool at_boundary() const noexcept { return phase_ == Phase::common && got_ == 0; }
  /// When the data of the PDU being read goes into [base, base + len), the rest of it is
  /// dropped instead (its digest is still checked).
  void drop_data_into(const uint8_t* base, size_t len) noexcept {
    if (dst_ && dst_ >= base && dst_ < base + len) dst_ = nullptr;
  }

  /// What consume() took from its input, and why it stopped early (Errc::ok: it did not; the
  /// details are in last_check()).
  struct Consumed {
    size_t bytes = 0;
    Errc error = Errc::ok;
  };
  template <class Handler>
  Consumed consume(const uint8_t* p, size_t n, Handler& h, ConsumeUntil until = ConsumeUntil::input_end) noexcept;

  /// Where the rest of the current PDU's data goes, when the reader is inside a data payload
  /// whose destination is a buffer (empty otherwise): a receive may write up to that many bytes
  /// there itself and hand them over with consume_placed(), saving the copy consume() makes.
  std::span<uint8_t> data_room() const noexcept {
    if (phase_ != Phase::data || !dst_) return {};
    return {dst_ + got_, check_.data_len - got_};
  }
  /// Bytes up to the end of the next PDU header (the current one's when inside one; the rest of
  /// a payload and its data digest first when inside those), counting a header whose length is
  /// not known yet as `expected_total` bytes (hlen plus its digest). A receive of at most this
  /// many bytes stops before a payload that follows the header, so that the payload can then go
  /// to data_room().
  size_t header_left(uint32_t expected_total) const noexcept {
    const size_t next = std::max<uint32_t>(expected_total, sizeof(CommonHeader));
    switch (phase_) {
      case Phase::common:
        return next - got_;
      case Phase::header:
        return check_.header_total - got_;
      case Phase::pad:
        return check_.pad_len - got_;
      case Phase::data:
        return check_.data_len - got_ + (check_.has_ddgst ? kDigestLen : 0) + next;
      case Phase::ddgst:
        return kDigestLen - got_ + next;
    }
    return 0;
  }
  /// `n` bytes (at most data_room().size()) were written straight to data_room(): account them
  /// as consume() would have (data digest, the end of the PDU and its on_pdu).
  template <class Handler>
  Consumed consume_placed(size_t n, Handler& h) noexcept;

 private:
  enum class Phase : uint8_t { common, header, pad, data, ddgst };
  Errc finish_header() noexcept;
  Errc fail(Errc e, Fes fes, uint32_t fei, const char* what) noexcept {
    check_.err = e;
    check_.fes = fes;
    check_.fei = fei;
    check_.what = what;
    return e;
  }

  Role role_;
  uint32_t max_data_;
  Negotiated neg_{};
  Phase phase_ = Phase::common;
  uint32_t got_ = 0;  // bytes of the current phase received so far
  HeaderCheck check_{};
  uint8_t* dst_ = nullptr;
  uint32_t crc_ = 0;
  alignas(8) uint8_t hdr_[kMaxHeaderLen + kMaxTermReqData]{};
  uint8_t dgst_[kDigestLen]{};
};

}  // namespace nvmeof::tcp

#include "transport/tcp/pdu_reader_impl.hpp"
