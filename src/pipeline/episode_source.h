// EpisodeSource: the batches of a dataset of episodes (an EpisodeIndex: rows of columns, one
// video or image camera per view), one sample a window of rows around its id.
//
//   plan()          the ids; every slot's rows and pad masks straight into the buffer, the
//                   transform's random parameters drawn, the reads listed;
//   group_reads()   the slots' reads grouped by video file, then by the GOPs they touch
//                   (overlapping keyframe-to-last-frame spans merge): one decoder pass each;
//                   an image camera's read (rows of stored PNG/JPEG) is a group of its own;
//   prefetch()      remote videos asked for every group's packets at once;
//   decode_group()  one group decoded, each distinct frame once, converted straight into its
//                   slots; a failing group is retried read by read, so only failing slots fail;
//   finish()        the batch's error (kRaise), or each failed slot replaced (kSkip).
//
// Ownership: the source shares the index, planner inputs, sampler and transform; it owns the
// VideoReaders it opens (one per video file, on first use).
// Thread-safety: as BatchSource's.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/mutex.h"
#include "pipeline/batch_layout.h"
#include "pipeline/batch_pool.h"
#include "pipeline/batch_source.h"
#include "stoker/episode_index.h"
#include "stoker/episode_source.h"
#include "stoker/image_transform.h"
#include "stoker/loader.h"
#include "stoker/sampling.h"
#include "stoker/video_reader.h"
#include "stoker/window_plan.h"

namespace stoker::pipeline {

/// One batch of episodes being built: per slot its window's plan, per slot and camera the
/// geometry of its frames.
struct EpisodeWork final : BatchWork {
  using BatchWork::BatchWork;
  std::vector<WindowPlan> plans;        // per slot
  std::vector<FrameGeometry> geometry;  // [slot * num_cameras + camera]
};

class EpisodeSource final : public BatchSource, public Refillable {
 public:
  EpisodeSource(std::shared_ptr<const EpisodeIndex> index, std::unique_ptr<WindowPlanner> planner,
                std::shared_ptr<const sampling::Sampler> sampler,
                std::shared_ptr<const ImageTransform> transform, BatchLayout layout,
                const LoaderOptions& options, EpisodeOptions episode);

  const BatchLayout& layout() const { return layout_; }
  int64_t num_samples() const override { return index_->num_rows(); }
  void place_fields(const std::vector<size_t>& offsets, size_t batch_bytes) override;
  const std::shared_ptr<const std::vector<BatchField>>& fields() const override {
    return layout_.fields;
  }
  size_t batch_bytes() const override { return layout_.batch_bytes; }
  const sampling::Sampler& sampler() const override { return *sampler_; }

  std::unique_ptr<BatchWork> new_work(uint32_t epoch, int64_t index,
                                      std::shared_ptr<PooledBatch> batch) const override;
  Status plan(BatchWork& work) override;
  Status plan_samples(BatchWork& work, std::vector<int64_t> slots,
                      std::span<const int64_t> rows) override;
  /// A slot whose frames are not in their video (a damaged index) gets its error instead.
  std::vector<ReadGroup> group_reads(BatchWork& work) override;
  /// VideoReader::prefetch for every group whose file is remote.
  void prefetch(BatchWork& work, const std::vector<ReadGroup>& groups) override;
  void decode_group(BatchWork& work, const ReadGroup& group) override;
  Status finish(BatchWork& work) override;
  /// `task`, when the row keys hold it.
  std::vector<std::string> column_names() const override;

  BuildStats stats() const override;
  void reset_stats() override;

  /// Replacements come from EpisodeOptions::replacement_rows, or every row when it is empty.
  int64_t replacement_pool() const override;
  int64_t replacement(int64_t k) const override;
  Status refill(BatchWork& work, int64_t slot, int64_t row) override;

 private:
  Status plan_slot(EpisodeWork& work, int64_t slot, int64_t row);
  Status decode_reads(EpisodeWork& work, const ReadGroup& reads);
  Status decode_images(EpisodeWork& work, const ReadGroup& reads);
  void fail_slot(EpisodeWork& work, const SlotRead& read, const Status& status);
  Result<const VideoReader*> reader_of(int64_t video);
  std::string describe_sample(const EpisodeWork& work, int64_t row) const;
  std::string describe_read(const EpisodeWork& work, int64_t row, int64_t camera) const;

  const std::shared_ptr<const EpisodeIndex> index_;
  const std::unique_ptr<WindowPlanner> planner_;
  const std::shared_ptr<const sampling::Sampler> sampler_;
  const std::shared_ptr<const ImageTransform> transform_;
  BatchLayout layout_;  // its fields placed by place_fields() before the first batch
  const LoaderOptions options_;
  const std::vector<int64_t> replacement_rows_;  // empty: every row
  const RowKeys row_keys_;

  core::Mutex readers_mutex_;
  std::vector<std::unique_ptr<VideoReader>> readers_ GUARDED_BY(readers_mutex_);  // per file

  std::atomic<int64_t> sampling_ns_{0}, index_ns_{0}, decode_ns_{0}, transform_ns_{0},
      collate_ns_{0};
  mutable core::Mutex decode_mutex_;
  DecodeStats decode_ GUARDED_BY(decode_mutex_);
  int64_t decode_calls_ GUARDED_BY(decode_mutex_) = 0;
};

}  // namespace stoker::pipeline
