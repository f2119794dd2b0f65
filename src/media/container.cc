#include "media/container.h"

#include <algorithm>
#include <cstring>
#include <string_view>

#include "core/crc32c.h"
#include "media/decoder.h"

namespace stoker::media {

using detail::check_av;

namespace {

constexpr int64_t kRemoteProbeMicroseconds = 500'000;

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
    : io_(std::move(io)), format_(std::move(format)), stream_index_(stream_index) {}

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
    // Formats that find their streams while reading (MPEG-PS) have none at open: probe them.
    if ((format->ctx_flags & AVFMTCTX_NOHEADER) != 0 &&
        stream_index >= static_cast<int>(format->nb_streams)) {
      const int probed = avformat_find_stream_info(format.get(), nullptr);
      if (probed < 0) return io_failure(*io, probed, "cannot read stream info");
    }
    if (stream_index < 0 || stream_index >= static_cast<int>(format->nb_streams) ||
        format->streams[stream_index]->codecpar->codec_type != AVMEDIA_TYPE_VIDEO) {
      return Status(StatusCode::kInvalidArgument, "the saved frame table names video stream " +
                                                      std::to_string(stream_index) +
                                                      ", which the file does not have");
    }
  } else {
    // A remote MP4/MOV is scanned from its sample tables (see scan()): the demuxer then hands
    // packets out as stored, with no parser to read their bytes.
    if (format->pb->opaque != nullptr && io->source()->is_remote() &&
        std::string_view(format->iformat->name).find("mp4") != std::string_view::npos) {
      format->flags |= AVFMT_FLAG_NOPARSE;
      // The sample tables hold the timing; probing decodes only what the decoder's parameters
      // need, not FFmpeg's default of 5 s of packets, each a remote read.
      format->max_analyze_duration = kRemoteProbeMicroseconds;
    }
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
    if (packet_->stream_index == stream_index_) return true;
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

  const ByteSource& source = *io_->source();
  const bool header_only = source.is_remote() && skip_packet_bytes();
  std::vector<PacketEntry> packets;
  bool every_pts = true;  // whether the container gives every packet a pts
  bool verbatim = true;   // every packet's bytes are the file's at its position
  std::vector<uint8_t> at_position;
  for (;;) {
    Result<bool> more = read_packet();
    if (!more.ok()) {
      return more.status().with_context("scanning packet " + std::to_string(packets.size()));
    }
    if (!*more) break;
    const AVPacket& p = *packet_;
    every_pts = every_pts && p.pts != AV_NOPTS_VALUE;
    packets.push_back(PacketEntry{.pts = p.pts,
                                  .dts = p.dts == AV_NOPTS_VALUE ? p.pts : p.dts,
                                  .duration = p.duration,
                                  .is_key = (p.flags & AV_PKT_FLAG_KEY) != 0,
                                  .shown = (p.flags & AV_PKT_FLAG_DISCARD) == 0,
                                  .pos = p.pos,
                                  .size = p.size});
    if (verbatim && !header_only) {
      at_position.resize(static_cast<size_t>(p.size));
      Result<size_t> got = p.pos >= 0 ? source.read_at(p.pos, at_position) : Result<size_t>(0);
      verbatim = got.ok() && *got == at_position.size() &&
                 std::memcmp(at_position.data(), p.data, at_position.size()) == 0;
    }
  }
  next_packet = -1;
  if (!every_pts) {
    info.pts_from_decoding = true;
    STOKER_RETURN_IF_ERROR(pts_from_decoding(info, packets));
  }
  info.packets_addressable = verbatim && packets_addressable(packets, !header_only);
  return FrameTable::create(std::move(info), std::move(packets), io_->source()->size(), mtime_ns);
}

bool Container::packets_addressable(const std::vector<PacketEntry>& packets, bool verified) const {
  // Containers that keep each packet as one run of bytes, handed out as stored: the ISO
  // family (MP4, MOV) and Matroska/WebM. Others cut packets out of a byte stream (MPEG-TS/PS)
  // or wrap them.
  const std::string_view format = format_->iformat->name;
  const bool iso =
      format.find("mp4") != std::string_view::npos || format.find("mov") != std::string_view::npos;
  const bool matroska = format.find("matroska") != std::string_view::npos;
  if (!(iso || matroska)) return false;
  // A parser may rewrite packets (split or merge them): allowed only where every packet's
  // bytes were found in the file as they came out.
  if (!verified && av_stream_get_parser(format_->streams[stream_index_]) != nullptr) return false;
  const int64_t size = io_->source()->size();
  for (const PacketEntry& p : packets) {
    if (p.pos < 0 || p.size <= 0 || p.pos > size - p.size) return false;
  }
  return !packets.empty();
}

bool Container::skip_packet_bytes() {
  const std::string_view format = format_->iformat->name;
  if (format.find("mp4") == std::string_view::npos) return false;  // "mov,mp4,m4a,..."
  const AVStream* video = format_->streams[stream_index_];
  if (av_stream_get_parser(video) != nullptr) return false;
  // The sample tables of every stream, read with the header: where each packet's bytes lie.
  std::vector<ByteRange> samples;
  for (unsigned i = 0; i < format_->nb_streams; ++i) {
    AVStream* stream = format_->streams[i];
    const int count = avformat_index_get_entries_count(stream);
    for (int k = 0; k < count; ++k) {
      const AVIndexEntry* entry = avformat_index_get_entry(stream, k);
      if (entry->pos < 0 || entry->size <= 0) return false;
      samples.push_back(ByteRange{entry->pos, entry->size});
    }
  }
  if (samples.empty()) return false;
  std::sort(samples.begin(), samples.end(),
            [](const ByteRange& a, const ByteRange& b) { return a.offset < b.offset; });
  std::vector<ByteRange> merged;
  for (const ByteRange& r : samples) {
    if (!merged.empty() && r.offset <= merged.back().end()) {
      merged.back().length = std::max(merged.back().end(), r.end()) - merged.back().offset;
    } else {
      merged.push_back(r);
    }
  }
  io_->answer_with_zeros(std::move(merged));
  return true;
}

namespace {

// The pts of frames shown in display order at `display` (packet positions) from the
// container's pts where it has them (`known`, AV_NOPTS_VALUE elsewhere): kept where they rise
// along the display order, the gaps filled evenly between them and extended at the ends by the
// smallest step between known neighbours. Empty when the known pts do not rise, or leave too
// little room for the frames between them.
std::vector<int64_t> fill_pts(const std::vector<int64_t>& display,
                              const std::vector<int64_t>& known) {
  std::vector<int64_t> known_slots;
  int64_t step = INT64_MAX;
  for (size_t j = 0; j < display.size(); ++j) {
    const int64_t pts = known[display[j]];
    if (pts == AV_NOPTS_VALUE) continue;
    if (!known_slots.empty()) {
      const int64_t i = known_slots.back();
      const int64_t gap = pts - known[display[i]];
      const int64_t slots = static_cast<int64_t>(j) - i;
      if (gap < slots) return {};  // not rising, or no room for distinct pts in between
      step = std::min(step, gap / slots);
    }
    known_slots.push_back(static_cast<int64_t>(j));
  }
  if (known_slots.size() < 2) return {};
  const int64_t count = static_cast<int64_t>(display.size());
  std::vector<int64_t> pts(count);
  const int64_t first = known_slots.front(), last = known_slots.back();
  for (int64_t j = 0; j < first; ++j) pts[j] = known[display[first]] - (first - j) * step;
  for (size_t k = 0; k + 1 < known_slots.size(); ++k) {
    const int64_t i = known_slots[k], j = known_slots[k + 1];
    const int64_t a = known[display[i]], b = known[display[j]];
    for (int64_t slot = i; slot < j; ++slot) pts[slot] = a + (b - a) * (slot - i) / (j - i);
  }
  for (int64_t j = last; j < count; ++j) pts[j] = known[display[last]] + (j - last) * step;
  return pts;
}

}  // namespace

Status Container::pts_from_decoding(const VideoStreamInfo& info,
                                    std::vector<PacketEntry>& packets) {
  // The packets again, from the top, each sent to a decoder tagged with its position as pts:
  // the decoder carries a packet's pts to the frame it holds, so the tags of the frames, in the
  // order they come out, are the packets in display order. Packets whose frame never comes out
  // are not frames, as in a full sequential decode.
  STOKER_ASSIGN_OR_RETURN(std::unique_ptr<Container> again,
                          Container::open(io_->source(), nullptr));
  STOKER_ASSIGN_OR_RETURN(detail::UniqueCodecContext decoder, build_decoder(info, 1));
  detail::UniqueFrame frame(av_frame_alloc());
  if (!frame) return Status(StatusCode::kInternal, "cannot allocate a frame");
  const int64_t count = static_cast<int64_t>(packets.size());
  std::vector<int64_t> display;
  std::vector<uint8_t> out(count, 0);
  auto receive = [&]() -> Status {
    for (;;) {
      const int got = avcodec_receive_frame(decoder.get(), frame.get());
      if (got == AVERROR(EAGAIN) || got == AVERROR_EOF) return Status();
      if (got < 0) continue;  // a frame the decoder could not make: not a frame
      const int64_t tag = frame->pts;
      av_frame_unref(frame.get());
      if (tag < 0 || tag >= count || out[tag]) {
        return Status(StatusCode::kUnsupported,
                      "the container gives no pts, and the decoder does not tell which packet "
                      "each frame comes from; frames cannot be told apart");
      }
      out[tag] = 1;
      display.push_back(tag);
    }
  };
  int64_t k = 0;
  for (;; ++k) {
    STOKER_ASSIGN_OR_RETURN(bool more, again->read_packet());
    if (!more) break;
    if (k >= count) break;
    AVPacket* packet = again->packet();
    packets[k].crc = core::crc32c(std::span(packet->data, static_cast<size_t>(packet->size)));
    packet->pts = packet->dts = k;
    avcodec_send_packet(decoder.get(), packet);  // a packet it cannot decode shows no frame
    STOKER_RETURN_IF_ERROR(receive());
  }
  if (k != count) {
    return Status(StatusCode::kCorruptData, "the container gave " + std::to_string(count) +
                                                " packets, then " + std::to_string(k) +
                                                " when read again");
  }
  avcodec_send_packet(decoder.get(), nullptr);
  STOKER_RETURN_IF_ERROR(receive());

  std::vector<int64_t> container_pts(count);
  for (int64_t p = 0; p < count; ++p) container_pts[p] = packets[p].pts;
  std::vector<int64_t> pts = fill_pts(display, container_pts);
  if (pts.empty()) {  // too few container pts to go by: the dts, in display order
    std::vector<int64_t> dts;
    for (int64_t p : display) dts.push_back(packets[p].dts);
    std::sort(dts.begin(), dts.end());
    if (std::adjacent_find(dts.begin(), dts.end()) != dts.end() ||
        std::find(dts.begin(), dts.end(), AV_NOPTS_VALUE) != dts.end()) {
      return Status(StatusCode::kUnsupported,
                    "the container gives neither pts nor distinct dts; frames cannot be timed");
    }
    pts = std::move(dts);
  }
  int64_t beyond = pts.empty() ? 0 : pts.back();
  for (PacketEntry& packet : packets) packet.shown = false;
  for (size_t j = 0; j < display.size(); ++j) {
    packets[display[j]].pts = pts[j];
    packets[display[j]].shown = true;
  }
  for (int64_t p = 0; p < count; ++p) {
    if (!out[p]) packets[p].pts = ++beyond;  // unique, after every frame: never shown
  }
  return Status();
}

int64_t Container::locate(const FrameTable& table) {
  AVPacket* packet = packet_.get();
  if (table.stream().pts_from_decoding) {
    const int64_t position = table.packet_with_crc(
        core::crc32c(std::span(packet->data, static_cast<size_t>(packet->size))));
    // The decoder carries this pts to the packet's frame, by which the frame is then known.
    if (position >= 0) packet->pts = table.packets()[position].pts;
    return position;
  }
  if (packet->pts == AV_NOPTS_VALUE) packet->pts = packet->dts;
  return table.packet_with_pts(packet->pts);
}

Status Container::seek_to_timestamp(int64_t timestamp) {
  // A seek starts reading afresh. FFmpeg keeps a failed read's error in the I/O context (a
  // seek does not clear it) and returns it for every later end of file: a store that failed
  // once, then recovered, would end each later pass over this pooled container in that error.
  format_->pb->error = 0;
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
  // Tables whose pts come from decoding seek by dts, the container's own timestamps.
  const int64_t first_try = table.stream().pts_from_decoding ? wanted.dts : wanted.pts;
  const int64_t timestamps[3] = {first_try, std::min(wanted.pts, wanted.dts), INT64_MIN};
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
      const int64_t position = locate(table);
      if (position == target) {
        next_packet = target + 1;  // packet() holds `target`; the caller decodes it first
        return Status();
      }
      if (position > target) break;  // overshot: try the next, earlier timestamp
      // A demuxer that splits frames out of a byte stream (MPEG-PS) may start, after a seek,
      // with a piece of a frame: not a packet of the table, read past until one is.
      if (position < 0 && !table.stream().pts_from_decoding) {
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
