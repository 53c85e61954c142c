// The admin readers of the host, written once over an AdminChannel: Identify Controller,
// Identify Namespace (with its descriptor list), the active namespace list, Get Log Page in
// pieces at offsets, the ANA log (its header first, then the length it names) and the
// discovery log (re-read while its generation counter moves).
//
// An AdminChannel is a fabric controller's admin queue (control/controller.cpp) or a kernel
// controller's /dev/nvmeX (transport/uring/admin.hpp).
//
// Threading: each call blocks its caller for as long as the channel's commands take.
#pragma once

#include <cstdint>
#include <vector>

#include "nvmeof/command.hpp"
#include "nvmeof/identify.hpp"
#include "nvmeof/status.hpp"

namespace nvmeof::fabric {

inline constexpr uint32_t kNsidAll = 0xffffffffu;
inline constexpr uint32_t kIdentifyLen = 4096;
inline constexpr uint32_t kAnaHeaderLen = 16;
inline constexpr uint32_t kAnaGroupDescLen = 32;
inline constexpr uint32_t kDiscoveryRecordLen = 1024;
inline constexpr uint64_t kMaxDiscoveryRecords = 1024;
inline constexpr uint32_t kMaxLogLen = 4u << 20;

class AdminChannel {
 public:
  virtual ~AdminChannel() = default;
  /// Runs one admin command moving `len` bytes to or from `data` (direction from the opcode),
  /// waiting for its completion. Returns DW0. Errors: the command's non-success status as an
  /// nvme_category() code, or the channel's own (timeout, not_connected, errno codes).
  virtual Result<uint32_t> admin_command(const Sqe& cmd, void* data, uint32_t len) = 0;
  /// Largest data length of one command (get_log_page() reads in pieces of this size).
  virtual uint32_t admin_max_transfer() const noexcept = 0;

 protected:
  AdminChannel() = default;
  AdminChannel(const AdminChannel&) = default;
  AdminChannel& operator=(const AdminChannel&) = default;
};

/// `cmd` reading `len` bytes into a new buffer.
Result<std::vector<uint8_t>> read_data(AdminChannel& ch, const Sqe& cmd, uint32_t len);
/// Log page `lid` for `nsid`, `len` bytes (rounded up to dwords), read in pieces of at most
/// admin_max_transfer() at their offsets (LPOL/LPOU).
Result<std::vector<uint8_t>> get_log_page(AdminChannel& ch, uint8_t lid, uint32_t nsid, uint32_t len);

/// Identify Controller, parsed.
Result<ControllerInfo> identify_controller(AdminChannel& ch);
/// Identify Namespace `nsid`, parsed, with the UUID from its descriptor list (NVMe 1.3+; a
/// controller that refuses the list still has NGUID/EUI64).
Result<NamespaceInfo> identify_namespace(AdminChannel& ch, uint32_t nsid);
/// Every active NSID in ascending order (CNS 02h, continued past the last NSID of a full list).
/// short_data when a list does not ascend.
Result<std::vector<uint32_t>> active_namespaces(AdminChannel& ch);
/// The ANA log with NSID lists: its header first, then as many bytes as its group count and
/// `nn` (Identify Controller NN: each namespace sits in at most one group) say, at most
/// kMaxLogLen.
Result<AnaLog> ana_log(AdminChannel& ch, uint32_t nn);
/// Every NSID of the Changed Namespace List log (4096 bytes: up to 1024, ending at the first 0),
/// the read that clears it on the controller. kAllNamespacesChanged alone when more than 1024
/// changed (or the list names it anywhere): look at every namespace.
using log_page::kAllNamespacesChanged;
Result<std::vector<uint32_t>> changed_namespaces(AdminChannel& ch);
/// The discovery log: the header, then every record NUMREC names (at most
/// kMaxDiscoveryRecords); read again while GENCTR changes between the two, up to three times
/// (protocol_error after).
Result<DiscoveryLog> discovery_log(AdminChannel& ch);

}  // namespace nvmeof::fabric
