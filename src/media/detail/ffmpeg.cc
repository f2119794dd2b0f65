#include "media/detail/ffmpeg.h"

#include <cerrno>
#include <mutex>

namespace stoker::media::detail {

std::string av_error_text(int error) {
  char text[AV_ERROR_MAX_STRING_SIZE] = {};
  av_strerror(error, text, sizeof(text));
  return text;
}

Status check_av(int error, const std::string& what) {
  if (error >= 0) return Status();
  StatusCode code = StatusCode::kCorruptData;
  if (error == AVERROR(ENOENT)) {
    code = StatusCode::kNotFound;
  } else if (error == AVERROR(EIO) || error == AVERROR(EACCES) || error == AVERROR(EPERM)) {
    code = StatusCode::kIoError;
  } else if (error == AVERROR_DECODER_NOT_FOUND || error == AVERROR_DEMUXER_NOT_FOUND ||
             error == AVERROR_PATCHWELCOME) {
    code = StatusCode::kUnsupported;
  } else if (error == AVERROR(ENOMEM)) {
    code = StatusCode::kInternal;
  }
  return Status(code, what + ": " + av_error_text(error));
}

void quiet_ffmpeg_logging() {
  static std::once_flag once;
  std::call_once(once, [] { av_log_set_level(AV_LOG_QUIET); });
}

}  // namespace stoker::media::detail
