// Batches of a dataset of episodes (a LeRobot dataset's index): the source a Loader reads it
// through, and what only such a dataset is read with.
//
// For each batch: the sampler gives the rows; the window planner gives each sample's rows and
// per-camera frames; the rows are copied into the batch; the frames are grouped by video file
// and GOP and decoded by one decoder pass per group, each converted straight into its slot
// (pipeline/episode_source.h says how).
//
// Ownership: the source shares the index, the sampler and the transform.
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "stoker/depth_transform.h"
#include "stoker/episode_index.h"
#include "stoker/image_transform.h"
#include "stoker/loader.h"
#include "stoker/sampling.h"
#include "stoker/status.h"
#include "stoker/window_plan.h"

namespace stoker {

/// What batches say of each sample's row beside the window's keys, as LeRobot's items do: each
/// an int64 [batch] field, `task` a column of strings. A name a window key has is not added.
struct RowKeys {
  bool index = false;          // the sample's row
  bool episode_index = false;  // its episode's number: episode_numbers[its episode]
  bool frame_index = false;    // its row within its episode
  bool task_index = false;     // its episode's task (EpisodeIndex::episode_task)
  bool task = false;           // that task's text: tasks[task_index], "" when it has none
  /// Per episode of the index (dataset order): its number (LeRobot's episode_index).
  /// REQUIRES with episode_index: one per episode.
  std::vector<int64_t> episode_numbers;
  /// The task texts, by task index.
  std::vector<std::string> tasks;
};

/// What only a dataset of episodes is read with (the generic rest is LoaderOptions).
struct EpisodeOptions {
  /// kSkip: the rows replacements are drawn from (a subset's: its episodes' rows). Default:
  /// empty, every row of the index.
  std::vector<int64_t> replacement_rows;
  /// The video cameras whose frames are depth maps (single-channel 10- to 16-bit video):
  /// decoded to their stored samples, one channel, uint16 or float32 metres (see
  /// depth_transform.h), with the transform's geometry. Default: none (every camera is RGB).
  std::vector<DepthCamera> depth_cameras;
  /// The row keys batches hold. Default: none.
  RowKeys row_keys;
};

/// The source of batches of `keys` (as WindowPlanner::create takes them) of `index`, for
/// Loader::create(source, options); `sampler` gives this rank's rows (positions 0 .. size() - 1
/// of each epoch). The batch layout is made now (the cameras' first frame tables read).
/// Errors (kInvalidArgument): bad options, a key the index lacks, a replacement row outside the
/// index, a bad depth camera, episode numbers for another number of episodes; a camera whose
/// first video cannot be read, named.
Result<std::unique_ptr<pipeline::BatchSource>> make_episode_source(
    std::shared_ptr<const EpisodeIndex> index, std::vector<WindowKey> keys,
    std::shared_ptr<const sampling::Sampler> sampler,
    std::shared_ptr<const ImageTransform> transform, const LoaderOptions& options,
    EpisodeOptions episode = {});

}  // namespace stoker
