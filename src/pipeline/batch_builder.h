// BatchBuilder: the work of building one batch, as plain functions on a BatchWork that tests
// can call on one thread; the Loader runs the same functions as tasks on its pool.
//
//   plan()          draw the ids; plan every slot: rows and pad masks straight into the
//                   buffer, the transform's random parameters drawn, the reads listed;
//   group_reads()   group the slots' reads by video file, then by the GOPs they touch
//                   (overlapping keyframe-to-last-frame spans merge): one decoder pass each;
//                   an image camera's read (rows of stored PNG/JPEG) is a group of its own;
//   prefetch()      ask remote files for every group's bytes at once, so that their fetches
//                   overlap each other and the decoding of groups before them;
//   decode_group()  decode one group, each distinct frame once, converted straight into its
//                   slots; a failing group is retried read by read, so only failing slots fail;
//   finish()        after every group: the batch's error (kRaise), or each failed slot
//                   replaced by a sample drawn from (seed, epoch, failed sample) (kSkip).
//
// Ownership: the builder shares the index, planner inputs, sampler and transform; it owns the
// VideoReaders it opens (one per video file, on first use). A BatchWork owns its plans and
// shares its batch.
// Thread-safety: every method may run on any thread. For one BatchWork: plan() first, then
// decode_group() on any threads at once (one call per group), then finish() once every group
// is done.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/mutex.h"
#include "pipeline/batch_layout.h"
#include "pipeline/batch_pool.h"
#include "stoker/episode_index.h"
#include "stoker/image_transform.h"
#include "stoker/loader.h"
#include "stoker/sampling.h"
#include "stoker/video_reader.h"
#include "stoker/window_plan.h"

namespace stoker::pipeline {

/// One batch being built.
struct BatchWork {
  BatchWork(uint32_t epoch, int64_t index, std::shared_ptr<PooledBatch> batch)
      : epoch(epoch), index(index), batch(std::move(batch)) {}

  const uint32_t epoch;
  const int64_t index;  // the batch's number in its epoch
  // Given up when the batch is delivered, so that only its consumer keeps its buffer.
  std::shared_ptr<PooledBatch> batch;
  std::vector<WindowPlan> plans;        // per slot
  std::vector<FrameGeometry> geometry;  // [slot * num_cameras + camera]
  std::vector<SkipRecord> skips;        // the slots replaced by finish()

  /// Why each slot failed (OK: it did not). The reads of one slot may fail on several
  /// threads at once.
  mutable core::Mutex errors_mutex;
  std::vector<Status> slot_errors GUARDED_BY(errors_mutex);
};

/// One read of one slot: the frames sample `slot` needs from one camera's file.
struct SlotRead {
  int64_t slot = 0;
  size_t read = 0;  // index into the slot's plan's reads
};
using ReadGroup = std::vector<SlotRead>;

/// Time per stage, summed over threads, and the decoder's work.
struct BuildStats {
  double sampling_s = 0, index_s = 0, decode_s = 0, transform_s = 0, collate_s = 0;
  DecodeStats decode;
  int64_t decode_calls = 0;
};

class BatchBuilder {
 public:
  BatchBuilder(std::shared_ptr<const EpisodeIndex> index, std::unique_ptr<WindowPlanner> planner,
               std::shared_ptr<const sampling::Sampler> sampler,
               std::shared_ptr<const ImageTransform> transform, BatchLayout layout,
               const LoaderOptions& options);

  const BatchLayout& layout() const { return layout_; }
  const sampling::Sampler& sampler() const { return *sampler_; }

  /// Draws the ids of `work`'s batch from the sampler and plans every slot; a slot that
  /// cannot be planned gets its error in slot_errors. Errors: the sampler's.
  Status plan(BatchWork& work);
  /// The reads of every planned slot, grouped for one decoder pass each. A slot whose frames
  /// are not in their video (a damaged index) gets its error instead.
  std::vector<ReadGroup> group_reads(BatchWork& work);
  /// Starts fetching the bytes of every group whose file is remote (VideoReader::prefetch);
  /// nothing for local files.
  void prefetch(BatchWork& work, const std::vector<ReadGroup>& groups);
  /// Decodes `group` into its slots; the slots whose reads fail get their errors.
  void decode_group(BatchWork& work, const ReadGroup& group);
  /// Settles the failed slots by the error policy: the first failure under kRaise; under kSkip,
  /// replacements (recorded in work.skips), or an error when a slot's replacements all fail.
  Status finish(BatchWork& work);

  BuildStats stats() const;
  void reset_stats();

 private:
  Status plan_slot(BatchWork& work, int64_t slot, int64_t row);
  Status decode_reads(BatchWork& work, const ReadGroup& reads);
  Status decode_images(BatchWork& work, const ReadGroup& reads);
  void fail_slot(BatchWork& work, const SlotRead& read, const Status& status);
  Status replace(BatchWork& work, int64_t slot, const Status& failure);
  Result<const VideoReader*> reader_of(int64_t video);
  std::string describe_sample(const BatchWork& work, int64_t row) const;
  std::string describe_read(const BatchWork& work, int64_t row, int64_t camera) const;

  const std::shared_ptr<const EpisodeIndex> index_;
  const std::unique_ptr<WindowPlanner> planner_;
  const std::shared_ptr<const sampling::Sampler> sampler_;
  const std::shared_ptr<const ImageTransform> transform_;
  const BatchLayout layout_;
  const LoaderOptions options_;

  core::Mutex readers_mutex_;
  std::vector<std::unique_ptr<VideoReader>> readers_ GUARDED_BY(readers_mutex_);  // per file

  std::atomic<int64_t> sampling_ns_{0}, index_ns_{0}, decode_ns_{0}, transform_ns_{0},
      collate_ns_{0};
  mutable core::Mutex decode_mutex_;
  DecodeStats decode_ GUARDED_BY(decode_mutex_);
  int64_t decode_calls_ GUARDED_BY(decode_mutex_) = 0;
};

}  // namespace stoker::pipeline
