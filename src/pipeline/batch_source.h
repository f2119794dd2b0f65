// BatchSource: what the Loader asks of a kind of dataset to build one batch, as plain
// functions on a BatchWork that tests can call on one thread; the Loader runs the same
// functions as tasks on its pool. One Loader, one scheduler, one pool of buffers, whatever the
// dataset: an EpisodeSource (a LeRobot dataset: episodes, windows, videos), a ShardSource
// (tar shards: images, clips, text, arrays, json) or a MixSource (several of those as one).
//
//   new_work()      a BatchWork for one batch, holding what the source plans per slot;
//   plan()          draw the ids; plan every slot (plan_samples);
//   plan_samples()  plan given samples into given slots (what each reads, the random
//                   parameters of its transform; fixed-size values straight into the buffer):
//                   all the slots for plan(), a mix's share of them for a MixSource;
//   group_reads()   group the slots' reads into tasks, each worth one thread's time: one
//                   decoder pass over a video's GOPs, a run of one shard's members;
//   prefetch()      ask remote files for every group's bytes at once, so that their fetches
//                   overlap each other and the decoding of the groups before them;
//   decode_group()  read and decode one group into its slots; only failing slots fail;
//   finish()        after every group: the failed slots settled by settle_failures() (the
//                   error policy, here once for every source), and the batch's
//                   variable-length columns completed (into work.columns, which the Loader
//                   hands to the batch).
//   refill()        what settle_failures() asks of a source (Refillable): plan and decode one
//                   replacement sample into one slot, drawn from its replacement_pool().
//
// Ownership: a source shares what it reads (index, sampler, transform) and owns its readers.
// A BatchWork owns its plans and shares its batch.
// Thread-safety: every method may run on any thread. For one BatchWork: plan() first, then
// group_reads() and prefetch(), then decode_group() on any threads at once (one call per
// group), then finish() once every group is done.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/env.h"
#include "core/mutex.h"
#include "pipeline/batch_pool.h"
#include "stoker/loader.h"
#include "stoker/sampling.h"
#include "stoker/video_reader.h"

namespace stoker::pipeline {

/// Stage timers, summed over threads, read from the process's Env.
using core::Clock;
using core::nanoseconds_since;

/// `offset` rounded up to the 64-byte boundary every field of a batch buffer starts on.
inline size_t aligned(size_t offset) { return (offset + 63) & ~size_t{63}; }

/// `fields` moved to `offsets` (one per field), for BatchSource::place_fields.
inline std::shared_ptr<const std::vector<BatchField>> placed_at(
    const std::vector<BatchField>& fields, const std::vector<size_t>& offsets) {
  auto placed = std::make_shared<std::vector<BatchField>>(fields);
  for (size_t f = 0; f < placed->size(); ++f) (*placed)[f].offset = offsets[f];
  return placed;
}

/// One batch being built. A source's new_work() returns its own subclass, holding its plans.
struct BatchWork {
  BatchWork(uint32_t epoch, int64_t index, std::shared_ptr<PooledBatch> batch)
      : epoch(epoch), index(index), batch(std::move(batch)) {}
  virtual ~BatchWork() = default;

  const uint32_t epoch;
  const int64_t index;  // the batch's number in its epoch
  // Given up when the batch is delivered, so that only its consumer keeps its buffer.
  std::shared_ptr<PooledBatch> batch;
  std::vector<SkipRecord> skips;  // the slots replaced by finish()
  // The slots this source planned, ascending: every slot, or a mix's share of them.
  std::vector<int64_t> slots;
  // The variable-size fields finish() gathers, one entry per planned slot, in slot order.
  std::vector<BatchColumn> columns;

  /// Why each slot failed (OK: it did not). The reads of one slot may fail on several
  /// threads at once.
  mutable core::Mutex errors_mutex;
  std::vector<Status> slot_errors GUARDED_BY(errors_mutex);
};

/// One read of one slot: for an episode, the frames it needs from one camera's file; for a
/// shard sample, all its members.
struct SlotRead {
  int64_t slot = 0;
  size_t read = 0;  // index into the slot's planned reads
};
using ReadGroup = std::vector<SlotRead>;

/// Time per stage, summed over threads, and the decoder's work.
struct BuildStats {
  double sampling_s = 0, index_s = 0, decode_s = 0, transform_s = 0, collate_s = 0;
  DecodeStats decode;
  int64_t decode_calls = 0;
  // Shards: the members' bytes, headers included; episodes: the videos' bytes the decoders
  // read (container headers included) and the image features' encoded bytes.
  int64_t bytes_read = 0;
};

class BatchSource {
 public:
  virtual ~BatchSource() = default;

