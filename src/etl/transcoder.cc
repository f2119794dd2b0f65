#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include "media/detail/ffmpeg.h"
#include "stoker/transcode.h"

// Not among media/detail/ffmpeg.h's headers; C linkage like them.
extern "C" {
#include <libavutil/opt.h>
}

namespace stoker {
namespace {

using media::detail::check_av;
using media::detail::UniqueCodecContext;
using media::detail::UniqueFrame;
using media::detail::UniqueOutputFormatContext;
using media::detail::UniquePacket;
using media::detail::UniqueSwsContext;

constexpr int kMaxSide = 1 << 14;
// SVT-AV1 refuses smaller pictures.
constexpr int kMinAv1Side = 64;

// The output timing of the transcoded run, in the source stream's time base.
struct Timing {
  AVRational time_base{1, 1};
  std::vector<int64_t> pts;       // per output frame, from 0, strictly increasing
  std::vector<int64_t> duration;  // per output frame, > 0
};

Timing output_timing(const FrameTable& table, int64_t first, int64_t count) {
  Timing timing;
  timing.time_base = AVRational{table.stream().time_base_num, table.stream().time_base_den};
  const std::span<const PacketEntry> packets = table.packets();
  const int64_t origin = packets[table.packet_of_frame(first)].pts;
  timing.pts.resize(count);
  for (int64_t i = 0; i < count; ++i) {
    timing.pts[i] = packets[table.packet_of_frame(first + i)].pts - origin;
  }
  timing.duration.resize(count);
  for (int64_t i = 0; i + 1 < count; ++i) timing.duration[i] = timing.pts[i + 1] - timing.pts[i];
  // The last frame keeps its own duration when the container states one; else it lasts as long
  // as the frame before it, or one frame at the stream's average rate.
  int64_t last = packets[table.packet_of_frame(first + count - 1)].duration;
  if (last <= 0 && count > 1) last = timing.duration[count - 2];
  if (last <= 0 && table.fps() > 0) {
    last = std::llround(static_cast<double>(timing.time_base.den) /
                        (table.fps() * timing.time_base.num));
  }
  timing.duration[count - 1] = std::max<int64_t>(last, 1);
  return timing;
}

Status validate(const VideoReader& source, int64_t first, int64_t count,
                const TranscodeOptions& o) {
  auto invalid = [](const std::string& why) { return Status(StatusCode::kInvalidArgument, why); };
  if (o.height <= 0 || o.width <= 0 || o.height > kMaxSide || o.width > kMaxSide ||
      o.height % 2 != 0 || o.width % 2 != 0) {
    return invalid("output size " + std::to_string(o.width) + "x" + std::to_string(o.height) +
                   " is invalid: width and height must be positive and even (4:2:0 chroma)");
  }
  if (o.codec == VideoCodec::kAV1 && std::min(o.height, o.width) < kMinAv1Side) {
    return invalid("output size " + std::to_string(o.width) + "x" + std::to_string(o.height) +
                   " is too small for AV1: SVT-AV1 needs at least 64x64");
  }
  if (o.gop < 1) return invalid("gop must be at least 1, got " + std::to_string(o.gop));
  const int max_crf = o.codec == VideoCodec::kH264 ? 51 : 63;
  if (o.crf != -1 && (o.crf < 0 || o.crf > max_crf)) {
    return invalid("crf must be in [0, " + std::to_string(max_crf) + "] for " +
                   encoder_name(o.codec) + ", got " + std::to_string(o.crf));
  }
  if (o.threads < 1) return invalid("threads must be at least 1");
  if (o.chunk_frames < 1) return invalid("chunk_frames must be at least 1");
  if (count < 1 || first < 0 || first > source.num_frames() - count) {
    return invalid("frames [" + std::to_string(first) + ", " + std::to_string(first + count) +
                   ") are not a non-empty range of the video's " +
                   std::to_string(source.num_frames()) + " frames");
  }
  return Status();
}

// Sets the encoder's private options: preset, rate factor, a fixed keyframe interval.
Status set_encoder_options(AVCodecContext* ctx, const TranscodeOptions& o) {
  std::string preset = o.preset;
  std::string crf = std::to_string(o.crf);
  std::string params;
  if (o.codec == VideoCodec::kH264) {
    if (preset.empty()) preset = "medium";
    if (o.crf == -1) crf = "23";
    // No keyframes at scene cuts: a keyframe exactly every gop frames, so the decode cost of a
    // random frame is bounded and predictable.
    params = "scenecut=0";
    STOKER_RETURN_IF_ERROR(check_av(av_opt_set(ctx->priv_data, "x264-params", params.c_str(), 0),
                                    "cannot set x264-params " + params));
    if (o.fast_decode) {
      STOKER_RETURN_IF_ERROR(
          check_av(av_opt_set(ctx->priv_data, "tune", "fastdecode", 0), "cannot set tune"));
    }
  } else {
    if (preset.empty()) preset = "8";
    if (o.crf == -1) crf = "30";
    // SVT-AV1 starts a thread per core by default; lp bounds it to the threads asked for. scd=0:
    // no scene-change keyframes, as for H.264.
    params = "lp=" + std::to_string(o.threads) + ":scd=0";
    if (o.fast_decode) params += ":fast-decode=1";
    STOKER_RETURN_IF_ERROR(check_av(av_opt_set(ctx->priv_data, "svtav1-params", params.c_str(), 0),
                                    "cannot set svtav1-params " + params));
  }
  STOKER_RETURN_IF_ERROR(check_av(av_opt_set(ctx->priv_data, "preset", preset.c_str(), 0),
                                  "invalid preset '" + preset + "'"));
  STOKER_RETURN_IF_ERROR(
      check_av(av_opt_set(ctx->priv_data, "crf", crf.c_str(), 0), "invalid crf " + crf));
  return Status();
}

// The encoder and the MP4 muxer of one output file.
class Mp4Writer {
 public:
  Mp4Writer(const Timing& timing, std::string path) : timing_(timing), path_(std::move(path)) {}

