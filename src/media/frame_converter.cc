#include "media/frame_converter.h"

#include <bit>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

// Not among media/detail/ffmpeg.h's headers; C linkage like them.
extern "C" {
#include <libavutil/imgutils.h>
}

namespace stoker::media {
namespace {

std::string pixel_format_name(int format) {
  const char* name = av_get_pix_fmt_name(static_cast<AVPixelFormat>(format));
  return name != nullptr ? name : "unknown";
}

// The planes swscale reads for a region of a frame: the frame's own planes, offset in place.
struct SourceRegion {
  const uint8_t* data[4] = {nullptr, nullptr, nullptr, nullptr};
  int width = 0;
  int height = 0;
};

// `frame`, or its region `crop` with the origin rounded down to the chroma grid (a subsampled
// chroma plane cannot start between two of its samples without resampling), keeping the size.
// OK when `crop` lies inside `frame`; else why not, naming both.
Status check_crop_inside(const CropRect& crop, const AVFrame& frame) {
  if (crop.x >= 0 && crop.y >= 0 && static_cast<int64_t>(crop.x) + crop.width <= frame.width &&
      static_cast<int64_t>(crop.y) + crop.height <= frame.height) {
    return Status();
  }
  return Status(StatusCode::kInvalidArgument,
                "crop " + std::to_string(crop.width) + "x" + std::to_string(crop.height) + " at (" +
                    std::to_string(crop.x) + ", " + std::to_string(crop.y) +
                    ") leaves the decoded " + std::to_string(frame.width) + "x" +
                    std::to_string(frame.height) + " frame");
}

Result<SourceRegion> source_region(const AVFrame& frame, const CropRect& crop) {
  SourceRegion region{.data = {frame.data[0], frame.data[1], frame.data[2], frame.data[3]},
                      .width = frame.width,
                      .height = frame.height};
  if (crop.empty()) return region;
  STOKER_RETURN_IF_ERROR(check_crop_inside(crop, frame));
  const AVPixFmtDescriptor* desc = av_pix_fmt_desc_get(static_cast<AVPixelFormat>(frame.format));
  // Bit-packed pixels cannot be addressed by a byte offset; hardware frames are not in memory.
  if (desc == nullptr || (desc->flags & (AV_PIX_FMT_FLAG_BITSTREAM | AV_PIX_FMT_FLAG_HWACCEL))) {
    return Status(StatusCode::kUnsupported,
                  "cannot crop frames of pixel format " + pixel_format_name(frame.format));
  }
  const int x = (crop.x >> desc->log2_chroma_w) << desc->log2_chroma_w;
  const int y = (crop.y >> desc->log2_chroma_h) << desc->log2_chroma_h;
  int max_step[4];
  av_image_fill_max_pixsteps(max_step, nullptr, desc);
  const bool rgb = (desc->flags & AV_PIX_FMT_FLAG_RGB) != 0;
  const bool palette = (desc->flags & AV_PIX_FMT_FLAG_PAL) != 0;  // plane 1 is the palette
  for (int plane = 0; plane < 4; ++plane) {
    if (frame.data[plane] == nullptr || (palette && plane > 0)) continue;
    const bool chroma = (plane == 1 || plane == 2) && !rgb;
    const int column = chroma ? x >> desc->log2_chroma_w : x;
    const int row = chroma ? y >> desc->log2_chroma_h : y;
    region.data[plane] = frame.data[plane] + static_cast<ptrdiff_t>(row) * frame.linesize[plane] +
                         static_cast<ptrdiff_t>(column) * max_step[plane];
  }
  region.width = crop.width;
  region.height = crop.height;
  return region;
}

int swscale_colorspace(int color_space) {
  switch (color_space) {
    case AVCOL_SPC_BT709:
      return SWS_CS_ITU709;
    case AVCOL_SPC_FCC:
      return SWS_CS_FCC;
    case AVCOL_SPC_SMPTE240M:
      return SWS_CS_SMPTE240M;
    case AVCOL_SPC_BT2020_NCL:
    case AVCOL_SPC_BT2020_CL:
      return SWS_CS_BT2020;
    default:
      return SWS_CS_DEFAULT;  // BT.601, also what FFmpeg assumes for unspecified streams
  }
}

// Packed RGB to R, G and B planes, and back: 16 pixels at a time with SSSE3 byte shuffles
// where the CPU has them (every x86-64 CPU of the last 15 years), else one pixel at a time.
// Shuffle masks: for channel c and 16-byte chunk j of the packed side, which byte goes where
// (0x80: none).
struct ShuffleMasks {
  alignas(16) uint8_t split[3][3][16];  // [channel][packed chunk][plane byte]
  alignas(16) uint8_t merge[3][3][16];  // [channel][packed chunk][packed byte]
  ShuffleMasks() {
    for (int c = 0; c < 3; ++c) {
      for (int j = 0; j < 3; ++j) {
        for (int k = 0; k < 16; ++k) {
          const int from = 3 * k + c;  // packed byte of pixel k's channel c
          split[c][j][k] = from / 16 == j ? static_cast<uint8_t>(from % 16) : 0x80;
          const int to = 16 * j + k;  // packed byte k of chunk j
          merge[c][j][k] = to % 3 == c ? static_cast<uint8_t>(to / 3) : 0x80;
        }
      }
    }
  }
};
const ShuffleMasks kMasks;

#if defined(__x86_64__)
__attribute__((target("ssse3"))) size_t deinterleave_ssse3(const uint8_t* rgb, size_t pixels,
                                                           uint8_t* planes[3]) {
  size_t i = 0;
  for (; i + 16 <= pixels; i += 16) {
    const __m128i chunk[3] = {_mm_loadu_si128(reinterpret_cast<const __m128i*>(rgb + 3 * i)),
                              _mm_loadu_si128(reinterpret_cast<const __m128i*>(rgb + 3 * i + 16)),
                              _mm_loadu_si128(reinterpret_cast<const __m128i*>(rgb + 3 * i + 32))};
    for (int c = 0; c < 3; ++c) {
      __m128i plane = _mm_setzero_si128();
      for (int j = 0; j < 3; ++j) {
        const __m128i mask = _mm_load_si128(reinterpret_cast<const __m128i*>(kMasks.split[c][j]));
        plane = _mm_or_si128(plane, _mm_shuffle_epi8(chunk[j], mask));
      }
      _mm_storeu_si128(reinterpret_cast<__m128i*>(planes[c] + i), plane);
    }
  }
  return i;
}

__attribute__((target("ssse3"))) size_t interleave_ssse3(const uint8_t* const planes[3],
                                                         size_t pixels, uint8_t* rgb) {
  size_t i = 0;
  for (; i + 16 <= pixels; i += 16) {
    const __m128i plane[3] = {_mm_loadu_si128(reinterpret_cast<const __m128i*>(planes[0] + i)),
                              _mm_loadu_si128(reinterpret_cast<const __m128i*>(planes[1] + i)),
                              _mm_loadu_si128(reinterpret_cast<const __m128i*>(planes[2] + i))};
    for (int j = 0; j < 3; ++j) {
      __m128i chunk = _mm_setzero_si128();
      for (int c = 0; c < 3; ++c) {
        const __m128i mask = _mm_load_si128(reinterpret_cast<const __m128i*>(kMasks.merge[c][j]));
        chunk = _mm_or_si128(chunk, _mm_shuffle_epi8(plane[c], mask));
      }
      _mm_storeu_si128(reinterpret_cast<__m128i*>(rgb + 3 * i + 16 * j), chunk);
    }
  }
  return i;
}

const bool kHaveSsse3 = __builtin_cpu_supports("ssse3");
#endif

void deinterleave(const uint8_t* rgb, size_t pixels, uint8_t* r, uint8_t* g, uint8_t* b) {
  uint8_t* planes[3] = {r, g, b};
  size_t i = 0;
#if defined(__x86_64__)
  if (kHaveSsse3) i = deinterleave_ssse3(rgb, pixels, planes);
#endif
  for (; i < pixels; ++i) {
    r[i] = rgb[3 * i];
    g[i] = rgb[3 * i + 1];
    b[i] = rgb[3 * i + 2];
  }
}

void interleave(const uint8_t* r, const uint8_t* g, const uint8_t* b, size_t pixels, uint8_t* rgb) {
  const uint8_t* planes[3] = {r, g, b};
  size_t i = 0;
#if defined(__x86_64__)
  if (kHaveSsse3) i = interleave_ssse3(planes, pixels, rgb);
#endif
  for (; i < pixels; ++i) {
    rgb[3 * i] = r[i];
    rgb[3 * i + 1] = g[i];
    rgb[3 * i + 2] = b[i];
  }
}

}  // namespace

Status FrameConverter::convert(const AVFrame& frame, const OutputOptions& options, int out_height,
                               int out_width, uint8_t* out, const CropRect& crop) {
  if (options.pixel_format == PixelFormat::kGray16) {
    return convert_gray16(frame, out_height, out_width, reinterpret_cast<uint16_t*>(out), crop);
  }
  STOKER_ASSIGN_OR_RETURN(const SourceRegion source, source_region(frame, crop));
  const bool planar_out = options.layout == Layout::kNCHW;
  const bool resizing = out_width != source.width || out_height != source.height;
  // swscale's fast paths differ by case: without a resize, packed RGB24 (its SIMD YUV->RGB
  // converter; planar GBRP output takes 3x longer at 224x224); with one, planar GBRP (packed
  // output with full-resolution chroma takes 2.5x longer from 640x480). The other layout is
  // then a (de)interleaving copy, so both layouts hold exactly the same values.
  const bool planar = resizing;
  int flags = options.interpolation == Interpolation::kArea ? SWS_AREA : SWS_BILINEAR;
  // FFmpeg's fast unscaled YUV->RGB path (x86) converts rows in blocks of 8 and 16 pixels:
  // for widths not a multiple of 8 it leaves the last pixels of every row unwritten, and for
  // widths not a multiple of 16 it writes past the row's end, past the frame's last row into
  // the caller's next bytes (valgrind: invalid write, width 120). The accurate path writes
  // exactly the frame.
  if (out_width % 16 != 0) flags |= SWS_ACCURATE_RND;
  // From RGB, swscale goes through YUV, and when the output is at most half the source's
  // width it computes the chroma from pixel pairs (rgb24ToUV_half), unless told to take every
  // pixel: for an odd width the last pair reads one pixel past the row, the next row's first
  // pixel or, after the last row, 3 bytes past the source (a decoded image's buffer: heap, or
  // what the thread decoded before). The last column's colour then depended on them: pixel
  // (223, 223) of 479x252 JPEGs resized to 224x224 differed between runs (issue 21).
  const AVPixFmtDescriptor* source_desc =
      av_pix_fmt_desc_get(static_cast<AVPixelFormat>(frame.format));
  if (source_desc != nullptr && (source_desc->flags & AV_PIX_FMT_FLAG_RGB) != 0) {
    flags |= SWS_FULL_CHR_H_INP;
  }
  Key key{.src_width = source.width,
          .src_height = source.height,
          .src_format = frame.format,
          .color_space = frame.colorspace,
          .color_range = frame.color_range,
          .dst_width = out_width,
          .dst_height = out_height,
          .dst_format = planar ? AV_PIX_FMT_GBRP : AV_PIX_FMT_RGB24,
          .flags = flags};
  if (!context_ || !(key == key_)) {
    context_.reset(sws_getContext(key.src_width, key.src_height,
                                  static_cast<AVPixelFormat>(key.src_format), key.dst_width,
                                  key.dst_height, static_cast<AVPixelFormat>(key.dst_format),
                                  key.flags, nullptr, nullptr, nullptr));
    if (!context_) {
      return Status(StatusCode::kUnsupported,
                    "cannot convert pixel format " + pixel_format_name(frame.format) + " to RGB");
    }
    const int full_range = frame.color_range == AVCOL_RANGE_JPEG ? 1 : 0;
    sws_setColorspaceDetails(context_.get(),
                             sws_getCoefficients(swscale_colorspace(frame.colorspace)), full_range,
                             sws_getCoefficients(SWS_CS_DEFAULT), 1, 0, 1 << 16, 1 << 16);
    key_ = key;
  }

  const size_t plane = static_cast<size_t>(out_height) * out_width;
  const bool staged = planar != planar_out;
  if (staged) staging_.resize(3 * plane);
  uint8_t* target = staged ? staging_.data() : out;
  uint8_t* planes[4] = {target, nullptr, nullptr, nullptr};
  int strides[4] = {out_width * 3, 0, 0, 0};
  if (planar) {
    // GBRP stores G, B, R planes; point each at its slot of the caller's R, G, B layout.
    planes[0] = target + plane;
    planes[1] = target + 2 * plane;
    planes[2] = target;
    strides[0] = strides[1] = strides[2] = out_width;
  }
  const int rows =
      sws_scale(context_.get(), source.data, frame.linesize, 0, source.height, planes, strides);
  if (rows != out_height) {
    return Status(StatusCode::kInternal, "colour conversion wrote " + std::to_string(rows) +
                                             " rows instead of " + std::to_string(out_height));
  }
  if (staged) {
    if (planar_out) {
      deinterleave(staging_.data(), plane, out, out + plane, out + 2 * plane);
    } else {
      interleave(staging_.data(), staging_.data() + plane, staging_.data() + 2 * plane, plane, out);
    }
  }
  return Status();
}

Status FrameConverter::convert_gray16(const AVFrame& frame, int out_height, int out_width,
                                      uint16_t* out, const CropRect& crop) {
  const AVPixFmtDescriptor* desc = av_pix_fmt_desc_get(static_cast<AVPixelFormat>(frame.format));
  constexpr uint64_t kRefused = AV_PIX_FMT_FLAG_RGB | AV_PIX_FMT_FLAG_PAL |
                                AV_PIX_FMT_FLAG_BITSTREAM | AV_PIX_FMT_FLAG_HWACCEL |
                                AV_PIX_FMT_FLAG_FLOAT | AV_PIX_FMT_FLAG_BAYER;
  if (desc == nullptr || (desc->flags & kRefused) != 0 || desc->nb_components < 1 ||
      desc->comp[0].depth > 16) {
    return Status(StatusCode::kUnsupported,
                  "cannot read 16-bit samples (a depth map) from frames of pixel format " +
                      pixel_format_name(frame.format) +
                      ": a single-channel (gray) or YUV stream of at most 16 bits is needed");
  }
  int x0 = 0, y0 = 0, w = frame.width, h = frame.height;
  if (!crop.empty()) {
    STOKER_RETURN_IF_ERROR(check_crop_inside(crop, frame));
    x0 = crop.x;
    y0 = crop.y;
    w = crop.width;
    h = crop.height;
  }
  columns_.resize(out_width);
  for (int x = 0; x < out_width; ++x) {
    columns_[x] = x0 + static_cast<int>((2 * int64_t{x} + 1) * w / (2 * int64_t{out_width}));
  }
  const AVComponentDescriptor& luma = desc->comp[0];
  const bool big_endian = (desc->flags & AV_PIX_FMT_FLAG_BE) != 0;
  const bool direct = luma.shift == 0 && luma.offset == 0 &&
                      ((luma.step == 1 && luma.depth <= 8) ||
                       (luma.step == 2 && luma.depth > 8 &&
                        big_endian == (std::endian::native == std::endian::big)));
  const uint8_t* plane = frame.data[luma.plane];
  const int stride = frame.linesize[luma.plane];
  if (!direct) row_.resize(frame.width);
  for (int y = 0; y < out_height; ++y) {
    const int source_y =
        y0 + static_cast<int>((2 * int64_t{y} + 1) * h / (2 * int64_t{out_height}));
    const uint8_t* row = plane + static_cast<ptrdiff_t>(source_y) * stride;
    uint16_t* out_row = out + static_cast<size_t>(y) * out_width;
    if (!direct) {
      // Component 0 of the row's columns x0 .. x0 + w, as plain words.
      const uint8_t* data[4] = {frame.data[0], frame.data[1], frame.data[2], frame.data[3]};
      av_read_image_line2(row_.data() + x0, data, frame.linesize, desc, x0, source_y, 0, w, 0, 2);
      for (int x = 0; x < out_width; ++x) out_row[x] = row_[columns_[x]];
    } else if (luma.step == 1) {
      for (int x = 0; x < out_width; ++x) out_row[x] = row[columns_[x]];
    } else if (out_width == w) {  // columns_ is x0, x0 + 1, ...: the row as it is
      std::memcpy(out_row, row + 2 * static_cast<size_t>(x0), 2 * static_cast<size_t>(w));
    } else {
      const auto* words = reinterpret_cast<const uint16_t*>(row);
      for (int x = 0; x < out_width; ++x) out_row[x] = words[columns_[x]];
    }
  }
  return Status();
}

Status FrameConverter::convert_rgb(const uint8_t* pixels, int width, int height, int stride,
                                   const OutputOptions& options, int out_height, int out_width,
                                   uint8_t* out, const CropRect& crop) {
  if (!rgb_frame_) {
    rgb_frame_.reset(av_frame_alloc());
    if (!rgb_frame_) return Status(StatusCode::kResourceExhausted, "cannot allocate a frame");
  }
  AVFrame& frame = *rgb_frame_;
  frame.format = AV_PIX_FMT_RGB24;
  frame.width = width;
  frame.height = height;
  frame.data[0] = const_cast<uint8_t*>(pixels);  // swscale only reads its source
  frame.linesize[0] = stride;
  frame.colorspace = AVCOL_SPC_RGB;
  frame.color_range = AVCOL_RANGE_JPEG;
  return convert(frame, options, out_height, out_width, out, crop);
}

}  // namespace stoker::media
