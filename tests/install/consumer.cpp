// An out-of-tree consumer of the installed library, built by tests/install/run_install_test.sh
// with nothing but `pkg-config --cflags --libs nvmeof`: it opens a volume over every path given,
// writes stamped blocks with the callback form (several I/Os in flight), reads them back with the
// coroutine form, and verifies every byte.
//
//   consumer NQN ADDR:PORT [ADDR:PORT...]
#include <nvmeof/version.h>
#include <nvmeof/task.hpp>
#include <nvmeof/volume.hpp>

#include <atomic>
#include <coroutine>
#include <cstdio>
#include <cstring>
#include <future>
#include <string>
#include <vector>

static_assert(NVMEOF_VERSION >= NVMEOF_VERSION_AT(0, 1, 0));

namespace {

constexpr uint32_t kIos = 32;        // I/Os in flight at once
constexpr uint32_t kBlocksPerIo = 8;

struct Batch {
  std::atomic<uint32_t> left{kIos};
  std::atomic<uint32_t> failed{0};
  std::promise<void> done;
};

void on_write(nvmeof::VolumeIo& io, nvmeof::NvmeStatus st) noexcept {
  auto* b = static_cast<Batch*>(io.user);
  if (!st.is_success()) b->failed.fetch_add(1);
  if (b->left.fetch_sub(1) == 1) b->done.set_value();
}

void stamp(std::vector<char>& buf, uint32_t bs) {
  for (size_t lba = 0; lba < buf.size() / bs; ++lba)
    for (uint32_t i = 0; i < bs; ++i)
      buf[lba * bs + i] = static_cast<char>((lba * 131 + i * 7 + 1) & 0xff);
}

nvmeof::Task<int> read_back(nvmeof::Volume& vol, const std::vector<char>& want) {
  std::vector<char> got(want.size());
  const uint32_t bs = vol.block_size();
  for (uint32_t i = 0; i < kIos; ++i) {
    char* p = got.data() + size_t{i} * kBlocksPerIo * bs;
    nvmeof::NvmeStatus st = co_await vol.read(p, uint64_t{i} * kBlocksPerIo, kBlocksPerIo);
    if (!st.is_success()) {
      std::fprintf(stderr, "consumer: read %u: %s\n", i, nvmeof::to_string(st).c_str());
      co_return 1;
    }
  }
  if (std::memcmp(got.data(), want.data(), want.size()) != 0) {
    std::fprintf(stderr, "consumer: data read back differs from data written\n");
    co_return 1;
  }
  co_return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s NQN ADDR:PORT [ADDR:PORT...]\n", argv[0]);
    return 2;
  }
  std::printf("consumer: built against nvmeof %s\n", NVMEOF_VERSION_STRING);
  nvmeof::VolumeOptions opts;
  opts.connect.subnqn = argv[1];
  for (int i = 2; i < argc; ++i) {
    auto a = nvmeof::TransportAddress::parse(argv[i]);
    if (!a) {
      std::fprintf(stderr, "consumer: %s: %s\n", argv[i], a.error().message().c_str());
      return 2;
    }
    opts.paths.push_back(*a);
  }
  auto vol = nvmeof::Volume::open(opts);
  if (!vol) {
    std::fprintf(stderr, "consumer: open: %s\n", vol.error().message().c_str());
    return 1;
  }
  nvmeof::Volume& v = **vol;
  const uint32_t bs = v.block_size();
  if (v.size_blocks() < uint64_t{kIos} * kBlocksPerIo) {
    std::fprintf(stderr, "consumer: namespace too small\n");
    return 1;
  }

  std::vector<char> data(size_t{kIos} * kBlocksPerIo * bs);
  stamp(data, bs);
  Batch batch;
  std::vector<nvmeof::VolumeIo> ios(kIos);
  for (uint32_t i = 0; i < kIos; ++i) {
    nvmeof::VolumeIo& io = ios[i];
    io.op = nvmeof::IoOp::write;
    io.slba = uint64_t{i} * kBlocksPerIo;
    io.nlb = kBlocksPerIo;
    io.buf = data.data() + size_t{i} * kBlocksPerIo * bs;
    io.done = on_write;
    io.user = &batch;
    if (int rc = v.submit(io); rc != 0) {
      std::fprintf(stderr, "consumer: submit %u: %d\n", i, rc);
      return 1;
    }
  }
  batch.done.get_future().wait();
  if (batch.failed.load() != 0) {
    std::fprintf(stderr, "consumer: %u writes failed\n", batch.failed.load());
    return 1;
  }
  if (read_back(v, data).result.get() != 0) return 1;

  const nvmeof::VolumeStats st = v.stats();
  if (st.paths.size() != opts.paths.size() || st.completed < 2 * kIos) {
    std::fprintf(stderr, "consumer: unexpected stats: %s\n", nvmeof::to_json(st).c_str());
    return 1;
  }
  std::printf("consumer: %u blocks of %u bytes over %zu paths written and verified\n",
              kIos * kBlocksPerIo, bs, st.paths.size());
  return 0;
}
