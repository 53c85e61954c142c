#include "target/target_core.hpp"

#include <nvme/types.h>

#include "target/port.hpp"

namespace nvmeof::target {

Subsystem* TargetCore::subsystem(std::string_view nqn) const noexcept {
  if (nqn == discovery->nqn()) return discovery.get();
  for (const auto& s : subsystems)
    if (s->nqn() == nqn) return s.get();
  return nullptr;
}

std::vector<AnaGroupView> TargetCore::ana_groups() const {
  std::vector<AnaGroupView> g;
  g.reserve(ports.size());
  for (const auto& p : ports) g.push_back({p->ana_state(), p->ana_chgcnt()});
  return g;
}

std::vector<DiscoveryRecord> TargetCore::discovery_records(const std::string& local_addr,
                                                           std::string_view hostnqn) const {
  std::vector<DiscoveryRecord> r;
  for (const auto& p : ports) {
    if (p->stopped()) continue;  // removed: no longer a way in
    for (const auto& s : subsystems) {
      if (!s->allows(hostnqn)) continue;
      DiscoveryRecord d;
      d.traddr = p->is_wildcard() ? local_addr : p->traddr();
      d.trsvcid = std::to_string(p->number());
      d.adrfam = d.traddr.find(':') != std::string::npos ? 2 : 1;
      d.portid = static_cast<uint16_t>(p->index() + 1);
      d.subnqn = s->nqn();
      switch (p->config().tls) {
        case PortTls::none:
          d.treq = NVMF_TREQ_NOT_SPECIFIED;
          d.sectype = NVMF_TCP_SECTYPE_NONE;
          break;
        case PortTls::not_required:
          d.treq = NVMF_TREQ_NOT_REQUIRED;
          d.sectype = NVMF_TCP_SECTYPE_TLS13;
          break;
        case PortTls::required:
          d.treq = NVMF_TREQ_REQUIRED;
          d.sectype = NVMF_TCP_SECTYPE_TLS13;
          break;
      }
      r.push_back(std::move(d));
    }
  }
  return r;
}

uint32_t TargetCore::max_transfer() const noexcept {
  if (opts.mdts == 0 || opts.mdts > 16) return 256u << 20;
  return 4096u << opts.mdts;
}

}  // namespace nvmeof::target
