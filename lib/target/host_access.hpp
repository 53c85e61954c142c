// Which hosts may use a subsystem of the embedded target: the loopback rule behind
// HostAccess::automatic, and the resolved decision each subsystem keeps.
// Threading: pure functions.
#pragma once

#include <string_view>
#include <vector>

#include "nvmeof/target.hpp"

namespace nvmeof::target {

/// A loopback traddr: IPv4 127.0.0.0/8, IPv6 ::1 (also v4-mapped 127/8), or "localhost".
/// 0.0.0.0 and :: (every address) are not, and neither is any other host name.
bool is_loopback_traddr(std::string_view traddr) noexcept;

/// Whether every port of `ports` listens on a loopback address (false for no ports).
bool all_ports_loopback(const std::vector<TargetPort>& ports) noexcept;

/// Whether any host may connect to `sub` on a target with these ports: HostAccess::any, or
/// HostAccess::automatic with every port on loopback. Otherwise only `sub.hosts` may.
bool any_host_allowed(const TargetSubsystem& sub, const std::vector<TargetPort>& ports) noexcept;

}  // namespace nvmeof::target
