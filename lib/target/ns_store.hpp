// One namespace of the embedded target: its identity and its blocks, in RAM or in a file.
// Threading: every method may be called from any thread. Reads share a lock and writes (and a
// resize) take it alone, so a read never sees half of a concurrent write to the same blocks, and
// every access checks its range against the size under that lock (a command planned before a
// shrink fails instead of touching what is gone). The size is also an atomic so that planning
// a command reads it without the lock.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <shared_mutex>
#include <string>

#include "nvmeof/identify.hpp"
#include "nvmeof/status.hpp"
#include "nvmeof/target.hpp"

namespace nvmeof::target {

class NsStore {
 public:
  /// Opens (and for a file, creates or extends) the backing store. `subnqn` seeds the NGUID and
  /// UUID when the configuration leaves them zero, so every port reports the same identity.
  /// Errors: invalid_argument (size not a multiple of the block size, block size not 512/4096,
  /// nsid 0), errno codes from open/ftruncate/mmap.
  static Result<std::unique_ptr<NsStore>> open(const TargetNamespace& cfg, const std::string& subnqn);
  ~NsStore();
  NsStore(const NsStore&) = delete;
  NsStore& operator=(const NsStore&) = delete;

  uint32_t nsid() const noexcept { return nsid_; }
  uint32_t block_size() const noexcept { return block_size_; }
  uint8_t lba_shift() const noexcept { return lba_shift_; }
  uint64_t blocks() const noexcept { return size_bytes() >> lba_shift_; }
  uint64_t size_bytes() const noexcept { return size_.load(std::memory_order_acquire); }
  const Nguid& nguid() const noexcept { return nguid_; }
  const Uuid& uuid() const noexcept { return uuid_; }

  /// Whether [offset, offset + len) lies inside the namespace (overflow-safe).
  bool contains(uint64_t offset, uint64_t len) const noexcept {
    const uint64_t size = size_bytes();
    return offset <= size && len <= size - offset;
  }
  /// Grows or shrinks the namespace to `bytes` (a multiple of the block size, not 0); the data
  /// below both sizes is kept, what a grow adds reads as zeroes. Errors: invalid_argument,
  /// unsupported (a block device), errno codes (mremap, ftruncate).
  Result<void> resize(uint64_t bytes);
  /// Byte-addressed access. Errors: invalid_argument when the range is past the end (a resize
  /// since the command was planned), errno codes (file I/O).
  Result<void> read(uint64_t offset, void* dst, size_t len);
  Result<void> write(uint64_t offset, const void* src, size_t len);
  /// Zeroes a range (Write Zeroes, Deallocate).
  Result<void> zero(uint64_t offset, uint64_t len);
  /// Makes written data durable (fdatasync for a file; nothing for RAM).
  Result<void> flush();

 private:
  NsStore() = default;

  uint32_t nsid_ = 0;
  uint32_t block_size_ = 0;
  uint8_t lba_shift_ = 0;
  std::atomic<uint64_t> size_{0};
  Nguid nguid_{};
  Uuid uuid_{};
  uint8_t* ram_ = nullptr;  // mmap'd anonymous memory, or nullptr when file-backed
  int fd_ = -1;
  std::shared_mutex mu_;
};

}  // namespace nvmeof::target
