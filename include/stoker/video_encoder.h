// Video encoders stoker writes with, and their settings: what `stoker etl` materializes
// datasets with (see transcode.h). The defaults here are the ETL's defaults, in one place.
//
// Thread-safety: plain values.
#pragma once

#include <string>

#include "stoker/status.h"

namespace stoker {

enum class VideoCodec {
  kH264,  // libx264
  kAV1,   // libsvtav1
};

/// The FFmpeg encoder's name for a codec: "libx264" or "libsvtav1".
const char* encoder_name(VideoCodec codec);

struct EncoderOptions {
  /// Default: H.264 (libx264), whose decoder is the cheapest per pixel.
  VideoCodec codec = VideoCodec::kH264;
  /// Frames from one keyframe to the next (a keyframe exactly every `gop` frames: no
  /// scene-cut keyframes). A decoder reaching a random frame decodes at most gop - 1 others.
  /// Default: 10.
  int gop = 10;
  /// Constant rate factor (lower: better quality, bigger files). Default -1: 23 for H.264
  /// (x264's own default), 30 for AV1 (LeRobot's).
  int crf = -1;
  /// Encoder speed preset. Default "": "medium" for libx264, "8" for libsvtav1 (0-13).
  std::string preset;
  /// Encode for cheap decoding, the point of materializing for training: x264's
  /// tune=fastdecode (CAVLC instead of CABAC, no deblocking filter, no weighted prediction:
  /// ~45% less decode time at 224x224 for ~8% more bytes), SVT-AV1's fast-decode=1.
  /// Default: true.
  bool fast_decode = true;
  /// Encoder threads. Default 1: parallelism comes from encoding many files at once.
  int threads = 1;
};

/// `options` with its codec's defaults in place of the "default" values: crf -1 and preset "".
EncoderOptions with_codec_defaults(EncoderOptions options);

/// OK when `options` can encode height x width pictures: both positive, even (4:2:0 chroma)
/// and at most 16384, at least 64 for kAV1 (SVT-AV1's minimum); gop and threads at least 1;
/// crf -1 or in the codec's range. Errors (kInvalidArgument) say which and why.
Status check_encoder_options(const EncoderOptions& options, int height, int width);

}  // namespace stoker
