// ShardSource: the batches of a dataset of tar shards (stoker/shard_source.h says what they
// hold).
//
//   plan()          the ids; each slot's sample checked (a sample known to be bad fails);
//   group_reads()   the slots grouped by shard, in runs of at most kSlotsPerGroup: one task,
//                   one ranged read of all their members;
//   prefetch()      remote shards asked for every group's members at once;
//   decode_group()  the run's members read (headers checked) and decoded into their slots:
//                   images with the field's transform, clips by a VideoReader over the
//                   member's bytes, labels and json numbers into the buffer; text, tokens,
//                   arrays and json strings kept per slot for finish();
//   finish()        arrays of another shape than the batch's first fail their slot; failed
//                   slots raised or replaced; then the columns gathered, one arena each.
//
// Ownership: shares the samples and the sampler; owns the fields' transforms.
// Thread-safety: as BatchSource's.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "pipeline/batch_source.h"
#include "stoker/image_transform.h"
#include "stoker/shard_source.h"

namespace stoker::pipeline {

/// What one slot decoded of a field that finish() gathers: a text's or string's bytes, an
/// array's values (tokens as int64), its numpy dtype name and shape.
struct SlotValue {
  std::vector<uint8_t> bytes;
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<std::string> strings;  // a json field: its str keys' values, in key order
};

struct ShardWork final : BatchWork {
  using BatchWork::BatchWork;
  std::vector<std::vector<SlotValue>> values;  // [slot][field]
};

class ShardSource final : public BatchSource, public Refillable {
 public:
  /// Slots per task: enough for a task to outweigh its scheduling, few enough that a batch
  /// read from one shard still spreads over every thread.
  static constexpr int64_t kSlotsPerGroup = 8;

  /// Errors (kInvalidArgument): no samples, a field without alternatives, a transform that
  /// cannot be made, an image or clip without a size.
  static Result<std::unique_ptr<ShardSource>> create(
      std::shared_ptr<const ShardSamples> samples, std::vector<ShardField> fields,
      std::shared_ptr<const sampling::Sampler> sampler, const LoaderOptions& options);

  const std::shared_ptr<const std::vector<BatchField>>& fields() const override {
    return batch_fields_;
  }
  size_t batch_bytes() const override { return batch_bytes_; }
  const sampling::Sampler& sampler() const override { return *sampler_; }
  /// Text, json strings, tokens and arrays, by field name; then the samples' keys, __key__.
  std::vector<std::string> column_names() const override;
  int64_t num_samples() const override;
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
  /// Replacements come from every sample.
  int64_t replacement_pool() const override { return num_samples(); }
  int64_t replacement(int64_t k) const override { return k; }
  Status refill(BatchWork& work, int64_t slot, int64_t sample) override;

  BuildStats stats() const override;
  void reset_stats() override;

 private:
  // Per spec field: where its fixed-size values go (-1: none), and its transform.
  struct FieldPlan {
    int64_t field = -1;         // the batch field of an image, clip, label or tokens' length
    std::vector<int64_t> json;  // a json field: per key, its batch field (-1 for str keys)
    size_t slot_bytes = 0;      // an image's or clip's bytes per slot
    std::shared_ptr<const ImageTransform> transform;
    std::vector<int32_t> alternatives;  // the field's alternatives, numbers in samples' fields
  };

  ShardSource(std::shared_ptr<const ShardSamples> samples, std::vector<ShardField> fields,
              std::vector<FieldPlan> plans,
              std::vector<std::pair<int64_t, std::string>> bad_samples,
              std::shared_ptr<const sampling::Sampler> sampler, const LoaderOptions& options,
              std::shared_ptr<const std::vector<BatchField>> layout, size_t batch_bytes);

  // Reads and decodes `slots` (of one shard) into the batch; each failing slot's error in
  // `errors` (same order). Fails as a whole only when the shard cannot be opened or read.
  void decode_slots(ShardWork& work, const std::vector<int64_t>& slots,
                    std::vector<Status>& errors);
  Status decode_member(ShardWork& work, int64_t slot, size_t field, std::span<const uint8_t> bytes);
  // Arrays of another dtype or shape than the batch's first fail their slot.
  void check_array_shapes(ShardWork& work, std::vector<Status>& errors) const;
  void gather_columns(ShardWork& work) const;
  Result<std::shared_ptr<const ByteSource>> source_of(int64_t shard) const;
  // "<url>: sample '<key>', field '<field>': <why>", as every shard error names a sample.
  std::string where(int64_t sample, const std::string& field, const std::string& why) const;
  std::string key_of(int64_t sample) const;
  std::string field_of(int64_t sample, size_t field) const;
  // A sample's error when it is known to be bad (bad_samples_), else OK.
  Status known_bad(int64_t sample) const;
  // The member sample `sample` reads for spec field `field`, -1 when it has none.
  int32_t member_of(int64_t sample, size_t field) const;

  const std::shared_ptr<const ShardSamples> samples_;
  const std::vector<ShardField> fields_;
  const std::vector<FieldPlan> plans_;
  // Samples that fail whatever is read of them (a field they read twice), sorted, and why.
  const std::vector<std::pair<int64_t, std::string>> bad_samples_;
  const std::shared_ptr<const sampling::Sampler> sampler_;
  const LoaderOptions options_;
  // Placed by place_fields() before the first batch.
  std::shared_ptr<const std::vector<BatchField>> batch_fields_;
  size_t batch_bytes_;

  std::atomic<int64_t> sampling_ns_{0}, read_ns_{0}, decode_ns_{0}, collate_ns_{0};
  std::atomic<int64_t> bytes_read_{0}, decode_calls_{0};
};

}  // namespace stoker::pipeline
