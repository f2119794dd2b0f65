#include "dataset/episode_placement.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace stoker {
namespace {

Status invalid(const std::string& why) { return Status(StatusCode::kInvalidArgument, why); }

// What placing reads of the source, checked so that no index leaves its array (a build has
// checked more already; a check passes what it could read).
Status check_inputs(const EpisodeIndexSource& s, size_t c,
                    std::span<const FrameTable* const> tables) {
  if (!(s.fps > 0)) return invalid("fps must be positive");
  if (c >= s.episode_video.size() || c >= s.episode_video_offset.size()) {
    return invalid("camera " + std::to_string(c) + " has no episode columns");
  }
  const size_t episodes = s.episode_from_row.size();
  if (s.episode_length.size() != episodes || s.episode_video[c].size() != episodes ||
      s.episode_video_offset[c].size() != episodes) {
    return invalid("episode columns differ in length");
  }
  if (tables.size() != s.video_files.size()) {
    return invalid(std::to_string(tables.size()) + " frame tables for " +
                   std::to_string(s.video_files.size()) + " video files");
  }
  const auto rows = static_cast<int64_t>(s.row_timestamp.size());
  for (size_t e = 0; e < episodes; ++e) {
    const int64_t from = s.episode_from_row[e], length = s.episode_length[e];
    if (from < 0 || length < 0 || from > rows || length > rows - from) {
      return invalid("episode " + std::to_string(e) + "'s rows [" + std::to_string(from) + ", " +
                     std::to_string(from) + " + " + std::to_string(length) + ") lie outside the " +
                     std::to_string(rows) + " rows");
    }
    const int64_t v = s.episode_video[c][e];
    if (v < 0 || v >= static_cast<int64_t>(tables.size())) {
      return invalid("episode " + std::to_string(e) + " names video file " + std::to_string(v) +
                     ", which does not exist");
    }
  }
  return Status();
}

}  // namespace

Result<EpisodePlacement> place_episodes(const EpisodeIndexSource& s, size_t c,
                                        std::span<const FrameTable* const> tables) {
  STOKER_RETURN_IF_ERROR(check_inputs(s, c, tables));
  const size_t episodes = s.episode_from_row.size();
  const std::vector<double>& offset = s.episode_video_offset[c];
  constexpr double kUnknown = std::numeric_limits<double>::quiet_NaN();
  EpisodePlacement out;
  out.first_frame.assign(episodes, -1);
  out.drift.assign(episodes, kUnknown);
  out.snap.assign(episodes, kUnknown);
  std::vector<std::vector<size_t>> by_file(tables.size());
  for (size_t e = 0; e < episodes; ++e) by_file[s.episode_video[c][e]].push_back(e);
  const double frame_period = 1.0 / s.fps;
  for (size_t v = 0; v < by_file.size(); ++v) {
    std::vector<size_t>& in_file = by_file[v];
    if (in_file.empty() || tables[v] == nullptr) continue;
    const FrameTable& table = *tables[v];
    // An episode's stated start: its offset in the file plus its first row's time.
    auto stated_start = [&](size_t e) {
      return s.episode_length[e] > 0 ? offset[e] + s.row_timestamp[s.episode_from_row[e]]
                                     : offset[e];
    };
    // A strict weak order even with NaN offsets (broken metadata): those go last.
    std::stable_sort(in_file.begin(), in_file.end(), [&](size_t a, size_t b) {
      return offset[a] < offset[b] || (!std::isnan(offset[a]) && std::isnan(offset[b]));
    });
    int64_t rows = 0;
    bool every_start_known = true;
    for (size_t e : in_file) {
      rows += s.episode_length[e];
      if (s.episode_length[e] > 0 && !std::isfinite(stated_start(e))) every_start_known = false;
    }
    const int64_t frames = table.num_frames();
    // Tiling needs the order of every episode in the file: with a start unknown, where the
    // episodes after it begin is too, and each known one is snapped instead.
    const bool tiled = rows == frames && every_start_known;
    int64_t cursor = 0;
    double previous_drift = 0;  // drift grows along a packed file, so snap relative to it
    for (size_t e : in_file) {
      const int64_t length = s.episode_length[e];
      if (length == 0) continue;  // no rows, no frames: nothing to place
      const auto episode = static_cast<int64_t>(e);
      const auto video = static_cast<int64_t>(v);
      out.order.push_back(episode);
      if (frames == 0) {
        out.problems.push_back({episode, static_cast<int64_t>(c), video, "the file has no frames"});
        continue;
      }
      const int64_t from_row = s.episode_from_row[e];
      const double stated = stated_start(e);
      if (!std::isfinite(stated)) {  // left unplaced; the next is snapped as if it were not there
        out.problems.push_back({episode, static_cast<int64_t>(c), video,
                                "its stated start is not a number (offset " +
                                    std::to_string(offset[e]) + " s, first row at " +
                                    std::to_string(s.row_timestamp[from_row]) + " s)"});
        continue;
      }
      const double sought = stated + previous_drift;
      const int64_t first = tiled ? cursor : table.nearest_frame(sought);
      cursor = first + length;
      out.first_frame[e] = first;
      out.drift[e] = table.pts_seconds(first) - stated;
      out.snap[e] = tiled ? 0.0 : table.pts_seconds(first) - sought;
      previous_drift = out.drift[e];
      if (!tiled && std::abs(out.snap[e]) > frame_period / 2) {
        out.problems.push_back({episode, static_cast<int64_t>(c), video,
                                "no frame near its stated start " + std::to_string(stated) +
                                    " s, and the file's " + std::to_string(frames) +
                                    " frames do not match its " + std::to_string(rows) + " rows"});
        continue;
      }
      if (first + length > frames) {
        out.problems.push_back({episode, static_cast<int64_t>(c), video,
                                "the episode needs " + std::to_string(length) +
                                    " frames from frame " + std::to_string(first) +
                                    ", the file has " + std::to_string(frames)});
        continue;
      }
      const double start_pts = table.pts_seconds(first);
      for (int64_t k = 1; k < length; ++k) {
        const double expected =
            start_pts + s.row_timestamp[from_row + k] - s.row_timestamp[from_row];
        const double actual = table.pts_seconds(first + k);
        if (std::abs(actual - expected) > s.tolerance_s) {
          out.problems.push_back({episode, static_cast<int64_t>(c), video,
                                  "row " + std::to_string(from_row + k) + " is at " +
                                      std::to_string(expected) + " s in the video, its frame " +
                                      std::to_string(first + k) + " at " + std::to_string(actual) +
                                      " s (timestamps inconsistent with the video)"});
          break;
        }
      }
    }
  }
  return out;
}

}  // namespace stoker
