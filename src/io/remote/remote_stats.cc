#include "io/remote/remote_stats.h"

#include "stoker/remote_source.h"

namespace stoker {
namespace io {

RemoteCounters& remote_counters() {
  static RemoteCounters* const counters = new RemoteCounters();  // never destroyed: I/O threads
  return *counters;                                              // may count during exit
}

}  // namespace io

RemoteStats remote_stats() {
  const io::RemoteCounters& c = io::remote_counters();
  auto get = [](const std::atomic<int64_t>& v) { return v.load(std::memory_order_relaxed); };
  return RemoteStats{
      .requests = get(c.requests),
      .retries = get(c.retries),
      .failures = get(c.failures),
      .bytes_fetched = get(c.bytes_fetched),
      .cache_hits = get(c.cache_hits),
      .cache_misses = get(c.cache_misses),
      .disk_cache_hits = get(c.disk_cache_hits),
      .wait_s = static_cast<double>(get(c.wait_ns)) * 1e-9,
  };
}

}  // namespace stoker
