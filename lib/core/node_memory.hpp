// Memory placed on a NUMA node: the lanes' request pools and the queue pairs' staging buffers
// and header slots. One mmap per buffer: huge pages (MAP_HUGETLB) when the buffer is large
// enough and the system has them reserved, else normal pages (the fallback is logged once per
// process); then an mbind to the node (MPOL_PREFERRED, so a full node falls back instead of
// failing) and a first touch of every page by the calling thread. Where mbind is refused
// (seccomp, no NUMA in the kernel) the first touch alone places the pages on the node of the CPU
// the caller runs on, which is the right one for a pinned reactor.
//
// Threading: allocate on the thread that will use the memory (after it is pinned). The
// thread-local memory node is per thread by construction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <utility>
#include <vector>

namespace nvmeof::detail {

/// Buffers at least this large try huge pages (rounded up to the huge page size).
inline constexpr size_t kHugePageMin = 512u << 10;

/// Where this thread's data-plane memory goes: set by a lane after pinning, read by the queue
/// pairs it creates. -1 (the default): first touch only, wherever the thread runs.
void set_thread_memory_node(int node) noexcept;
int thread_memory_node() noexcept;

class NodeBuffer {
 public:
  NodeBuffer() = default;
  /// `bytes` zeroed bytes on `node` (-1: no binding, first touch). Throws std::bad_alloc when
  /// mmap fails for normal pages too.
  NodeBuffer(size_t bytes, int node);
  ~NodeBuffer();
  NodeBuffer(NodeBuffer&& o) noexcept { *this = std::move(o); }
  NodeBuffer& operator=(NodeBuffer&& o) noexcept;
  NodeBuffer(const NodeBuffer&) = delete;
  NodeBuffer& operator=(const NodeBuffer&) = delete;

  void* data() const noexcept { return p_; }
  size_t size() const noexcept { return bytes_; }
  bool huge() const noexcept { return huge_; }
  /// Whether mbind accepted the node (false: placed by first touch only, or no node asked).
  bool bound() const noexcept { return bound_; }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
  size_t mapped_ = 0;
  bool huge_ = false;
  bool bound_ = false;
};

/// `n` value-initialized T in a NodeBuffer.
template <class T>
class NodeArray {
 public:
  NodeArray() = default;
  NodeArray(size_t n, int node) : buf_(n * sizeof(T), node), n_(n) {
    static_assert(alignof(T) <= 4096);
    for (size_t i = 0; i < n_; ++i) new (&data()[i]) T();
  }
  ~NodeArray() { reset(); }
  NodeArray(NodeArray&& o) noexcept : buf_(std::move(o.buf_)), n_(std::exchange(o.n_, 0)) {}
  NodeArray& operator=(NodeArray&& o) noexcept {
    reset();
    buf_ = std::move(o.buf_);
    n_ = std::exchange(o.n_, 0);
    return *this;
  }
  T* data() const noexcept { return static_cast<T*>(buf_.data()); }
  T& operator[](size_t i) const noexcept { return data()[i]; }
  size_t size() const noexcept { return n_; }
  T* begin() const noexcept { return data(); }
  T* end() const noexcept { return data() + n_; }
  const NodeBuffer& buffer() const noexcept { return buf_; }

 private:
  void reset() noexcept {
    for (size_t i = 0; i < n_; ++i) data()[i].~T();
    n_ = 0;
  }
  NodeBuffer buf_;
  size_t n_ = 0;
};

/// The node each page of [p, p + bytes) sits on (move_pages with no target nodes), -errno for a
/// page that is not there or when the call is refused (every entry then holds that -errno).
std::vector<int> page_nodes(const void* p, size_t bytes);

}  // namespace nvmeof::detail
