// EpisodeIndex: a dataset's episodes, videos and low-dimensional columns in one versioned,
// memory-mapped file, so that going from a row (a sample) to its episode, its rows and each
// camera's frame is O(1) array arithmetic, whatever the number of files.
//
// Built once per dataset by build() from whole columns (the Python front reads LeRobot's
// metadata and Parquet with pyarrow), it holds:
// - the episodes: first row, length, task; and the episode of every row;
// - per camera and episode: the video file and the episode's first frame in it. In packed
//   (LeRobot v3.0) files the stated offset is snapped to the nearest real pts once, at build;
//   the drift between the two is recorded, and rows map to frames by arithmetic inside the
//   episode;
// - the frame table of every video file (built in parallel);
// - the low-dimensional columns (state, action, ...) as contiguous typed arrays;
// - image cameras (LeRobot features of dtype `image`, whose PNG/JPEG bytes sit in the data
//   files): per camera and row, where the row's encoded image lies in one side file, written
//   beside the index by the Python front and memory-mapped here (workers share its pages);
// - the size and modification time of every source file, so a changed dataset is detected;
// - the episodes some camera's video could not serve, when the build was asked to keep them
//   (a reader leaves them out rather than refusing the whole dataset);
// - arrays and lists of strings attached by the builder, which the index keeps without reading
//   them (the Python front attaches the dataset's checked metadata, so that opening a current
//   index spares reading the metadata tables again).
//
// Ownership: open() returns a shared, immutable index; its arrays point into the mapping and
// live as long as it does.
// Thread-safety: every const method may be called from any thread; frame tables are decoded
// from the mapping on first use, once, under a lock.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "stoker/dtype.h"
#include "stoker/frame_table.h"
#include "stoker/status.h"

namespace stoker {

namespace core {
class MappedFile;
}  // namespace core

/// What an index is built from. All per-row arrays have num_rows entries, in dataset order.
struct EpisodeIndexSource {
  double fps = 0;
  /// Per episode (dataset order): its first row and its number of rows; episodes are contiguous.
  std::vector<int64_t> episode_from_row;
  std::vector<int64_t> episode_length;
  std::vector<int64_t> episode_task;
  /// Each row's timestamp within its episode (LeRobot's `timestamp` column), seconds.
  std::vector<double> row_timestamp;
  /// Camera names, and every video file of every camera (absolute paths).
  std::vector<std::string> cameras;
  std::vector<std::string> video_files;
  /// [camera][episode]: index into video_files, and the stated time of the episode's start in
  /// that file (LeRobot v3.0's from_timestamp; 0 for one file per episode).
  std::vector<std::vector<int64_t>> episode_video;
  std::vector<std::vector<double>> episode_video_offset;
  struct Column {
    std::string name;
    /// kFloat32, kFloat64 or kInt64.
    DType type = DType::kFloat32;
    int64_t dim = 1;
    std::vector<uint8_t> data;  // num_rows * dim values
  };
  std::vector<Column> columns;
  /// Image cameras: names (they follow the video cameras in EpisodeIndex::cameras()), the side
  /// file holding their encoded images back to back, and [image camera][row] each row's image
  /// as (offset, length) in that file. Empty image_cameras: no side file.
  std::vector<std::string> image_cameras;
  std::string image_file;
  std::vector<std::vector<int64_t>> image_offset;
  std::vector<std::vector<int64_t>> image_length;
  /// Other files whose change must rebuild the index (metadata, Parquet tables).
  std::vector<std::string> tracked_files;
  /// Attached for the index's readers, unread by the index itself: named arrays of any length
  /// (kInt32, kInt64, kFloat32 or kFloat64 values) and named lists of strings. Names are unique
  /// within each kind. Default: none.
  struct AttachedArray {
    std::string name;
    DType type = DType::kInt64;
    std::vector<uint8_t> data;  // a whole number of values
  };
  std::vector<AttachedArray> attached_arrays;
  struct AttachedStrings {
    std::string name;
    std::vector<std::string> values;
  };
  std::vector<AttachedStrings> attached_strings;
  /// How far a frame's pts may sit from the time its row states, after snapping, in seconds.
  double tolerance_s = 1e-4;
};

struct EpisodeIndexBuildOptions {
  /// Threads scanning video files. Default 0: usable_cores() (see stoker/cores.h).
  int threads = 0;
  /// Called from the building thread after each video file is scanned: (done, total).
  std::function<void(int64_t, int64_t)> progress;
  /// What an episode that a camera's video cannot serve does to the build (the file does not
  /// open, has too few frames for the episode's rows, shows them at other times, or the
  /// episode's stated start is not a number; dataset/episode_placement.h places them). Default
  /// false: build() fails, listing every such problem. true: build() writes the index all the
  /// same, recording each (episode, camera, why) in it (EpisodeIndex::broken_episodes()), so
  /// that whoever reads it can leave those episodes out, under whatever policy it has; the
  /// WindowPlanner refuses their rows.
  bool keep_broken_episodes = false;
};

/// An episode that one camera's video cannot serve, recorded by a build with
/// EpisodeIndexBuildOptions::keep_broken_episodes.
struct BrokenEpisode {
  int64_t episode = 0;  // position in dataset order
  int64_t camera = 0;   // a video camera
  std::string why;      // e.g. "cannot open: Invalid data found when processing input"
};

/// What build() found, for the user to read.
struct EpisodeIndexBuildReport {
  double seconds = 0;
  /// Per video file: the largest |real first-frame pts - stated offset| over its episodes.
  std::vector<double> max_drift_s;
};

class EpisodeIndex {
 public:
  /// Scans every video, snaps every episode's start, checks that each episode's rows fit its
  /// video frames, and writes the index to `path` atomically (a temporary file, then rename).
  /// Errors name the episode, camera and file; when several files fail, all are listed (unless
  /// options.keep_broken_episodes records them in the index instead).
  static Status build(const EpisodeIndexSource& source, const std::string& path,
                      const EpisodeIndexBuildOptions& options = {},
                      EpisodeIndexBuildReport* report = nullptr);

