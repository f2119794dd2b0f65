// The decoder of a video stream, built from what a frame table records (codec parameters and
// extradata), with no container needed. Private to src/media.
#pragma once

#include "media/detail/ffmpeg.h"
#include "stoker/frame_table.h"

namespace stoker::media {

/// An opened decoder for `stream` with `threads` threads (frame and slice threading above 1).
/// AV1 goes to libdav1d (FFmpeg's native AV1 decoder needs a hardware accelerator). Errors:
/// kUnsupported when FFmpeg has no decoder for the codec; FFmpeg's when it refuses to open.
Result<detail::UniqueCodecContext> build_decoder(const VideoStreamInfo& stream, int threads);

}  // namespace stoker::media
