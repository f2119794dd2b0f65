// Where each episode of a camera starts in its video file: the one rule the episode index
// builds with (EpisodeIndex::build) and `stoker check` checks with, so that the two never place
// an episode on different frames.
//
// A file's episodes follow each other in the order of their stated offsets (LeRobot v3.0's
// from_timestamp; ties in dataset order). When the file's frames are exactly its episodes'
// rows, they tile it frame by frame and the stated offsets only order them; otherwise each is
// snapped to the frame nearest its stated start plus the drift of the episode before it in the
// file (stated offsets summed from durations drift slowly along a packed file). Either way every
// row's time is then checked against its frame's pts; an episode that its file cannot serve is
// recorded as a problem, and placing goes on with the next. An episode whose stated start is
// not a number (a NaN offset or first row time) is a problem and left unplaced; its file is not
// tiled then (where the episodes after it begin is unknown): the others are snapped.
//
// Thread-safety: a pure function. Ownership: the source and the frame tables are borrowed for
// the call.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "stoker/episode_index.h"
#include "stoker/frame_table.h"
#include "stoker/status.h"

namespace stoker {

/// An episode that a camera's video file cannot serve.
struct PlacementProblem {
  int64_t episode = 0;  // position in dataset order
  int64_t camera = 0;   // index into EpisodeIndexSource::cameras
  int64_t video = 0;    // index into EpisodeIndexSource::video_files
  std::string why;      // e.g. "the episode needs 30 frames from frame 60, the file has 75"
};

/// Where one camera's episodes lie in their files.
struct EpisodePlacement {
  /// Per episode: its first frame in its file, and that frame's pts minus the episode's stated
  /// start (seconds). -1 and NaN for an episode left unplaced: its file has no frame table, it
  /// has no rows, or its stated start is not a number.
  std::vector<int64_t> first_frame;
  std::vector<double> drift;
  /// Per episode: the placed frame's pts minus the time it was sought at (the stated start
  /// plus the drift of the episode before it in the file); 0 in a file its episodes tile, NaN
  /// where unplaced. Beyond half a frame period, no frame lies near the stated start.
  std::vector<double> snap;
  /// The placed episodes, file by file (in file number order), each file's in the order they
  /// follow each other in it.
  std::vector<int64_t> order;
  /// What could not be placed, in `order`; at most one problem per episode.
  std::vector<PlacementProblem> problems;
};

/// Places every episode of camera `camera` of `source` in its video file, `tables[v]` being
/// the frame table of source.video_files[v] (null: the file could not be scanned; its
/// episodes are left unplaced, without a problem: the caller knows why). Reads fps,
/// episode_from_row, episode_length, row_timestamp, episode_video, episode_video_offset and
/// tolerance_s of the source, nothing else.
/// Errors (kInvalidArgument): fps not positive, `camera` or a file number out of range,
/// per-episode arrays of other lengths than episode_from_row, an episode's rows outside
/// row_timestamp, tables.size() != source.video_files.size().
Result<EpisodePlacement> place_episodes(const EpisodeIndexSource& source, size_t camera,
                                        std::span<const FrameTable* const> tables);

}  // namespace stoker
