// checkpoint: write a model checkpoint as shards with large I/O over every path of a volume,
// flush it, read it back, verify every byte, and print the throughput of each phase.
//
//   checkpoint --embedded 2 --size 1g          an in-process target with 2 ports (paths)
//   checkpoint 10.0.0.1:4420,10.0.0.2:4420 nqn.2024-01.io.nvmeof:target --size 1g
//
// Options: --size BYTES (k/m/g suffix; default 64m), --shards N (default 4), --io-size BYTES
// (default 4m), --depth N (I/Os in flight, default 8), --deadline-ms N (per-command deadline
// before a path counts as dead; default: the volume's own). Each I/O is larger than the controller's
// MDTS: the volume splits it into pieces and places each piece on a path of its own choosing,
// so one large I/O runs over every active path at once. Exit code 0 when everything read back
// is what was written.
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "nvmeof/target.hpp"
#include "nvmeof/volume.hpp"

namespace {

using Clock = std::chrono::steady_clock;

uint64_t parse_size(const char* s) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s, &end, 10);
  const char u = end ? static_cast<char>(*end | 0x20) : 0;
  const uint64_t mul = u == 'k' ? 1ull << 10 : u == 'm' ? 1ull << 20 : u == 'g' ? 1ull << 30 : 1;
  return v * mul;
}

// The checkpoint's content: every 8-byte word names its shard and its offset, so a block that
// lands in the wrong place (or a stale one) cannot pass the check.
uint64_t word(uint32_t shard, uint64_t offset) {
  uint64_t x = (static_cast<uint64_t>(shard) << 48) ^ offset ^ 0x9e3779b97f4a7c15ull;
  x ^= x >> 31;
  x *= 0xbf58476d1ce4e5b9ull;
  return x ^ (x >> 29);
}

void fill(uint64_t* p, size_t bytes, uint32_t shard, uint64_t offset) {
  for (size_t i = 0; i < bytes / 8; ++i) p[i] = word(shard, offset + i * 8);
}

size_t first_bad(const uint64_t* p, size_t bytes, uint32_t shard, uint64_t offset) {
  for (size_t i = 0; i < bytes / 8; ++i)
    if (p[i] != word(shard, offset + i * 8)) return i * 8;
  return bytes;
}

// A fixed set of I/O slots kept busy from this thread; completions run on the volume's reactor.
class Pipeline {
 public:
  Pipeline(nvmeof::Volume& v, unsigned depth, uint32_t io_bytes) : v_(v), slots_(depth) {
    for (auto& s : slots_) {
      s.buf.reset(static_cast<uint64_t*>(std::aligned_alloc(4096, io_bytes)));
      s.owner = this;
      s.io.user = &s;
      s.io.done = &Pipeline::done;
      free_.push_back(&s);
    }
  }
  struct Slot {
    std::unique_ptr<uint64_t, decltype(&std::free)> buf{nullptr, &std::free};
    nvmeof::VolumeIo io;
    Pipeline* owner = nullptr;
    uint32_t shard = 0;
    uint64_t offset = 0;
    size_t bytes = 0;
  };
  // Waits for a free slot (checking the one that frees up with `check`).
  template <class Check>
  Slot& acquire(Check&& check) {
    std::unique_lock lk(mu_);
    cv_.wait(lk, [this] { return !free_.empty() || !finished_.empty(); });
    if (!finished_.empty()) {
      Slot* s = finished_.back();
      finished_.pop_back();
      lk.unlock();
      check(*s);
      return *s;
    }
    Slot* s = free_.back();
    free_.pop_back();
    return *s;
  }
  void submit(Slot& s) {
    {
      std::lock_guard lk(mu_);
      ++inflight_;
    }
    while (v_.submit(s.io) == -EAGAIN) std::this_thread::yield();
  }
  template <class Check>
  void drain(Check&& check) {
    std::unique_lock lk(mu_);
    for (;;) {
      while (!finished_.empty()) {
        Slot* s = finished_.back();
        finished_.pop_back();
        lk.unlock();
        check(*s);
        lk.lock();
        free_.push_back(s);
      }
      if (inflight_ == 0) return;
      cv_.wait(lk, [this] { return !finished_.empty() || inflight_ == 0; });
    }
  }
  bool failed() const { return failed_.load(); }

