// NVMe submission and completion queue entries, the admin and NVM command set constants, and
// the prep helpers that fill them (for Controller::admin, nvmeof/controller.hpp; the Dataset
// Management ranges of Volume::dsm). Fabrics commands (Connect, Property Get/Set, the SGL data
// pointer) are the library's own business and are not here.
//
// In the style of liburing's io_uring_prep_*: each helper only fills a struct, all are built on
// one generic builder, none allocates or fails. Field layouts are those of the NVMe Base
// Specification 2.0; the library targets little-endian hosts only.
// Threading: plain data; no shared state.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "nvmeof/status.hpp"
#include "nvmeof/export.h"

static_assert(std::endian::native == std::endian::little, "nvmeof supports little-endian hosts");

NVMEOF_API_BEGIN  // every declaration below is public API (default visibility)
namespace nvmeof {

/// 64-byte submission queue entry.
struct Sqe {
  uint8_t opcode;
  uint8_t flags;  ///< bits 7:6 PSDT, bits 1:0 FUSE
  uint16_t cid;
  uint32_t nsid;
  uint32_t cdw2;
  uint32_t cdw3;
  uint64_t mptr;
  uint8_t dptr[16];  ///< data pointer (filled by the transport)
  uint32_t cdw10;
  uint32_t cdw11;
  uint32_t cdw12;
  uint32_t cdw13;
  uint32_t cdw14;
  uint32_t cdw15;
};
static_assert(sizeof(Sqe) == 64);

/// 16-byte completion queue entry.
struct Cqe {
  uint32_t dw0;
  uint32_t dw1;
  uint16_t sq_head;
  uint16_t sq_id;
  uint16_t cid;
  uint16_t status_field;  ///< bit 0 phase, bits 15:1 status
  NvmeStatus status() const noexcept { return NvmeStatus::from_cqe_field(status_field); }
};
static_assert(sizeof(Cqe) == 16);

namespace opcode {
// Admin
inline constexpr uint8_t kGetLogPage = 0x02;
inline constexpr uint8_t kIdentify = 0x06;
inline constexpr uint8_t kSetFeatures = 0x09;
inline constexpr uint8_t kGetFeatures = 0x0a;
inline constexpr uint8_t kAsyncEventRequest = 0x0c;
inline constexpr uint8_t kKeepAlive = 0x18;
/// Cross-Controller Reset (NVMe TP8028): resets another controller of the same subsystem.
inline constexpr uint8_t kCrossControllerReset = 0x38;
// NVM I/O
inline constexpr uint8_t kFlush = 0x00;
inline constexpr uint8_t kWrite = 0x01;
inline constexpr uint8_t kRead = 0x02;
inline constexpr uint8_t kWriteZeroes = 0x08;
inline constexpr uint8_t kDatasetManagement = 0x09;
}  // namespace opcode

namespace cns {
inline constexpr uint8_t kNamespace = 0x00;
inline constexpr uint8_t kController = 0x01;
inline constexpr uint8_t kActiveNamespaceList = 0x02;
inline constexpr uint8_t kNamespaceDescriptors = 0x03;
}  // namespace cns

namespace log_page {
/// Changed Namespace List: up to 1024 NSIDs changed since the controller last returned it (read
/// clears it); 0xFFFFFFFF in the first entry when more changed.
inline constexpr uint8_t kChangedNamespaces = 0x04;
inline constexpr uint32_t kAllNamespacesChanged = 0xffffffffu;
inline constexpr uint8_t kAna = 0x0c;
inline constexpr uint8_t kDiscovery = 0x70;
/// Cross-Controller Reset log (TP8028): one entry per CCR this controller was asked for.
inline constexpr uint8_t kCrossControllerReset = 0x1e;
}  // namespace log_page

/// TP8028 Cross-Controller Reset: completion DW0 bits, log entry status, the command-specific
/// statuses (SCT 1) and the asynchronous event (notice, information F4h, log page 1Eh).
namespace ccr {
inline constexpr uint32_t kImmediateResetSuccessful = 1u << 0;  ///< IRS: reset already done
inline constexpr uint32_t kValidated = 1u << 1;                 ///< V (only with IRS)
inline constexpr uint32_t kControllerLevelReset = 1u << 2;      ///< CLRI (only with IRS)
inline constexpr uint8_t kStatusInProgress = 0;  ///< CCRS of a log entry
inline constexpr uint8_t kStatusSuccess = 1;
inline constexpr uint8_t kStatusFailed = 2;
inline constexpr uint8_t kScInProgress = 0x3f;   ///< this controller already resets that one
inline constexpr uint8_t kScLogFull = 0x40;
inline constexpr uint8_t kScLimitExceeded = 0x41;  ///< more than CCRL in progress
inline constexpr uint8_t kEventInfoCompleted = 0xf4;
inline constexpr size_t kLogHeaderLen = 8;   ///< NE (u16) then reserved
inline constexpr size_t kLogEntryLen = 8;    ///< ICID u16, CIU u8, rsvd, ACID u16, CCRS u8, CCRF u8
inline constexpr size_t kMaxLogEntries = 511;
}  // namespace ccr

namespace feature {
inline constexpr uint8_t kArbitration = 0x01;
inline constexpr uint8_t kPowerManagement = 0x02;
inline constexpr uint8_t kTemperatureThreshold = 0x04;
inline constexpr uint8_t kErrorRecovery = 0x05;
inline constexpr uint8_t kVolatileWriteCache = 0x06;
inline constexpr uint8_t kNumberOfQueues = 0x07;
inline constexpr uint8_t kAsyncEventConfig = 0x0b;
inline constexpr uint8_t kKeepAliveTimer = 0x0f;
}  // namespace feature

/// Generic builder: zeroes the entry and sets opcode and nsid.
inline void prep_command(Sqe& c, uint8_t op, uint32_t nsid) noexcept {
  std::memset(&c, 0, sizeof c);
  c.opcode = op;
  c.nsid = nsid;
}

inline void prep_rw(Sqe& c, uint8_t op, uint32_t nsid, uint64_t slba, uint32_t nlb) noexcept {
  prep_command(c, op, nsid);
  c.cdw10 = static_cast<uint32_t>(slba);
  c.cdw11 = static_cast<uint32_t>(slba >> 32);
  c.cdw12 = (nlb - 1) & 0xffff;  // NLB is 0's based
}

/// Read `nlb` (1..65536) logical blocks starting at `slba`.
inline void prep_read(Sqe& c, uint32_t nsid, uint64_t slba, uint32_t nlb) noexcept {
  prep_rw(c, opcode::kRead, nsid, slba, nlb);
}
/// Write `nlb` (1..65536) logical blocks starting at `slba`.
inline void prep_write(Sqe& c, uint32_t nsid, uint64_t slba, uint32_t nlb) noexcept {
  prep_rw(c, opcode::kWrite, nsid, slba, nlb);
}
inline void prep_write_zeroes(Sqe& c, uint32_t nsid, uint64_t slba, uint32_t nlb) noexcept {
  prep_rw(c, opcode::kWriteZeroes, nsid, slba, nlb);
}
inline void prep_flush(Sqe& c, uint32_t nsid) noexcept { prep_command(c, opcode::kFlush, nsid); }

/// One Dataset Management range (the command's data is an array of these).
struct DsmRange {
  uint32_t context_attributes;
  uint32_t nlb;  ///< 1's based length in logical blocks
  uint64_t slba;
};
static_assert(sizeof(DsmRange) == 16);
inline constexpr uint32_t kDsmDeallocate = 1u << 2;

/// Dataset Management over `nr` (1..256) ranges; `attributes` e.g. kDsmDeallocate.
inline void prep_dsm(Sqe& c, uint32_t nsid, uint32_t nr, uint32_t attributes) noexcept {
  prep_command(c, opcode::kDatasetManagement, nsid);
  c.cdw10 = (nr - 1) & 0xff;
  c.cdw11 = attributes;
}

inline void prep_identify(Sqe& c, uint8_t cns_value, uint32_t nsid, uint16_t cntid = 0) noexcept {
  prep_command(c, opcode::kIdentify, nsid);
  c.cdw10 = cns_value | (static_cast<uint32_t>(cntid) << 16);
}

/// Get Log Page for `len` bytes (a multiple of 4) at byte `offset`.
inline void prep_get_log_page(Sqe& c, uint8_t lid, uint32_t nsid, uint32_t len, uint64_t offset = 0,
                              uint8_t lsp = 0) noexcept {
  prep_command(c, opcode::kGetLogPage, nsid);
  const uint32_t numd = len / 4 - 1;
  c.cdw10 = lid | (static_cast<uint32_t>(lsp & 0x7f) << 8) | ((numd & 0xffff) << 16);
  c.cdw11 = numd >> 16;
  c.cdw12 = static_cast<uint32_t>(offset);
  c.cdw13 = static_cast<uint32_t>(offset >> 32);
}

inline void prep_set_features(Sqe& c, uint8_t fid, uint32_t cdw11) noexcept {
  prep_command(c, opcode::kSetFeatures, 0);
  c.cdw10 = fid;
  c.cdw11 = cdw11;
}
inline void prep_get_features(Sqe& c, uint8_t fid) noexcept {
  prep_command(c, opcode::kGetFeatures, 0);
  c.cdw10 = fid;
}
inline void prep_keep_alive(Sqe& c) noexcept { prep_command(c, opcode::kKeepAlive, 0); }
/// Cross-Controller Reset of controller `icid` of the same subsystem, named by its CNTLID, CIU
/// and CIRN (Identify Controller of that controller): CDW10 ICID | CIU << 16, CDW12/13 CIRN.
inline void prep_cross_controller_reset(Sqe& c, uint16_t icid, uint8_t ciu, uint64_t cirn) noexcept {
  prep_command(c, opcode::kCrossControllerReset, 0);
  c.cdw10 = icid | (static_cast<uint32_t>(ciu) << 16);
  c.cdw12 = static_cast<uint32_t>(cirn);
  c.cdw13 = static_cast<uint32_t>(cirn >> 32);
}
inline void prep_async_event_request(Sqe& c) noexcept {
  prep_command(c, opcode::kAsyncEventRequest, 0);
}

}  // namespace nvmeof
NVMEOF_API_END
