#include "core/node_memory.hpp"
#include "core/log.hpp"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace nvmeof::detail {
namespace {

thread_local int tls_memory_node = -1;

constexpr size_t kHugePage = 2u << 20;
constexpr int kMpolPreferred = 1;        // <linux/mempolicy.h>; libnuma is not a dependency
constexpr unsigned kMaskBits = 1024;
std::atomic<bool> logged_huge{false};
std::atomic<bool> logged_mbind{false};

size_t page_size() noexcept {
  static const size_t ps = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return ps;
}

bool bind_to(void* p, size_t len, int node) noexcept {
  if (node < 0 || static_cast<unsigned>(node) >= kMaskBits) return false;
  unsigned long mask[kMaskBits / (8 * sizeof(unsigned long))] = {};
  mask[static_cast<unsigned>(node) / (8 * sizeof(unsigned long))] |=
      1ul << (static_cast<unsigned>(node) % (8 * sizeof(unsigned long)));
  // maxnode counts bits, and the kernel ignores the last one it is told about: hence + 1.
  if (syscall(SYS_mbind, p, len, kMpolPreferred, mask, kMaskBits + 1, 0) == 0) return true;
  if (!logged_mbind.exchange(true))
    nvmeof::detail::log_warning("nvmeof: mbind refused (%s): node-local memory by first touch only\n",
                 std::strerror(errno));
  return false;
}

}  // namespace

void set_thread_memory_node(int node) noexcept { tls_memory_node = node; }
int thread_memory_node() noexcept { return tls_memory_node; }

NodeBuffer::NodeBuffer(size_t bytes, int node) : bytes_(bytes) {
  if (bytes == 0) return;
  if (bytes >= kHugePageMin) {
    const size_t len = (bytes + kHugePage - 1) & ~(kHugePage - 1);
    void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
    if (p != MAP_FAILED) {
      p_ = p;
      mapped_ = len;
      huge_ = true;
    } else if (!logged_huge.exchange(true)) {
      nvmeof::detail::log_warning("nvmeof: no huge pages (%s): data-plane buffers use normal pages\n",
                   std::strerror(errno));
    }
  }
  if (!p_) {
    const size_t len = (bytes + page_size() - 1) & ~(page_size() - 1);
    void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    p_ = p;
    mapped_ = len;
  }
  bound_ = bind_to(p_, mapped_, node);
  // First touch: the pages are allocated now, by this thread, under the policy just set.
  std::memset(p_, 0, mapped_);
}

NodeBuffer::~NodeBuffer() {
  if (p_) munmap(p_, mapped_);
}

NodeBuffer& NodeBuffer::operator=(NodeBuffer&& o) noexcept {
  if (this == &o) return *this;
  if (p_) munmap(p_, mapped_);
  p_ = std::exchange(o.p_, nullptr);
  bytes_ = std::exchange(o.bytes_, 0);
  mapped_ = std::exchange(o.mapped_, 0);
  huge_ = std::exchange(o.huge_, false);
  bound_ = std::exchange(o.bound_, false);
  return *this;
}

std::vector<int> page_nodes(const void* p, size_t bytes) {
  const size_t ps = page_size();
  const auto start = reinterpret_cast<uintptr_t>(p) & ~(ps - 1);
  const auto end = reinterpret_cast<uintptr_t>(p) + bytes;
  std::vector<void*> pages;
  for (uintptr_t a = start; a < end; a += ps) pages.push_back(reinterpret_cast<void*>(a));
  std::vector<int> status(pages.size(), -ENOENT);
  if (pages.empty()) return status;
  if (syscall(SYS_move_pages, 0, pages.size(), pages.data(), nullptr, status.data(), 0) != 0)
    status.assign(pages.size(), -errno);
  return status;
}

}  // namespace nvmeof::detail
