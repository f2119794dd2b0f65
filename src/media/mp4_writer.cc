#include "media/mp4_writer.h"

#include <algorithm>
#include <string>

#include "media/detail/ffmpeg.h"

#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#endif

// Not among media/detail/ffmpeg.h's headers; C linkage like them.
extern "C" {
#include <libavutil/opt.h>
}

namespace stoker {

const char* encoder_name(VideoCodec codec) {
  return codec == VideoCodec::kAV1 ? "libsvtav1" : "libx264";
}

EncoderOptions with_codec_defaults(EncoderOptions options) {
  const bool h264 = options.codec == VideoCodec::kH264;
  if (options.crf == -1) options.crf = h264 ? 23 : 30;
  if (options.preset.empty()) options.preset = h264 ? "medium" : "8";
  return options;
}

Status check_encoder_options(const EncoderOptions& o, int height, int width) {
  constexpr int kMaxSide = 1 << 14;
  constexpr int kMinAv1Side = 64;  // SVT-AV1 refuses smaller pictures
  auto invalid = [](const std::string& why) { return Status(StatusCode::kInvalidArgument, why); };
  const std::string size = std::to_string(width) + "x" + std::to_string(height);
  if (height <= 0 || width <= 0 || height > kMaxSide || width > kMaxSide || height % 2 != 0 ||
      width % 2 != 0) {
    return invalid("output size " + size +
                   " is invalid: width and height must be positive and even (4:2:0 chroma)");
  }
  if (o.codec == VideoCodec::kAV1 && std::min(height, width) < kMinAv1Side) {
    return invalid("output size " + size + " is too small for AV1: SVT-AV1 needs at least 64x64");
  }
  if (o.gop < 1) return invalid("gop must be at least 1, got " + std::to_string(o.gop));
  const int max_crf = o.codec == VideoCodec::kH264 ? 51 : 63;
  if (o.crf != -1 && (o.crf < 0 || o.crf > max_crf)) {
    return invalid("crf must be in [0, " + std::to_string(max_crf) + "] for " +
                   encoder_name(o.codec) + ", got " + std::to_string(o.crf));
  }
  if (o.threads < 1) return invalid("threads must be at least 1");
  return Status();
}

namespace media {
namespace {

using detail::check_av;

// Gives the calling thread its scheduling policy and priority back when destroyed. SVT-AV1
// switches the thread that opens an encoder to SCHED_FIFO at the highest priority whenever it
// may (as root): an ETL worker that had encoded one AV1 unit stayed real-time for good, and two
// such threads busy on two cores starved every other thread of the process.
class KeepScheduling {
 public:
  KeepScheduling() {
#if defined(__linux__)
    saved_ = pthread_getschedparam(pthread_self(), &policy_, &param_) == 0;
#endif
  }
  ~KeepScheduling() {
#if defined(__linux__)
    if (saved_) pthread_setschedparam(pthread_self(), policy_, &param_);
#endif
  }
  KeepScheduling(const KeepScheduling&) = delete;
  KeepScheduling& operator=(const KeepScheduling&) = delete;

 private:
#if defined(__linux__)
  bool saved_ = false;
  int policy_ = 0;
  sched_param param_{};
#endif
};

bool cpu_has_avx512() {
#if defined(__x86_64__) || defined(__i386__)
  return __builtin_cpu_supports("avx512f");
#else
  return false;
#endif
}

// Sets the encoder's private options: preset, rate factor, a fixed keyframe interval.
Status set_encoder_options(AVCodecContext* ctx, const EncoderOptions& given) {
  const EncoderOptions o = with_codec_defaults(given);
  const std::string crf = std::to_string(o.crf);
  if (o.codec == VideoCodec::kH264) {
    // No keyframes at scene cuts: a keyframe exactly every gop frames, so the decode cost of a
    // random frame is bounded and predictable.
    std::string params = "scenecut=0";
    // x264's AVX-512 functions (r3095) read bytes of its own buffers that nothing wrote, and
    // those bytes reach its decisions: on an AVX-512 CPU the same pictures encoded to other
    // bytes whenever the heap held other garbage (1 ETL unit in 3 under load; every time with
    // glibc's M_PERTURB at 1). Capped at AVX2 (every AVX-512 CPU has it, and what x264 detects
    // besides: the 64-byte cache line), the output is a function of the input alone, at the
    // same speed within a few percent (measured in docs/etl.md).
    if (cpu_has_avx512()) params += ":asm=AVX2,Cache64";
    STOKER_RETURN_IF_ERROR(check_av(av_opt_set(ctx->priv_data, "x264-params", params.c_str(), 0),
                                    "cannot set x264-params " + params));
    if (o.fast_decode) {
      STOKER_RETURN_IF_ERROR(
          check_av(av_opt_set(ctx->priv_data, "tune", "fastdecode", 0), "cannot set tune"));
    }
  } else {
    // SVT-AV1 starts a thread per core by default; lp bounds it to the threads asked for. scd=0:
    // no scene-change keyframes, as for H.264.
    const std::string params =
        "lp=" + std::to_string(o.threads) + ":scd=0" + (o.fast_decode ? ":fast-decode=1" : "");
    STOKER_RETURN_IF_ERROR(check_av(av_opt_set(ctx->priv_data, "svtav1-params", params.c_str(), 0),
                                    "cannot set svtav1-params " + params));
  }
  STOKER_RETURN_IF_ERROR(check_av(av_opt_set(ctx->priv_data, "preset", o.preset.c_str(), 0),
                                  "invalid preset '" + o.preset + "'"));
  STOKER_RETURN_IF_ERROR(
      check_av(av_opt_set(ctx->priv_data, "crf", crf.c_str(), 0), "invalid crf " + crf));
  return Status();
}

}  // namespace

class Mp4Writer::Impl {
 public:
  Impl(std::string path, Mp4Timing timing) : path_(std::move(path)), timing_(std::move(timing)) {}

