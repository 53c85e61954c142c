// The parsers of Identify data and log pages (Identify Controller and Namespace, the Namespace
// Identification Descriptor list, the ANA and discovery logs) into the forms of
// nvmeof/identify.hpp, and of an ANA state's name. The raw layouts are libnvme's
// (<nvme/types.h>); parsing checks every length against the buffer it was given: short or
// inconsistent input yields Errc::short_data, never a read past the end. Internal: the admin
// readers (fabric/), the kernel path scan (control/), the tools, the tests and the fuzz targets
// use them; an application gets the parsed forms from Controller and Volume.
//
// Threading: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "nvmeof/identify.hpp"
#include "nvmeof/status.hpp"

namespace nvmeof {

/// Identify Controller data is 4096 bytes; returns short_data when `raw` is shorter.
Result<ControllerInfo> parse_identify_controller(std::span<const uint8_t> raw);

/// Identify Namespace (4096 bytes). A namespace that is not active (NSZE 0) parses with
/// size_blocks 0. Errors: short_data, invalid_argument (LBA format out of range).
Result<NamespaceInfo> parse_identify_namespace(std::span<const uint8_t> raw, uint32_t nsid);
/// Merges a Namespace Identification Descriptor list (CNS 03h) into `id`.
Result<void> parse_ns_descriptors(std::span<const uint8_t> raw, NamespaceId& id);

/// Parses "optimized", "non-optimized" / "non_optimized", "inaccessible", "persistent-loss",
/// "change". Errc::invalid_argument otherwise.
Result<AnaState> parse_ana_state(std::string_view s);

/// ANA log page (0x0C). Errors: short_data when a descriptor or its NSID list runs past `raw`,
/// malformed (invalid_argument) on an unknown state value.
Result<AnaLog> parse_ana_log(std::span<const uint8_t> raw);

/// Discovery log page (0x70): 1024-byte header then 1024-byte entries. Errors: short_data.
Result<DiscoveryLog> parse_discovery_log(std::span<const uint8_t> raw);

}  // namespace nvmeof
