// In-band authentication on a fabrics queue (NVMe Base 2.0, 8.13; NVMe over Fabrics 1.1): the
// Authentication Send / Receive commands and the AUTHREQ bits of the Connect response, one set
// for the host's Fabrics Connect (fabric/), the DH-HMAC-CHAP machines (auth/) and the embedded
// target, which may all use core/.
//
// Threading: constants and functions that only fill a command.
#pragma once

#include <cstdint>

#include "core/fabrics_command.hpp"

namespace nvmeof {

/// Connect response DW0 (as nvmet and the Linux host place them): CNTLID in 15:0, AUTHREQ.
inline constexpr uint32_t kAuthReqAtr = 1u << 17;   ///< authentication transaction required
inline constexpr uint32_t kAuthReqAscr = 1u << 18;  ///< secure channel concatenation required

/// Security protocol and protocol-specific fields of DH-HMAC-CHAP.
inline constexpr uint8_t kAuthSecpDhchap = 0xe9;  ///< SECP: NVMe in-band authentication
inline constexpr uint8_t kAuthSpsp0 = 0x01;
inline constexpr uint8_t kAuthSpsp1 = 0x01;

/// Authentication Send (fctype 05h, `tl` bytes of message) / Receive (fctype 06h, `al` bytes
/// of buffer): SECP, SPSP1, SPSP0 in CDW10 (bits 31:24, 23:16, 15:8), TL or AL in CDW11. The
/// data pointer is the transport's.
inline void prep_auth_send(Sqe& c, uint32_t tl, uint8_t secp = kAuthSecpDhchap,
                           uint8_t spsp0 = kAuthSpsp0, uint8_t spsp1 = kAuthSpsp1) noexcept {
  prep_fabrics(c, fctype::kAuthenticationSend);
  c.cdw10 = static_cast<uint32_t>(secp) << 24 | static_cast<uint32_t>(spsp1) << 16 |
            static_cast<uint32_t>(spsp0) << 8;
  c.cdw11 = tl;
}
inline void prep_auth_receive(Sqe& c, uint32_t al, uint8_t secp = kAuthSecpDhchap,
                              uint8_t spsp0 = kAuthSpsp0, uint8_t spsp1 = kAuthSpsp1) noexcept {
  prep_fabrics(c, fctype::kAuthenticationReceive);
  c.cdw10 = static_cast<uint32_t>(secp) << 24 | static_cast<uint32_t>(spsp1) << 16 |
            static_cast<uint32_t>(spsp0) << 8;
  c.cdw11 = al;
}

}  // namespace nvmeof
