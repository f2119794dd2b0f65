#include "stoker/clip_cutter.h"

#include <algorithm>
#include <cctype>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/file.h"
#include "media/container.h"
#include "media/detail/ffmpeg.h"

namespace stoker {
namespace {

using media::detail::check_av;

std::string frames_text(int64_t first, int64_t count) {
  return "frames [" + std::to_string(first) + ", " + std::to_string(first + count) + ")";
}

// The packets of a run of frames, decode order: [first, last].
struct PacketRun {
  int64_t first = 0;
  int64_t last = 0;
};

// The run of packets of frames [first, first + count) when copying them decodes to exactly
// those frames (see clip_cutter.h); else why not.
Result<PacketRun> packet_run(const FrameTable& table, int64_t first, int64_t count) {
  auto invalid = [&](const std::string& why) {
    return Status(StatusCode::kInvalidArgument, frames_text(first, count) + " " + why);
  };
  const int64_t frames = table.num_frames();
  if (count < 1 || first < 0 || first > frames - count) {
    return invalid("are not a non-empty range of the video's " + std::to_string(frames) +
                   " frames");
  }
  if (table.stream().pts_from_decoding) {
    return Status(StatusCode::kUnsupported,
                  "the container gives its packets no presentation times of their own (they "
                  "were worked out by decoding): its packets cannot be copied with their times");
  }
  PacketRun run{.first = INT64_MAX, .last = -1};
  for (int64_t f = first; f < first + count; ++f) {
    run.first = std::min(run.first, table.packet_of_frame(f));
    run.last = std::max(run.last, table.packet_of_frame(f));
  }
  const std::span<const PacketEntry> packets = table.packets();
  if (!packets[run.first].is_key) {
    int64_t key = run.first;
    while (key >= 0 && !packets[key].is_key) --key;
    return invalid("do not start on a keyframe: their first packet in decode order, " +
                   std::to_string(run.first) + " (frame " +
                   std::to_string(table.frame_of_packet(run.first)) + "), is not one" +
                   (key >= 0 ? " (the keyframe before it shows frame " +
                                   std::to_string(table.frame_of_packet(key)) + ")"
                             : ""));
  }
  // Contiguous: every packet between the first and the last shows a frame of the run. One
  // that shows a frame outside it is a reordered frame cut from its group.
  for (int64_t p = run.first; p <= run.last; ++p) {
    const int64_t f = table.frame_of_packet(p);
    if (f < first || f >= first + count) {
      return invalid("cut a group of reordered frames: packet " + std::to_string(p) +
                     ", between their packets " + std::to_string(run.first) + " and " +
                     std::to_string(run.last) + " in decode order, " +
                     (f < 0 ? std::string("is not shown")
                            : "shows frame " + std::to_string(f) + ", outside them"));
    }
  }
  for (int64_t f = first; f < first + count; ++f) {
    const int64_t sync = table.sync_packet_of_frame(f);
    if (sync < run.first) {
      return invalid("need packets before them: frame " + std::to_string(f) +
                     " decodes from packet " + std::to_string(sync) +
                     " (a leading picture of an open GOP)");
    }
  }
  return run;
}

bool ends_with(std::string_view name, std::string_view suffix) {
  if (name.size() < suffix.size()) return false;
  return std::equal(suffix.rbegin(), suffix.rend(), name.rbegin(), [](char a, char b) {
    return std::tolower(static_cast<unsigned char>(a)) == b;
  });
}

// The muxer of the source's own container (ClipCopyOptions::format's default).
std::string default_format(std::string_view demuxer, std::string_view name) {
  name = name.substr(0, name.find('?'));  // a URL's query
  if (demuxer.find("mp4") != std::string_view::npos ||
      demuxer.find("mov") != std::string_view::npos) {
    return ends_with(name, ".mov") ? "mov" : "mp4";
  }
  if (demuxer.find("matroska") != std::string_view::npos) {
    return ends_with(name, ".webm") ? "webm" : "matroska";
  }
  return std::string(demuxer.substr(0, demuxer.find(',')));
}

// OK unless the muxer `format` says it cannot store `codec` video. Muxers that cannot say are
// taken at their word when the header is written.
Status check_format(const std::string& format, const std::string& codec) {
  const AVOutputFormat* muxer = av_guess_format(format.c_str(), nullptr, nullptr);
  if (muxer == nullptr) {
    return Status(StatusCode::kUnsupported, "FFmpeg has no muxer called '" + format + "'");
  }
  const AVCodecDescriptor* descriptor = avcodec_descriptor_get_by_name(codec.c_str());
  if (descriptor != nullptr &&
      avformat_query_codec(muxer, descriptor->id, FF_COMPLIANCE_NORMAL) == 0) {
    return Status(StatusCode::kUnsupported,
                  "FFmpeg's " + format + " muxer cannot store " + codec + " video");
  }
  return Status();
}

// The source's codec tag where the output container knows it for the codec (hvc1 and hev1
// differ for players), else 0: the muxer picks its own. As ffmpeg -c copy does.
uint32_t kept_codec_tag(const AVOutputFormat& muxer, const AVCodecParameters& par) {
  unsigned int tag = 0;
  if (muxer.codec_tag == nullptr ||
      av_codec_get_id(muxer.codec_tag, par.codec_tag) == par.codec_id ||
      !av_codec_get_tag2(muxer.codec_tag, par.codec_id, &tag)) {
    return par.codec_tag;
  }
  return 0;
}

// Fills what a demuxer opened without probing leaves unknown, from the table's probed scan:
// muxers write these into the codec configuration (MP4's vpcC needs VP9's bit depth).
void fill_from_table(AVCodecParameters* par, const VideoStreamInfo& info) {
  if (par->format < 0 && info.pixel_format >= 0) par->format = info.pixel_format;
  if (par->profile < 0) par->profile = info.profile;
  if (par->level < 0) par->level = info.level;
  if (par->color_range == AVCOL_RANGE_UNSPECIFIED) {
    par->color_range = static_cast<AVColorRange>(info.color_range);
  }
  if (par->color_space == AVCOL_SPC_UNSPECIFIED) {
    par->color_space = static_cast<AVColorSpace>(info.color_space);
  }
  if (par->video_delay == 0) par->video_delay = info.video_delay;
  if (par->bits_per_raw_sample == 0) par->bits_per_raw_sample = info.bits_per_raw_sample;
}

// Removes a file when destroyed, unless released.
class RemoveOnExit {
 public:
  explicit RemoveOnExit(std::string path) : path_(std::move(path)) {}
  ~RemoveOnExit() {
    if (!path_.empty()) core::remove_file_if_present(path_);
  }
  RemoveOnExit(const RemoveOnExit&) = delete;
  RemoveOnExit& operator=(const RemoveOnExit&) = delete;
  void release() { path_.clear(); }