 private:
  static void done(nvmeof::VolumeIo& io, nvmeof::NvmeStatus st) noexcept {
    auto* s = static_cast<Slot*>(io.user);
    Pipeline* p = s->owner;
    if (!st.is_success()) {
      std::fprintf(stderr, "checkpoint: I/O at LBA %llu failed: %s\n",
                   static_cast<unsigned long long>(io.slba), nvmeof::to_string(st).c_str());
      p->failed_.store(true);
    }
    std::lock_guard lk(p->mu_);
    --p->inflight_;
    p->finished_.push_back(s);
    p->cv_.notify_one();
  }

  nvmeof::Volume& v_;
  std::vector<Slot> slots_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Slot*> free_, finished_;
  unsigned inflight_ = 0;
  std::atomic<bool> failed_{false};
};

void print_rate(const char* what, uint64_t bytes, Clock::duration d) {
  const double s = std::chrono::duration<double>(d).count();
  std::printf("%-22s %8.1f MiB in %7.3f s: %6.3f GB/s\n", what, static_cast<double>(bytes) / (1 << 20), s,
              s > 0 ? static_cast<double>(bytes) / s / 1e9 : 0.0);
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t size = 64ull << 20, io_size = 4ull << 20;
  unsigned shards = 4, depth = 8, embedded = 0, deadline_ms = 0;
  std::vector<std::string> pos;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--size" && has_value) size = parse_size(argv[++i]);
    else if (a == "--io-size" && has_value) io_size = parse_size(argv[++i]);
    else if (a == "--shards" && has_value) shards = static_cast<unsigned>(std::atoi(argv[++i]));
    else if (a == "--depth" && has_value) depth = static_cast<unsigned>(std::atoi(argv[++i]));
    else if (a == "--deadline-ms" && has_value) deadline_ms = static_cast<unsigned>(std::atoi(argv[++i]));
    else if (a == "--embedded" && has_value) embedded = static_cast<unsigned>(std::atoi(argv[++i]));
    else if (a.rfind("--", 0) == 0) {
      std::fprintf(stderr, "checkpoint: unknown option %s\n", a.c_str());
      return 2;
    } else pos.push_back(a);
  }
  if (size == 0 || io_size == 0 || io_size % 4096 || shards == 0 || depth == 0 || depth > 64 ||
      embedded > 16 || (embedded == 0) == (pos.size() != 2) || size % (uint64_t{shards} * 4096)) {
    std::fprintf(stderr,
                 "usage: %s (--embedded PATHS | ADDR:PORT[,ADDR:PORT...] NQN) [--size 64m] [--shards 4]\n"
                 "       [--io-size 4m] [--depth 8] [--deadline-ms N]   (size: a multiple of shards x 4 KiB)\n",
                 argv[0]);
    return 2;
  }

  // Either a target in this process with one port per path, or the addresses given.
  std::unique_ptr<nvmeof::Target> target;
  nvmeof::VolumeOptions opts;
  if (embedded) {
    nvmeof::TargetOptions to;
    to.ports.assign(embedded, nvmeof::TargetPort{"127.0.0.1", "0", nvmeof::AnaState::optimized});
    to.subsystems[0].namespaces[0].size_bytes = size;
    auto t = nvmeof::Target::start(to);
    if (!t) {
      std::fprintf(stderr, "checkpoint: cannot start the target: %s\n", t.error().message().c_str());
      return 1;
    }
    target = std::move(*t);
    for (unsigned i = 0; i < embedded; ++i) pos.push_back(target->port_address(i));
    opts.connect.subnqn = to.subsystems[0].nqn;
  } else {
    opts.connect.subnqn = pos[1];
    const std::string list = pos[0];
    pos.clear();
    for (size_t at = 0; at <= list.size();) {
      const size_t comma = std::min(list.find(',', at), list.size());
      pos.push_back(list.substr(at, comma - at));
      at = comma + 1;
    }
  }
  for (const std::string& a : pos) {
    auto addr = nvmeof::TransportAddress::parse(a);
    if (!addr) {
      std::fprintf(stderr, "checkpoint: %s: %s\n", a.c_str(), addr.error().message().c_str());
      return 2;
    }
    opts.paths.push_back(*addr);
  }
  // The per-command deadline that declares a path dead: the volume derives one (at most 25 ms)
  // from the latency it sees; a bulk writer on a busy host may prefer a longer one.
  opts.io_deadline = std::chrono::milliseconds(deadline_ms);
  auto opened = nvmeof::Volume::open(opts);
  if (!opened) {
    std::fprintf(stderr, "checkpoint: cannot open the volume: %s\n", opened.error().message().c_str());
    return 1;
  }
  nvmeof::Volume& vol = **opened;
  const uint32_t bs = vol.block_size();
  if (size > vol.size_blocks() * bs) {
    std::fprintf(stderr, "checkpoint: --size is larger than the namespace (%llu bytes)\n",
                 static_cast<unsigned long long>(vol.size_blocks() * bs));
    return 2;
  }
  const uint64_t shard_bytes = size / shards;
  io_size = std::min<uint64_t>(io_size, shard_bytes);
  std::printf("checkpoint: %llu MiB in %u shards, %llu KiB I/O, %u in flight, %zu path(s), %u usable\n",
              static_cast<unsigned long long>(size >> 20), shards,
              static_cast<unsigned long long>(io_size >> 10), depth, opts.paths.size(), vol.usable_paths());

  bool ok = true;
  Pipeline pipe(vol, depth, static_cast<uint32_t>(io_size));
  auto no_check = [](Pipeline::Slot&) {};
  auto verify = [&](Pipeline::Slot& s) {
    if (s.bytes == 0) return;
    const size_t bad = first_bad(s.buf.get(), s.bytes, s.shard, s.offset);
    if (bad != s.bytes) {
      std::fprintf(stderr, "checkpoint: shard %u differs at byte %llu\n", s.shard,
                   static_cast<unsigned long long>(s.offset + bad));
      ok = false;
    }
    s.bytes = 0;
  };
  // Walks every shard in io_size pieces: `prepare` sets the slot up, then it is submitted.
  auto sweep = [&](nvmeof::IoOp op, auto&& check) {
    for (uint32_t sh = 0; sh < shards; ++sh) {
      for (uint64_t off = 0; off < shard_bytes; off += io_size) {
        Pipeline::Slot& s = pipe.acquire(check);
        s.shard = sh;
        s.offset = off;
        s.bytes = static_cast<size_t>(std::min(io_size, shard_bytes - off));
        if (op == nvmeof::IoOp::write) fill(s.buf.get(), s.bytes, sh, off);
        s.io.op = op;
        s.io.buf = s.buf.get();
        s.io.slba = (sh * shard_bytes + off) / bs;
        s.io.nlb = static_cast<uint32_t>(s.bytes / bs);
        pipe.submit(s);
      }
    }
    pipe.drain(check);
  };

  const nvmeof::VolumeStats before = vol.stats();
  const auto t0 = Clock::now();
  sweep(nvmeof::IoOp::write, no_check);
  const auto t1 = Clock::now();
  // The checkpoint is durable only once the flush returns.
  {
    Pipeline::Slot& s = pipe.acquire(no_check);
    s.bytes = 0;
    s.io.op = nvmeof::IoOp::flush;
    s.io.buf = nullptr;
    s.io.slba = 0;
    s.io.nlb = 0;
    pipe.submit(s);
    pipe.drain(no_check);
  }
  const auto t2 = Clock::now();
  sweep(nvmeof::IoOp::read, verify);
  const auto t3 = Clock::now();
  const nvmeof::VolumeStats after = vol.stats();

  print_rate("write", size, t1 - t0);
  print_rate("write + flush", size, t2 - t0);
  print_rate("read back + verify", size, t3 - t2);
  for (size_t p = 0; p < after.paths.size(); ++p) {
    const uint64_t ios = after.paths[p].ios - (p < before.paths.size() ? before.paths[p].ios : 0);
    const uint64_t bytes = after.paths[p].bytes - (p < before.paths.size() ? before.paths[p].bytes : 0);
    std::printf("path %zu %-22s %7llu commands, %8.1f MiB\n", p, after.paths[p].address.c_str(),
                static_cast<unsigned long long>(ios), static_cast<double>(bytes) / (1 << 20));
  }
  ok = ok && !pipe.failed();
  std::printf("checkpoint %s\n", ok ? "verified" : "FAILED");
  return ok ? 0 : 1;
}