  /// The fixed-size arrays of every batch, where they lie in its buffer, and the buffer's size.
  virtual const std::shared_ptr<const std::vector<BatchField>>& fields() const = 0;
  virtual size_t batch_bytes() const = 0;
  /// This rank's ids per epoch.
  virtual const sampling::Sampler& sampler() const = 0;

  virtual std::unique_ptr<BatchWork> new_work(uint32_t epoch, int64_t index,
                                              std::shared_ptr<PooledBatch> batch) const = 0;
  /// The variable-size fields (Batch::columns()) of every batch, by name, in order.
  virtual std::vector<std::string> column_names() const { return {}; }
  /// The sample ids this source reads: 0 to num_samples() - 1 (an episode source's rows).
  virtual int64_t num_samples() const = 0;
  /// Moves the fields to `offsets` (one per field, in order) of a buffer of `batch_bytes`, so
  /// that several sources write one batch (a mix). REQUIRES: before the first new_work();
  /// the fields do not overlap there.
  virtual void place_fields(const std::vector<size_t>& offsets, size_t batch_bytes) = 0;

  /// Draws the ids of `work`'s batch from the sampler and plans every slot (plan_samples).
  /// Errors: the sampler's.
  virtual Status plan(BatchWork& work) = 0;
  /// Plans `samples[k]` into slot `slots[k]` (ascending) and only those; a slot that cannot
  /// be planned gets its error in slot_errors. Errors (kInvalidArgument): a sample out of
  /// range. REQUIRES: called once per work, instead of plan().
  virtual Status plan_samples(BatchWork& work, std::vector<int64_t> slots,
                              std::span<const int64_t> samples) = 0;
  /// The reads of every planned slot, grouped into tasks; a slot whose reads cannot be made
  /// (a damaged index) gets its error instead.
  virtual std::vector<ReadGroup> group_reads(BatchWork& work) = 0;
  /// Starts fetching the bytes of every group whose file is remote; nothing for local files.
  virtual void prefetch(BatchWork& work, const std::vector<ReadGroup>& groups) = 0;
  /// Reads and decodes `group` into its slots; the slots whose reads fail get their errors.
  virtual void decode_group(BatchWork& work, const ReadGroup& group) = 0;
  /// Settles the failed slots by the error policy: the first failure under kRaise; under
  /// kSkip, replacements (recorded in work.skips), or an error when a slot's replacements all
  /// fail. Then completes the batch (its columns).
  virtual Status finish(BatchWork& work) = 0;

  virtual BuildStats stats() const = 0;
  virtual void reset_stats() = 0;
};

/// What the error policy asks of a source that replaces its own failed slots (an episode or a
/// shard source; a mix's parts replace theirs).
class Refillable {
 public:
  virtual ~Refillable() = default;
  /// The samples a failed slot's replacements are drawn from: replacement(k) for k in
  /// [0, replacement_pool()).
  virtual int64_t replacement_pool() const = 0;
  virtual int64_t replacement(int64_t k) const = 0;
  /// Plans and decodes `sample` into `slot` of `work` alone, replacing what the slot held;
  /// OK when the slot now holds it, else why not (naming the sample).
  virtual Status refill(BatchWork& work, int64_t slot, int64_t sample) = 0;
};

/// The error policy, in one place for every source. `errors` holds one status per slot of
/// work's batch (OK where the slot holds its sample). Under kRaise: the first failure. Under
/// kSkip: each failed slot refilled with candidates drawn from (seed, epoch, failed sample,
/// attempt) among the source's replacement pool, up to max_replacements of them; each
/// replacement recorded in work.skips (the failure's message its reason) and its slot's error
/// cleared; a slot whose replacements all fail is the batch's error, naming the first failure
/// and the last replacement's.
Status settle_failures(Refillable& source, BatchWork& work, const LoaderOptions& options,
                       std::span<const Status> errors);

}  // namespace stoker::pipeline
