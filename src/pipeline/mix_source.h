// MixSource: the batches of several sources read as one (stoker/mix_source.h says what a batch
// holds).
//
//   plan()          the mix's ids; each slot's part and its sample; each part plans its slots
//                   (plan_samples) into the shared buffer; the fields a slot's part lacks
//                   zeroed, the masks and dataset_index written;
//   group_reads()   every part's groups (a group's first slot says its part);
//   prefetch()      every part's, for its groups;
//   decode_group()  the group's part decodes it;
//   finish()        every part settles its failed slots (replacements come from the same
//                   part), then the parts' columns merged by slot.
//
// Ownership: owns the parts' sources; a MixWork owns one work per part, on the mix's batch.
// Thread-safety: as BatchSource's.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "pipeline/batch_source.h"
#include "stoker/mix_source.h"

namespace stoker::pipeline {

struct MixWork final : BatchWork {
  using BatchWork::BatchWork;
  std::vector<std::unique_ptr<BatchWork>> parts;  // per part, on this work's batch
  std::vector<int32_t> part_of_slot;
  std::vector<int64_t> place_in_part;  // per slot: its entry in its part's columns
};

class MixSource final : public BatchSource {
 public:
  /// Errors: as create_mix_loader's.
  static Result<std::unique_ptr<MixSource>> create(std::vector<MixPart> parts,
                                                   std::shared_ptr<const sampling::Sampler> sampler,
                                                   const LoaderOptions& options);

  const std::shared_ptr<const std::vector<BatchField>>& fields() const override { return fields_; }
  size_t batch_bytes() const override { return batch_bytes_; }
  const sampling::Sampler& sampler() const override { return *sampler_; }
  std::vector<std::string> column_names() const override { return column_names_; }
  int64_t num_samples() const override { return offsets_.back(); }
  void place_fields(const std::vector<size_t>& offsets, size_t batch_bytes) override;

  std::unique_ptr<BatchWork> new_work(uint32_t epoch, int64_t index,
                                      std::shared_ptr<PooledBatch> batch) const override;
  Status plan(BatchWork& work) override;
  Status plan_samples(BatchWork& work, std::vector<int64_t> slots,
                      std::span<const int64_t> samples) override;
  std::vector<ReadGroup> group_reads(BatchWork& work) override;
  void prefetch(BatchWork& work, const std::vector<ReadGroup>& groups) override;
  void decode_group(BatchWork& work, const ReadGroup& group) override;
  Status finish(BatchWork& work) override;

  BuildStats stats() const override;
  void reset_stats() override;

 private:
  // How a union field is filled in the slots of a part that lacks it.
  struct Filler {
    size_t field = 0;
    std::vector<uint8_t> value_per_part;  // the byte every slot of part k lacking it gets
    std::vector<bool> part_has;           // whether part k writes the field itself
  };

  MixSource(std::vector<MixPart> parts, std::shared_ptr<const sampling::Sampler> sampler,
            const LoaderOptions& options);
  Status lay_out();
  Status merge_columns(MixWork& work) const;

  std::vector<MixPart> parts_;
  const std::shared_ptr<const sampling::Sampler> sampler_;
  const LoaderOptions options_;
  std::vector<int64_t> offsets_;                  // the first id of each part, and the total
  std::vector<std::vector<size_t>> part_fields_;  // per part, per field of its: the mix's field
  std::shared_ptr<const std::vector<BatchField>> fields_;
  size_t batch_bytes_ = 0;
  size_t dataset_index_field_ = 0;
  std::vector<Filler> fillers_;  // the fields some part lacks
  std::vector<std::string> column_names_;
  std::atomic<int64_t> sampling_ns_{0}, collate_ns_{0};
};

}  // namespace stoker::pipeline
