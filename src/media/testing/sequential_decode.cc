#include "media/testing/sequential_decode.h"

#include <gtest/gtest.h>

#include <map>

#include "media/detail/ffmpeg.h"
#include "media/frame_converter.h"

namespace stoker::testing {

using media::detail::check_av;

Result<std::vector<std::vector<uint8_t>>> decode_all_frames(const std::string& path,
                                                            const OutputOptions& options) {
  AVFormatContext* raw = nullptr;
  STOKER_RETURN_IF_ERROR(
      check_av(avformat_open_input(&raw, path.c_str(), nullptr, nullptr), "open " + path));
  media::detail::UniqueFormatContext format(raw);
  STOKER_RETURN_IF_ERROR(check_av(avformat_find_stream_info(format.get(), nullptr), "probe"));
  const int stream = av_find_best_stream(format.get(), AVMEDIA_TYPE_VIDEO, -1, -1, nullptr, 0);
  STOKER_RETURN_IF_ERROR(check_av(stream, "find video stream"));
  const AVCodecParameters* par = format->streams[stream]->codecpar;
  const AVCodec* codec = par->codec_id == AV_CODEC_ID_AV1 ? avcodec_find_decoder_by_name("libdav1d")
                                                          : avcodec_find_decoder(par->codec_id);
  if (codec == nullptr) return Status(StatusCode::kUnsupported, "no decoder");
  media::detail::UniqueCodecContext ctx(avcodec_alloc_context3(codec));
  STOKER_RETURN_IF_ERROR(check_av(avcodec_parameters_to_context(ctx.get(), par), "parameters"));
  ctx->pkt_timebase = format->streams[stream]->time_base;
  ctx->thread_count = 1;
  STOKER_RETURN_IF_ERROR(check_av(avcodec_open2(ctx.get(), codec, nullptr), "open decoder"));

  const int height = options.height > 0 ? options.height : par->height;
  const int width = options.width > 0 ? options.width : par->width;
  media::FrameConverter converter;
  std::vector<std::vector<uint8_t>> frames;
  media::detail::UniquePacket packet(av_packet_alloc());
  media::detail::UniqueFrame frame(av_frame_alloc());
  auto receive = [&]() -> Status {
    while (avcodec_receive_frame(ctx.get(), frame.get()) == 0) {
      // Filled with a value the reader's tests do not use, so an unwritten byte shows.
      frames.emplace_back(static_cast<size_t>(height) * width * pixel_bytes(options.pixel_format),
                          0xCD);
      STOKER_RETURN_IF_ERROR(
          converter.convert(*frame, options, height, width, frames.back().data()));
      av_frame_unref(frame.get());
    }
    return Status();
  };
  while (av_read_frame(format.get(), packet.get()) >= 0) {
    if (packet->stream_index == stream) {
      avcodec_send_packet(ctx.get(), packet.get());
      STOKER_RETURN_IF_ERROR(receive());
    }
    av_packet_unref(packet.get());
  }
  avcodec_send_packet(ctx.get(), nullptr);
  STOKER_RETURN_IF_ERROR(receive());
  return frames;
}

const std::vector<std::vector<uint8_t>>& reference_frames(const std::string& path) {
  static std::map<std::string, std::vector<std::vector<uint8_t>>> cache;
  auto it = cache.find(path);
  if (it == cache.end()) {
    auto frames = decode_all_frames(path, OutputOptions{});
    EXPECT_TRUE(frames.ok()) << frames.status().message();
    it = cache
             .emplace(path,
                      frames.ok() ? std::move(frames).value() : std::vector<std::vector<uint8_t>>{})
             .first;
  }
  return it->second;
}

}  // namespace stoker::testing
