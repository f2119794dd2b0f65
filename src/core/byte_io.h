// ByteWriter / ByteReader: the little-endian binary form of stoker's saved structures (frame
// tables, the episode index). The reader checks every bound, so malformed input is a `false`
// return, never a read outside the span. Internal to the core; no FFmpeg, no I/O.
//
// Thread-safety: values used by one thread at a time.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace stoker::core {

class ByteWriter {
 public:
  /// Starts with `reserve` zero bytes (room for a header patched in at the end).
  explicit ByteWriter(size_t reserve = 0) : out_(reserve, 0) {}

  void bytes(const void* data, size_t size) {
    if (size == 0) return;  // data may be null (an empty vector's)
    const size_t at = out_.size();
    out_.resize(at + size);
    std::memcpy(out_.data() + at, data, size);
  }
  template <typename T>
  void pod(T value) {
    static_assert(std::is_trivially_copyable_v<T>);
    bytes(&value, sizeof(value));
  }
  /// A 32-bit length, then the characters.
  void string(const std::string& s) {
    pod<uint32_t>(static_cast<uint32_t>(s.size()));
    bytes(s.data(), s.size());
  }
  /// Pads with zeros to a multiple of `alignment`.
  void align(size_t alignment) {
    out_.resize((out_.size() + alignment - 1) / alignment * alignment, 0);
  }

  size_t size() const { return out_.size(); }
  std::vector<uint8_t>& buffer() { return out_; }
  std::vector<uint8_t> take() { return std::move(out_); }

 private:
  std::vector<uint8_t> out_;
};

class ByteReader {
 public:
  explicit ByteReader(std::span<const uint8_t> in) : in_(in) {}

  bool bytes(void* data, size_t size) {
    if (size == 0) return true;  // data may be null (an empty vector's)
    if (size > in_.size() - pos_) return false;
    std::memcpy(data, in_.data() + pos_, size);
    pos_ += size;
    return true;
  }
  template <typename T>
  bool pod(T* value) {
    static_assert(std::is_trivially_copyable_v<T>);
    return bytes(value, sizeof(T));
  }
  /// Reads what ByteWriter::string wrote; false when longer than `max_size` or truncated.
  bool string(std::string* s, size_t max_size) {
    uint32_t size = 0;
    if (!pod(&size) || size > max_size || size > in_.size() - pos_) return false;
    s->assign(reinterpret_cast<const char*>(in_.data() + pos_), size);
    pos_ += size;
    return true;
  }
  /// Skips the zeros ByteWriter::align wrote.
  bool align(size_t alignment) {
    const size_t to = (pos_ + alignment - 1) / alignment * alignment;
    if (to > in_.size()) return false;
    pos_ = to;
    return true;
  }
  /// `count` values of T in place, without a copy; false when they run past the end or do not
  /// lie at T's alignment in memory.
  template <typename T>
  bool view(size_t count, std::span<const T>* out) {
    static_assert(std::is_trivially_copyable_v<T>);
    if (count > (in_.size() - pos_) / sizeof(T)) return false;
    const uint8_t* at = in_.data() + pos_;
    if (count > 0 && reinterpret_cast<uintptr_t>(at) % alignof(T) != 0) return false;
    *out = std::span<const T>(reinterpret_cast<const T*>(at), count);
    pos_ += count * sizeof(T);
    return true;
  }
  size_t position() const { return pos_; }
  bool at_end() const { return pos_ == in_.size(); }

 private:
  std::span<const uint8_t> in_;
  size_t pos_ = 0;
};

}  // namespace stoker::core
