// RemoteLikeSource: bytes in memory that present themselves as remote (is_remote() is true), and
// count what is asked of them, so that media tests run the remote read path (header-only
// scans, packets read by position, prefetch) without a network, and check how much it reads.
//
// Thread-safety: as any ByteSource; the counters are atomics.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "stoker/byte_source.h"

namespace stoker::testing {

class RemoteLikeSource final : public ByteSource {
 public:
  RemoteLikeSource(std::string name, std::vector<uint8_t> bytes)
      : ByteSource(name), bytes_(memory_source(std::move(name), std::move(bytes))) {}

  int64_t size() const override { return bytes_->size(); }
  bool is_remote() const override { return true; }
  Result<size_t> read_at(int64_t offset, std::span<uint8_t> out) const override {
    Result<size_t> got = bytes_->read_at(offset, out);
    if (got.ok()) bytes_read += static_cast<int64_t>(*got);
    ++reads;
    return got;
  }
  void prefetch(std::span<const ByteRange> ranges) const override {
    std::lock_guard<std::mutex> lock(mutex_);
    prefetched.insert(prefetched.end(), ranges.begin(), ranges.end());
  }
  std::vector<ByteRange> take_prefetched() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return std::exchange(prefetched, {});
  }

  mutable std::atomic<int64_t> reads{0};
  mutable std::atomic<int64_t> bytes_read{0};

 private:
  std::unique_ptr<ByteSource> bytes_;
  mutable std::mutex mutex_;
  mutable std::vector<ByteRange> prefetched;
};

}  // namespace stoker::testing
