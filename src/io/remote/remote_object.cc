#include "io/remote/remote_object.h"

#include "io/remote/cache_config.h"
#include "io/remote/disk_cache.h"
#include "io/remote/remote_stats.h"

namespace stoker::io {

Status fetch_range(const RemoteObject& object, ByteRange range, std::span<uint8_t> out) {
  const CacheConfig& config = cache_config();
  const std::string disk_key =
      object.cache_key + "\n" + std::to_string(range.offset) + "\n" + std::to_string(range.length);
  if (disk_cache_read(config, disk_key, out)) {
    count(remote_counters().disk_cache_hits);
    return Status();
  }
  HttpRequest request{.method = HttpMethod::kGet,
                      .range = range,
                      .if_match = object.etag,
                      .expected_size = object.size,
                      .expected_mtime_ns = object.mtime_ns};
  Result<HttpResponse> response = send_with_retries(object.target, std::move(request), out);
  if (!response.ok()) return response.status();
  disk_cache_write(config, disk_key, out);
  return Status();
}

}  // namespace stoker::io
