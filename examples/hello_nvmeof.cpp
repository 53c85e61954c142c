// hello_nvmeof: open a volume over one NVMe/TCP path, write four blocks, read them back.
//
//   hello_nvmeof 127.0.0.1:4420 nqn.2024-01.io.nvmeof:target
//
// The reads and writes are coroutines: `co_await volume.write(...)` suspends until the
// completion arrives and resumes on the volume's reactor thread; nvmeof::Task (nvmeof/task.hpp)
// hands the result to main().
#include <cstdio>
#include <cstring>
#include <vector>

#include "nvmeof/task.hpp"
#include "nvmeof/volume.hpp"

namespace {

nvmeof::Task<int> write_and_read_back(nvmeof::Volume& volume) {
  constexpr uint32_t kBlocks = 4;
  const uint32_t bs = volume.block_size();
  std::vector<char> out(size_t{kBlocks} * bs), in(out.size());
  for (uint32_t b = 0; b < kBlocks; ++b)
    std::snprintf(&out[size_t{b} * bs], bs, "hello from nvmeof, block %u", b);

  nvmeof::NvmeStatus st = co_await volume.write(out.data(), 0, kBlocks);
  if (!st.is_success()) {
    std::printf("write failed: %s\n", nvmeof::to_string(st).c_str());
    co_return 1;
  }
  std::printf("wrote %u blocks of %u bytes at LBA 0\n", kBlocks, bs);

  st = co_await volume.read(in.data(), 0, kBlocks);
  if (!st.is_success()) {
    std::printf("read failed: %s\n", nvmeof::to_string(st).c_str());
    co_return 1;
  }
  const bool same = std::memcmp(in.data(), out.data(), in.size()) == 0;
  std::printf("read them back: \"%s\" ... %s\n", in.data(), same ? "identical" : "DIFFERENT");
  co_return same ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s ADDR:PORT SUBSYSTEM-NQN\n", argv[0]);
    return 2;
  }
  auto address = nvmeof::TransportAddress::parse(argv[1]);
  if (!address) {
    std::fprintf(stderr, "%s: %s\n", argv[1], address.error().message().c_str());
    return 2;
  }

  nvmeof::VolumeOptions opts;
  opts.paths = {*address};
  opts.connect.subnqn = argv[2];
  auto volume = nvmeof::Volume::open(opts);
  if (!volume) {
    std::fprintf(stderr, "cannot open %s: %s\n", argv[1], volume.error().message().c_str());
    return 1;
  }
  std::printf("opened namespace %u: %llu blocks of %u bytes\n", (*volume)->ns().nsid,
              static_cast<unsigned long long>((*volume)->size_blocks()), (*volume)->block_size());

  return write_and_read_back(**volume).result.get();
}
