#include "target/host_access.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cstring>
#include <string>

namespace nvmeof::target {

bool is_loopback_traddr(std::string_view traddr) noexcept {
  if (traddr == "localhost") return true;
  // inet_pton needs a NUL-terminated string; an address literal is short.
  char buf[INET6_ADDRSTRLEN + 1];
  if (traddr.empty() || traddr.size() >= sizeof buf) return false;
  std::memcpy(buf, traddr.data(), traddr.size());
  buf[traddr.size()] = '\0';
  in_addr v4{};
  if (::inet_pton(AF_INET, buf, &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (::inet_pton(AF_INET6, buf, &v6) != 1) return false;
  if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
  return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
}

bool all_ports_loopback(const std::vector<TargetPort>& ports) noexcept {
  if (ports.empty()) return false;
  for (const auto& p : ports)
    if (!is_loopback_traddr(p.traddr)) return false;
  return true;
}

bool any_host_allowed(const TargetSubsystem& sub, const std::vector<TargetPort>& ports) noexcept {
  switch (sub.access) {
    case HostAccess::any: return true;
    case HostAccess::allow_list: return false;
    case HostAccess::automatic: return all_ports_loopback(ports);
  }
  return false;
}

}  // namespace nvmeof::target
