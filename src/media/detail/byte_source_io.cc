#include "media/detail/byte_source_io.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <span>

namespace stoker::media::detail {

Result<std::unique_ptr<ByteSourceIo>> ByteSourceIo::create(
    std::shared_ptr<const ByteSource> source) {
  std::unique_ptr<ByteSourceIo> io(new ByteSourceIo(std::move(source)));
  auto* buffer = static_cast<uint8_t*>(av_malloc(kBufferBytes));
  if (buffer == nullptr) return Status(StatusCode::kInternal, "cannot allocate an I/O buffer");
  io->context_ = avio_alloc_context(buffer, kBufferBytes, /*write_flag=*/0, io.get(),
                                    &ByteSourceIo::read, nullptr, &ByteSourceIo::seek);
  if (io->context_ == nullptr) {
    av_free(buffer);
    return Status(StatusCode::kInternal, "cannot allocate an I/O context");
  }
  return io;
}

ByteSourceIo::~ByteSourceIo() {
  if (context_ != nullptr) {
    av_freep(&context_->buffer);  // FFmpeg may have replaced the buffer it was given
    avio_context_free(&context_);
  }
}

int ByteSourceIo::read(void* opaque, uint8_t* buffer, int size) {
  auto* io = static_cast<ByteSourceIo*>(opaque);
  size_t wanted = static_cast<size_t>(size);
  if (!io->zero_ranges_.empty()) {
    // The first range ending after the position: answer zeros inside it, stop reading at it.
    const auto& ranges = io->zero_ranges_;
    auto it =
        std::upper_bound(ranges.begin(), ranges.end(), io->position_,
                         [](int64_t position, const ByteRange& r) { return position < r.end(); });
    if (it != ranges.end() && it->offset <= io->position_) {
      const int64_t left = std::min<int64_t>(io->source_->size(), it->end()) - io->position_;
      const size_t zeros = static_cast<size_t>(std::min<int64_t>(left, size));
      if (zeros == 0) return AVERROR_EOF;
      std::memset(buffer, 0, zeros);
      io->position_ += static_cast<int64_t>(zeros);
      return static_cast<int>(zeros);
    }
    if (it != ranges.end()) {
      wanted = static_cast<size_t>(std::min<int64_t>(size, it->offset - io->position_));
    }
  }
  Result<size_t> got = io->source_->read_at(io->position_, std::span(buffer, wanted));
  if (!got.ok()) {
    io->read_error_ = got.status();
    return AVERROR(EIO);
  }
  if (*got == 0) return AVERROR_EOF;
  io->position_ += static_cast<int64_t>(*got);
  io->bytes_read_ += static_cast<int64_t>(*got);
  return static_cast<int>(*got);
}

int64_t ByteSourceIo::seek(void* opaque, int64_t offset, int whence) {
  auto* io = static_cast<ByteSourceIo*>(opaque);
  const int64_t size = io->source_->size();
  int64_t target = 0;
  switch (whence & ~AVSEEK_FORCE) {
    case AVSEEK_SIZE:
      return size;
    case SEEK_SET:
      target = offset;
      break;
    case SEEK_CUR:
      target = io->position_ + offset;
      break;
    case SEEK_END:
      target = size + offset;
      break;
    default:
      return AVERROR(EINVAL);
  }
  if (target < 0) return AVERROR(EINVAL);
  io->position_ = target;
  return target;
}

}  // namespace stoker::media::detail
