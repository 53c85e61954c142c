#include "target/held_writes.hpp"

#include <algorithm>
#include <chrono>

#include "target/clock.hpp"
#include "target/controller.hpp"
#include "target/ns_store.hpp"
#include "target/port.hpp"
#include "target/tcp_connection.hpp"

namespace nvmeof::target {
namespace {

// The target notices a teardown a little after the host made it (scheduling, the FIN in
// flight), and the host counts CQT from its own moment. Giving up a little early keeps a held
// write from landing after the host's CQT wait ended.
uint64_t quiesce_margin_ns(uint64_t cqt_ns) { return std::min<uint64_t>(cqt_ns / 4, 2'000'000); }

}  // namespace

HeldWrites::~HeldWrites() { stop(); }

void HeldWrites::start() { thread_ = std::thread([this] { run(); }); }

void HeldWrites::stop() {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  queue_.clear();
}

void HeldWrites::hold(Write w) {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    const uint64_t due = w.due_ns;
    queue_.emplace(due, std::move(w));
  }
  cv_.notify_all();
}

void HeldWrites::run() noexcept {
  std::unique_lock lock(mu_);
  while (!stopping_) {
    if (queue_.empty()) {
      cv_.wait(lock);
      continue;
    }
    const uint64_t due = queue_.begin()->first;
    const uint64_t now = now_ns();
    if (now < due) {
      cv_.wait_for(lock, std::chrono::nanoseconds(due - now));
      continue;
    }
    Write w = std::move(queue_.begin()->second);
    queue_.erase(queue_.begin());
    executing_ = w.ctrl.get();
    lock.unlock();
    execute(w);
    lock.lock();
    executing_ = nullptr;
    done_cv_.notify_all();
  }
}

bool HeldWrites::purge(const Controller& ctrl, uint64_t deadline_ns) {
  std::unique_lock lock(mu_);
  for (auto it = queue_.begin(); it != queue_.end();) {
    if (it->second.ctrl.get() == &ctrl && it->second.mode == QuiesceMode::honour) {
      it->second.port->counters().delayed_dropped.fetch_add(1, std::memory_order_relaxed);
      it = queue_.erase(it);
    } else {
      ++it;
    }
  }
  while (executing_ == &ctrl) {
    const uint64_t now = now_ns();
    if (now >= deadline_ns) return false;
    done_cv_.wait_for(lock, std::chrono::nanoseconds(deadline_ns - now));
  }
  return true;
}

void HeldWrites::execute(Write& w) noexcept {
  uint64_t gone = w.conn ? w.conn->teardown_ns() : 0;
  if (const uint64_t c = w.ctrl ? w.ctrl->teardown_ns() : 0; c != 0 && (gone == 0 || c < gone))
    gone = c;
  const bool fenced = w.ctrl && w.ctrl->is_fenced();
  if (w.mode == QuiesceMode::honour &&
      (fenced || (gone != 0 && now_ns() + quiesce_margin_ns(w.cqt_ns) > gone + w.cqt_ns))) {
    w.port->counters().delayed_dropped.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  auto r = w.ns->write(w.offset, w.data.data(), w.data.size());
  w.port->counters().delayed_executed.fetch_add(1, std::memory_order_relaxed);
  if (w.conn)
    w.conn->post_completion(w.slot, w.cid, r ? status::kSuccess : status::kDataTransferError);
}

}  // namespace nvmeof::target
