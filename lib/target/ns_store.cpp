#include "target/ns_store.hpp"

#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <vector>

namespace nvmeof::target {
namespace {

uint64_t fnv1a(const std::string& s, uint64_t seed) {
  uint64_t h = 0xcbf29ce484222325ull ^ seed;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

// Stable across runs and ports: hosts match paths by these identifiers.
void derive_ids(const std::string& subnqn, uint32_t nsid, Nguid& nguid, Uuid& uuid) {
  const std::string key = subnqn + "/" + std::to_string(nsid);
  const uint64_t a = fnv1a(key, 1), b = fnv1a(key, 2), c = fnv1a(key, 3), d = fnv1a(key, 4);
  std::memcpy(nguid.data(), &a, 8);
  std::memcpy(nguid.data() + 8, &b, 8);
  std::memcpy(uuid.data(), &c, 8);
  std::memcpy(uuid.data() + 8, &d, 8);
  uuid[6] = static_cast<uint8_t>((uuid[6] & 0x0f) | 0x80);  // RFC 9562 version 8 (custom)
  uuid[8] = static_cast<uint8_t>((uuid[8] & 0x3f) | 0x80);  // variant 10b
}

Result<void> full_pread(int fd, uint8_t* p, size_t len, uint64_t off) {
  while (len) {
    const ssize_t n = ::pread(fd, p, len, static_cast<off_t>(off));
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_code(errno);
    }
    if (n == 0) {  // past the end of a file someone truncated: reads as zeroes
      std::memset(p, 0, len);
      return {};
    }
    p += n;
    off += static_cast<uint64_t>(n);
    len -= static_cast<size_t>(n);
  }
  return {};
}

Result<void> full_pwrite(int fd, const uint8_t* p, size_t len, uint64_t off) {
  while (len) {
    const ssize_t n = ::pwrite(fd, p, len, static_cast<off_t>(off));
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_code(errno);
    }
    p += n;
    off += static_cast<uint64_t>(n);
    len -= static_cast<size_t>(n);
  }
  return {};
}

}  // namespace

Result<std::unique_ptr<NsStore>> NsStore::open(const TargetNamespace& cfg, const std::string& subnqn) {
  if (cfg.nsid == 0 || cfg.nsid == 0xffffffffu) return Errc::invalid_argument;
  if (cfg.block_size != 512 && cfg.block_size != 4096) return Errc::invalid_argument;
  if (cfg.size_bytes == 0 || cfg.size_bytes % cfg.block_size != 0) return Errc::invalid_argument;

  std::unique_ptr<NsStore> ns(new NsStore);
  ns->nsid_ = cfg.nsid;
  ns->block_size_ = cfg.block_size;
  ns->lba_shift_ = cfg.block_size == 512 ? 9 : 12;
  ns->size_.store(cfg.size_bytes);
  derive_ids(subnqn, cfg.nsid, ns->nguid_, ns->uuid_);
  if (std::any_of(cfg.nguid.begin(), cfg.nguid.end(), [](uint8_t b) { return b != 0; }))
    ns->nguid_ = cfg.nguid;

  if (cfg.file.empty()) {
    // Anonymous memory is zero on first touch and only committed when written.
    void* p = ::mmap(nullptr, cfg.size_bytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return errno_code(errno);
    ns->ram_ = static_cast<uint8_t*>(p);
    return ns;
  }
  const int fd = ::open(cfg.file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return errno_code(errno);
  ns->fd_ = fd;
  struct stat st {};
  if (::fstat(fd, &st) != 0) return errno_code(errno);
  if (S_ISREG(st.st_mode) && static_cast<uint64_t>(st.st_size) < cfg.size_bytes &&
      ::ftruncate(fd, static_cast<off_t>(cfg.size_bytes)) != 0)
    return errno_code(errno);
  return ns;
}

NsStore::~NsStore() {
  if (ram_) ::munmap(ram_, size_.load());
  if (fd_ >= 0) ::close(fd_);
}

Result<void> NsStore::resize(uint64_t bytes) {
  if (bytes == 0 || bytes % block_size_ != 0) return Errc::invalid_argument;
  std::unique_lock lock(mu_);
  const uint64_t old = size_.load();
  if (bytes == old) return {};
  if (ram_) {
    // Anonymous memory: a shrink gives the tail back, a grow adds zero pages (the mapping may
    // move; every access takes the lock and reads ram_ under it).
    void* p = ::mremap(ram_, old, bytes, MREMAP_MAYMOVE);
    if (p == MAP_FAILED) return errno_code(errno);
    ram_ = static_cast<uint8_t*>(p);
  } else {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) return errno_code(errno);
    if (!S_ISREG(st.st_mode)) return {Errc::unsupported, "a block device namespace cannot be resized"};
    if (::ftruncate(fd_, static_cast<off_t>(bytes)) != 0) return errno_code(errno);
  }
  size_.store(bytes, std::memory_order_release);
  return {};
}

Result<void> NsStore::read(uint64_t offset, void* dst, size_t len) {
  std::shared_lock lock(mu_);
  if (!contains(offset, len)) return Errc::invalid_argument;
  if (ram_) {
    std::memcpy(dst, ram_ + offset, len);
    return {};
  }
  return full_pread(fd_, static_cast<uint8_t*>(dst), len, offset);
}

Result<void> NsStore::write(uint64_t offset, const void* src, size_t len) {
  std::unique_lock lock(mu_);
  if (!contains(offset, len)) return Errc::invalid_argument;
  if (ram_) {
    std::memcpy(ram_ + offset, src, len);
    return {};
  }
  return full_pwrite(fd_, static_cast<const uint8_t*>(src), len, offset);
}

Result<void> NsStore::zero(uint64_t offset, uint64_t len) {
  std::unique_lock lock(mu_);
  if (!contains(offset, len)) return Errc::invalid_argument;
  if (ram_) {
    std::memset(ram_ + offset, 0, len);
    return {};
  }
  if (::fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(offset),
                  static_cast<off_t>(len)) == 0)
    return {};
  // Not every file system punches holes (and block devices refuse): write zeroes instead.
  static const std::vector<uint8_t> zeros(1 << 20, 0);
  while (len) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(len, zeros.size()));
    if (auto r = full_pwrite(fd_, zeros.data(), n, offset); !r) return r;
    offset += n;
    len -= n;
  }
  return {};
}

Result<void> NsStore::flush() {
  if (fd_ < 0) return {};
  if (::fdatasync(fd_) != 0) return errno_code(errno);
  return {};
}

}  // namespace nvmeof::target