  Status open(const TranscodeOptions& o, double fps) {
    const AVCodec* codec = avcodec_find_encoder_by_name(encoder_name(o.codec));
    if (codec == nullptr) {
      return Status(StatusCode::kUnsupported,
                    std::string("FFmpeg was built without the encoder ") + encoder_name(o.codec));
    }
    encoder_.reset(avcodec_alloc_context3(codec));
    frame_.reset(av_frame_alloc());
    packet_.reset(av_packet_alloc());
    if (!encoder_ || !frame_ || !packet_) {
      return Status(StatusCode::kInternal, "cannot allocate the encoder");
    }
    AVCodecContext* ctx = encoder_.get();
    ctx->width = o.width;
    ctx->height = o.height;
    ctx->pix_fmt = AV_PIX_FMT_YUV420P;
    ctx->time_base = timing_.time_base;
    // Rate control and SVT-AV1's frame-rate setting need the real rate, not 1 / time base.
    ctx->framerate = fps > 0 ? av_d2q(fps, 100000) : AVRational{30, 1};
    ctx->gop_size = o.gop;
    ctx->keyint_min = o.gop;
    // No B-frames: frames are decoded in presentation order, each as soon as its packet
    // arrives, and pts == dts (no edit list, no composition offsets in the MP4).
    ctx->max_b_frames = 0;
    ctx->thread_count = o.threads;
    ctx->color_range = AVCOL_RANGE_MPEG;
    ctx->colorspace = AVCOL_SPC_SMPTE170M;  // BT.601 matrix, as the conversion below writes
    ctx->sample_aspect_ratio = AVRational{1, 1};

    AVFormatContext* raw = nullptr;
    STOKER_RETURN_IF_ERROR(
        check_av(avformat_alloc_output_context2(&raw, nullptr, "mp4", path_.c_str()),
                 "cannot create an MP4 muxer"));
    muxer_.reset(raw);
    if (muxer_->oformat->flags & AVFMT_GLOBALHEADER) ctx->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
    STOKER_RETURN_IF_ERROR(set_encoder_options(ctx, o));
    STOKER_RETURN_IF_ERROR(check_av(avcodec_open2(ctx, codec, nullptr),
                                    std::string("cannot open the encoder ") + codec->name));

    stream_ = avformat_new_stream(muxer_.get(), nullptr);
    if (stream_ == nullptr) return Status(StatusCode::kInternal, "cannot add an MP4 stream");
    STOKER_RETURN_IF_ERROR(check_av(avcodec_parameters_from_context(stream_->codecpar, ctx),
                                    "cannot describe the encoded stream"));
    // The MP4 track timescale becomes this time base's denominator (doubled until >= 10000),
    // which represents every source pts exactly.
    stream_->time_base = ctx->time_base;
    stream_->avg_frame_rate = ctx->framerate;
    STOKER_RETURN_IF_ERROR(check_av(avio_open(&muxer_->pb, path_.c_str(), AVIO_FLAG_WRITE),
                                    "cannot create '" + path_ + "'"));
    AVDictionary* options = nullptr;
    // The index (moov) at the front: one read finds every packet, also over HTTP ranges.
    av_dict_set(&options, "movflags", "+faststart", 0);
    const int header = avformat_write_header(muxer_.get(), &options);
    av_dict_free(&options);
    STOKER_RETURN_IF_ERROR(check_av(header, "cannot write the MP4 header of '" + path_ + "'"));

    frame_->format = AV_PIX_FMT_YUV420P;
    frame_->width = o.width;
    frame_->height = o.height;
    frame_->color_range = AVCOL_RANGE_MPEG;
    frame_->colorspace = AVCOL_SPC_SMPTE170M;
    STOKER_RETURN_IF_ERROR(
        check_av(av_frame_get_buffer(frame_.get(), 0), "cannot allocate a frame"));
    // RGB (full range) to yuv420p with BT.601 coefficients, limited range.
    converter_.reset(sws_getContext(
        o.width, o.height, AV_PIX_FMT_RGB24, o.width, o.height, AV_PIX_FMT_YUV420P,
        SWS_BILINEAR | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INP, nullptr, nullptr, nullptr));
    if (!converter_) return Status(StatusCode::kInternal, "cannot create the RGB to YUV converter");
    const int* bt601 = sws_getCoefficients(SWS_CS_ITU601);
    sws_setColorspaceDetails(converter_.get(), bt601, 1, bt601, 0, 0, 1 << 16, 1 << 16);
    return Status();
  }

