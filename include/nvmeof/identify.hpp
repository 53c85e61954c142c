// Identify data and log pages as the library reads them from a controller (Controller::info,
// identify_namespace, ana_log, discovery_log; Volume::ns). Threading: plain data.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "nvmeof/status.hpp"
#include "nvmeof/export.h"

NVMEOF_API_BEGIN  // every declaration below is public API (default visibility)
namespace nvmeof {

inline constexpr char kDiscoveryNqn[] = "nqn.2014-08.org.nvmexpress.discovery";

/// The fields of Identify Controller the library uses.
struct ControllerInfo {
  uint16_t cntlid = 0;
  std::string serial;  ///< SN, trimmed
  std::string model;   ///< MN, trimmed
  std::string firmware;
  std::string subnqn;
  uint8_t mdts = 0;            ///< raw MDTS (power of two of the minimum page size, 0 = none)
  uint32_t max_transfer = 0;   ///< MDTS in bytes (4 KiB pages assumed), 0 = unlimited
  uint32_t nn = 0;             ///< number of namespaces
  uint16_t kas_100ms = 0;      ///< keep-alive granularity
  uint32_t ctratt = 0;         ///< controller attributes
  /// CTRATT bit 6 (TBKAS): any command restarts the controller's keep-alive timer, so the
  /// host may skip keep-alives while traffic flows; the TP4129 hold is then 3 x KATO + CQT.
  bool traffic_based_keep_alive() const noexcept { return (ctratt & (1u << 6)) != 0; }
  // TP8028 (Rapid Path Failure Recovery), bytes 135, 143:136 and 1807; libnvme 1.3 predates them.
  uint8_t ciu = 0;             ///< Controller Instance Uniquifier (changes on every enable)
  uint64_t cirn = 0;           ///< Controller Instance Random Number
  uint8_t ccrl = 0;            ///< Cross-Controller Reset Limit; 0: no CCR through this controller
  uint8_t anatt_s = 0;         ///< ANA transition time, seconds
  uint8_t anacap = 0;
  uint32_t nanagrpid = 0;
  uint16_t cqt_ms = 0;         ///< Command Quiesce Time (ms; bytes 387:386, NVMe 2.1), 0 = not reported
  std::array<uint16_t, 3> crdt_100ms{};  ///< command retry delay times
  uint8_t cmic = 0;
  uint32_t ioccsz_bytes = 0;   ///< I/O command capsule size (64 + in-capsule data)
  uint32_t iorcsz_bytes = 0;
  uint32_t sgls = 0;
  uint16_t oncs = 0;
  uint8_t vwc = 0;
  uint32_t ver = 0;
  uint8_t cntrltype = 0;
  /// Bytes of in-capsule data an I/O command may carry (ioccsz - 64).
  uint32_t in_capsule_data() const noexcept { return ioccsz_bytes > 64 ? ioccsz_bytes - 64 : 0; }
};

using Nguid = std::array<uint8_t, 16>;
using Eui64 = std::array<uint8_t, 8>;
using Uuid = std::array<uint8_t, 16>;

/// What identifies a namespace across controllers (never the NSID alone).
struct NamespaceId {
  Nguid nguid{};
  Eui64 eui64{};
  Uuid uuid{};
  bool has_nguid = false;
  bool has_eui64 = false;
  bool has_uuid = false;
  /// True when at least one identifier is present in both and every common one is equal.
  bool same_namespace_as(const NamespaceId& o) const noexcept;
  bool empty() const noexcept { return !has_nguid && !has_eui64 && !has_uuid; }
  std::string to_string() const;
};

struct NamespaceInfo {
  uint32_t nsid = 0;
  uint64_t size_blocks = 0;    ///< NSZE
  uint64_t capacity_blocks = 0;
  uint32_t block_size = 0;     ///< from the current LBA format
  uint32_t anagrpid = 0;
  uint8_t nmic = 0;
  NamespaceId id;
};

enum class AnaState : uint8_t {
  optimized = 0x1,
  non_optimized = 0x2,
  inaccessible = 0x3,
  persistent_loss = 0x4,
  change = 0xf,
};
const char* to_string(AnaState s) noexcept;

struct AnaGroup {
  uint32_t grpid = 0;
  AnaState state = AnaState::optimized;
  uint64_t chgcnt = 0;
  std::vector<uint32_t> nsids;
};
struct AnaLog {
  uint64_t chgcnt = 0;
  std::vector<AnaGroup> groups;
  /// The group holding `grpid`, or nullptr.
  const AnaGroup* group(uint32_t grpid) const noexcept;
};
struct DiscoveryEntry {
  uint8_t trtype = 0;   ///< 1 rdma, 3 tcp
  uint8_t adrfam = 0;   ///< 1 ipv4, 2 ipv6
  uint8_t subtype = 0;  ///< 1 referral, 2 nvme, 3 current discovery
  uint8_t treq = 0;     ///< bits 1:0 secure channel: 0 not specified, 1 required, 2 not required
  uint8_t sectype = 0;  ///< TSAS SECTYPE of a TCP entry: 0 none, 1 TLS 1.2, 2 TLS 1.3
  uint16_t portid = 0;
  uint16_t cntlid = 0;
  uint16_t asqsz = 0;
  std::string trsvcid;
  std::string subnqn;
  std::string traddr;
};
struct DiscoveryLog {
  uint64_t genctr = 0;
  std::vector<DiscoveryEntry> entries;
};
}  // namespace nvmeof
NVMEOF_API_END
