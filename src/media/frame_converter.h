// FrameConverter: colour conversion and resize of one decoded frame, written into the caller's
// output slot. swscale writes the slot directly when its fast path produces the asked layout;
// otherwise it writes a per-converter staging frame that is then (de)interleaved into the slot
// (see convert()).
//
// Ownership: owns one cached swscale context, rebuilt only when the source or target changes,
// and the staging frame.
// Thread-safety: none; each thread uses its own (kept in its ThreadMediaCache).
#pragma once

#include <cstdint>
#include <vector>

#include "media/detail/ffmpeg.h"
#include "stoker/video_reader.h"

namespace stoker::media {

class FrameConverter {
 public:
  /// Converts `frame`, or its region `crop` when that is not empty, to 8-bit RGB of size
  /// out_height x out_width in `options.layout`, writing exactly out_height * out_width * 3 bytes
  /// at `out`. The crop's origin is rounded down to the chroma grid (so that the chroma planes
  /// can be offset without resampling), keeping its size; swscale then reads the region in
  /// place, without a copy. REQUIRES: the crop lies inside the frame (checked: an error if not).
  /// For options.pixel_format == kGray16 it writes out_height * out_width native-endian uint16
  /// instead: the frame's first component as stored (see PixelFormat), the region taken
  /// exactly (no rounding: one plane), resized by nearest neighbour (see convert_gray16()).
  Status convert(const AVFrame& frame, const OutputOptions& options, int out_height, int out_width,
                 uint8_t* out, const CropRect& crop = {});

  /// The same for packed 8-bit RGB pixels in memory (a decoded image: `height` rows of
  /// `stride` bytes at `pixels`, borrowed for the call), so that images are resized by the same
  /// code as video frames.
  Status convert_rgb(const uint8_t* pixels, int width, int height, int stride,
                     const OutputOptions& options, int out_height, int out_width, uint8_t* out,
                     const CropRect& crop = {});

 private:
  // Output pixel (x, y) is source pixel (crop.x + x * w / out_width, ...) in the centre-aligned
  // sense: the source pixel whose span holds the output pixel's centre, floor((2x + 1) * w /
  // (2 * out_width)). Samples are read directly when they are native-endian 8- or 16-bit words,
  // else row by row through av_read_image_line2 (big-endian, packed or shifted components).
  Status convert_gray16(const AVFrame& frame, int out_height, int out_width, uint16_t* out,
                        const CropRect& crop);

  struct Key {
    int src_width = 0, src_height = 0, src_format = -1, color_space = 0, color_range = 0;
    int dst_width = 0, dst_height = 0, dst_format = -1, flags = 0;
    bool operator==(const Key&) const = default;
  };
  Key key_;
  detail::UniqueSwsContext context_;
  std::vector<uint8_t> staging_;
  // convert_gray16(): the source column of each output column, and one source row as words.
  std::vector<int> columns_;
  std::vector<uint16_t> row_;
  // convert_rgb()'s frame: a header pointing at the caller's pixels, allocated on first use.
  detail::UniqueFrame rgb_frame_;
};

}  // namespace stoker::media
