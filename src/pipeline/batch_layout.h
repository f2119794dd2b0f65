// BatchLayout: where every key of a sample goes in a batch's buffer. Computed once per Loader
// from the window keys, the index's columns and the image transform; read by every thread that
// builds a batch.
//
// A batch's buffer holds one C-contiguous [batch_size, ...] array per field, in key order: each
// key, then `<key>_is_pad` for windowed keys, then the row keys asked for (RowKeys), each
// starting on a 64-byte boundary. The shapes are
// the items' (the fronts add no axis and drop none): [B, (T,) ...], where a column of one value
// per row is a scalar ([B] or [B, T]) and a key that drops its time axis has no T.
//
// Thread-safety: immutable after create().
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "stoker/depth_transform.h"
#include "stoker/episode_index.h"
#include "stoker/episode_source.h"
#include "stoker/image_transform.h"
#include "stoker/loader.h"
#include "stoker/window_plan.h"

namespace stoker::pipeline {

/// One key of the planner: what it reads and where its values go.
struct KeyLayout {
  int64_t camera = -1;     // the camera it reads, or -1 for a column
  int64_t column = -1;     // the column it reads, or -1 for a camera
  int64_t steps = 1;       // time steps per sample (T): its offsets, or 1 without a window
  size_t field = 0;        // its field
  int64_t pad_field = -1;  // its _is_pad field, -1 without a window
  size_t step_bytes = 0;   // one time step of one sample
  int height = 0;          // cameras: the output frame size
  int width = 0;
};

struct BatchLayout {
  std::shared_ptr<const std::vector<BatchField>> fields;
  std::vector<KeyLayout> keys;                    // per key of the planner, in its order
  std::vector<std::pair<int, int>> camera_sizes;  // per camera of the index: (height, width)
  std::vector<std::optional<DepthCamera>> depth;  // per camera of the index: depth, or RGB
  // Per camera of the index: every stored sample's value for a metric depth camera
  // (depth_value_table), empty otherwise.
  std::vector<std::vector<float>> depth_values;
  size_t batch_bytes = 0;  // the buffer of one batch
  // The row keys' int64 [batch] fields (-1: not held), and whether `task` is a column.
  int64_t index_field = -1, episode_index_field = -1, frame_index_field = -1, task_index_field = -1;
  bool task_column = false;

  /// The layout of batches of `batch_size` samples of `planner`'s keys. A camera's output size
  /// comes from its first video, or for an image camera from its first image's header (every
  /// batch has one size per key). Errors: a camera whose first frame table or image cannot be
  /// read, named. A depth camera's keys hold one channel of depth.dtype() (the transform's
  /// layout places it: [1, H, W] or [H, W, 1]); errors (kInvalidArgument): a depth camera the
  /// index lacks, named twice, an image camera, or with a bad coding (check_depth_camera).
  static Result<BatchLayout> create(const EpisodeIndex& index, const WindowPlanner& planner,
                                    const ImageTransform& transform, int64_t batch_size,
                                    std::span<const DepthCamera> depth_cameras = {},
                                    const RowKeys& row_keys = {});

  /// Where time step `step` of slot `slot` of `key` starts in a buffer at `buffer`.
  uint8_t* at(uint8_t* buffer, const KeyLayout& key, int64_t slot, int64_t step) const {
    return buffer + (*fields)[key.field].offset + (slot * key.steps + step) * key.step_bytes;
  }
};

}  // namespace stoker::pipeline
