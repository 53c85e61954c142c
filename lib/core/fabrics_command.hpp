// Fabrics commands (NVMe over Fabrics 1.1: Connect, Property Get/Set, the SGL descriptors of the
// fabric transports) and the decoders the transports and the embedded target share. Internal:
// an application reaches a controller through Controller and Volume (nvmeof/controller.hpp,
// nvmeof/volume.hpp), which issue these commands themselves. In core/ so that every layer that
// speaks to a fabric queue (fabric/, auth/, the transports, control/, the embedded target)
// reaches it (ARCHITECTURE.md, "Layers").
//
// Threading: constants and functions that only fill or read a command.
#pragma once

#include <cstdint>
#include <cstring>

#include "nvmeof/command.hpp"

namespace nvmeof {

namespace opcode {
inline constexpr uint8_t kFabrics = 0x7f;
}  // namespace opcode

namespace fctype {
inline constexpr uint8_t kPropertySet = 0x00;
inline constexpr uint8_t kConnect = 0x01;
inline constexpr uint8_t kPropertyGet = 0x04;
inline constexpr uint8_t kAuthenticationSend = 0x05;
inline constexpr uint8_t kAuthenticationReceive = 0x06;
inline constexpr uint8_t kDisconnect = 0x08;
}  // namespace fctype

/// Controller properties (register offsets) reached by Property Get/Set over fabrics.
namespace prop {
inline constexpr uint32_t kCap = 0x00;  // 8 bytes
inline constexpr uint32_t kVs = 0x08;
inline constexpr uint32_t kCc = 0x14;
inline constexpr uint32_t kCsts = 0x1c;
}  // namespace prop

inline void prep_fabrics(Sqe& c, uint8_t fct) noexcept {
  prep_command(c, opcode::kFabrics, 0);
  reinterpret_cast<uint8_t*>(&c)[4] = fct;
}
inline uint8_t fabrics_type(const Sqe& c) noexcept { return reinterpret_cast<const uint8_t*>(&c)[4]; }

/// Connect CATTR bit 2: the host asks for SQ flow control to be disabled (no SQHD reported).
inline constexpr uint8_t kConnectDisableSqFlowControl = 1u << 2;

/// Fabrics Connect: `sqsize` is 0's based; `kato_ms` the keep-alive timeout (admin queue only);
/// `cattr` the connection attributes (kConnectDisableSqFlowControl).
inline void prep_connect(Sqe& c, uint16_t qid, uint16_t sqsize, uint32_t kato_ms,
                         uint8_t cattr = 0) noexcept {
  prep_fabrics(c, fctype::kConnect);
  c.cdw10 = static_cast<uint32_t>(qid) << 16;  // RECFMT 0 in bits 15:0
  c.cdw11 = sqsize | (static_cast<uint32_t>(cattr) << 16);
  c.cdw12 = kato_ms;
}
/// Property Get of a 4-byte (`size8` false) or 8-byte property.
inline void prep_property_get(Sqe& c, uint32_t offset, bool size8) noexcept {
  prep_fabrics(c, fctype::kPropertyGet);
  c.cdw10 = size8 ? 1 : 0;
  c.cdw11 = offset;
}
inline void prep_property_set(Sqe& c, uint32_t offset, uint64_t value, bool size8) noexcept {
  prep_fabrics(c, fctype::kPropertySet);
  c.cdw10 = size8 ? 1 : 0;
  c.cdw11 = offset;
  c.cdw12 = static_cast<uint32_t>(value);
  c.cdw13 = static_cast<uint32_t>(value >> 32);
}

/// SGL descriptors of the fabric transports' commands (Data Block in the command's data pointer).
namespace sgl {
inline constexpr uint8_t kPsdtSgl = 0x40;  // PSDT 01b in flags bits 7:6
inline constexpr uint8_t kDataBlockOffset = 0x01;  // type 0h, subtype 1h: in-capsule data
inline constexpr uint8_t kTransportDataBlock = 0x5a;  // type 5h, subtype Ah: data moved by PDUs
}  // namespace sgl

inline void set_sgl(Sqe& c, uint8_t id, uint64_t address, uint32_t length) noexcept {
  c.flags = static_cast<uint8_t>((c.flags & 0x3f) | sgl::kPsdtSgl);
  std::memcpy(c.dptr, &address, 8);
  std::memcpy(c.dptr + 8, &length, 4);
  c.dptr[12] = c.dptr[13] = c.dptr[14] = 0;
  c.dptr[15] = id;
}
inline uint32_t sgl_length(const Sqe& c) noexcept {
  uint32_t len;
  std::memcpy(&len, c.dptr + 8, 4);
  return len;
}
inline uint64_t sgl_address(const Sqe& c) noexcept {
  uint64_t a;
  std::memcpy(&a, c.dptr, 8);
  return a;
}
inline uint8_t sgl_id(const Sqe& c) noexcept { return c.dptr[15]; }

/// Fields of a read/write command, decoded.
inline uint64_t rw_slba(const Sqe& c) noexcept {
  return c.cdw10 | (static_cast<uint64_t>(c.cdw11) << 32);
}
inline uint32_t rw_nlb(const Sqe& c) noexcept { return (c.cdw12 & 0xffff) + 1; }

/// Whether the command moves data from host to controller (opcode bits 1:0 = 01b), the
/// convention of the NVMe opcode encoding; for a Fabrics command FCTYPE bits 1:0 say it
/// (Connect and Authentication Send send data, Authentication Receive receives it).
inline bool is_host_to_controller(const Sqe& c) noexcept {
  if (c.opcode == opcode::kFabrics) return (fabrics_type(c) & 0x3) == 0x1;
  return (c.opcode & 0x3) == 0x1;
}
inline bool is_controller_to_host(const Sqe& c) noexcept {
  if (c.opcode == opcode::kFabrics) return (fabrics_type(c) & 0x3) == 0x2;
  return (c.opcode & 0x3) == 0x2;
}

}  // namespace nvmeof
