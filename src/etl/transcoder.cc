#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/aligned_allocator.h"
#include "core/env.h"
#include "core/file.h"
#include "media/mp4_writer.h"
#include "stoker/transcode.h"

namespace stoker {
namespace {

// The output timing of the transcoded run, in the source stream's time base: pts from 0.
media::Mp4Timing output_timing(const FrameTable& table, int64_t first, int64_t count) {
  media::Mp4Timing timing;
  timing.time_base_num = table.stream().time_base_num;
  timing.time_base_den = table.stream().time_base_den;
  timing.fps = table.fps();
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
    last = std::llround(static_cast<double>(timing.time_base_den) /
                        (table.fps() * timing.time_base_num));
  }
  timing.duration[count - 1] = std::max<int64_t>(last, 1);
  return timing;
}

Status validate(const VideoReader& source, int64_t first, int64_t count,
                const TranscodeOptions& o) {
  auto invalid = [](const std::string& why) { return Status(StatusCode::kInvalidArgument, why); };
  STOKER_RETURN_IF_ERROR(check_encoder_options(o.encoder, o.height, o.width));
  if (o.chunk_frames < 1) return invalid("chunk_frames must be at least 1");
  if (count < 1 || first < 0 || first > source.num_frames() - count) {
    return invalid("frames [" + std::to_string(first) + ", " + std::to_string(first + count) +
                   ") are not a non-empty range of the video's " +
                   std::to_string(source.num_frames()) + " frames");
  }
  return Status();
}

// Checks that `path` reads back with exactly the expected frames and times; fills `result`.
Status verify(const std::string& path, const media::Mp4Timing& timing, TranscodeResult* result) {
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
  const __int128 in_num = timing.time_base_num, in_den = timing.time_base_den;
  const std::span<const PacketEntry> packets = table.packets();
  const int64_t origin = packets[table.packet_of_frame(0)].pts;
  for (int64_t i = 0; i < count; ++i) {
    const __int128 got = packets[table.packet_of_frame(i)].pts - origin;
    if (got * out_num * in_den != static_cast<__int128>(timing.pts[i]) * in_num * out_den) {
      return Status(StatusCode::kInternal,
                    "frame " + std::to_string(i) + " of the written file shows at " +
                        std::to_string(table.pts_seconds(i) - table.pts_seconds(0)) +
                        " s instead of " +
                        std::to_string(static_cast<double>(timing.pts[i]) * timing.time_base_num /
                                       timing.time_base_den) +
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

// Removes a file when destroyed, unless released.
class RemoveOnExit {
 public:
  explicit RemoveOnExit(std::string path) : path_(std::move(path)) {}
  ~RemoveOnExit() {
    if (!path_.empty()) core::remove_file_if_present(path_);
  }
  void release() { path_.clear(); }

 private:
  std::string path_;
};

Status transcode_into(const VideoReader& source, int64_t first, int64_t count,
                      const std::string& partial, const TranscodeOptions& o,
                      const media::Mp4Timing& timing) {
  STOKER_ASSIGN_OR_RETURN(std::unique_ptr<media::Mp4Writer> writer,
                          media::Mp4Writer::create(partial, o.height, o.width, o.encoder, timing));
  const OutputOptions output{.height = o.height,
                             .width = o.width,
                             .layout = Layout::kNHWC,
                             .interpolation = o.interpolation};
  const size_t frame_bytes = source.frame_bytes(output);
  const int64_t chunk = std::min<int64_t>(o.chunk_frames, count);
  // The writer's RGB reads may pass the end of the last row (see Mp4Writer::write_rgb).
  const size_t padding = static_cast<size_t>(o.width) * 3 + 64;
  // Aligned, always: swscale's code paths depend on the alignment of the rows it reads (see
  // core/aligned_allocator.h); a heap block's own made one run encode other bytes than the next.
  core::AlignedBytes rgb(static_cast<size_t>(chunk) * frame_bytes + padding);
  std::vector<int64_t> indices;
  for (int64_t begin = 0; begin < count; begin += chunk) {
    const int64_t n = std::min(chunk, count - begin);
    indices.resize(n);
    for (int64_t k = 0; k < n; ++k) indices[k] = first + begin + k;
    // Consecutive chunks continue the same decode pass: the pooled decoder is not re-seeked.
    STOKER_RETURN_IF_ERROR(source.get_frames(
        indices, output, std::span(rgb.data(), static_cast<size_t>(n) * frame_bytes)));
    for (int64_t k = 0; k < n; ++k) {
      STOKER_RETURN_IF_ERROR(writer->write_rgb(rgb.data() + k * frame_bytes, begin + k)
                                 .with_context("frame " + std::to_string(first + begin + k)));
    }
  }
  return writer->finish();
}

}  // namespace

Result<TranscodeResult> transcode_frames(const VideoReader& source, int64_t first_frame,
                                         int64_t num_frames, const std::string& target,
                                         const TranscodeOptions& options) {
  const auto start = core::now();
  const std::string context = "transcoding frames [" + std::to_string(first_frame) + ", " +
                              std::to_string(first_frame + num_frames) + ") of '" + source.name() +
                              "' to '" + target + "'";
  STOKER_RETURN_IF_ERROR(validate(source, first_frame, num_frames, options).with_context(context));
  const media::Mp4Timing timing = output_timing(source.frame_table(), first_frame, num_frames);

  const std::string partial = target + ".partial";
  RemoveOnExit cleanup(partial);
  TranscodeResult result;
  STOKER_RETURN_IF_ERROR(transcode_into(source, first_frame, num_frames, partial, options, timing)
                             .with_context(context));
  STOKER_RETURN_IF_ERROR(
      verify(partial, timing, &result).with_context(context + ": checking the written file"));
  Result<core::FileIdentity> written = core::stat_file(partial);
  if (!written.ok()) return written.status().with_context(context + ": '" + partial + "'");
  result.bytes = written->size;
  STOKER_RETURN_IF_ERROR(core::commit_file(partial, target).with_context(context));
  cleanup.release();
  result.seconds = std::chrono::duration<double>(core::now() - start).count();
  return result;
}

}  // namespace stoker
