#include "media/container.h"

#include <algorithm>
#include <atomic>

namespace stoker::media {

using detail::check_av;

namespace {

std::atomic<uint64_t> next_container_id{0};

// The status of a failed FFmpeg call that read through `io`: the source's own error when a
// read failed (it names the source and says why), else FFmpeg's.
Status io_failure(detail::ByteSourceIo& io, int error, const std::string& what) {
  Status read = io.take_read_error();
  if (!read.ok()) return read.with_context(what);
  return check_av(error, what);
}

}  // namespace

Container::Container(std::unique_ptr<detail::ByteSourceIo> io, detail::UniqueFormatContext format,
                     int stream_index)
    : id(next_container_id.fetch_add(1) + 1),
      io_(std::move(io)),
      format_(std::move(format)),
      stream_index_(stream_index),
      packet_(av_packet_alloc()) {}

Status Container::failure(int error, const std::string& what) {
  return io_failure(*io_, error, what);
}

Result<std::unique_ptr<Container>> Container::open(std::shared_ptr<const ByteSource> source,
                                                   const FrameTable* table) {
  detail::quiet_ffmpeg_logging();
  STOKER_ASSIGN_OR_RETURN(std::unique_ptr<detail::ByteSourceIo> io,
                          detail::ByteSourceIo::create(std::move(source)));
  AVFormatContext* raw = avformat_alloc_context();
  if (raw == nullptr) return Status(StatusCode::kInternal, "cannot allocate a demuxer");
  raw->pb = io->context();
  // The name is a hint for probing (the extension), as it is for FFmpeg's file protocol. On
  // failure FFmpeg frees the context it was given.
  const int opened = avformat_open_input(&raw, io->source()->name().c_str(), nullptr, nullptr);
  if (opened < 0) return io_failure(*io, opened, "cannot open");
  detail::UniqueFormatContext format(raw);

  int stream_index = -1;
  if (table != nullptr) {
    stream_index = table->stream().stream_index;
    if (stream_index < 0 || stream_index >= static_cast<int>(format->nb_streams) ||
        format->streams[stream_index]->codecpar->codec_type != AVMEDIA_TYPE_VIDEO) {
      return Status(StatusCode::kInvalidArgument, "the saved frame table names video stream " +
                                                      std::to_string(stream_index) +
                                                      ", which the file does not have");
    }
  } else {
    const int probed = avformat_find_stream_info(format.get(), nullptr);
    if (probed < 0) return io_failure(*io, probed, "cannot read stream info");
    stream_index = av_find_best_stream(format.get(), AVMEDIA_TYPE_VIDEO, -1, -1, nullptr, 0);
    if (stream_index < 0) return Status(StatusCode::kNotFound, "the file has no video stream");
  }
  for (unsigned i = 0; i < format->nb_streams; ++i) {
    format->streams[i]->discard =
        static_cast<int>(i) == stream_index ? AVDISCARD_DEFAULT : AVDISCARD_ALL;
  }
  return std::unique_ptr<Container>(new Container(std::move(io), std::move(format), stream_index));
}

Result<bool> Container::read_packet() {
  for (;;) {
    av_packet_unref(packet_.get());
    const int error = av_read_frame(format_.get(), packet_.get());
    if (error == AVERROR_EOF) return false;
    if (error < 0) return failure(error, "cannot read a packet");
    if (packet_->stream_index == stream_index_) {
      if (packet_->pts == AV_NOPTS_VALUE) packet_->pts = packet_->dts;
      if (packet_->dts == AV_NOPTS_VALUE) packet_->dts = packet_->pts;
      return true;
    }
  }
}

Result<std::shared_ptr<const FrameTable>> Container::scan(int64_t mtime_ns) {
  const AVStream* stream = format_->streams[stream_index_];
  const AVCodecParameters* par = stream->codecpar;
  VideoStreamInfo info;
  info.codec = avcodec_get_name(par->codec_id);
  info.width = par->width;
  info.height = par->height;
  info.pixel_format = par->format;
  info.profile = par->profile;
  info.level = par->level;
  info.bits_per_raw_sample = par->bits_per_raw_sample;
  info.color_range = par->color_range;
  info.color_space = par->color_space;
  info.sample_aspect_num = par->sample_aspect_ratio.num;
  info.sample_aspect_den = par->sample_aspect_ratio.den;
  info.video_delay = par->video_delay;
  info.time_base_num = stream->time_base.num;
  info.time_base_den = stream->time_base.den;
  info.stream_index = stream_index_;
  info.extradata.assign(par->extradata, par->extradata + par->extradata_size);
  if (info.width <= 0 || info.height <= 0) {
    return Status(StatusCode::kCorruptData, "the video stream has no frame size");
  }

  std::vector<PacketEntry> packets;
  for (;;) {
    Result<bool> more = read_packet();
    if (!more.ok()) {
      return more.status().with_context("scanning packet " + std::to_string(packets.size()));
    }
    if (!*more) break;
    const AVPacket& p = *packet_;
    if (p.pts == AV_NOPTS_VALUE) {
      return Status(StatusCode::kUnsupported,
                    "packet " + std::to_string(packets.size()) + " has no timestamp");
    }
    packets.push_back(PacketEntry{.pts = p.pts,
                                  .dts = p.dts,
                                  .duration = p.duration,
                                  .is_key = (p.flags & AV_PKT_FLAG_KEY) != 0,
                                  .shown = (p.flags & AV_PKT_FLAG_DISCARD) == 0});
  }
  next_packet = -1;
  return FrameTable::create(std::move(info), std::move(packets), io_->source()->size(), mtime_ns);
}

Status Container::seek_to_timestamp(int64_t timestamp) {
  const int error = av_seek_frame(format_.get(), stream_index_, timestamp, AVSEEK_FLAG_BACKWARD);
  return error < 0 ? failure(error, "cannot seek") : Status();
}

Status Container::seek_to_packet(const FrameTable& table, int64_t target, int64_t* packets_read) {
  const auto packets = table.packets();
  const PacketEntry& wanted = packets[target];
  // Seeking backward to the keyframe's pts lands on it in both kinds of index, dts (MP4) or
  // pts (Matroska): MP4's demuxer takes the last keyframe whose dts is at or before it, which
  // is this one, as no later keyframe's dts precedes this one's pts. (Seeking to its dts lands
  // one GOP early on MP4 with B-frames, and costs reading that GOP's packets.) Should the
  // demuxer overshoot, the smaller of pts and dts, then the top of the file, are tried.
  const int64_t timestamps[3] = {wanted.pts, std::min(wanted.pts, wanted.dts), INT64_MIN};
  for (int64_t timestamp : timestamps) {
    if (timestamp == INT64_MIN) {
      timestamp = packets.empty() ? 0 : packets.front().dts;
      for (const PacketEntry& p : packets) timestamp = std::min({timestamp, p.dts, p.pts});
    }
    STOKER_RETURN_IF_ERROR(seek_to_timestamp(timestamp));
    for (;;) {
      STOKER_ASSIGN_OR_RETURN(bool more, read_packet());
      if (!more) {
        return Status(StatusCode::kCorruptData,
                      "end of file before packet " + std::to_string(target));
      }
      ++*packets_read;
      const int64_t position = table.packet_with_pts(packet_->pts);
      if (position == target) {
        next_packet = target + 1;  // packet() holds `target`; the caller decodes it first
        return Status();
      }
      if (position > target) break;  // overshot: try the next, earlier timestamp
      if (position < 0) {
        return Status(StatusCode::kCorruptData,
                      "packet with pts " + std::to_string(packet_->pts) +
                          " is not in the frame table (the file changed since it was scanned?)");
      }
    }
  }
  return Status(StatusCode::kCorruptData,
                "cannot reach packet " + std::to_string(target) + " by seeking");
}

}  // namespace stoker::media
