// The loader's batch memory: a pool of equal-sized buffers, and the Batch that holds one of
// them and gives it back when its last reference goes.
//
// Ownership: a PooledBatch shares its pool, so a batch the consumer still holds keeps the pool
// (and its memory provider) alive after the loader is gone.
// Thread-safety: BufferPool's methods may be called from any thread (a batch is released by
// whichever thread drops its last reference).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/host_memory.h"
#include "core/mutex.h"
#include "stoker/loader.h"

namespace stoker::pipeline {

// The environment variable that poisons batch buffers, a debugging aid (docs/loader.md): every
// buffer a pool hands out, new or recycled, is first filled with this byte, so that a byte a
// batch leaves unwritten shows as the poison instead of the previous batch's pixels.
inline constexpr const char* kPoisonVariable = "STOKER_POISON_BATCHES";

// The poison byte STOKER_POISON_BATCHES asks for ("0".."255"), read now; none when it is unset
// or empty. Errors (kInvalidArgument): any other value.
inline Result<std::optional<uint8_t>> poison_from_environment() {
  const char* value = std::getenv(kPoisonVariable);
  if (value == nullptr || *value == '\0') return std::optional<uint8_t>();
  int byte = 0;
  const size_t length = std::strlen(value);
  for (size_t i = 0; i < length && byte <= 255; ++i) {
    byte = value[i] >= '0' && value[i] <= '9' ? byte * 10 + (value[i] - '0') : 256;
  }
  if (byte > 255) {
    return Status(
        StatusCode::kInvalidArgument,
        std::string(kPoisonVariable) + " must be a byte value, 0 to 255, not '" + value + "'");
  }
  return std::optional<uint8_t>(static_cast<uint8_t>(byte));
}

// Batch buffers: `capacity` are kept for reuse; more are allocated when the consumer holds
// more, and freed on release once `capacity` are idle again. With `poison`, every buffer is
// filled with it as acquire() hands it out (poison_from_environment()); without, a buffer
// holds whatever it held.
class BufferPool {
 public:
  BufferPool(std::shared_ptr<const HostMemory> memory, size_t bytes, int64_t capacity,
             std::optional<uint8_t> poison = std::nullopt)
      : memory_(std::move(memory)), bytes_(bytes), capacity_(capacity), poison_(poison) {}
  ~BufferPool() {
    core::MutexLock lock(&mutex_);
    for (uint8_t* buffer : idle_) memory_->release(buffer);
  }
  Result<uint8_t*> acquire() {
    Result<uint8_t*> buffer = take();
    if (poison_.has_value() && buffer.ok()) std::memset(*buffer, *poison_, bytes_);
    return buffer;
  }
  void release(uint8_t* buffer) {
    core::MutexLock lock(&mutex_);
    if (static_cast<int64_t>(idle_.size()) < capacity_) {
      idle_.push_back(buffer);
    } else {
      memory_->release(buffer);
      --allocated_;
    }
  }
  int64_t allocated() const {
    core::MutexLock lock(&mutex_);
    return allocated_;
  }
  size_t bytes() const { return bytes_; }
  int64_t capacity() const { return capacity_; }
  bool pinned() const { return memory_->pinned(); }
  std::optional<uint8_t> poison() const { return poison_; }

 private:
  Result<uint8_t*> take() {
    core::MutexLock lock(&mutex_);
    if (!idle_.empty()) {
      uint8_t* buffer = idle_.back();
      idle_.pop_back();
      return buffer;
    }
    Result<uint8_t*> buffer = memory_->allocate(bytes_);
    if (!buffer.ok()) return buffer.status().with_context("a batch buffer");
    ++allocated_;
    return buffer;
  }

  const std::shared_ptr<const HostMemory> memory_;
  const size_t bytes_;
  const int64_t capacity_;
  const std::optional<uint8_t> poison_;
  mutable core::Mutex mutex_;
  std::vector<uint8_t*> idle_ GUARDED_BY(mutex_);
  int64_t allocated_ GUARDED_BY(mutex_) = 0;
};

class PooledBatch final : public Batch {
 public:
  PooledBatch(std::shared_ptr<BufferPool> pool,
              std::shared_ptr<const std::vector<BatchField>> fields, uint8_t* buffer,
              uint32_t epoch, int64_t index, int64_t size)
      : pool_(std::move(pool)) {
    fields_ = std::move(fields);
    buffer_ = buffer;
    epoch_ = epoch;
    index_ = index;
    samples_.assign(size, 0);
    episodes_.assign(size, 0);
  }
  ~PooledBatch() override { pool_->release(buffer_); }
  uint8_t* buffer() { return buffer_; }
  std::vector<int64_t>& mutable_samples() { return samples_; }
  std::vector<int64_t>& mutable_episodes() { return episodes_; }
  std::vector<BatchColumn>& mutable_columns() { return columns_; }

 private:
  std::shared_ptr<BufferPool> pool_;
};

}  // namespace stoker::pipeline