  Status open(int height, int width, const EncoderOptions& o) {
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
    ctx->width = width;
    ctx->height = height;
    ctx->pix_fmt = AV_PIX_FMT_YUV420P;
    ctx->time_base = AVRational{timing_.time_base_num, timing_.time_base_den};
    // Rate control and SVT-AV1's frame-rate setting need the real rate, not 1 / time base.
    ctx->framerate = timing_.fps > 0 ? av_d2q(timing_.fps, 100000) : AVRational{30, 1};
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
    const KeepScheduling keep_scheduling;  // across the encoder's opening (SVT-AV1)
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
    frame_->width = width;
    frame_->height = height;
    frame_->color_range = AVCOL_RANGE_MPEG;
    frame_->colorspace = AVCOL_SPC_SMPTE170M;
    STOKER_RETURN_IF_ERROR(
        check_av(av_frame_get_buffer(frame_.get(), 0), "cannot allocate a frame"));
    // RGB (full range) to yuv420p with BT.601 coefficients, limited range.
    converter_.reset(sws_getContext(
        width, height, AV_PIX_FMT_RGB24, width, height, AV_PIX_FMT_YUV420P,
        SWS_BILINEAR | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INP, nullptr, nullptr, nullptr));
    if (!converter_) return Status(StatusCode::kInternal, "cannot create the RGB to YUV converter");
    const int* bt601 = sws_getCoefficients(SWS_CS_ITU601);
    sws_setColorspaceDetails(converter_.get(), bt601, 1, bt601, 0, 0, 1 << 16, 1 << 16);
    return Status();
  }

  Status write_rgb(const uint8_t* rgb, int64_t index) {
    if (index < 0 || index >= static_cast<int64_t>(timing_.pts.size())) {
      return Status(StatusCode::kInvalidArgument,
                    "frame " + std::to_string(index) + " is not in the file's timing");
    }
    STOKER_RETURN_IF_ERROR(check_av(av_frame_make_writable(frame_.get()), "cannot reuse a frame"));
    const uint8_t* planes[4] = {rgb, nullptr, nullptr, nullptr};
    const int strides[4] = {frame_->width * 3, 0, 0, 0};
    sws_scale(converter_.get(), planes, strides, 0, frame_->height, frame_->data, frame_->linesize);
    frame_->pts = timing_.pts[index];
    frame_->pict_type = AV_PICTURE_TYPE_NONE;
    return send(frame_.get());
  }

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

  const std::string path_;
  const Mp4Timing timing_;
  detail::UniqueCodecContext encoder_;
  detail::UniqueOutputFormatContext muxer_;
  AVStream* stream_ = nullptr;  // owned by muxer_
  detail::UniqueFrame frame_;
  detail::UniquePacket packet_;
  detail::UniqueSwsContext converter_;
  int64_t written_ = 0;
};

Result<std::unique_ptr<Mp4Writer>> Mp4Writer::create(const std::string& path, int height, int width,
                                                     const EncoderOptions& options,
                                                     Mp4Timing timing) {
  STOKER_RETURN_IF_ERROR(check_encoder_options(options, height, width));
  detail::quiet_ffmpeg_logging();
  auto impl = std::make_unique<Impl>(path, std::move(timing));
  STOKER_RETURN_IF_ERROR(impl->open(height, width, options));
  return std::unique_ptr<Mp4Writer>(new Mp4Writer(std::move(impl)));
}

Mp4Writer::Mp4Writer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Mp4Writer::~Mp4Writer() = default;
Status Mp4Writer::write_rgb(const uint8_t* rgb, int64_t index) {
  return impl_->write_rgb(rgb, index);
}
Status Mp4Writer::finish() { return impl_->finish(); }

}  // namespace media
}  // namespace stoker
