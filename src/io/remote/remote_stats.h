// The process-wide counters behind remote_stats(): plain atomics, bumped by the HTTP client
// (requests, retries, failures, bytes) and the range cache (hits, misses, waits).
//
// Thread-safety: every function may be called from any thread. The counters survive fork():
// a child starts from its parent's totals, as it would reading them through remote_stats().
#pragma once

#include <atomic>
#include <cstdint>

namespace stoker::io {

struct RemoteCounters {
  std::atomic<int64_t> requests{0};
  std::atomic<int64_t> retries{0};
  std::atomic<int64_t> failures{0};
  std::atomic<int64_t> bytes_fetched{0};
  std::atomic<int64_t> cache_hits{0};
  std::atomic<int64_t> cache_misses{0};
  std::atomic<int64_t> disk_cache_hits{0};
  std::atomic<int64_t> wait_ns{0};
};

/// The one set of counters of this process.
RemoteCounters& remote_counters();

/// Adds `n` to `counter` (relaxed: counters order nothing).
inline void count(std::atomic<int64_t>& counter, int64_t n = 1) {
  counter.fetch_add(n, std::memory_order_relaxed);
}

}  // namespace stoker::io
