// Loader: sample ids to finished batches, on a pool of native threads.
//
// For each batch, in order: the sampler gives the ids; the planner gives each sample's rows and
// per-camera frames; the rows are copied into the batch; the frames of all the batch's samples
// are grouped by video file and by the GOPs they touch, and each group is decoded by one
// decoder pass, each distinct frame once, each converted (cropped and resized) straight into
// its slot; the transform finishes float outputs and flips. Batches are delivered in order, so
// the output is a function of (seed, epoch, sampler) alone, whatever the number of threads.
//
// Memory: the pool keeps buffers for the `pipeline_depth()` batches built ahead of the
// consumer, the one being handed over and the one the consumer holds while it asks for the
// next; more are allocated only while the consumer keeps more batches, and are freed when
// released. Per thread, the decoder pool (see
// video_reader.h) adds its containers and decoders. LoaderStats reports the bound.
//
// Threads: a run (start() to the end of its epoch, an error, or stop()) has its own pool of
// worker threads, joined when the run ends, so no thread outlives iteration.
//
// Ownership: create() returns a loader the caller owns. Batches are shared: one stays valid
// after the loader is gone, and its buffer returns to the pool when its last reference goes.
// Thread-safety: start(), next() and stop() are for one consumer thread at a time; stats() may
// be called from any thread.
//
// Fork: a loader belongs to the process that created it. In a child of fork() its threads and
// locks are not usable: start() and next() fail (kInvalidArgument), stop() does nothing, and
// destroying it leaves its memory to the parent's pages instead of joining threads that do not
// exist. Create a new Loader in the child.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "stoker/depth_transform.h"
#include "stoker/dtype.h"
#include "stoker/episode_index.h"
#include "stoker/image_transform.h"
#include "stoker/sampling.h"
#include "stoker/status.h"
#include "stoker/window_plan.h"

namespace stoker {
namespace pipeline {
class BatchSource;
}

/// One array of a batch: a C-contiguous [batch_size, ...] array of `type` at `offset` bytes
/// into the batch's buffer. A short last batch fills its first size() rows.
struct BatchField {
  std::string name;
  DType type = DType::kUint8;
  std::vector<int64_t> shape;
  size_t offset = 0;
  size_t bytes = 0;
};

/// A field whose size is known only once its batch is built, kept beside the buffer: strings
/// (text, a json key of strings, the samples' keys) as one byte arena with size() + 1 offsets,
/// or an array whose shape is the batch's (tokens padded to the batch's longest, a shard's
/// .npy arrays).
struct BatchColumn {
  std::string name;
  bool strings = false;
  DType type = DType::kUint8;    // arrays
  std::vector<int64_t> shape;    // arrays: [size(), ...]
  std::vector<uint8_t> bytes;    // arrays: the values, C order; strings: UTF-8, one after another
  std::vector<int64_t> offsets;  // strings: string k is bytes[offsets[k], offsets[k + 1])
};

class Batch {
 public:
  virtual ~Batch() = default;
  uint32_t epoch() const { return epoch_; }
  /// The batch's number in its epoch.
  int64_t index() const { return index_; }
  /// Samples held: batch_size, or fewer in the last batch of an epoch.
  int64_t size() const { return static_cast<int64_t>(samples_.size()); }
  const std::vector<BatchField>& fields() const { return *fields_; }
  uint8_t* data(size_t field) const { return buffer_ + (*fields_)[field].offset; }
  /// Per slot: the sample (dataset row) it holds, after any replacement, and its episode.
  std::span<const int64_t> samples() const { return samples_; }
  std::span<const int64_t> episodes() const { return episodes_; }
  /// The variable-size fields, after the buffer's; none for a dataset of episodes.
  const std::vector<BatchColumn>& columns() const { return columns_; }

