// The command lists fuzz_target takes (its mode bit 5): one 16-byte record per command, from
// which the fuzz target builds a capsule (fuzz_target.cpp, build()). Shared with the corpus
// generator, which writes its seeds as records, so that the two never disagree on a table.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/fabrics_command.hpp"
#include "nvmeof/command.hpp"

namespace nvmeof::fuzz {

/// Mode byte bit 5: the input after it is a list of Records.
inline constexpr uint8_t kModeCommands = 32;

// One command, 16 bytes (words little-endian):
//   kind  bits 1:0  Family
//         bits 4:2  DataMode
//         bit 5     a Connect names the host that must authenticate; on an I/O queue (stage 3)
//                   a Disconnect goes to the admin queue instead, ending the association
//                   under the I/O queue's later commands
//         bits 7:6  NSID: 1, 0, FFFFFFFFh, 2 (no such namespace). Fabrics: a Connect's CNTLID
//                   (FFFFh, 1, 2, CDW12 15:0), a property's offset (CAP, CC, CSTS, CDW11)
//   pick  the command in its family's table (modulo its size); for Fabrics a pick from F0h up
//         is that FCTYPE itself; for kAnyOpcode the opcode
//   len   the data length, kLengths[len % size]; kNatural sizes a Connect's data and an
//         AUTH_Negotiate itself
//   aux   bit 0 an 8-byte property; bits 2:1 a Connect's QID (0, 1, 2, CDW10 31:16); bit 3 an
//         Authentication Send carries an AUTH_Negotiate
//   cdw10, cdw11, cdw12 (a Connect's SQSIZE and CATTR are CDW11, its KATO CDW12; a property's
//         value is CDW12)
struct Record {
  uint8_t kind, pick, len, aux;
  uint32_t cdw10, cdw11, cdw12;
};
static_assert(sizeof(Record) == 16);

enum Family : uint8_t { kAdmin = 0, kIo = 1, kFabrics = 2, kAnyOpcode = 3 };
enum DataMode : uint8_t {
  kNoData = 0,
  kNatural = 1,    ///< as the opcode's direction says: in the capsule when it fits, else R2T/C2H
  kInCapsule = 2,
  kByPdus = 3,     ///< a transport SGL: R2T / H2CData, or C2HData
  kPrp = 4,        ///< no SGL at all
  kKeyed = 5,      ///< a keyed SGL, which NVMe/TCP does not take
  kAtOffset = 6,   ///< in the capsule, at a non-zero SGL offset
  kOverlong = 7,   ///< more in-capsule bytes than the SGL says
};
enum Sel : uint8_t { kSel0 = 0, kSel1 = 1, kSel2 = 2, kSel3 = 3 };
inline constexpr uint8_t kAuthHostBit = 0x20;
inline constexpr uint8_t kOnAdminBit = 0x20;
inline constexpr uint8_t kAuxSize8 = 1, kAuxNegotiate = 8;
inline constexpr uint8_t aux_qid(uint8_t q) { return static_cast<uint8_t>((q & 3) << 1); }

inline constexpr uint8_t kAdminOps[] = {opcode::kGetLogPage, opcode::kIdentify, 0x08 /* Abort */,
                                        opcode::kSetFeatures, opcode::kGetFeatures,
                                        opcode::kAsyncEventRequest, opcode::kKeepAlive,
                                        opcode::kCrossControllerReset, 0x00, 0x01, 0x04, 0x05, 0x10};
inline constexpr uint8_t kIoOps[] = {opcode::kFlush, opcode::kWrite, opcode::kRead, 0x04, 0x05,
                                     opcode::kWriteZeroes, opcode::kDatasetManagement, 0x0c, 0x0d, 0x19};
inline constexpr uint8_t kFabricsTypes[] = {fctype::kConnect, fctype::kPropertyGet,
                                            fctype::kPropertySet, fctype::kDisconnect,
                                            fctype::kAuthenticationSend,
                                            fctype::kAuthenticationReceive};
inline constexpr uint32_t kLengths[] = {0, 16, 64, 512, 1024, 4096, 8192, 8193, 65536, 131072, 131073, 1u << 20};

inline constexpr uint8_t kind(Family f, DataMode d, Sel s = kSel0, uint8_t extra = 0) {
  return static_cast<uint8_t>(f | (d << 2) | extra | (s << 6));
}

/// The table index of `v` (for writing seeds); the table's size when it is not there.
template <class T, size_t N>
constexpr uint8_t index_of(const T (&table)[N], T v) {
  for (size_t i = 0; i < N; ++i)
    if (table[i] == v) return static_cast<uint8_t>(i);
  return static_cast<uint8_t>(N);
}

template <class T, size_t N>
constexpr T pick(const T (&table)[N], uint8_t i) {
  return table[i % N];
}

}  // namespace nvmeof::fuzz