  /// Maps an index file. Fails (kCorruptData) on a foreign or older format version or any
  /// inconsistency; never reads outside the file.
  static Result<std::shared_ptr<const EpisodeIndex>> open(const std::string& path);
  ~EpisodeIndex();

  /// The source files (videos and tracked files) whose size or modification time changed since
  /// the build, or that are gone. Empty means the index is current.
  std::vector<std::string> stale_files() const;

  /// The CRC-32C of the index file's contents (checked when it was opened): what tells one
  /// build of an index from another, exactly.
  uint32_t checksum() const { return checksum_; }

  double fps() const { return fps_; }
  int64_t num_rows() const { return static_cast<int64_t>(row_episode_.size()); }
  int64_t num_episodes() const { return static_cast<int64_t>(episode_from_row_.size()); }
  /// Every camera: the video cameras first, then the image cameras.
  int64_t num_cameras() const { return static_cast<int64_t>(cameras_.size()); }
  int64_t num_video_cameras() const { return num_video_cameras_; }
  const std::vector<std::string>& cameras() const { return cameras_; }
  /// Whether camera c's frames are images stored per row (else frames of its videos).
  bool is_image_camera(int64_t c) const { return c >= num_video_cameras_; }
  const std::vector<std::string>& video_files() const { return video_files_; }

  /// REQUIRES: 0 <= row < num_rows(). O(1).
  int64_t episode_of_row(int64_t row) const { return row_episode_[row]; }
  int64_t episode_from_row(int64_t e) const { return episode_from_row_[e]; }
  int64_t episode_length(int64_t e) const { return episode_length_[e]; }
  int64_t episode_task(int64_t e) const { return episode_task_[e]; }
  double row_timestamp(int64_t row) const { return row_timestamp_[row]; }
  /// The same per episode, as arrays in the mapping (num_episodes() values each).
  std::span<const int64_t> episode_from_rows() const { return episode_from_row_; }
  std::span<const int64_t> episode_lengths() const { return episode_length_; }
  std::span<const int64_t> episode_tasks() const { return episode_task_; }

