#include "target/subsystem.hpp"

#include <algorithm>
#include <set>
#include <string_view>

#include "target/controller.hpp"

namespace nvmeof::target {

Result<std::unique_ptr<Subsystem>> Subsystem::create(const TargetSubsystem& cfg, bool any_host) {
  if (cfg.nqn.empty() || cfg.nqn.size() > 223 || cfg.nqn == kDiscoveryNqn)
    return Errc::invalid_argument;
  std::set<std::string_view> seen;
  for (const auto& h : cfg.hosts)
    if (h.nqn.empty() || h.nqn.size() > 223 || !seen.insert(h.nqn).second) return Errc::invalid_argument;
  std::unique_ptr<Subsystem> s(new Subsystem);
  s->nqn_ = cfg.nqn;
  s->hosts_ = cfg.hosts;
  s->any_host_ = any_host;
  s->serial_ = cfg.serial;
  s->model_ = cfg.model;
  for (const auto& n : cfg.namespaces) {
    auto ns = NsStore::open(n, cfg.nqn);
    if (!ns) return ns.error();
    s->ns_.push_back(std::move(*ns));
  }
  std::sort(s->ns_.begin(), s->ns_.end(),
            [](const auto& a, const auto& b) { return a->nsid() < b->nsid(); });
  for (size_t i = 1; i < s->ns_.size(); ++i)
    if (s->ns_[i]->nsid() == s->ns_[i - 1]->nsid()) return Errc::invalid_argument;
  return s;
}

std::unique_ptr<Subsystem> Subsystem::discovery() {
  std::unique_ptr<Subsystem> s(new Subsystem);
  s->nqn_ = kDiscoveryNqn;
  s->serial_ = "NVMEOFDISC";
  s->model_ = "nvmeof discovery controller";
  s->kind_ = SubsystemKind::discovery;
  return s;
}

bool Subsystem::allows(std::string_view hostnqn) const noexcept {
  return any_host_ || host(hostnqn) != nullptr;
}

const TargetHost* Subsystem::host(std::string_view hostnqn) const noexcept {
  for (const auto& h : hosts_)
    if (h.nqn == hostnqn) return &h;
  return nullptr;
}

NsStore* Subsystem::ns(uint32_t nsid) const noexcept {
  auto it = std::lower_bound(ns_.begin(), ns_.end(), nsid,
                             [](const auto& n, uint32_t id) { return n->nsid() < id; });
  return it != ns_.end() && (*it)->nsid() == nsid ? it->get() : nullptr;
}

std::shared_ptr<Controller> Subsystem::create_controller(size_t port, const std::string& hostnqn,
                                                         const uint8_t (&hostid)[16]) {
  constexpr uint16_t kMaxCntlid = 0xffef;  // 0xfff0.. are reserved (0xffff: dynamic)
  std::lock_guard lock(mu_);
  for (uint32_t tries = 0; tries < kMaxCntlid; ++tries) {
    const uint16_t id = next_cntlid_;
    next_cntlid_ = static_cast<uint16_t>(id >= kMaxCntlid ? 1 : id + 1);
    auto it = ctrls_.find(id);
    if (it != ctrls_.end() && !it->second.expired()) continue;
    auto c = std::make_shared<Controller>(*this, id, port, hostnqn, hostid);
    ctrls_[id] = c;
    return c;
  }
  return nullptr;
}

std::shared_ptr<Controller> Subsystem::controller(uint16_t cntlid) const {
  std::lock_guard lock(mu_);
  auto it = ctrls_.find(cntlid);
  return it == ctrls_.end() ? nullptr : it->second.lock();
}

void Subsystem::remove_controller(const Controller* c) {
  std::lock_guard lock(mu_);
  // Both a CCR and the controller's own admin thread remove it; after the first, the id may
  // already belong to a new controller that must stay.
  auto it = ctrls_.find(c->cntlid());
  if (it == ctrls_.end()) return;
  auto live = it->second.lock();
  if (!live || live.get() == c) ctrls_.erase(it);
}

}  // namespace nvmeof::target
