#include "target/port.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>

#include "target/target_core.hpp"
#include "target/tcp_connection.hpp"

namespace nvmeof::target {
namespace {

std::string numeric_host(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (sa->sa_family == AF_INET)
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, buf, sizeof buf);
  else if (sa->sa_family == AF_INET6)
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, buf, sizeof buf);
  return buf;
}

uint16_t port_of(const sockaddr* sa) {
  if (sa->sa_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(sa)->sin_port);
  return ntohs(reinterpret_cast<const sockaddr_in6*>(sa)->sin6_port);
}

std::string endpoint(const sockaddr* sa) {
  const std::string h = numeric_host(sa);
  const std::string p = std::to_string(port_of(sa));
  return sa->sa_family == AF_INET6 ? "[" + h + "]:" + p : h + ":" + p;
}

}  // namespace

void abort_socket(int fd) noexcept {
  // A zero linger time makes close() send RST instead of FIN: the peer sees a reset at once.
  const linger lg{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
  ::close(fd);
}

Port::Port(TargetCore& core, size_t index, const TargetPort& cfg)
    : core_(core), index_(index), cfg_(cfg), ana_state_(static_cast<uint8_t>(cfg.ana_state)) {}

Port::~Port() { stop(); }

Result<void> Port::listen() {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const char* host = cfg_.traddr.empty() ? nullptr : cfg_.traddr.c_str();
  if (::getaddrinfo(host, cfg_.trsvcid.c_str(), &hints, &res) != 0 || !res)
    return Errc::invalid_argument;
  int err = EADDRNOTAVAIL;
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
      err = errno;
      continue;
    }
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd, 128) != 0) {
      err = errno;
      ::close(fd);
      continue;
    }
    listen_fd_ = fd;
    break;
  }
  ::freeaddrinfo(res);
  if (listen_fd_ < 0) return errno_code(err);
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&ss), &len);
  const auto* sa = reinterpret_cast<const sockaddr*>(&ss);
  traddr_ = numeric_host(sa);
  number_ = port_of(sa);
  adrfam_ = sa->sa_family == AF_INET6 ? 2 : 1;
  wildcard_ = traddr_ == "0.0.0.0" || traddr_ == "::";
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) return errno_code(errno);
  return {};
}

void Port::start() { acceptor_ = std::thread([this] { accept_loop(); }); }

std::string Port::address() const {
  const std::string p = std::to_string(number_);
  return adrfam_ == 2 ? "[" + traddr_ + "]:" + p : traddr_ + ":" + p;
}

void Port::accept_loop() noexcept {
  while (!stopping_.load(std::memory_order_acquire)) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    // The timeout only bounds how long finished connection threads wait to be joined.
    ::poll(fds, 2, 200);
    reap_finished();
    if (fds[1].revents) {
      uint64_t v;
      [[maybe_unused]] auto n = ::read(wake_fd_, &v, sizeof v);
    }
    if (stopping_.load(std::memory_order_acquire)) break;
    if (!(fds[0].revents & POLLIN)) continue;
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&ss), &len,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOMEM) ::usleep(10000);
      continue;
    }
    if (refusing()) {
      abort_socket(fd);
      continue;
    }
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    sockaddr_storage local{};
    socklen_t llen = sizeof local;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &llen);
    const uint64_t id = core_.next_conn_id.fetch_add(1, std::memory_order_relaxed);
    auto conn = std::make_shared<TcpConnection>(core_, *this, fd, id,
                                                endpoint(reinterpret_cast<sockaddr*>(&ss)),
                                                numeric_host(reinterpret_cast<sockaddr*>(&local)));
    counters_.connections.fetch_add(1, std::memory_order_relaxed);
    counters_.live_connections.fetch_add(1, std::memory_order_relaxed);
    try {
      std::lock_guard lock(mu_);
      conns_.reserve(conns_.size() + 1);  // any throw happens before the thread exists
      conns_.push_back(Conn{conn, std::thread([conn] { conn->run(); })});
    } catch (const std::exception&) {
      // No thread to serve it (out of threads or memory): the host sees a reset, not a hang.
      conn->request_close(CloseKind::reset);
      conn->run();
    }
  }
}