 private:
  std::string path_;
};

// Writes the packets of `run` into a new `format` file at `path` ("" : the source's own
// container), pts and dts shifted so that the run's first frame shows at 0.
Status write_run(const std::shared_ptr<const ByteSource>& source, const FrameTable& table,
                 PacketRun run, int64_t first_frame, const std::string& path,
                 const std::string& format_option) {
  const std::span<const PacketEntry> packets = table.packets();
  if (source->is_remote() && table.stream().packets_addressable) {
    // The run's bytes in one ranged read, before the demuxer asks for them packet by packet.
    std::vector<ByteRange> ranges;
    for (int64_t p = run.first; p <= run.last; ++p) {
      ranges.push_back(ByteRange{packets[p].pos, packets[p].size});
    }
    std::sort(ranges.begin(), ranges.end(),
              [](const ByteRange& a, const ByteRange& b) { return a.offset < b.offset; });
    std::vector<ByteRange> merged;
    for (const ByteRange& r : ranges) {
      if (!merged.empty() && r.offset <= merged.back().end()) {
        merged.back().length = std::max(merged.back().end(), r.end()) - merged.back().offset;
      } else {
        merged.push_back(r);
      }
    }
    source->prefetch(merged);
  }
  STOKER_ASSIGN_OR_RETURN(std::unique_ptr<media::Container> input,
                          media::Container::open(source, &table));
  const AVStream& in = input->stream();
  const std::string format =
      format_option.empty() ? default_format(input->format_name(), source->name()) : format_option;
  STOKER_RETURN_IF_ERROR(check_format(format, table.stream().codec));

  AVFormatContext* raw = nullptr;
  STOKER_RETURN_IF_ERROR(
      check_av(avformat_alloc_output_context2(&raw, nullptr, format.c_str(), path.c_str()),
               "cannot create a " + format + " muxer"));
  media::detail::UniqueOutputFormatContext muxer(raw);
  // No encoder version, creation time or random ids: the same clip is the same bytes.
  muxer->flags |= AVFMT_FLAG_BITEXACT;
  AVStream* out = avformat_new_stream(muxer.get(), nullptr);
  if (out == nullptr) return Status(StatusCode::kInternal, "cannot add a stream to the muxer");
  STOKER_RETURN_IF_ERROR(check_av(avcodec_parameters_copy(out->codecpar, in.codecpar),
                                  "cannot copy the stream's codec parameters"));
  fill_from_table(out->codecpar, table.stream());
  out->codecpar->codec_tag = kept_codec_tag(*muxer->oformat, *in.codecpar);
  out->time_base = in.time_base;  // MP4's track timescale becomes a multiple of it: exact
  out->sample_aspect_ratio = out->codecpar->sample_aspect_ratio;
  const int created = avio_open(&muxer->pb, path.c_str(), AVIO_FLAG_WRITE);
  if (created < 0) {
    return Status(StatusCode::kIoError,
                  "cannot create '" + path + "': " + media::detail::av_error_text(created));
  }
  AVDictionary* header_options = nullptr;
  const std::string_view muxer_name = muxer->oformat->name;
  if (muxer_name == "mp4" || muxer_name == "mov") {
    // The index (moov) at the front: one read finds every packet, also over HTTP ranges.
    av_dict_set(&header_options, "movflags", "+faststart", 0);
  }
  const int header = avformat_write_header(muxer.get(), &header_options);
  av_dict_free(&header_options);
  if (header < 0) {
    return Status(StatusCode::kUnsupported, "FFmpeg's " + format + " muxer refuses the " +
                                                table.stream().codec +
                                                " stream: " + media::detail::av_error_text(header));
  }

  // The first frame (the smallest pts of the run) shows at 0; dts moves with pts, so every
  // composition offset is kept (dts may start below 0: MP4 writes an edit list for it).
  const int64_t shift = packets[table.packet_of_frame(first_frame)].pts;
  int64_t packets_read = 0;
  STOKER_RETURN_IF_ERROR(input->seek_to_packet(table, run.first, &packets_read)
                             .with_context("seeking to packet " + std::to_string(run.first)));
  for (int64_t p = run.first;; ++p) {
    AVPacket* packet = input->packet();
    packet->stream_index = out->index;
    packet->pos = -1;
    if (packet->pts != AV_NOPTS_VALUE) packet->pts -= shift;
    if (packet->dts != AV_NOPTS_VALUE) packet->dts -= shift;
    av_packet_rescale_ts(packet, in.time_base, out->time_base);
    // Takes the packet's bytes (and blanks it); the container's next read refills it.
    STOKER_RETURN_IF_ERROR(check_av(av_interleaved_write_frame(muxer.get(), packet),
                                    "cannot write packet " + std::to_string(p)));
    if (p == run.last) break;
    STOKER_ASSIGN_OR_RETURN(bool more, input->read_packet());
    if (!more) {
      return Status(StatusCode::kCorruptData,
                    "end of file before packet " + std::to_string(p + 1) + " of the frame table");
    }
    const int64_t at = input->locate(table);
    if (at != p + 1) {
      return Status(StatusCode::kCorruptData,
                    "packet " + std::to_string(p + 1) +
                        " of the frame table is not next in the "
                        "file (the demuxer gave " +
                        (at < 0 ? "a packet with pts " + std::to_string(input->packet()->pts) +
                                      ", which the table does not have"
                                : "packet " + std::to_string(at)) +
                        "): the file changed since it was scanned?");
    }
  }
  STOKER_RETURN_IF_ERROR(check_av(av_write_trailer(muxer.get()), "cannot complete '" + path + "'"));
  // Closed here, not by the owner, so that a failed last write is seen.
  return check_av(avio_closep(&muxer->pb), "cannot write '" + path + "'");
}

// Checks that `path` reads back with the run's frames at their times from 0: the same count,
// and each time within half a tick of the written file's time base of the source's.
Status verify(const std::string& path, const FrameTable& table, int64_t first, int64_t count) {
  STOKER_ASSIGN_OR_RETURN(std::unique_ptr<ByteSource> file, open_file_source(path));
  STOKER_ASSIGN_OR_RETURN(std::unique_ptr<media::Container> written,
                          media::Container::open(std::move(file), nullptr));
  STOKER_ASSIGN_OR_RETURN(std::shared_ptr<const FrameTable> clip, written->scan(0));
  if (clip->num_frames() != count) {
    return Status(StatusCode::kInternal, "the written file has " +
                                             std::to_string(clip->num_frames()) +
                                             " frames instead of " + std::to_string(count));
  }
  const __int128 out_num = clip->stream().time_base_num, out_den = clip->stream().time_base_den;
  const __int128 in_num = table.stream().time_base_num, in_den = table.stream().time_base_den;
  const std::span<const PacketEntry> got = clip->packets(), want = table.packets();
  const int64_t origin = want[table.packet_of_frame(first)].pts;
  for (int64_t i = 0; i < count; ++i) {
    const __int128 a = got[clip->packet_of_frame(i)].pts;
    const __int128 b = want[table.packet_of_frame(first + i)].pts - origin;
    // |a * out - b * in| <= out / 2, in seconds, multiplied through by both denominators.
    __int128 error = a * out_num * in_den - b * in_num * out_den;
    if (error < 0) error = -error;
    if (2 * error > out_num * in_den) {
      return Status(StatusCode::kInternal,
                    "frame " + std::to_string(i) + " of the written file shows at " +
                        std::to_string(clip->pts_seconds(i)) + " s instead of " +
                        std::to_string(static_cast<double>(b) * table.stream().time_base_num /
                                       table.stream().time_base_den) +
                        " s");
    }
  }
  return Status();
}

}  // namespace

Status check_clip_copy(const FrameTable& table, int64_t first_frame, int64_t num_frames,
                       const std::string& format) {
  STOKER_RETURN_IF_ERROR(packet_run(table, first_frame, num_frames).status());
  if (format.empty()) return Status();
  return check_format(format, table.stream().codec);
}

Result<ClipCopyResult> copy_clip(std::shared_ptr<const ByteSource> source, const FrameTable& table,
                                 int64_t first_frame, int64_t num_frames, const std::string& target,
                                 const ClipCopyOptions& options) {
  const std::string context = "copying " + frames_text(first_frame, num_frames) + " of '" +
                              (source != nullptr ? source->name() : std::string("(none)")) +
                              "' to '" + target + "'";
  if (source == nullptr) {
    return Status(StatusCode::kInvalidArgument, context + ": no source given");
  }
  if (table.file_size() != source->size() ||
      (table.file_mtime_ns() != 0 && source->mtime_ns() != 0 &&
       table.file_mtime_ns() != source->mtime_ns())) {
    return Status(StatusCode::kCorruptData,
                  context + ": the frame table is stale: it describes a file of " +
                      std::to_string(table.file_size()) + " bytes, not this one of " +
                      std::to_string(source->size()) + " (the file was modified since)");
  }
  media::detail::quiet_ffmpeg_logging();
  STOKER_RETURN_IF_ERROR(core::check_path(target).with_context(context));
  Result<PacketRun> run = packet_run(table, first_frame, num_frames);
  if (!run.ok()) return run.status().with_context(context);
  if (!options.format.empty()) {
    STOKER_RETURN_IF_ERROR(
        check_format(options.format, table.stream().codec).with_context(context));
  }

  const std::string partial = target + ".partial";
  RemoveOnExit cleanup(partial);
  STOKER_RETURN_IF_ERROR(
      write_run(source, table, *run, first_frame, partial, options.format).with_context(context));
  STOKER_RETURN_IF_ERROR(verify(partial, table, first_frame, num_frames)
                             .with_context(context + ": checking the written file"));
  Result<core::FileIdentity> written = core::stat_file(partial);
  if (!written.ok()) return written.status().with_context(context + ": '" + partial + "'");
  STOKER_RETURN_IF_ERROR(core::commit_file(partial, target).with_context(context));
  cleanup.release();
  return ClipCopyResult{.frames = num_frames, .bytes = written->size, .first_packet = run->first};
}

}  // namespace stoker