  /// Video camera c's file for episode e, the episode's first frame in it, and the drift of the
  /// stated offset from that frame's pts (seconds). REQUIRES: !is_image_camera(c).
  int64_t video_of(int64_t c, int64_t e) const { return episode_video_[c * num_episodes() + e]; }
  int64_t first_frame(int64_t c, int64_t e) const {
    return episode_first_frame_[c * num_episodes() + e];
  }
  double drift(int64_t c, int64_t e) const { return episode_drift_[c * num_episodes() + e]; }
  /// The frame of camera c showing `row`: first_frame + (row - episode start). O(1).
  int64_t frame_of_row(int64_t c, int64_t row) const {
    const int64_t e = row_episode_[row];
    return first_frame(c, e) + (row - episode_from_row_[e]);
  }

  /// The episodes whose video of some camera could not serve them when the index was built,
  /// in the order the build found them (empty unless built with keep_broken_episodes). Their
  /// first frames are 0 and their file may have no frame table: they must not be read.
  const std::vector<BrokenEpisode>& broken_episodes() const { return broken_; }
  /// Whether camera c cannot serve episode e (see broken_episodes(); never an image camera).
  /// REQUIRES: 0 <= c < num_cameras(), 0 <= e < num_episodes(). O(1).
  bool is_broken(int64_t c, int64_t e) const {
    return !broken_mask_.empty() && c < num_video_cameras_ &&
           broken_mask_[c * num_episodes() + e] != 0;
  }

  /// The encoded image (PNG or JPEG) of image camera c at `row`, in the mapped side file.
  /// REQUIRES: is_image_camera(c), 0 <= row < num_rows(). O(1).
  std::span<const uint8_t> image_bytes(int64_t c, int64_t row) const {
    const size_t k = static_cast<size_t>((c - num_video_cameras_) * num_rows() + row);
    return image_data_.subspan(static_cast<size_t>(image_offset_[k]),
                               static_cast<size_t>(image_length_[k]));
  }
  /// The side file of the image cameras ("" without any).
  const std::string& image_file() const { return image_file_; }

  /// The frame table of video file `v`, decoded from the mapping on first use. Fails
  /// (kCorruptData) for a file the build could not scan (see broken_episodes()).
  Result<std::shared_ptr<const FrameTable>> frame_table(int64_t v) const;

  struct ColumnView {
    std::string name;
    DType type;
    int64_t dim;
    std::span<const uint8_t> data;  // num_rows() * dim values, in the mapping
  };
  const std::vector<ColumnView>& columns() const { return columns_; }

  /// An array attached at build (EpisodeIndexSource::attached_arrays), in the mapping; null
  /// when the index has none of that name. It lives as long as the index.
  struct AttachedArrayView {
    std::string name;
    DType type;
    std::span<const uint8_t> data;
  };
  const AttachedArrayView* attached_array(const std::string& name) const;
  /// A list of strings attached at build, decoded from the mapping on each call (so that an
  /// index holding long lists costs nothing until they are asked for). kNotFound when the index
  /// has none of that name; kCorruptData when its bytes do not decode.
  Result<std::vector<std::string>> attached_strings(const std::string& name) const;

 private:
  EpisodeIndex();
  struct FrameTables;
  struct TrackedFile {
    std::string path;
    int64_t size;
    int64_t mtime_ns;
  };

  std::unique_ptr<core::MappedFile> mapping_;
  std::unique_ptr<core::MappedFile> image_mapping_;
  std::span<const uint8_t> image_data_;
  std::span<const int64_t> image_offset_, image_length_;
  std::string image_file_;
  int64_t num_video_cameras_ = 0;
  uint32_t checksum_ = 0;
  double fps_ = 0;
  std::span<const int64_t> episode_from_row_, episode_length_, episode_task_;
  std::span<const int32_t> row_episode_;
  std::span<const double> row_timestamp_;
  std::span<const int64_t> episode_video_, episode_first_frame_;
  std::span<const double> episode_drift_;
  std::vector<std::string> cameras_;
  std::vector<std::string> video_files_;
  std::vector<std::span<const uint8_t>> frame_table_bytes_;
  std::vector<TrackedFile> tracked_;
  std::vector<ColumnView> columns_;
  std::vector<AttachedArrayView> attached_arrays_;
  std::vector<std::pair<std::string, std::span<const uint8_t>>> attached_strings_;
  std::vector<BrokenEpisode> broken_;
  std::vector<uint8_t> broken_mask_;  // [camera][episode], empty when none is broken
  // The frame tables decoded so far, under their own lock.
  std::unique_ptr<FrameTables> tables_;
};

}  // namespace stoker