  // Encodes one RGB24 picture (height x width x 3, packed) as output frame `index`.
  Status write(const uint8_t* rgb, int64_t index) {
    STOKER_RETURN_IF_ERROR(check_av(av_frame_make_writable(frame_.get()), "cannot reuse a frame"));
    const uint8_t* planes[4] = {rgb, nullptr, nullptr, nullptr};
    const int strides[4] = {frame_->width * 3, 0, 0, 0};
    sws_scale(converter_.get(), planes, strides, 0, frame_->height, frame_->data, frame_->linesize);
    frame_->pts = timing_.pts[index];
    frame_->pict_type = AV_PICTURE_TYPE_NONE;
    return send(frame_.get());
  }

  // Flushes the encoder and completes the file.
  Status finish() {
    STOKER_RETURN_IF_ERROR(send(nullptr));
    STOKER_RETURN_IF_ERROR(
        check_av(av_write_trailer(muxer_.get()), "cannot finish the MP4 '" + path_ + "'"));
    STOKER_RETURN_IF_ERROR(check_av(avio_closep(&muxer_->pb), "cannot close '" + path_ + "'"));
    if (written_ != static_cast<int64_t>(timing_.pts.size())) {
      return Status(StatusCode::kInternal, "the encoder returned " + std::to_string(written_) +
                                               " packets for " +
                                               std::to_string(timing_.pts.size()) + " frames");
    }
    return Status();
  }

