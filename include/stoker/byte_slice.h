// Byte slices: a window [offset, offset + length) of a file or object, read as a source of its
// own. What a video stored inside a bigger file is (a Lance blob: bytes in a data file or a
// blob sidecar), so that the episode index, the video reader and the remote range cache treat
// it as any other video: frame tables, windows, GOP sharing and If-Match checks unchanged.
//
// A slice is named by one string, `<file path or URL>#bytes=<offset>+<length>` (both decimal),
// which is what the episode index stores as the video's path and open_source()
// (stoker/remote_source.h) opens: the whole file once (shared per URL for remote objects), the
// slice over it.
//
// Ownership: slice_source() shares the whole source with whoever else holds it.
// Thread-safety: everything here may be called from any thread; a slice keeps no read position.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "stoker/byte_source.h"
#include "stoker/status.h"

namespace stoker {

/// A window of a file or object: `whole` names it as open_source() takes it.
struct ByteSlice {
  std::string whole;
  ByteRange range;
  bool operator==(const ByteSlice&) const = default;
};

/// The name of `slice`: `<whole>#bytes=<offset>+<length>`.
std::string byte_slice_name(const ByteSlice& slice);

/// The slice `name` names, or nothing when it does not end in `#bytes=<offset>+<length>` with
/// a non-negative offset and a positive length (a plain path or URL).
std::optional<ByteSlice> parse_byte_slice(std::string_view name);

/// `range` of `whole`, read as a source of range.length bytes named byte_slice_name(). Its
/// version (mtime, version tag, check_unchanged) is the whole's: a file rewritten in place or an
/// object replaced fails its reads as the whole's would; prefetch() and read_at() are shifted by
/// range.offset and never reach outside the range. Errors: kInvalidArgument for an empty or
/// negative range; kCorruptData when the range ends past the whole's size (the file is shorter
/// than the slice that names it).
Result<std::unique_ptr<ByteSource>> slice_source(std::shared_ptr<const ByteSource> whole,
                                                 ByteRange range);

}  // namespace stoker
