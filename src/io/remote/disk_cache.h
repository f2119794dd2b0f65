// The optional disk level of the range cache: fetched ranges kept as files in one folder,
// named by a hash of (URL, ETag, offset, length), so a later process (the next epoch's
// workers) reads them instead of the network. Files appear complete or not at all (written
// to a temporary name, then renamed); the folder is kept under its byte budget by deleting the
// least recently used files (a hit refreshes a file's modification time).
//
// Thread-safety: any number of threads and processes may use one folder at once.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "io/remote/cache_config.h"

namespace stoker::io {

/// Fills `out` from the file of `key` when there is one of exactly out.size() bytes.
bool disk_cache_read(const CacheConfig& config, const std::string& key, std::span<uint8_t> out);

/// Keeps `bytes` as the file of `key`, then trims the folder to config.disk_bytes. Failures
/// (a full disk) are ignored: the cache is an optimisation.
void disk_cache_write(const CacheConfig& config, const std::string& key,
                      std::span<const uint8_t> bytes);

}  // namespace stoker::io
