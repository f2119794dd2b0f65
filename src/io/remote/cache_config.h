// The range cache's configuration (configure_remote_cache()): one immutable value per call,
// read without a lock, so a forked child reads it safely whatever its parent's threads held.
//
// Thread-safety: both functions may be called from any thread.
#pragma once

#include <cstdint>
#include <string>

namespace stoker::io {

struct CacheConfig {
  int64_t memory_bytes = int64_t{256} << 20;
  std::string disk_folder;  // empty: no disk cache
  int64_t disk_bytes = 0;
  const CacheConfig* previous = nullptr;  // the one it replaced, kept (a reader may hold it)
};

/// The configuration in force. The reference stays valid until exit.
const CacheConfig& cache_config();

/// Replaces the configuration.
void set_cache_config(int64_t memory_bytes, std::string disk_folder, int64_t disk_bytes);

}  // namespace stoker::io
