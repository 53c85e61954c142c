// QD1 4 KiB read latency through nvmeof (a Volume over one NVMe/TCP path to the embedded target)
// side by side with the floor any user-space NVMe/TCP initiator sits on: a raw io_uring TCP
// ping-pong between two threads on the same loopback, moving the same bytes (a 72-byte command
// capsule one way, a 24-byte C2HData header plus 4 KiB the other). The two alternate in rounds so
// drift of a shared machine hits both alike; the report gives each and their ratio. Then IOPS of
// 4 KiB random reads at QD 32 on one reactor.
#include <arpa/inet.h>
#include <liburing.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <thread>
#include <vector>

#include "core/histogram.hpp"
#include "nvmeof/target.hpp"
#include "nvmeof/volume.hpp"

namespace {

using nvmeof::LatencyHistogram;

constexpr size_t kCommandBytes = 72;          // CapsuleCmd PDU: 8-byte header + 64-byte SQE
constexpr size_t kReplyBytes = 4096 + 24;     // C2HData PDU header + one block
constexpr uint32_t kReadBytes = 4096;

uint64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// -- raw io_uring TCP ping-pong ------------------------------------------------------------

enum class Direction : uint8_t { send, recv };

// Sends or receives exactly `len` bytes through the ring, one SQE at a time as a QD1 initiator
// would. Returns false when the peer closed or on an error.
bool ring_io(io_uring& ring, int fd, void* buf, size_t len, Direction dir) {
  auto* p = static_cast<uint8_t*>(buf);
  while (len > 0) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring);
    if (dir == Direction::send) {
      io_uring_prep_send(sqe, fd, p, len, MSG_NOSIGNAL);
    } else {
      io_uring_prep_recv(sqe, fd, p, len, 0);
    }
    io_uring_submit_and_wait(&ring, 1);
    io_uring_cqe* cqe = nullptr;
    if (io_uring_wait_cqe(&ring, &cqe) != 0) return false;
    const int res = cqe->res;
    io_uring_cqe_seen(&ring, cqe);
    if (res <= 0) return false;
    p += res;
    len -= static_cast<size_t>(res);
  }
  return true;
}

bool send_all(io_uring& ring, int fd, void* buf, size_t len) {
  return ring_io(ring, fd, buf, len, Direction::send);
}
bool recv_all(io_uring& ring, int fd, void* buf, size_t len) {
  return ring_io(ring, fd, buf, len, Direction::recv);
}

class PingPong {
 public:
  // Listens on an ephemeral loopback port, starts the server thread, connects.
  bool start() {
    listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof a;
    if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        listen(listen_fd_, 1) != 0 ||
        getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &alen) != 0)
      return false;
    server_ = std::thread([this] { serve(); });
    client_fd_ = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(client_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return false;
    set_nodelay(client_fd_);
    return io_uring_queue_init(8, &ring_, 0) == 0;
  }

  ~PingPong() {
    if (client_fd_ >= 0) close(client_fd_);
    if (server_.joinable()) server_.join();
    if (listen_fd_ >= 0) close(listen_fd_);
    io_uring_queue_exit(&ring_);
  }

  // Round trips for `duration`, each recorded in `h`.
  bool run(std::chrono::nanoseconds duration, LatencyHistogram& h) {
    std::vector<uint8_t> cmd(kCommandBytes, 0x5a), reply(kReplyBytes);
    const uint64_t end = now_ns() + static_cast<uint64_t>(duration.count());
    while (now_ns() < end) {
      const uint64_t t0 = now_ns();
      if (!send_all(ring_, client_fd_, cmd.data(), cmd.size()) ||
          !recv_all(ring_, client_fd_, reply.data(), reply.size()))
        return false;
      h.record(now_ns() - t0);
    }
    return true;
  }

 private:
  static void set_nodelay(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }

  void serve() {
    const int fd = accept(listen_fd_, nullptr, nullptr);
    if (fd < 0) return;
    set_nodelay(fd);
    io_uring ring{};
    if (io_uring_queue_init(8, &ring, 0) == 0) {
      std::vector<uint8_t> cmd(kCommandBytes), reply(kReplyBytes, 0xa5);
      while (recv_all(ring, fd, cmd.data(), cmd.size()) &&
             send_all(ring, fd, reply.data(), reply.size())) {
      }
      io_uring_queue_exit(&ring);
    }
    close(fd);
  }

  int listen_fd_ = -1;
  int client_fd_ = -1;
  io_uring ring_{};
  std::thread server_;
};

