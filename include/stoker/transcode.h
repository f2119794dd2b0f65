// transcode_frames: re-encodes a run of frames of one video into a new MP4 at training size,
// keeping every frame's timing. The unit of work of `stoker etl` (one episode of one camera).
//
// The frames are decoded frame-exactly by VideoReader (in chunks, resized while converting to
// RGB), converted to yuv420p (BT.601, limited range, tagged so in the stream) and encoded with
// libx264 or libsvtav1 without B-frames: every frame can be shown as soon as its packet is
// decoded, and presentation and decode timestamps are equal, so the MP4 needs no edit list or
// composition offsets and every demuxer reads the same times.
//
// Output timing: frame i of the output has pts = pts(first_frame + i) - pts(first_frame) in the
// source stream's time base (the MP4 track timescale is a multiple of it, so every pts is
// represented exactly); its duration is the gap to the next frame, and the last frame keeps its
// source duration.
//
// Atomicity: the file is written to `<target>.partial`, reopened and checked (frame count and
// every pts), flushed to disk and only then renamed to `target`. A file at `target` is
// therefore always complete; a failure leaves no file at `target` and removes the partial one.
//
// Thread-safety: calls on different targets may run concurrently, each on its own thread; the
// source is read through the calling thread's pooled decoders (see media_cache.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "stoker/status.h"
#include "stoker/video_reader.h"

namespace stoker {

enum class VideoCodec {
  kH264,  // libx264
  kAV1,   // libsvtav1
};

/// The FFmpeg encoder's name for a codec: "libx264" or "libsvtav1".
const char* encoder_name(VideoCodec codec);

struct TranscodeOptions {
  /// Output size in pixels. REQUIRED: both positive and even (4:2:0 chroma); at least 64 for
  /// kAV1 (SVT-AV1's minimum).
  int height = 0;
  int width = 0;
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
  /// Resampling from the source size. Default: bilinear, as VideoReader's default.
  Interpolation interpolation = Interpolation::kBilinear;
  /// Encoder threads (the decoder's are the source VideoReader's). Default 1: parallelism comes
  /// from transcoding many episodes at once.
  int threads = 1;
  /// Frames decoded per VideoReader call. Bounds the memory of a call to
  /// chunk_frames * height * width * 3 bytes of RGB. Default: 32.
  int chunk_frames = 32;
};

struct TranscodeResult {
  int64_t frames = 0;
  /// Size of the written file.
  int64_t bytes = 0;
  /// Presentation time of every output frame in seconds, from 0, as the written file's frame
  /// table reads it.
  std::vector<double> pts_seconds;
  /// From the first frame's pts to the end of the last frame (FrameTable::duration).
  double duration = 0;
  /// Wall time of the call.
  double seconds = 0;
};

/// Re-encodes frames [first_frame, first_frame + num_frames) of `source` (presentation order)
/// into a new MP4 file at `target`, at the size and with the encoder of `options` (see the file
/// comment for timing and atomicity). Any file at `target` is replaced; the folder of `target`
/// must exist.
/// Errors: kInvalidArgument for bad options or a frame range outside the video; kUnsupported when
/// FFmpeg lacks the encoder; kCorruptData when a source frame cannot be decoded (naming the
/// file and frame); kIoError when the target cannot be written; kInternal when the written file
/// does not read back with the expected frames and times. Every message names the source file
/// and the target.
Result<TranscodeResult> transcode_frames(const VideoReader& source, int64_t first_frame,
                                         int64_t num_frames, const std::string& target,
                                         const TranscodeOptions& options);

}  // namespace stoker
