#include "target/controller.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <vector>

#include "core/fabrics_command.hpp"
#include "target/clock.hpp"
#include "target/tcp_connection.hpp"

namespace nvmeof::target {
namespace {

constexpr uint32_t kCcEn = 1u << 0;
constexpr uint32_t kCcShnMask = 3u << 14;
constexpr uint32_t kCstsRdy = 1u << 0;
constexpr uint32_t kCstsShstComplete = 2u << 2;
constexpr uint32_t kCstsShstMask = 3u << 2;

// CIRN must not be guessable by another host, and CIU must differ between two controllers that
// reuse a CNTLID: both come from the OS's entropy, once per controller and per enable.
uint64_t random_u64() {
  static thread_local std::mt19937_64 gen{(static_cast<uint64_t>(std::random_device{}()) << 32) ^
                                          std::random_device{}()};
  return gen();
}

uint8_t random_ciu() {
  for (;;)
    if (const auto v = static_cast<uint8_t>(random_u64())) return v;
}

}  // namespace

Controller::Controller(Subsystem& subsys, uint16_t cntlid, size_t port, std::string hostnqn,
                       const uint8_t (&hostid)[16])
    : subsys_(subsys),
      cntlid_(cntlid),
      port_(port),
      hostnqn_(std::move(hostnqn)),
      ciu_(random_ciu()),
      cirn_(random_u64()) {
  std::memcpy(hostid_, hostid, sizeof hostid_);
}

void Controller::set_kato(uint32_t ms) noexcept {
  const uint64_t up = (static_cast<uint64_t>(ms) + kKasMs - 1) / kKasMs * kKasMs;
  kato_ms = static_cast<uint32_t>(std::min<uint64_t>(up, UINT32_MAX / kKasMs * kKasMs));
}

bool Controller::same_host(const std::string& hostnqn, const uint8_t (&hostid)[16]) const noexcept {
  return hostnqn == hostnqn_ && std::memcmp(hostid, hostid_, sizeof hostid_) == 0;
}

NvmeStatus Controller::property_get(uint32_t offset, const TargetOptions& opts,
                                    uint64_t& value) const noexcept {
  switch (offset) {
    case prop::kCap: {
      const uint64_t mqes = (opts.max_queue_depth - 1) & 0xffff;
      constexpr uint64_t kCqr = 1ull << 16;         // queues must be contiguous
      constexpr uint64_t kTo = 15ull << 24;         // 7.5 s in 500 ms units
      constexpr uint64_t kCssNvm = 1ull << 37;      // NVM command set
      value = mqes | kCqr | kTo | kCssNvm;          // MPSMIN = MPSMAX = 0: 4 KiB pages
      return status::kSuccess;
    }
    case prop::kVs: value = 0x00020000; return status::kSuccess;
    case prop::kCc: value = cc_; return status::kSuccess;
    case prop::kCsts: value = csts_; return status::kSuccess;
    default: return status::kInvalidField;
  }
}

NvmeStatus Controller::property_set(uint32_t offset, uint64_t value) noexcept {
  if (offset != prop::kCc) return status::kInvalidField;
  const auto cc = static_cast<uint32_t>(value);
  if ((cc & kCcEn) && !(cc_ & kCcEn)) {
    csts_ |= kCstsRdy;
    // A new instance of the controller: a CCR naming the old one must no longer match.
    uint8_t next = static_cast<uint8_t>(ciu_.load(std::memory_order_relaxed) + 1);
    if (next == 0) next = 1;
    ciu_.store(next, std::memory_order_release);
    cirn_.store(random_u64(), std::memory_order_release);
  }
  if (!(cc & kCcEn) && (cc_ & kCcEn)) csts_ &= ~kCstsRdy;
  // Nothing is cached, so a shutdown completes the moment it is asked for.
  if ((cc & kCcShnMask) && !(cc_ & kCcShnMask)) csts_ = (csts_ & ~kCstsShstMask) | kCstsShstComplete;
  if (!(cc & kCcShnMask) && (cc_ & kCcShnMask)) csts_ &= ~kCstsShstMask;
  cc_ = cc;
  return status::kSuccess;
}

void Controller::attach_admin(const std::shared_ptr<TcpConnection>& conn) {
  std::lock_guard lock(mu_);
  admin_ = conn;
  ++live_queues_;
}

std::shared_ptr<TcpConnection> Controller::admin_connection() const {
  std::lock_guard lock(mu_);
  return admin_.lock();
}

NvmeStatus Controller::bind_io_queue(uint16_t qid, const std::shared_ptr<TcpConnection>& conn) {
  constexpr NvmeStatus kBusy = NvmeStatus::make(Sct::command_specific, 0x81, true);
  std::lock_guard lock(mu_);
  if (is_torn_down()) return kBusy;
  auto it = io_.find(qid);
  if (it != io_.end() && !it->second.expired()) return kBusy;
  io_[qid] = conn;
  ++live_queues_;
  had_io_queues_.store(true, std::memory_order_release);
  return status::kSuccess;
}

void Controller::queue_stopped(uint16_t qid, const TcpConnection* conn) {
  {
    std::lock_guard lock(mu_);
    if (qid != 0) {
      auto it = io_.find(qid);
      if (it != io_.end()) {
        auto live = it->second.lock();
        if (!live || live.get() == conn) io_.erase(it);
      }
    }
    if (live_queues_ > 0) --live_queues_;
  }
  cv_.notify_all();
}

bool Controller::tear_down() {
  std::vector<std::shared_ptr<TcpConnection>> conns;
  {
    std::lock_guard lock(mu_);
    if (is_torn_down()) return false;
    teardown_ns_.store(now_ns(), std::memory_order_release);
    for (auto& [qid, w] : io_)
      if (auto c = w.lock()) conns.push_back(std::move(c));
    if (auto a = admin_.lock()) conns.push_back(std::move(a));
  }
  for (auto& c : conns) c->request_close(CloseKind::association);
  return true;
}

bool Controller::wait_quiesced(uint64_t deadline_ns) {
  std::unique_lock lock(mu_);
  for (;;) {
    if (live_queues_ == 0) return true;
    const uint64_t now = now_ns();
    if (now >= deadline_ns) return false;
    cv_.wait_for(lock, std::chrono::nanoseconds(deadline_ns - now));
  }
}

Controller::CcrAdmission Controller::admit_ccr(uint16_t icid, uint8_t limit) const {
  std::lock_guard lock(mu_);
  size_t in_progress = 0;
  for (const auto& e : ccr_log_) {
    if (e.ccrs != ccr::kStatusInProgress) continue;
    if (e.icid == icid) return CcrAdmission::in_progress;
    ++in_progress;
  }
  if (in_progress >= limit) return CcrAdmission::limit_exceeded;
  if (ccr_log_.size() >= ccr::kMaxLogEntries) return CcrAdmission::log_full;
  return CcrAdmission::admitted;
}

void Controller::add_ccr_entry(uint16_t icid, uint8_t ciu) {
  std::lock_guard lock(mu_);
  ccr_log_.push_back({icid, ciu, ccr::kStatusInProgress});
}

void Controller::finish_ccr_entry(uint16_t icid, uint8_t ccrs) {
  std::lock_guard lock(mu_);
  for (auto& e : ccr_log_)
    if (e.icid == icid && e.ccrs == ccr::kStatusInProgress) {
      e.ccrs = ccrs;
      return;
    }
}

std::vector<uint8_t> Controller::ccr_log(bool remove_completed, uint64_t offset, uint64_t len) {
  std::lock_guard lock(mu_);
  std::vector<uint8_t> out(ccr::kLogHeaderLen + ccr_log_.size() * ccr::kLogEntryLen, 0);
  const auto ne = static_cast<uint16_t>(ccr_log_.size());
  std::memcpy(out.data(), &ne, sizeof ne);
  uint8_t* p = out.data() + ccr::kLogHeaderLen;
  for (const auto& e : ccr_log_) {
    std::memcpy(p, &e.icid, 2);
    p[2] = e.ciu;
    std::memcpy(p + 4, &cntlid_, 2);
    p[6] = e.ccrs;
    // V and CLRI describe a reset that happened: only a successful one has them.
    p[7] = e.ccrs == ccr::kStatusSuccess ? 0x03 : 0x00;
    p += ccr::kLogEntryLen;
  }
  if (remove_completed) {
    std::vector<CcrEntry> kept;
    for (size_t i = 0; i < ccr_log_.size(); ++i) {
      const uint64_t at = ccr::kLogHeaderLen + i * ccr::kLogEntryLen;
      const bool returned = at >= offset && at + ccr::kLogEntryLen <= offset + len;
      if (!returned || ccr_log_[i].ccrs == ccr::kStatusInProgress) kept.push_back(ccr_log_[i]);
    }
    ccr_log_.swap(kept);
  }
  return out;
}

void Controller::note_ns_changed(uint32_t nsid) {
  std::lock_guard lock(mu_);
  auto it = std::lower_bound(changed_ns_.begin(), changed_ns_.end(), nsid);
  if (it != changed_ns_.end() && *it == nsid) return;
  if (changed_ns_.size() > kMaxChangedNs) return;  // overflowed already: the host looks at all
  changed_ns_.insert(it, nsid);
}

std::vector<uint32_t> Controller::changed_ns(bool retain) {
  std::lock_guard lock(mu_);
  std::vector<uint32_t> out = changed_ns_.size() > kMaxChangedNs ? std::vector<uint32_t>{0xffffffffu} : changed_ns_;
  if (!retain) changed_ns_.clear();
  return out;
}

}  // namespace nvmeof::target
