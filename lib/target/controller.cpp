#include "target/controller.hpp"

#include <cstring>
#include <vector>

#include "nvmeof/command.hpp"
#include "target/tcp_connection.hpp"

namespace nvmeof::target {
namespace {

constexpr uint32_t kCcEn = 1u << 0;
constexpr uint32_t kCcShnMask = 3u << 14;
constexpr uint32_t kCstsRdy = 1u << 0;
constexpr uint32_t kCstsShstComplete = 2u << 2;
constexpr uint32_t kCstsShstMask = 3u << 2;

}  // namespace

Controller::Controller(Subsystem& subsys, uint16_t cntlid, size_t port, std::string hostnqn,
                       const uint8_t (&hostid)[16])
    : subsys_(subsys), cntlid_(cntlid), port_(port), hostnqn_(std::move(hostnqn)) {
  std::memcpy(hostid_, hostid, sizeof hostid_);
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
  if ((cc & kCcEn) && !(cc_ & kCcEn)) csts_ |= kCstsRdy;
  if (!(cc & kCcEn) && (cc_ & kCcEn)) csts_ &= ~kCstsRdy;
  // Nothing is cached, so a shutdown completes the moment it is asked for.
  if ((cc & kCcShnMask) && !(cc_ & kCcShnMask)) csts_ = (csts_ & ~kCstsShstMask) | kCstsShstComplete;
  if (!(cc & kCcShnMask) && (cc_ & kCcShnMask)) csts_ &= ~kCstsShstMask;
  cc_ = cc;
  return status::kSuccess;
}

NvmeStatus Controller::bind_io_queue(uint16_t qid, const std::shared_ptr<TcpConnection>& conn) {
  constexpr NvmeStatus kBusy = NvmeStatus::make(Sct::command_specific, 0x81, true);
  std::lock_guard lock(mu_);
  if (torn_down_) return kBusy;
  auto it = io_.find(qid);
  if (it != io_.end() && !it->second.expired()) return kBusy;
  io_[qid] = conn;
  return status::kSuccess;
}

void Controller::unbind_io_queue(uint16_t qid, const TcpConnection* conn) {
  std::lock_guard lock(mu_);
  auto it = io_.find(qid);
  if (it == io_.end()) return;
  auto live = it->second.lock();
  if (!live || live.get() == conn) io_.erase(it);
}

void Controller::tear_down() {
  std::vector<std::shared_ptr<TcpConnection>> conns;
  {
    std::lock_guard lock(mu_);
    torn_down_ = true;
    for (auto& [qid, w] : io_)
      if (auto c = w.lock()) conns.push_back(std::move(c));
    io_.clear();
  }
  for (auto& c : conns) c->request_close(CloseKind::association);
}

}  // namespace nvmeof::target
