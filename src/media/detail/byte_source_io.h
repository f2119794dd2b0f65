// ByteSourceIo: an FFmpeg AVIOContext that reads from a ByteSource, so that demuxers read
// stoker's byte sources (a local file, bytes in memory, ...) instead of opening paths through
// FFmpeg's own file protocol. Private to src/media.
//
// Ownership: shares the source for its lifetime; owns the AVIOContext and its buffer. The
// AVFormatContext that reads through context() must be closed before this is destroyed.
// Thread-safety: none; used by the one thread that uses its container.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "media/detail/ffmpeg.h"
#include "stoker/byte_source.h"

namespace stoker::media::detail {

class ByteSourceIo {
 public:
  /// The buffer FFmpeg reads through: the size of the file protocol's own.
  static constexpr int kBufferBytes = 32 * 1024;

  static Result<std::unique_ptr<ByteSourceIo>> create(std::shared_ptr<const ByteSource> source);
  ~ByteSourceIo();
  ByteSourceIo(const ByteSourceIo&) = delete;
  ByteSourceIo& operator=(const ByteSourceIo&) = delete;

  AVIOContext* context() const { return context_; }
  const std::shared_ptr<const ByteSource>& source() const { return source_; }

  /// From now on, reads inside `ranges` (sorted, disjoint) are answered with zeros without
  /// reading the source: the packet bytes a header-only scan does not need.
  void answer_with_zeros(std::vector<ByteRange> ranges) { zero_ranges_ = std::move(ranges); }

  /// Why the last failed read failed (FFmpeg only sees AVERROR(EIO)), and forgets it; OK when
  /// no read failed since the last call.
  Status take_read_error() { return std::exchange(read_error_, Status()); }

  /// The bytes read from the source since the last call (zeros answered without reading are
  /// not counted), and starts counting again.
  int64_t take_bytes_read() { return std::exchange(bytes_read_, 0); }

 private:
  explicit ByteSourceIo(std::shared_ptr<const ByteSource> source) : source_(std::move(source)) {}
  static int read(void* opaque, uint8_t* buffer, int size);
  static int64_t seek(void* opaque, int64_t offset, int whence);

  const std::shared_ptr<const ByteSource> source_;
  AVIOContext* context_ = nullptr;
  int64_t position_ = 0;
  Status read_error_;
  int64_t bytes_read_ = 0;
  std::vector<ByteRange> zero_ranges_;
};

}  // namespace stoker::media::detail
