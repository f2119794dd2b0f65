#include "media/decoder.h"

#include <algorithm>
#include <string>

namespace stoker::media {
namespace {

const AVCodec* find_decoder(const std::string& codec_name) {
  const AVCodecDescriptor* descriptor = avcodec_descriptor_get_by_name(codec_name.c_str());
  if (descriptor == nullptr) return nullptr;
  // FFmpeg's native AV1 decoder needs a hardware accelerator; dav1d is the software one.
  if (descriptor->id == AV_CODEC_ID_AV1) {
    if (const AVCodec* dav1d = avcodec_find_decoder_by_name("libdav1d")) return dav1d;
  }
  return avcodec_find_decoder(descriptor->id);
}

}  // namespace

Result<detail::UniqueCodecContext> build_decoder(const VideoStreamInfo& s, int threads) {
  const AVCodec* codec = find_decoder(s.codec);
  if (codec == nullptr) {
    return Status(StatusCode::kUnsupported, "no decoder for codec '" + s.codec + "'");
  }
  detail::UniqueCodecContext ctx(avcodec_alloc_context3(codec));
  if (!ctx) return Status(StatusCode::kInternal, "cannot allocate a decoder");
  ctx->codec_type = AVMEDIA_TYPE_VIDEO;
  ctx->codec_id = codec->id;
  ctx->width = s.width;
  ctx->height = s.height;
  ctx->pix_fmt = static_cast<AVPixelFormat>(s.pixel_format);
  ctx->profile = s.profile;
  ctx->level = s.level;
  ctx->bits_per_raw_sample = s.bits_per_raw_sample;
  ctx->color_range = static_cast<AVColorRange>(s.color_range);
  ctx->colorspace = static_cast<AVColorSpace>(s.color_space);
  ctx->sample_aspect_ratio = AVRational{s.sample_aspect_num, s.sample_aspect_den};
  ctx->has_b_frames = s.video_delay;
  ctx->pkt_timebase = AVRational{s.time_base_num, s.time_base_den};
  if (!s.extradata.empty()) {
    ctx->extradata =
        static_cast<uint8_t*>(av_mallocz(s.extradata.size() + AV_INPUT_BUFFER_PADDING_SIZE));
    if (ctx->extradata == nullptr) return Status(StatusCode::kInternal, "out of memory");
    std::copy(s.extradata.begin(), s.extradata.end(), ctx->extradata);
    ctx->extradata_size = static_cast<int>(s.extradata.size());
  }
  ctx->thread_count = threads;
  ctx->thread_type = threads > 1 ? (FF_THREAD_FRAME | FF_THREAD_SLICE) : 0;
  STOKER_RETURN_IF_ERROR(detail::check_av(avcodec_open2(ctx.get(), codec, nullptr),
                                          "cannot open the " + s.codec + " decoder"));
  return ctx;
}

}  // namespace stoker::media