 protected:
  Batch() = default;
  uint32_t epoch_ = 0;
  int64_t index_ = 0;
  std::shared_ptr<const std::vector<BatchField>> fields_;
  uint8_t* buffer_ = nullptr;
  std::vector<int64_t> samples_;
  std::vector<int64_t> episodes_;
  std::vector<BatchColumn> columns_;
};

enum class ErrorPolicy {
  /// A failing sample fails its batch: next() returns the error, naming the sample, its
  /// episode, the camera, the file and the cause; the loader stops.
  kRaise,
  /// A failing sample is replaced by another, drawn from (seed, epoch, sample): the batch keeps
  /// its shape and every rank its number of steps. Skips are counted with their reasons.
  kSkip,
};

struct LoaderOptions {
  /// Samples per batch. REQUIRES: >= 1.
  int64_t batch_size = 1;
  /// Worker threads. Default 0: as many as the process may run on.
  int threads = 0;
  /// Batches in the pipeline ahead of the consumer, ready or being built. Two or more keep
  /// every thread busy across batch boundaries. REQUIRES: >= 1. Default: 2.
  int prefetch = 2;
  /// Drop the epoch's last batch when it is short. Default: false (deliver it short).
  bool drop_last = false;
  /// Keys the random transforms and the replacements of skipped samples.
  uint64_t seed = 0;
  ErrorPolicy on_error = ErrorPolicy::kRaise;
  /// kSkip: replacements tried for one failing sample before the batch fails. REQUIRES: in
  /// [1, 16]. Default: 8.
  int max_replacements = 8;
  /// Batch buffers in page-locked memory from the CUDA runtime, for asynchronous copies to a
  /// GPU. create() fails (kUnsupported) when none can be had. Default: false.
  bool pinned_memory = false;
  /// How many of the latest batches' data_wait stats() keeps (LoaderStats::data_wait_s): a
  /// bound on the memory a long run's statistics take. REQUIRES: >= 1. Default: 65,536.
  int64_t max_wait_records = 65536;
};

/// One skipped sample.
struct SkipRecord {
  uint32_t epoch = 0;
  int64_t batch = 0;
  int64_t sample = 0;       // the sample that failed
  int64_t replacement = 0;  // the sample its slot holds instead
  std::string reason;
};

struct LoaderStats {
  int64_t batches = 0;  // delivered
  int64_t samples = 0;
  /// Seconds spent per stage, summed over threads: drawing ids, planning windows, decoding and
  /// converting frames, finishing them (dtype, flip), copying rows into batches.
  double sampling_s = 0, index_s = 0, decode_s = 0, transform_s = 0, collate_s = 0;
  /// Per delivered batch since the last reset, the latest LoaderOptions::max_wait_records of
  /// them, oldest first: how long next() blocked before returning it. And over all of them.
  std::vector<double> data_wait_s;
  double data_wait_total_s = 0;
  /// Finished batches waiting for the consumer: now, and on average when next() was called.
  int64_t ready_batches = 0;
  double mean_ready_batches = 0;
  /// Decoder work, summed over every decode call.
  DecodeStats decode;
  int64_t decode_calls = 0;
  /// Shards: the bytes of the members read, their tar headers included.
  int64_t bytes_read = 0;
  /// Skipped samples in the delivered batches, and the first 1000 of them.
  int64_t skipped = 0;
  std::vector<SkipRecord> skips;
  /// Memory: one batch, the pool's planned batches, the buffers that exist now.
  size_t batch_bytes = 0;
  int64_t pool_batches = 0;
  int64_t buffers_allocated = 0;
  bool pinned_memory = false;
  int threads = 0;
};

class Loader {
 public:
  /// Batches of any kind of dataset: `source` builds them (pipeline/batch_source.h), made by
  /// its kind's factory: make_episode_source (episode_source.h), make_shard_source
  /// (shard_source.h), make_mix_source (mix_source.h). The only constructor. Errors
  /// (kInvalidArgument): bad options, an environment variable STOKER_POISON_BATCHES that is not
  /// a byte value (when it is one, a debugging aid, see docs/loader.md, every batch buffer is
  /// filled with that byte before its batch is built); a pool the machine cannot hold
  /// (kResourceExhausted), memory that cannot be pinned (kUnsupported).
  static Result<std::unique_ptr<Loader>> create(std::unique_ptr<pipeline::BatchSource> source,
                                                const LoaderOptions& options);
  /// Ends the run; batches already handed out stay valid.
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  /// Batches in epoch 0, and in `epoch`: the same for every epoch but for a stream of shards
  /// dealt to ranks by bytes, whose epochs differ.
  int64_t batches_per_epoch() const;
  int64_t batches_in_epoch(uint32_t epoch) const;
  /// The arrays of every batch, in key order: each key, then `<key>_is_pad` for windowed keys.
  const std::vector<BatchField>& fields() const;
  /// The names of every batch's columns (Batch::columns()), in order.
  std::vector<std::string> column_names() const;
  /// Batches in the pipeline ahead of the consumer, ready or being built: prefetch.
  int pipeline_depth() const;

  /// Begins a run that delivers batch `batch` of `epoch` and on, to the end of epoch
  /// `epoch + epochs - 1` (epochs = 0: until stop()), starting the run's threads; ends the
  /// previous run first. A run that spans epochs builds the next epoch's first batches while
  /// the consumer finishes the current one. Errors (kInvalidArgument): batch outside
  /// [0, batches_in_epoch(epoch)], epochs < 0.
  Status start(uint32_t epoch, int64_t batch, int64_t epochs = 1);
  /// The next batch, in order, blocking until it is ready; nullptr once the run is done or
  /// after stop(). An error (kRaise policy) stops the loader; start() again to go on.
  Result<std::shared_ptr<const Batch>> next();
  /// A batch of `samples` (dataset ids, 1 to batch_size of them), built now on the calling
  /// thread by the source that builds the runs' batches, with epoch `epoch`'s random
  /// transforms; a run, its position and its statistics are untouched. Under kSkip a failing
  /// sample is replaced as in a run. Any number of threads may call it at once, beside a run.
  /// Errors: kInvalidArgument (no samples or more than batch_size, an id out of range, in a
  /// forked child); the batch's first failure under kRaise.
  Result<std::shared_ptr<const Batch>> read(std::span<const int64_t> samples, uint32_t epoch = 0);
  /// The (epoch, batch) next() delivers next, and whether a run is going.
  std::pair<uint32_t, int64_t> position() const;
  bool running() const;
  /// Ends the run: drops the batches in flight and joins the threads (each finishes the task it
  /// is on: at most one decode pass).
  void stop();

  LoaderStats stats() const;
  void reset_stats();

 private:
  class Impl;
  explicit Loader(std::unique_ptr<Impl> impl);
  /// Whether this process is a child forked after the loader was created.
  bool forked() const;
  Status refuse_if_forked() const;
  std::unique_ptr<Impl> impl_;
  uint64_t fork_generation_;
};

}  // namespace stoker
