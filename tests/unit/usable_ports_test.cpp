// Which ports of a discovery log a host uses for a subsystem (usable_ports, shared by
// Volume::open_discovered and persistent discovery): TCP entries of that subsystem only, TLS
// chosen by TREQ/TSAS, one path per port however many entries name it, referrals and other
// subsystems left out.
#include <catch2/catch.hpp>

#include "multipath/discovery.hpp"

using namespace nvmeof;
using nvmeof::detail::usable_ports;

namespace {

DiscoveryEntry entry(const std::string& nqn, const std::string& addr, const std::string& port, uint8_t treq = 0,
                     uint8_t sectype = 0, uint8_t trtype = 3, uint8_t subtype = 2) {
  DiscoveryEntry e;
  e.subnqn = nqn;
  e.traddr = addr;
  e.trsvcid = port;
  e.treq = treq;
  e.sectype = sectype;
  e.trtype = trtype;
  e.subtype = subtype;
  return e;
}

std::vector<std::string> names(const std::vector<TransportAddress>& v) {
  std::vector<std::string> out;
  for (const auto& a : v) out.push_back(a.traddr + ":" + a.trsvcid);
  return out;
}

}  // namespace

TEST_CASE("usable_ports: the subsystem's TCP ports, once each; referrals and others left out", "[discovery]") {
  const std::string us = "nqn.2024-01.io.nvmeof:us";
  const std::vector<DiscoveryEntry> log = {
      entry(us, "10.0.0.1", "4420"),
      entry(us, "10.0.0.1", "4420"),                                  // a second entry of one port
      entry("nqn.2024-01.io.nvmeof:them", "10.0.0.9", "4420"),        // another subsystem
      entry(us, "10.0.0.2", "4420", 0, 0, 1),                         // RDMA: not ours to dial here
      entry(kDiscoveryNqn, "10.0.0.3", "8009", 0, 0, 3, 1),           // a referral
      entry(us, "10.0.0.4", "4420", 1),                               // requires TLS
      entry(us, "10.0.0.5", "4420", 2, 2),                            // TLS 1.3 offered, not required
  };
  ConnectOptions plain;
  size_t need = 0, none = 0;
  CHECK(names(usable_ports(log, us, plain, &need, &none)) ==
        std::vector<std::string>{"10.0.0.1:4420", "10.0.0.5:4420"});
  CHECK(need == 1);
  CHECK(none == 0);

  ConnectOptions tls;
  tls.tls_psk = "NVMeTLSkey-1:01:AAAA:";  // keyed: only ports that offer TLS 1.3
  need = none = 0;
  CHECK(names(usable_ports(log, us, tls, &need, &none)) == std::vector<std::string>{"10.0.0.5:4420"});
  CHECK(none == 3);
  CHECK(need == 0);

  CHECK(usable_ports(log, "nqn.2024-01.io.nvmeof:nobody", plain).empty());
  CHECK(usable_ports({}, us, plain).empty());
}
