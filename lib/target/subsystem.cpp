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
  std::vector<NsStore*> sorted;
  for (const auto& n : cfg.namespaces) {
    auto ns = NsStore::open(n, cfg.nqn);
    if (!ns) return ns.error();
    sorted.push_back(ns->get());
    s->stores_.push_back(std::move(*ns));
  }
  std::sort(sorted.begin(), sorted.end(), [](const auto* a, const auto* b) { return a->nsid() < b->nsid(); });
  for (size_t i = 1; i < sorted.size(); ++i)
    if (sorted[i]->nsid() == sorted[i - 1]->nsid()) return Errc::invalid_argument;
  s->publish(std::move(sorted));
  return s;
}

void Subsystem::publish(std::vector<NsStore*> sorted) {
  auto t = std::make_unique<NsTable>();
  t->sorted = std::move(sorted);
  table_.store(t.get(), std::memory_order_release);
  tables_.push_back(std::move(t));
}

Result<void> Subsystem::attach(const TargetNamespace& cfg) {
  std::lock_guard lock(change_mu_);
  if (ns(cfg.nsid)) return {Errc::invalid_argument, "namespace " + std::to_string(cfg.nsid) + " is already in use"};
  if (cfg.nsid == 0 || cfg.nsid == 0xffffffffu)
    return {Errc::invalid_argument, "nsid " + std::to_string(cfg.nsid) + " is not a namespace ID"};
  if (cfg.block_size != 512 && cfg.block_size != 4096)
    return {Errc::invalid_argument, "block size " + std::to_string(cfg.block_size) + " (512 or 4096)"};
  if (cfg.size_bytes == 0 || cfg.size_bytes % cfg.block_size != 0)
    return {Errc::invalid_argument, "size " + std::to_string(cfg.size_bytes) +
                                        " is not a non-zero multiple of the block size (" +
                                        std::to_string(cfg.block_size) + " bytes)"};
  auto n = NsStore::open(cfg, nqn_);
  if (!n) return n.failure();
  std::vector<NsStore*> sorted = namespaces();
  sorted.insert(std::upper_bound(sorted.begin(), sorted.end(), cfg.nsid,
                                 [](uint32_t id, const NsStore* x) { return id < x->nsid(); }),
                n->get());
  stores_.push_back(std::move(*n));
  publish(std::move(sorted));
  return {};
}

Result<void> Subsystem::detach(uint32_t nsid) {
  std::lock_guard lock(change_mu_);
  if (!ns(nsid)) return {Errc::invalid_argument, "namespace " + std::to_string(nsid) + " is not active"};
  std::vector<NsStore*> sorted = namespaces();
  std::erase_if(sorted, [&](const NsStore* x) { return x->nsid() == nsid; });
  publish(std::move(sorted));  // the store stays (stores_): commands running on it finish
  return {};
}

std::vector<std::shared_ptr<Controller>> Subsystem::controllers() const {
  std::lock_guard lock(mu_);
  std::vector<std::shared_ptr<Controller>> out;
  for (const auto& [id, w] : ctrls_)
    if (auto c = w.lock()) out.push_back(std::move(c));
  return out;
}

std::unique_ptr<Subsystem> Subsystem::discovery() {
  std::unique_ptr<Subsystem> s(new Subsystem);
  s->nqn_ = kDiscoveryNqn;
  s->serial_ = "NVMEOFDISC";
  s->model_ = "nvmeof discovery controller";
  s->kind_ = SubsystemKind::discovery;
  s->publish({});
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
  const auto& t = namespaces();
  auto it = std::lower_bound(t.begin(), t.end(), nsid, [](const NsStore* n, uint32_t id) { return n->nsid() < id; });
  return it != t.end() && (*it)->nsid() == nsid ? *it : nullptr;
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
