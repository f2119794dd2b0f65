// transcode_frames: re-encodes a run of frames of one video into a new MP4 at training size,
// keeping every frame's timing. The unit of work of `stoker etl` (one episode of one camera).
//
// The frames are decoded frame-exactly by VideoReader (in chunks, resized while converting to
// RGB) and encoded with one of stoker's encoders (video_encoder.h): yuv420p, no B-frames, a
// keyframe every `gop` frames, presentation and decode timestamps equal.
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
#include "stoker/video_encoder.h"
#include "stoker/video_reader.h"

namespace stoker {

struct TranscodeOptions {
  /// Output size in pixels. REQUIRED: see check_encoder_options (positive, even, ...).
  int height = 0;
  int width = 0;
  /// The encoder and its settings (codec, gop, crf, preset, fast_decode, threads).
  EncoderOptions encoder;
  /// Resampling from the source size. Default: bilinear, as VideoReader's default.
  Interpolation interpolation = Interpolation::kBilinear;
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
