#include "media/frame_converter.h"

namespace stoker::media {
namespace {

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
                               int out_width, uint8_t* out) {
  const bool planar = options.layout == Layout::kNCHW;
  int flags = options.interpolation == Interpolation::kArea ? SWS_AREA : SWS_BILINEAR;
  // FFmpeg's fast unscaled YUV->RGB path (x86) converts rows in blocks of 8 pixels and leaves
  // the last width % 8 pixels of every row unwritten; the accurate path writes them all.
  if (out_width % 8 != 0) flags |= SWS_ACCURATE_RND;
  // When resizing, interpolate chroma at full resolution for packed RGB too, as swscale always
  // does for planar output: both layouts then show the same picture.
  if (out_width != frame.width || out_height != frame.height) flags |= SWS_FULL_CHR_H_INT;
  Key key{.src_width = frame.width,
          .src_height = frame.height,
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
                    std::string("cannot convert pixel format ") +
                        (av_get_pix_fmt_name(static_cast<AVPixelFormat>(frame.format))
                             ? av_get_pix_fmt_name(static_cast<AVPixelFormat>(frame.format))
                             : "unknown") +
                        " to RGB");
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
      sws_scale(context_.get(), frame.data, frame.linesize, 0, frame.height, planes, strides);
  if (rows != out_height) {
    return Status(StatusCode::kInternal, "colour conversion wrote " + std::to_string(rows) +
                                             " rows instead of " + std::to_string(out_height));
  }
  return Status();
}

}  // namespace stoker::media
