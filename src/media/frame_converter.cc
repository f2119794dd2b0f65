#include "media/frame_converter.h"

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
Result<SourceRegion> source_region(const AVFrame& frame, const CropRect& crop) {
  SourceRegion region{.data = {frame.data[0], frame.data[1], frame.data[2], frame.data[3]},
                      .width = frame.width,
                      .height = frame.height};
  if (crop.empty()) return region;
  if (crop.x < 0 || crop.y < 0 || static_cast<int64_t>(crop.x) + crop.width > frame.width ||
      static_cast<int64_t>(crop.y) + crop.height > frame.height) {
    return Status(StatusCode::kInvalidArgument,
                  "crop " + std::to_string(crop.width) + "x" + std::to_string(crop.height) +
                      " at (" + std::to_string(crop.x) + ", " + std::to_string(crop.y) +
                      ") leaves the decoded " + std::to_string(frame.width) + "x" +
                      std::to_string(frame.height) + " frame");
  }
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

}  // namespace

Status FrameConverter::convert(const AVFrame& frame, const OutputOptions& options, int out_height,
                               int out_width, uint8_t* out, const CropRect& crop) {
  STOKER_ASSIGN_OR_RETURN(const SourceRegion source, source_region(frame, crop));
  const bool planar = options.layout == Layout::kNCHW;
  int flags = options.interpolation == Interpolation::kArea ? SWS_AREA : SWS_BILINEAR;
  // FFmpeg's fast unscaled YUV->RGB path (x86) converts rows in blocks of 8 and 16 pixels:
  // for widths not a multiple of 8 it leaves the last pixels of every row unwritten, and for
  // widths not a multiple of 16 it writes past the row's end, past the frame's last row into
  // the caller's next bytes (valgrind: invalid write, width 120). The accurate path writes
  // exactly the frame.
  if (out_width % 16 != 0) flags |= SWS_ACCURATE_RND;
  // When resizing, interpolate chroma at full resolution for packed RGB too, as swscale always
  // does for planar output: both layouts then show the same picture.
  if (out_width != source.width || out_height != source.height) flags |= SWS_FULL_CHR_H_INT;
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
  uint8_t* planes[4] = {out, nullptr, nullptr, nullptr};
  int strides[4] = {out_width * 3, 0, 0, 0};
  if (planar) {
    // GBRP stores G, B, R planes; point each at its slot of the caller's R, G, B layout.
    planes[0] = out + plane;
    planes[1] = out + 2 * plane;
    planes[2] = out;
    strides[0] = strides[1] = strides[2] = out_width;
  }
  const int rows =
      sws_scale(context_.get(), source.data, frame.linesize, 0, source.height, planes, strides);
  if (rows != out_height) {
    return Status(StatusCode::kInternal, "colour conversion wrote " + std::to_string(rows) +
                                             " rows instead of " + std::to_string(out_height));
  }
  return Status();
}

}  // namespace stoker::media
