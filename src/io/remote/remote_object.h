// A remote object as opened: where it is (ObjectTarget), its size, ETag and modification time
// as of the HEAD, and the key its bytes are cached under. Shared (std::shared_ptr) by its
// source and the background fetches still running for it.
//
// Thread-safety: immutable once made; fetch_range() may be called from any thread.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "io/remote/object_request.h"
#include "stoker/byte_source.h"
#include "stoker/status.h"

namespace stoker::io {

struct RemoteObject {
  ObjectTarget target;
  int64_t size = 0;
  std::string etag;  // "" when the server sent none
  int64_t mtime_ns = 0;
  std::string cache_key;  // the URL and the version: equal keys, equal bytes
};

/// Fills `out` (out.size() == range.length) with the bytes of `range`: from the disk cache
/// when it has them, else by a GET with If-Match (retried per the object's options), whose
/// bytes then go to the disk cache. The reply must show the version opened (its ETag, else
/// Last-Modified, and its size), whether or not the server honoured If-Match: another is
/// kCorruptData, "changed since it was opened", and nothing of it is kept.
Status fetch_range(const RemoteObject& object, ByteRange range, std::span<uint8_t> out);

}  // namespace stoker::io
