// WindowPlanner: from a sample (a row of the dataset) and a window spec to the rows and frames
// that sample needs: per output key, the rows at its offsets (clamped to the episode, with a pad
// mask where clamped, as LeRobot does), and per camera one list of frames to decode in one call.
//
// Offsets are in rows (frames); the Python WindowSpec converts LeRobot's delta_timestamps to
// rows and checks them against fps. Several keys may read the same camera (past / current /
// future segments): their frames go into the same per-camera read.
//
// Ownership: a planner shares its EpisodeIndex. Thread-safety: plan() is const and may run on
// any number of threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "stoker/episode_index.h"
#include "stoker/status.h"

namespace stoker {

struct WindowKey {
  /// The output key, e.g. "observation.images.front" or "front_past".
  std::string name;
  /// A camera or a column of the index, e.g. "observation.images.front", "action".
  std::string source;
  /// Rows relative to the sample's row, e.g. {-2, -1, 0}. Empty: the sample's own row, with no
  /// time axis in the output (as LeRobot returns keys without delta_timestamps).
  std::vector<int64_t> offsets;
  /// With one offset: no time axis in the output, as LeRobot's own call squeezes a window of
  /// one frame (its `<name>_is_pad` keeps its axis of 1). REQUIRES: offsets.size() == 1.
  bool drop_time_axis = false;
};

/// What one sample needs. Per key k, entries [key_begin[k], key_begin[k + 1]) of `rows` and
/// `pad` are its time steps (one entry when the key has no offsets).
struct WindowPlan {
  int64_t row = 0;
  int64_t episode = 0;
  std::vector<int64_t> rows;
  std::vector<uint8_t> pad;  // 1 where the offset left the episode and the row was clamped
  std::vector<int64_t> key_begin;

  /// One decode call per camera: the frames of all its keys, in key order, repeats allowed.
  /// An image camera (EpisodeIndex::is_image_camera) has no video file (-1): its "frames" are
  /// the rows whose images it reads (EpisodeIndex::image_bytes).
  struct Read {
    int64_t camera = 0;
    int64_t video_file = 0;
    std::vector<int64_t> frames;
  };
  std::vector<Read> reads;
  /// Per key: its index in `reads` (-1 for column keys) and the position of its first frame in
  /// that read's frames.
  std::vector<int64_t> key_read;
  std::vector<int64_t> key_read_begin;
};

class WindowPlanner {
 public:
  /// Resolves every key's source. Errors (kInvalidArgument): an unknown source, a duplicate
  /// output name, no keys.
  static Result<std::unique_ptr<WindowPlanner>> create(std::shared_ptr<const EpisodeIndex> index,
                                                       std::vector<WindowKey> keys);

  const std::vector<WindowKey>& keys() const { return keys_; }
  /// For each key: the camera it reads, or -1 when it is a column.
  const std::vector<int64_t>& key_camera() const { return key_camera_; }
  /// For each key: the column it reads (index into EpisodeIndex::columns()), or -1.
  const std::vector<int64_t>& key_column() const { return key_column_; }

  /// Fills `plan` for sample `row`. Errors: kInvalidArgument when row is out of range;
  /// kCorruptData when a camera read is broken for the row's episode
  /// (EpisodeIndex::is_broken), naming the episode, camera, file and why.
  Status plan(int64_t row, WindowPlan* plan) const;

  /// The estimated decode cost of sample `row`, for balancing load across ranks: per camera,
  /// the packets a decoder must process for the sample's frames (from the keyframe before each
  /// run of frames to its last frame, as VideoReader decodes) times the frame's pixels; per
  /// image camera, the encoded bytes of its images times 8 (a PNG or JPEG decodes in time
  /// roughly proportional to its bytes; a byte of a compressed image stands for several pixels).
  Result<double> cost(int64_t row) const;

 private:
  WindowPlanner() = default;
  std::shared_ptr<const EpisodeIndex> index_;
  std::vector<WindowKey> keys_;
  std::vector<int64_t> key_camera_;
  std::vector<int64_t> key_column_;
};

}  // namespace stoker
