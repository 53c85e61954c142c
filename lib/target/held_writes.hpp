// Fault injection for the multipath ghost-write tests: writes held back for a while and executed
// later, possibly after the connection they arrived on died. One thread runs them at their due
// time. With QuiesceMode::honour a held write whose connection was torn down is executed only if
// that happens within the Command Quiesce Time of the teardown (minus a small safety margin, see
// quiesce_margin_ns) and its controller was not reset by a CCR, and dropped otherwise;
// QuiesceMode::ignore always executes it. The teardown is the earlier of its connection's and
// its controller's.
//
// Threading: hold() and purge() may be called from any thread; the writes run on the HeldWrites
// thread. mu_ guards the queue, the stop flag and `executing_` (the controller whose write runs
// right now, outside the lock), so purge() can wait for that write to end.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "nvmeof/target.hpp"
#include "target/byte_buffer.hpp"

namespace nvmeof::target {

class Controller;
class NsStore;
class Port;
class TcpConnection;

class HeldWrites {
 public:
  struct Write {
    uint64_t due_ns = 0;
    QuiesceMode mode = QuiesceMode::honour;
    uint64_t cqt_ns = 0;
    std::shared_ptr<TcpConnection> conn;  ///< gets the completion if it is still alive
    std::shared_ptr<Controller> ctrl;     ///< the controller of that queue
    Port* port = nullptr;                 ///< counts executed / dropped writes
    NsStore* ns = nullptr;
    uint64_t offset = 0;
    ByteBuffer data;
    uint16_t slot = 0;
    uint16_t cid = 0;
  };

  HeldWrites() = default;
  ~HeldWrites();  ///< stop()
  HeldWrites(const HeldWrites&) = delete;
  HeldWrites& operator=(const HeldWrites&) = delete;

  void start();
  /// Joins the thread; writes still held are dropped (the target is going away). Idempotent.
  void stop();
  void hold(Write w);
  /// After a CCR fenced `ctrl`: drops its held writes (QuiesceMode::honour ones) and waits up to
  /// `deadline_ns` (steady) for one of its writes that is executing right now. Returns true
  /// when none of its honour-mode writes can run any more.
  bool purge(const Controller& ctrl, uint64_t deadline_ns);

 private:
  void run() noexcept;
  void execute(Write& w) noexcept;

  std::mutex mu_;  // guards queue_, stopping_ and executing_
  std::condition_variable cv_;
  std::condition_variable done_cv_;  // executing_ cleared
  std::multimap<uint64_t, Write> queue_;
  bool stopping_ = false;
  const Controller* executing_ = nullptr;
  std::thread thread_;
};

}  // namespace nvmeof::target
