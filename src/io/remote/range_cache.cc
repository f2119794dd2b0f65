#include "io/remote/range_cache.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/env.h"
#include "io/remote/cache_config.h"
#include "io/remote/io_pool.h"
#include "io/remote/per_fork_generation.h"
#include "io/remote/remote_stats.h"

namespace stoker::io {
namespace {

using core::Clock;
using core::nanoseconds_since;

PerForkGeneration<RangeCache> caches;

}  // namespace

RangeCache& range_cache() { return caches.get(); }

RangeCache::Held* RangeCache::covering(Slots& slots, int64_t offset) {
  auto after = slots.upper_bound(offset);
  if (after == slots.begin()) return nullptr;
  Held& held = std::prev(after)->second;
  return offset < held.slot->range.end() ? &held : nullptr;
}

Result<size_t> RangeCache::read(const std::shared_ptr<const RemoteObject>& object, int64_t offset,
                                std::span<uint8_t> out) {
  if (offset >= object->size || out.empty()) return size_t{0};
  const int64_t end = std::min(object->size, offset + static_cast<int64_t>(out.size()));
  const int64_t min_request = object->target.options.min_request_bytes;
  RemoteCounters& counters = remote_counters();
  bool missed = false;
  int64_t waited_ns = 0;
  Status failure;
  int64_t position = offset;
  while (position < end) {
    std::shared_ptr<Slot> slot;
    bool fetch = false;
    {
      core::MutexLock lock(&mutex_);
      Slots& slots = objects_[object->cache_key];
      if (Held* held = covering(slots, position)) {
        slot = held->slot;
        if (slot->state.load() == SlotState::kReady) {
          lru_.splice(lru_.begin(), lru_, held->lru);
        } else {
          missed = true;
          const Clock::time_point start = core::now();
          while (slot->state.load() == SlotState::kPending) slot_done_.wait(&mutex_);
          waited_ns += nanoseconds_since(start);
          if (slot->state.load() == SlotState::kFailed) continue;  // gone: fetch it ourselves
        }
      } else {
        // Read ahead, but only up to the next slot: slots never overlap.
        int64_t stop = std::min(object->size, position + std::max(end - position, min_request));
        const auto next = slots.upper_bound(position);
        if (next != slots.end()) stop = std::min(stop, next->first);
        slot = std::make_shared<Slot>(ByteRange{position, stop - position});
        slots.emplace(position, Held{slot, {}});
        fetch = true;
        missed = true;
      }
    }
    if (fetch) {
      const Clock::time_point start = core::now();
      failure = fill(object, slot);  // with its own retries
      waited_ns += nanoseconds_since(start);
      if (!failure.ok()) break;
    }
    const int64_t n = std::min(end, slot->range.end()) - position;
    std::memcpy(out.data() + (position - offset),
                slot->bytes.data() + (position - slot->range.offset), static_cast<size_t>(n));
    position += n;
  }
  count(missed ? counters.cache_misses : counters.cache_hits);
  count(counters.wait_ns, waited_ns);
  if (!failure.ok()) return failure;
  return static_cast<size_t>(end - offset);
}

Status RangeCache::fill(const std::shared_ptr<const RemoteObject>& object,
                        const std::shared_ptr<Slot>& slot) {
  slot->bytes.resize(static_cast<size_t>(slot->range.length));
  const Status status = fetch_range(*object, slot->range, slot->bytes);
  core::MutexLock lock(&mutex_);
  Slots& slots = objects_[object->cache_key];
  const auto found = slots.find(slot->range.offset);
  const bool listed = found != slots.end() && found->second.slot == slot;
  if (status.ok()) {
    slot->state.store(SlotState::kReady);
    if (listed) {
      lru_.push_front(LruItem{&objects_.find(object->cache_key)->first, slot->range.offset});
      found->second.lru = lru_.begin();
      ready_bytes_ += slot->range.length;
      evict_over_budget();
    }
  } else {
    slot->bytes = {};
    slot->state.store(SlotState::kFailed);
    if (listed) slots.erase(found);
  }
  slot_done_.signal_all();
  return status;
}

void RangeCache::evict_over_budget() {
  const int64_t budget = cache_config().memory_bytes;
  while (ready_bytes_ > budget && !lru_.empty()) {
    const LruItem item = lru_.back();
    lru_.pop_back();
    Slots& slots = objects_.find(*item.key)->second;
    const auto found = slots.find(item.offset);
    ready_bytes_ -= found->second.slot->range.length;
    slots.erase(found);  // a reader still copying holds the slot
  }
}

void RangeCache::trim() {
  core::MutexLock lock(&mutex_);
  evict_over_budget();
}

void RangeCache::prefetch(const std::shared_ptr<const RemoteObject>& object,
                          std::span<const ByteRange> ranges) {
  std::vector<ByteRange> wanted;
  for (const ByteRange& range : ranges) {
    const int64_t begin = std::max<int64_t>(0, range.offset);
    const int64_t end = std::min(object->size, range.end());
    if (end > begin) wanted.push_back({begin, end - begin});
  }
  std::sort(wanted.begin(), wanted.end(),
            [](const ByteRange& a, const ByteRange& b) { return a.offset < b.offset; });
  // Ranges closer than the gap become one request: reading the gap costs less than a request.
  std::vector<ByteRange> merged;
  for (const ByteRange& range : wanted) {
    if (!merged.empty() &&
        range.offset - merged.back().end() < object->target.options.read_through_gap_bytes) {
      merged.back().length = std::max(merged.back().end(), range.end()) - merged.back().offset;
    } else {
      merged.push_back(range);
    }
  }
  std::vector<std::shared_ptr<Slot>> fetches;
  {
    core::MutexLock lock(&mutex_);
    Slots& slots = objects_[object->cache_key];
    for (const ByteRange& range : merged) {
      int64_t position = range.offset;
      while (position < range.end()) {
        if (const Held* held = covering(slots, position)) {  // cached or on its way
          position = held->slot->range.end();
          continue;
        }
        int64_t stop = std::min(range.end(), position + kMaxRequestBytes);
        const auto next = slots.upper_bound(position);
        if (next != slots.end()) stop = std::min(stop, next->first);
        auto slot = std::make_shared<Slot>(ByteRange{position, stop - position});
        slots.emplace(position, Held{slot, {}});
        fetches.push_back(std::move(slot));
        position = stop;
      }
    }
  }
  for (const std::shared_ptr<Slot>& slot : fetches) {
    const bool queued = io_pool().submit([this, object, slot] { (void)fill(object, slot); });
    if (queued) continue;
    // No room: drop the slot, and whichever read needs it fetches it.
    core::MutexLock lock(&mutex_);
    Slots& slots = objects_[object->cache_key];
    const auto found = slots.find(slot->range.offset);
    if (found != slots.end() && found->second.slot == slot) slots.erase(found);
    slot->state.store(SlotState::kFailed);
    slot_done_.signal_all();
  }
}

}  // namespace stoker::io
