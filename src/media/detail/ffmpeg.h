// RAII owners for every FFmpeg handle stoker holds, and the one helper that turns an FFmpeg
// error code into a Status. Private to src/media: FFmpeg headers never reach a public header.
#pragma once

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/avutil.h>
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>
}

#include <memory>
#include <string>

#include "stoker/status.h"

namespace stoker::media::detail {

struct FormatContextDeleter {
  void operator()(AVFormatContext* ctx) const { avformat_close_input(&ctx); }
};
struct CodecContextDeleter {
  void operator()(AVCodecContext* ctx) const { avcodec_free_context(&ctx); }
};
struct FrameDeleter {
  void operator()(AVFrame* frame) const { av_frame_free(&frame); }
};
struct PacketDeleter {
  void operator()(AVPacket* packet) const { av_packet_free(&packet); }
};
struct SwsContextDeleter {
  void operator()(SwsContext* ctx) const { sws_freeContext(ctx); }
};

using UniqueFormatContext = std::unique_ptr<AVFormatContext, FormatContextDeleter>;
using UniqueCodecContext = std::unique_ptr<AVCodecContext, CodecContextDeleter>;
using UniqueFrame = std::unique_ptr<AVFrame, FrameDeleter>;
using UniquePacket = std::unique_ptr<AVPacket, PacketDeleter>;
using UniqueSwsContext = std::unique_ptr<SwsContext, SwsContextDeleter>;

/// FFmpeg's text for an error code, e.g. "Invalid data found when processing input".
std::string av_error_text(int error);

/// OK when `error` >= 0; otherwise a Status "<what>: <FFmpeg's text>" with a code chosen from
/// the error (kNotFound for ENOENT, kCorruptData for AVERROR_INVALIDDATA, ...).
Status check_av(int error, const std::string& what);

/// Quiets FFmpeg's own logging to errors only, once per process: stoker reports failures itself.
void quiet_ffmpeg_logging();

/// Owner of a muxer (an output AVFormatContext): closes its file, if it opened one, then frees
/// it. Input contexts use FormatContextDeleter (avformat_close_input) instead.
struct OutputFormatContextDeleter {
  void operator()(AVFormatContext* ctx) const {
    if (ctx == nullptr) return;
    if (ctx->pb != nullptr && ctx->oformat != nullptr && !(ctx->oformat->flags & AVFMT_NOFILE)) {
      avio_closep(&ctx->pb);
    }
    avformat_free_context(ctx);
  }
};
using UniqueOutputFormatContext = std::unique_ptr<AVFormatContext, OutputFormatContextDeleter>;

}  // namespace stoker::media::detail