// -- nvmeof closed loop ---------------------------------------------------------------------

// `depth` reads kept in flight, each resubmitted from its own completion on the reactor thread.
class ReadLoop {
 public:
  ReadLoop(nvmeof::Volume& v, unsigned depth) : volume_(v), slots_(depth) {
    blocks_per_io_ = kReadBytes / v.block_size();
    ios_in_ns_ = v.size_blocks() / blocks_per_io_;
    for (size_t i = 0; i < slots_.size(); ++i) {
      slots_[i].loop = this;
      slots_[i].buf.resize(kReadBytes);
      slots_[i].rng = 0x9e3779b97f4a7c15ull * (i + 1);
    }
  }

  // Runs for `duration`; latencies go to `h`. Returns completed I/Os, or -1 on an error.
  int64_t run(std::chrono::nanoseconds duration, LatencyHistogram& h) {
    stop_.store(false);
    errors_.store(0);
    for (Slot& s : slots_) {
      s.latency.reset();
      s.ios = 0;
    }
    for (Slot& s : slots_) {
      active_.fetch_add(1);
      submit(s);
    }
    std::this_thread::sleep_for(duration);
    stop_.store(true);
    while (active_.load(std::memory_order_acquire) != 0)
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    int64_t ios = 0;
    for (Slot& s : slots_) {
      h.merge(s.latency);
      ios += static_cast<int64_t>(s.ios);
    }
    return errors_.load() ? -1 : ios;
  }

 private:
  struct Slot {
    nvmeof::VolumeIo io;
    ReadLoop* loop = nullptr;
    std::vector<uint8_t> buf;
    uint64_t rng = 1;
    uint64_t start_ns = 0;
    uint64_t ios = 0;
    LatencyHistogram latency;
  };

  void submit(Slot& s) noexcept {
    s.rng ^= s.rng << 13;
    s.rng ^= s.rng >> 7;
    s.rng ^= s.rng << 17;
    s.io = nvmeof::VolumeIo{};
    s.io.op = nvmeof::IoOp::read;
    s.io.slba = (s.rng % ios_in_ns_) * blocks_per_io_;
    s.io.nlb = blocks_per_io_;
    s.io.buf = s.buf.data();
    s.io.done = &ReadLoop::on_complete;
    s.io.user = &s;
    s.start_ns = now_ns();
    if (volume_.submit(s.io) != 0) {
      errors_.fetch_add(1);
      active_.fetch_sub(1, std::memory_order_acq_rel);
    }
  }

  static void on_complete(nvmeof::VolumeIo& io, nvmeof::NvmeStatus st) noexcept {
    auto& s = *static_cast<Slot*>(io.user);
    ReadLoop& loop = *s.loop;
    s.latency.record(now_ns() - s.start_ns);
    ++s.ios;
    if (!st.is_success()) loop.errors_.fetch_add(1);
    if (loop.stop_.load(std::memory_order_relaxed) || !st.is_success()) {
      loop.active_.fetch_sub(1, std::memory_order_acq_rel);
      return;
    }
    loop.submit(s);
  }

  nvmeof::Volume& volume_;
  std::vector<Slot> slots_;
  uint32_t blocks_per_io_ = 1;
  uint64_t ios_in_ns_ = 1;
  std::atomic<bool> stop_{false};
  std::atomic<unsigned> active_{0};
  std::atomic<uint64_t> errors_{0};
};

