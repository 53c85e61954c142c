// Builders for the data the target's admin commands return: Identify Controller / Namespace /
// active namespace list / namespace descriptors, and the ANA and discovery log pages. The layouts
// are libnvme's (<nvme/types.h>); these functions only fill them.
// Threading: pure functions over the arguments.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "nvmeof/identify.hpp"
#include "nvmeof/target.hpp"

struct nvme_id_ctrl;
struct nvme_id_ns;

namespace nvmeof::target {

class NsStore;
class Subsystem;

inline constexpr size_t kIdentifyLen = 4096;
/// Admin queues accept this much in-capsule data (Connect data is 1024 bytes).
inline constexpr uint32_t kAdminInCapsuleData = 8192;

/// Which controller instance Identify describes (TP8028 CIU/CIRN name it in a CCR).
struct ControllerInstance {
  uint16_t cntlid = 0;
  uint8_t ciu = 0;    ///< Controller Instance Uniquifier
  uint64_t cirn = 0;  ///< Controller Instance Random Number
};
/// Identify Controller for controller `inst` of `subsys` on a target with `nports` ports.
/// Discovery controllers report no CIU, CIRN or CCRL.
void build_identify_controller(const TargetOptions& opts, const Subsystem& subsys,
                               const ControllerInstance& inst, uint32_t nports, nvme_id_ctrl& id);
/// Identify Namespace; `anagrpid` is the ANA group of the asking controller's port.
void build_identify_namespace(const NsStore& ns, uint32_t anagrpid, nvme_id_ns& id);
/// Namespace Identification Descriptor list (NGUID, UUID, CSI) into a 4096-byte buffer.
void build_ns_descriptors(const NsStore& ns, std::span<uint8_t, kIdentifyLen> out);
/// Active namespace IDs greater than `after`, ascending, into a 4096-byte buffer.
void build_active_ns_list(const Subsystem& subsys, uint32_t after, std::span<uint8_t, kIdentifyLen> out);

/// The ANA state of one port's group as the log reports it.
struct AnaGroupView {
  AnaState state = AnaState::optimized;
  uint64_t chgcnt = 0;
};
/// ANA log page: one descriptor per port (group id = port index + 1). The namespaces are listed
/// under the asking controller's own group (`own`) only: a namespace belongs to one ANA group per
/// controller, and hosts (Linux among them) apply every descriptor that names a namespace.
/// `groups_only` (LSP bit 0, RGO) lists no namespaces at all.
std::vector<uint8_t> build_ana_log(uint64_t chgcnt, std::span<const AnaGroupView> groups, size_t own,
                                   std::span<const uint32_t> nsids, bool groups_only);

/// One discovery log entry: a subsystem reachable through a port.
struct DiscoveryRecord {
  std::string traddr;
  std::string trsvcid;
  uint8_t adrfam = 1;  ///< 1 IPv4, 2 IPv6
  uint16_t portid = 0;
  std::string subnqn;
  uint8_t treq = 0;     ///< TREQ: NVMF_TREQ_* secure channel requirement
  uint8_t sectype = 0;  ///< TSAS SECTYPE: NVMF_TCP_SECTYPE_*
};
/// Discovery log page (0x70): header then one 1024-byte entry per record.
std::vector<uint8_t> build_discovery_log(uint64_t genctr, std::span<const DiscoveryRecord> records);

}  // namespace nvmeof::target