 private:
  Status send(AVFrame* frame) {
    const std::string what = std::string("encoding with ") + encoder_->codec->name;
    while (true) {
      const int sent = avcodec_send_frame(encoder_.get(), frame);
      if (sent == AVERROR(EAGAIN)) {  // its queue is full: take packets out, then retry
        STOKER_RETURN_IF_ERROR(receive());
        continue;
      }
      STOKER_RETURN_IF_ERROR(check_av(sent, what));
      return receive();
    }
  }

  // Writes every packet the encoder has ready.
  Status receive() {
    while (true) {
      const int got = avcodec_receive_packet(encoder_.get(), packet_.get());
      if (got == AVERROR(EAGAIN) || got == AVERROR_EOF) return Status();
      STOKER_RETURN_IF_ERROR(check_av(got, std::string("encoding with ") + encoder_->codec->name));
      // The duration of the frame the packet shows (encoders do not all carry it over).
      auto it = std::lower_bound(timing_.pts.begin(), timing_.pts.end(), packet_->pts);
      if (it == timing_.pts.end() || *it != packet_->pts) {
        av_packet_unref(packet_.get());
        return Status(StatusCode::kInternal, "the encoder returned a packet with pts " +
                                                 std::to_string(packet_->pts) +
                                                 ", which no input frame had");
      }
      packet_->duration = timing_.duration[it - timing_.pts.begin()];
      packet_->stream_index = stream_->index;
      av_packet_rescale_ts(packet_.get(), encoder_->time_base, stream_->time_base);
      ++written_;
      // Takes the packet's reference, leaving packet_ blank.
      STOKER_RETURN_IF_ERROR(check_av(av_interleaved_write_frame(muxer_.get(), packet_.get()),
                                      "cannot write to '" + path_ + "'"));
    }
  }

  const Timing& timing_;
  const std::string path_;
  UniqueCodecContext encoder_;
  UniqueOutputFormatContext muxer_;
  AVStream* stream_ = nullptr;  // owned by muxer_
  UniqueFrame frame_;
  UniquePacket packet_;
  UniqueSwsContext converter_;
  int64_t written_ = 0;
};

// Checks that `path` reads back with exactly the expected frames and times; fills `result`.
Status verify(const std::string& path, const Timing& timing, TranscodeResult* result) {
  STOKER_ASSIGN_OR_RETURN(std::unique_ptr<VideoReader> written, VideoReader::open(path));
  const FrameTable& table = written->frame_table();
  const int64_t count = static_cast<int64_t>(timing.pts.size());
  if (table.num_frames() != count) {
    return Status(StatusCode::kInternal, "the written file has " +
                                             std::to_string(table.num_frames()) +
                                             " frames instead of " + std::to_string(count));
  }
  // Exact comparison of the rationals pts * num / den of both time bases.
  const __int128 out_num = table.stream().time_base_num, out_den = table.stream().time_base_den;
  const __int128 in_num = timing.time_base.num, in_den = timing.time_base.den;
  const std::span<const PacketEntry> packets = table.packets();
  const int64_t origin = packets[table.packet_of_frame(0)].pts;
  for (int64_t i = 0; i < count; ++i) {
    const __int128 got = packets[table.packet_of_frame(i)].pts - origin;
    if (got * out_num * in_den != static_cast<__int128>(timing.pts[i]) * in_num * out_den) {
      return Status(StatusCode::kInternal,
                    "frame " + std::to_string(i) + " of the written file shows at " +
                        std::to_string(table.pts_seconds(i) - table.pts_seconds(0)) +
                        " s instead of " +
                        std::to_string(static_cast<double>(timing.pts[i]) * timing.time_base.num /
                                       timing.time_base.den) +
                        " s");
    }
  }
  result->frames = count;
  result->pts_seconds.resize(count);
  for (int64_t i = 0; i < count; ++i) {
    result->pts_seconds[i] = table.pts_seconds(i) - table.pts_seconds(0);
  }
  result->duration = table.duration();
  return Status();
}

// Flushes a file, or a folder's entries, to disk.
Status sync_path(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (directory ? O_DIRECTORY : 0));
  if (fd < 0) {
    return Status(StatusCode::kIoError, "cannot open '" + path + "': " + std::strerror(errno));
  }
  const int synced = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  if (synced != 0) {
    return Status(StatusCode::kIoError, "cannot flush '" + path + "': " + std::strerror(error));
  }
  return Status();
}

// Removes a file when destroyed, unless released.
class RemoveOnExit {
 public:
  explicit RemoveOnExit(std::string path) : path_(std::move(path)) {}
  ~RemoveOnExit() {
    if (!path_.empty()) {
      std::error_code ignored;
      std::filesystem::remove(path_, ignored);
    }
  }
  void release() { path_.clear(); }

