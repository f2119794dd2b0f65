// The loader's batch memory: a pool of equal-sized buffers, and the Batch that holds one of
// them and gives it back when its last reference goes.
//
// Ownership: a PooledBatch shares its pool, so a batch the consumer still holds keeps the pool
// (and its memory provider) alive after the loader is gone.
// Thread-safety: BufferPool's methods may be called from any thread (a batch is released by
// whichever thread drops its last reference).
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "core/host_memory.h"
#include "core/mutex.h"
#include "stoker/loader.h"

namespace stoker::pipeline {

// Batch buffers: `capacity` are kept for reuse; more are allocated when the consumer holds
// more, and freed on release once `capacity` are idle again.
class BufferPool {
 public:
  BufferPool(std::shared_ptr<const HostMemory> memory, size_t bytes, int64_t capacity)
      : memory_(std::move(memory)), bytes_(bytes), capacity_(capacity) {}
  ~BufferPool() {
    core::MutexLock lock(&mutex_);
    for (uint8_t* buffer : idle_) memory_->release(buffer);
  }
  Result<uint8_t*> acquire() {
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

 private:
  const std::shared_ptr<const HostMemory> memory_;
  const size_t bytes_;
  const int64_t capacity_;
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

 private:
  std::shared_ptr<BufferPool> pool_;
};

}  // namespace stoker::pipeline
