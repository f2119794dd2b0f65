#include "io/remote/cache_config.h"

#include <atomic>

namespace stoker::io {
namespace {

const CacheConfig kDefault;
std::atomic<const CacheConfig*> current{&kDefault};

}  // namespace

const CacheConfig& cache_config() { return *current.load(std::memory_order_acquire); }

void set_cache_config(int64_t memory_bytes, std::string disk_folder, int64_t disk_bytes) {
  auto* fresh = new CacheConfig{.memory_bytes = memory_bytes,
                                .disk_folder = std::move(disk_folder),
                                .disk_bytes = disk_bytes,
                                .previous = current.load(std::memory_order_acquire)};
  while (!current.compare_exchange_weak(fresh->previous, fresh, std::memory_order_acq_rel)) {
  }
}

}  // namespace stoker::io
