// Mp4Writer: encodes packed RGB pictures into an MP4 file with one of stoker's encoders
// (video_encoder.h), at timestamps the caller gives. The ETL's transcoder writes through it.
//
// The stream has no B-frames: every frame can be shown as soon as its packet is decoded, and
// presentation and decode timestamps are equal, so the MP4 needs no edit list or composition
// offsets and every demuxer reads the same times. Pictures are converted from full-range RGB to
// yuv420p (BT.601 matrix, limited range, tagged so in the stream). The index (moov) is written
// at the front of the file, so one read finds every packet.
//
// Ownership: the writer owns its encoder, muxer and output file; the file is complete only
// after finish() returns OK. FFmpeg stays behind the pImpl.
// Thread-safety: none; one thread writes one file. Writers of different files may run at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "stoker/status.h"
#include "stoker/video_encoder.h"

namespace stoker::media {

/// When each frame shows: pts and durations in a time base of num / den seconds.
struct Mp4Timing {
  int time_base_num = 1;
  int time_base_den = 1;
  std::vector<int64_t> pts;       // per frame, strictly increasing
  std::vector<int64_t> duration;  // per frame, positive
  /// The average frame rate, for the encoder's rate control; 0 when unknown.
  double fps = 0;
};

class Mp4Writer {
 public:
  /// Creates `path` (replacing any file there) for height x width pictures. The MP4 track
  /// timescale is a multiple of the time base, so every pts is stored exactly. Errors:
  /// kInvalidArgument (check_encoder_options), kUnsupported (FFmpeg lacks the encoder),
  /// kIoError (the file cannot be created).
  static Result<std::unique_ptr<Mp4Writer>> create(const std::string& path, int height, int width,
                                                   const EncoderOptions& options, Mp4Timing timing);
  ~Mp4Writer();
  Mp4Writer(const Mp4Writer&) = delete;
  Mp4Writer& operator=(const Mp4Writer&) = delete;

  /// Encodes one packed RGB24 picture (height x width x 3 bytes) as frame `index` of the
  /// timing. The rows are read with SIMD loads that may pass the end of the last row by up to
  /// width * 3 + 64 bytes: the buffer must be readable that far.
  Status write_rgb(const uint8_t* rgb, int64_t index);
  /// Flushes the encoder and completes the file. Errors when fewer packets than frames came
  /// out (kInternal) or the file cannot be written (kIoError).
  Status finish();

 private:
  class Impl;
  explicit Mp4Writer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace stoker::media