nlohmann::json latency_json(const LatencyHistogram& h) {
  auto us = [](uint64_t ns) { return std::round(static_cast<double>(ns) / 10.0) / 100.0; };
  return {{"ios", h.count()},
          {"p50_us", us(h.percentile(50))},
          {"p99_us", us(h.percentile(99))},
          {"p999_us", us(h.percentile(99.9))},
          {"max_us", us(h.max())},
          {"mean_us", std::round(h.mean() / 10.0) / 100.0}};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"latency_bench: nvmeof QD1 read latency against a raw io_uring TCP ping-pong, and "
               "QD32 IOPS on one reactor"};
  double seconds = 3.0;
  unsigned rounds = 3;
  unsigned depth = 32;
  bool json_out = false;
  app.add_option("--seconds", seconds, "time per measurement (split across the rounds)")
      ->check(CLI::Range(0.1, 600.0));
  app.add_option("--rounds", rounds, "alternations of the two QD1 measurements")
      ->check(CLI::Range(1u, 100u));
  app.add_option("--iodepth", depth, "queue depth of the IOPS run")->check(CLI::Range(1u, 1024u));
  app.add_flag("--json", json_out, "print JSON");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }

  nvmeof::TargetOptions topts;
  topts.ports[0].trsvcid = "0";
  auto target = nvmeof::Target::start(topts);
  if (!target) {
    std::fprintf(stderr, "latency_bench: target: %s\n", target.error().message().c_str());
    return 1;
  }
  nvmeof::VolumeOptions vopts;
  vopts.paths = {*nvmeof::TransportAddress::parse((*target)->port_address(0))};
  vopts.connect.subnqn = topts.subsystems[0].nqn;
  vopts.reactors = 1;
  auto volume = nvmeof::Volume::open(vopts);
  if (!volume) {
    std::fprintf(stderr, "latency_bench: volume: %s\n", volume.error().message().c_str());
    return 1;
  }
  PingPong pingpong;
  if (!pingpong.start()) {
    std::fprintf(stderr, "latency_bench: ping-pong set-up: %s\n", std::strerror(errno));
    return 1;
  }

  const auto slice = std::chrono::nanoseconds(static_cast<int64_t>(seconds * 1e9 / rounds));
  LatencyHistogram ours, baseline, warmup, qd_lat;
  int rc = 0;
  {
    ReadLoop qd1(**volume, 1);
    if (qd1.run(std::chrono::milliseconds(200), warmup) < 0 ||
        !pingpong.run(std::chrono::milliseconds(200), warmup))
      rc = 1;
    for (unsigned r = 0; r < rounds && rc == 0; ++r) {
      if (!pingpong.run(slice, baseline) || qd1.run(slice, ours) < 0) rc = 1;
    }
  }
  ReadLoop qd_n(**volume, depth);
  const auto iops_time = std::chrono::nanoseconds(static_cast<int64_t>(seconds * 1e9));
  const int64_t ios = rc == 0 ? qd_n.run(iops_time, qd_lat) : -1;
  if (ios < 0) rc = 1;
  const double iops = ios > 0 ? static_cast<double>(ios) / seconds : 0.0;
  if (rc != 0) std::fprintf(stderr, "latency_bench: an I/O failed\n");

  auto ratio = [](uint64_t a, uint64_t b) {
    return b ? std::round(static_cast<double>(a) / static_cast<double>(b) * 100.0) / 100.0 : 0.0;
  };
  const nlohmann::json j = {
      {"qd1_read_4k",
       {{"nvmeof", latency_json(ours)},
        {"io_uring_tcp_pingpong", latency_json(baseline)},
        {"ratio_p50", ratio(ours.percentile(50), baseline.percentile(50))},
        {"ratio_p99", ratio(ours.percentile(99), baseline.percentile(99))}}},
      {"randread_4k_qd",
       {{"iodepth", depth},
        {"reactors", 1},
        {"iops", std::round(iops)},
        {"mib_per_s", std::round(iops * kReadBytes / (1024.0 * 1024.0) * 10.0) / 10.0},
        {"latency", latency_json(qd_lat)}}},
      {"ok", rc == 0}};
  if (json_out) {
    std::cout << j.dump(2) << "\n";
    return rc;
  }
  const auto& q = j["qd1_read_4k"];
  std::printf("QD1 4 KiB read, loopback (us)      p50      p99    p99.9     mean\n");
  for (const char* name : {"nvmeof", "io_uring_tcp_pingpong"}) {
    const auto& x = q[name];
    std::printf("  %-28s %8.2f %8.2f %8.2f %8.2f  (%llu I/Os)\n", name,
                x["p50_us"].get<double>(), x["p99_us"].get<double>(), x["p999_us"].get<double>(),
                x["mean_us"].get<double>(),
                static_cast<unsigned long long>(x["ios"].get<uint64_t>()));
  }
  std::printf("  ratio nvmeof / ping-pong:     p50 %.2fx, p99 %.2fx\n", q["ratio_p50"].get<double>(),
              q["ratio_p99"].get<double>());
  std::printf("4 KiB randread QD%u, one reactor: %.0f IOPS (%.1f MiB/s), p50 %.2f us, p99 %.2f us\n",
              depth, iops, iops * kReadBytes / (1024.0 * 1024.0),
              j["randread_4k_qd"]["latency"]["p50_us"].get<double>(),
              j["randread_4k_qd"]["latency"]["p99_us"].get<double>());
  return rc;
}
