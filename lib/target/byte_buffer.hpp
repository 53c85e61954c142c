// A growable byte buffer whose new bytes are left uninitialized: the send queue and command data
// buffers are overwritten right after they grow, so zero-filling them would only cost time.
// Threading: owned by one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <utility>

namespace nvmeof::target {

class ByteBuffer {
 public:
  ByteBuffer() = default;
  ByteBuffer(ByteBuffer&& o) noexcept
      : data_(std::move(o.data_)), size_(std::exchange(o.size_, 0)), cap_(std::exchange(o.cap_, 0)) {}
  ByteBuffer& operator=(ByteBuffer&& o) noexcept {
    data_ = std::move(o.data_);
    size_ = std::exchange(o.size_, 0);
    cap_ = std::exchange(o.cap_, 0);
    return *this;
  }
  ByteBuffer(const ByteBuffer&) = delete;
  ByteBuffer& operator=(const ByteBuffer&) = delete;

  uint8_t* data() noexcept { return data_.get(); }
  const uint8_t* data() const noexcept { return data_.get(); }
  size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }

  /// Sets the size, keeping the first min(old, n) bytes; new bytes are unspecified.
  void resize(size_t n) {
    reserve(n);
    size_ = n;
  }
  void reserve(size_t n) {
    if (n <= cap_) return;
    size_t cap = cap_ ? cap_ : 4096;
    while (cap < n) cap *= 2;
    auto fresh = std::make_unique_for_overwrite<uint8_t[]>(cap);
    if (size_) std::memcpy(fresh.get(), data_.get(), size_);
    data_ = std::move(fresh);
    cap_ = cap;
  }
  /// Appends `n` unspecified bytes and returns their address (valid until the next growth).
  uint8_t* grow(size_t n) {
    const size_t at = size_;
    resize(size_ + n);
    return data_.get() + at;
  }
  void append(const void* p, size_t n) { std::memcpy(grow(n), p, n); }
  void clear() noexcept { size_ = 0; }
  /// Drops the first `n` bytes.
  void consume_front(size_t n) noexcept {
    if (n >= size_) {
      size_ = 0;
      return;
    }
    std::memmove(data_.get(), data_.get() + n, size_ - n);
    size_ -= n;
  }
  /// Frees the memory when it grew far beyond what is in use (a burst of large transfers).
  void shrink_if_idle(size_t keep) {
    if (size_ == 0 && cap_ > keep) {
      data_.reset();
      cap_ = 0;
    }
  }

 private:
  std::unique_ptr<uint8_t[]> data_;
  size_t size_ = 0;
  size_t cap_ = 0;
};

}  // namespace nvmeof::target