void Port::reap_finished() {
  std::vector<Conn> done;
  {
    std::lock_guard lock(mu_);
    for (auto it = conns_.begin(); it != conns_.end();) {
      if (it->conn->finished()) {
        retired_passes_ += it->conn->poll_passes();
        retired_wakeups_ += it->conn->poll_wakeups();
        done.push_back(std::move(*it));
        it = conns_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& c : done) c.thread.join();
}

void Port::stop() {
  if (stopping_.exchange(true)) return;
  if (acceptor_.joinable()) {
    const uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake_fd_, &one, sizeof one);
    acceptor_.join();
  }
  std::vector<Conn> all;
  {
    std::lock_guard lock(mu_);
    all.swap(conns_);
  }
  for (auto& c : all) c.conn->request_close(CloseKind::stop);
  for (auto& c : all) c.thread.join();
  {
    std::lock_guard lock(mu_);
    for (auto& c : all) {
      retired_passes_ += c.conn->poll_passes();
      retired_wakeups_ += c.conn->poll_wakeups();
    }
  }
  if (listen_fd_ >= 0) ::close(listen_fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
  listen_fd_ = wake_fd_ = -1;
}

bool Port::set_ana_state(AnaState s) noexcept {
  const auto v = static_cast<uint8_t>(s);
  if (ana_state_.exchange(v, std::memory_order_acq_rel) == v) return false;
  ana_chgcnt_.fetch_add(1, std::memory_order_acq_rel);
  return true;
}

std::optional<NvmeStatus> Port::failing() const noexcept {
  const int32_t v = fail_status_.load(std::memory_order_acquire);
  if (v < 0) return std::nullopt;
  return NvmeStatus{static_cast<uint16_t>(v)};
}

void Port::set_blackhole(bool on) noexcept {
  blackhole_.store(on, std::memory_order_release);
  wake_connections();
}

void Port::set_partition(bool on) noexcept {
  partition_.store(on, std::memory_order_release);
  wake_connections();
}

bool Port::take_drop() noexcept {
  uint32_t left = drop_budget_.load(std::memory_order_acquire);
  // Connection threads race for the budget: each decrement must be one dropped command.
  while (left != 0 && !drop_budget_.compare_exchange_weak(left, left - 1, std::memory_order_acq_rel)) {
  }
  return left != 0;
}

void Port::set_latency(std::chrono::microseconds l) noexcept {
  latency_ns_.store(l.count() > 0 ? static_cast<uint64_t>(l.count()) * 1000 : 0,
                    std::memory_order_relaxed);
}

void Port::set_failing(std::optional<NvmeStatus> s) noexcept {
  fail_status_.store(s ? static_cast<int32_t>(s->raw) : -1, std::memory_order_release);
}

void Port::set_write_delay(std::chrono::milliseconds d, QuiesceMode m) noexcept {
  write_delay_mode_.store(static_cast<uint8_t>(m), std::memory_order_relaxed);
  write_delay_ns_.store(d.count() > 0 ? static_cast<uint64_t>(d.count()) * 1000000 : 0,
                        std::memory_order_relaxed);
}

void Port::reset_connections() {
  std::lock_guard lock(mu_);
  for (auto& c : conns_) c.conn->request_close(CloseKind::reset);
}

void Port::wake_connections() {
  std::lock_guard lock(mu_);
  for (auto& c : conns_) c.conn->wake();
}

PortStats Port::stats() const noexcept {
  PortStats s;
  s.connections = counters_.connections.load(std::memory_order_relaxed);
  s.live_connections = counters_.live_connections.load(std::memory_order_relaxed);
  s.commands = counters_.commands.load(std::memory_order_relaxed);
  s.reads = counters_.reads.load(std::memory_order_relaxed);
  s.writes = counters_.writes.load(std::memory_order_relaxed);
  s.errors = counters_.errors.load(std::memory_order_relaxed);
  s.delayed_writes_executed = counters_.delayed_executed.load(std::memory_order_relaxed);
  s.delayed_writes_dropped = counters_.delayed_dropped.load(std::memory_order_relaxed);
  s.writes_dropped_after_teardown = counters_.writes_dropped_after_teardown.load(std::memory_order_relaxed);
  s.commands_dropped = counters_.commands_dropped.load(std::memory_order_relaxed);
  s.ccr_received = counters_.ccr_received.load(std::memory_order_relaxed);
  s.ccr_completed = counters_.ccr_completed.load(std::memory_order_relaxed);
  s.keep_alive_expiries = counters_.keep_alive_expiries.load(std::memory_order_relaxed);
  s.keep_alive_commands = counters_.keep_alive_commands.load(std::memory_order_relaxed);
  s.max_output_backlog = counters_.max_output_backlog.load(std::memory_order_relaxed);
  s.authentications = counters_.authentications.load(std::memory_order_relaxed);
  s.auth_failures = counters_.auth_failures.load(std::memory_order_relaxed);
  s.tls_sessions = counters_.tls_sessions.load(std::memory_order_relaxed);
  s.tls_failures = counters_.tls_failures.load(std::memory_order_relaxed);
  s.tls_plaintext_refused = counters_.tls_plaintext_refused.load(std::memory_order_relaxed);
  s.io_queues_without_sq_flow_control =
      counters_.io_queues_without_sq_flow_control.load(std::memory_order_relaxed);
  s.admin_queues_without_sq_flow_control =
      counters_.admin_queues_without_sq_flow_control.load(std::memory_order_relaxed);
  std::lock_guard lock(mu_);
  s.poll_passes = retired_passes_;
  s.poll_wakeups = retired_wakeups_;
  for (const auto& c : conns_) {
    s.poll_passes += c.conn->poll_passes();
    s.poll_wakeups += c.conn->poll_wakeups();
  }
  return s;
}

}  // namespace nvmeof::target
