// The process's cache of fetched ranges of remote objects, in memory within a byte budget
// (least recently used out first), and the reads and prefetches of remote sources that go
// through it.
//
// Each object's ranges are disjoint slots: ready (bytes in memory) or pending (a fetch
// running). A read copies from the slots that cover it and fetches what none covers, reading
// ahead at least min_request_bytes so small demuxer reads share one request; a read that needs
// a pending slot waits for its fetch, and fetches the bytes itself if that fetch failed.
// prefetch() coalesces nearby ranges and fetches them on the I/O pool (io_pool.h).
//
// A forked child gets an empty cache of its own (PerForkGeneration): the parent's pending slots
// would never complete there.
//
// Thread-safety: every method may be called from any thread. A slot's bytes are written by one
// fetch before the slot is marked ready (under the mutex), and only read after.
#pragma once

#include <atomic>
#include <list>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/mutex.h"
#include "io/remote/remote_object.h"
#include "stoker/byte_source.h"
#include "stoker/status.h"

namespace stoker::io {

class RangeCache {
 public:
  /// The largest request a prefetch makes; longer spans are split, so that the first reads of
  /// a long window need not wait for all of it.
  static constexpr int64_t kMaxRequestBytes = int64_t{8} << 20;

  RangeCache() = default;
  RangeCache(const RangeCache&) = delete;
  RangeCache& operator=(const RangeCache&) = delete;

  /// ByteSource::read_at() of `object`. REQUIRES: offset >= 0.
  Result<size_t> read(const std::shared_ptr<const RemoteObject>& object, int64_t offset,
                      std::span<uint8_t> out) EXCLUDES(mutex_);

  /// ByteSource::prefetch() of `object`.
  void prefetch(const std::shared_ptr<const RemoteObject>& object,
                std::span<const ByteRange> ranges) EXCLUDES(mutex_);

  /// Evicts down to the configured memory budget (after configure_remote_cache()).
  void trim() EXCLUDES(mutex_);

 private:
  enum class SlotState { kPending, kReady, kFailed };
  struct Slot {
    explicit Slot(ByteRange r) : range(r) {}
    const ByteRange range;
    std::vector<uint8_t> bytes;                         // the fetch's, until state leaves kPending
    std::atomic<SlotState> state{SlotState::kPending};  // changed under mutex_ (waits)
  };
  struct LruItem {
    const std::string* key;  // the key in objects_, whose nodes never move
    int64_t offset;
  };
  struct Held {
    std::shared_ptr<Slot> slot;
    std::list<LruItem>::iterator lru;  // valid when the slot is ready
  };
  using Slots = std::map<int64_t, Held>;  // by offset

  // The slot of `slots` holding byte `offset`, or null.
  static Held* covering(Slots& slots, int64_t offset);
  // Runs the fetch of a pending slot and publishes what it got; returns the fetch's Status.
  Status fill(const std::shared_ptr<const RemoteObject>& object, const std::shared_ptr<Slot>& slot)
      EXCLUDES(mutex_);
  void evict_over_budget() REQUIRES(mutex_);

  core::Mutex mutex_;
  core::CondVar slot_done_;  // a slot left kPending
  std::unordered_map<std::string, Slots> objects_ GUARDED_BY(mutex_);
  std::list<LruItem> lru_ GUARDED_BY(mutex_);  // ready slots, most recently used first
  int64_t ready_bytes_ GUARDED_BY(mutex_) = 0;
};

/// This process's cache.
RangeCache& range_cache();

}  // namespace stoker::io