 private:
  std::string path_;
};

Status transcode_into(const VideoReader& source, int64_t first, int64_t count,
                      const std::string& partial, const TranscodeOptions& o, const Timing& timing) {
  Mp4Writer writer(timing, partial);
  STOKER_RETURN_IF_ERROR(writer.open(o, source.frame_table().fps()));
  const OutputOptions output{.height = o.height,
                             .width = o.width,
                             .layout = Layout::kNHWC,
                             .interpolation = o.interpolation};
  const size_t frame_bytes = source.frame_bytes(output);
  const int64_t chunk = std::min<int64_t>(o.chunk_frames, count);
  // swscale's SIMD readers of packed RGB load past the end of a row; on the last row of the
  // buffer that would leave the allocation, so one more row (and some) of padding follows it.
  const size_t padding = static_cast<size_t>(o.width) * 3 + 64;
  std::vector<uint8_t> rgb(static_cast<size_t>(chunk) * frame_bytes + padding);
  std::vector<int64_t> indices;
  for (int64_t begin = 0; begin < count; begin += chunk) {
    const int64_t n = std::min(chunk, count - begin);
    indices.resize(n);
    for (int64_t k = 0; k < n; ++k) indices[k] = first + begin + k;
    // Consecutive chunks continue the same decode pass: the pooled decoder is not re-seeked.
    STOKER_RETURN_IF_ERROR(source.get_frames(
        indices, output, std::span(rgb.data(), static_cast<size_t>(n) * frame_bytes)));
    for (int64_t k = 0; k < n; ++k) {
      STOKER_RETURN_IF_ERROR(writer.write(rgb.data() + k * frame_bytes, begin + k)
                                 .with_context("frame " + std::to_string(first + begin + k)));
    }
  }
  return writer.finish();
}

}  // namespace

const char* encoder_name(VideoCodec codec) {
  return codec == VideoCodec::kAV1 ? "libsvtav1" : "libx264";
}

Result<TranscodeResult> transcode_frames(const VideoReader& source, int64_t first_frame,
                                         int64_t num_frames, const std::string& target,
                                         const TranscodeOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  const std::string context = "transcoding frames [" + std::to_string(first_frame) + ", " +
                              std::to_string(first_frame + num_frames) + ") of '" + source.path() +
                              "' to '" + target + "'";
  STOKER_RETURN_IF_ERROR(validate(source, first_frame, num_frames, options).with_context(context));
  media::detail::quiet_ffmpeg_logging();
  const Timing timing = output_timing(source.frame_table(), first_frame, num_frames);

  const std::string partial = target + ".partial";
  RemoveOnExit cleanup(partial);
  TranscodeResult result;
  STOKER_RETURN_IF_ERROR(transcode_into(source, first_frame, num_frames, partial, options, timing)
                             .with_context(context));
  STOKER_RETURN_IF_ERROR(
      verify(partial, timing, &result).with_context(context + ": checking the written file"));
  STOKER_RETURN_IF_ERROR(sync_path(partial, false).with_context(context));
  std::error_code error;
  result.bytes = static_cast<int64_t>(std::filesystem::file_size(partial, error));
  std::filesystem::rename(partial, target, error);
  if (error) {
    return Status(StatusCode::kIoError,
                  context + ": cannot rename '" + partial + "': " + error.message());
  }
  cleanup.release();
  std::string folder = std::filesystem::path(target).parent_path().string();
  STOKER_RETURN_IF_ERROR(sync_path(folder.empty() ? "." : folder, true).with_context(context));
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace stoker
