#include "stoker/loader.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <limits>
#include <mutex>
#include <thread>

#include "core/host_memory.h"
#include "pipeline/batch_pool.h"
#include "pipeline/executor.h"
#include "sampling/detail/common.h"
#include "stoker/video_reader.h"

namespace stoker {
namespace {

using pipeline::BufferPool;
using pipeline::PooledBatch;

using Clock = std::chrono::steady_clock;
constexpr size_t kAlignment = 64;
constexpr size_t kMaxSkipRecords = 1000;
constexpr int kMaxReplacements = 16;  // replacement streams: sampling/detail/common.h

int64_t nanoseconds_since(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count();
}

int available_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

size_t align_up(size_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }

ElementType column_element(ColumnType type) {
  switch (type) {
    case ColumnType::kFloat32:
      return ElementType::kFloat32;
    case ColumnType::kFloat64:
      return ElementType::kFloat64;
    case ColumnType::kInt64:
      return ElementType::kInt64;
  }
  return ElementType::kFloat32;
}

ElementType image_element(ImageDType dtype) {
  switch (dtype) {
    case ImageDType::kUint8:
      return ElementType::kUint8;
    case ImageDType::kFloat16:
      return ElementType::kFloat16;
    case ImageDType::kBFloat16:
      return ElementType::kBFloat16;
    case ImageDType::kFloat32:
      return ElementType::kFloat32;
  }
  return ElementType::kUint8;
}

// One batch being built. Its tasks hold it by shared_ptr, so a dropped job stays valid until
// its last running task returns.
struct Job {
  uint32_t epoch = 0;
  int64_t index = 0;
  int64_t serial = 0;
  pipeline::Executor* executor = nullptr;  // the run's; alive while any of its tasks runs
  std::shared_ptr<PooledBatch> batch;
  std::vector<WindowPlan> plans;
  std::vector<FrameGeometry> geometry;  // [slot * num_cameras + camera]
  std::mutex errors_mutex;              // the reads of one slot may fail on several threads at once
  std::vector<Status> slot_error;       // GUARDED_BY(errors_mutex) while its groups decode
  std::atomic<int64_t> pending{0};
  std::atomic<bool> cancelled{false};
  std::vector<SkipRecord> skips;  // counted in the loader's stats when the batch is delivered
  Status error;
  bool ready = false;  // GUARDED_BY(Loader::Impl::mutex_)
};

// One read of one slot: the frames sample `slot` needs from one camera's file.
struct SlotRead {
  int64_t slot;
  size_t read;
};

}  // namespace

size_t element_size(ElementType type) {
  switch (type) {
    case ElementType::kUint8:
    case ElementType::kBool:
      return 1;
    case ElementType::kFloat16:
    case ElementType::kBFloat16:
      return 2;
    case ElementType::kFloat32:
      return 4;
    case ElementType::kInt64:
    case ElementType::kFloat64:
      return 8;
  }
  return 1;
}

class Loader::Impl {
 public:
  // Per key: where its values go and what they are.
  struct KeyLayout {
    int64_t camera = -1;  // or the column, below
    int64_t column = -1;
    int64_t steps = 1;       // T
    size_t field = 0;        // its field
    int64_t pad_field = -1;  // its _is_pad field
    size_t step_bytes = 0;   // one time step of one sample
    // Cameras: the output size.
    int height = 0, width = 0;
  };

  Impl(std::shared_ptr<const EpisodeIndex> index, std::unique_ptr<WindowPlanner> planner,
       std::shared_ptr<const sampling::Sampler> sampler,
       std::shared_ptr<const ImageTransform> transform, const LoaderOptions& options,
       std::vector<KeyLayout> keys, std::shared_ptr<const std::vector<BatchField>> fields,
       std::shared_ptr<BufferPool> pool, int threads)
      : index_(std::move(index)),
        planner_(std::move(planner)),
        sampler_(std::move(sampler)),
        transform_(std::move(transform)),
        options_(options),
        keys_(std::move(keys)),
        fields_(std::move(fields)),
        readers_(index_->video_files().size()),
        pool_(std::move(pool)),
        threads_(threads) {
    const int64_t per_rank = sampler_->size();
    batches_ = options_.drop_last ? per_rank / options_.batch_size
                                  : (per_rank + options_.batch_size - 1) / options_.batch_size;
    camera_size_.assign(index_->num_cameras(), {0, 0});
    for (const KeyLayout& key : keys_) {
      if (key.camera >= 0) camera_size_[key.camera] = {key.height, key.width};
    }
  }

  ~Impl() { stop(); }

  int64_t batches() const { return batches_; }
  int depth() const { return options_.prefetch; }
  const std::vector<BatchField>& fields() const { return *fields_; }

  Status start(uint32_t epoch, int64_t batch, int64_t epochs) {
    if (batch < 0 || batch > batches_) {
      return Status(StatusCode::kInvalidArgument, "loader: batch " + std::to_string(batch) +
                                                      " is outside the epoch's [0, " +
                                                      std::to_string(batches_) + "]");
    }
    if (epochs < 0) return Status(StatusCode::kInvalidArgument, "loader: epochs must be >= 0");
    stop();
    std::lock_guard<std::mutex> lock(mutex_);
    executor_ = std::make_unique<pipeline::Executor>(threads_);
    next_start_ = next_deliver_ = static_cast<int64_t>(epoch) * batches_ + batch;
    run_end_ = epochs == 0 ? std::numeric_limits<int64_t>::max()
                           : (static_cast<int64_t>(epoch) + epochs) * batches_;
    running_ = true;
    schedule_locked();
    return Status();
  }

  std::pair<uint32_t, int64_t> position() const {
    std::lock_guard<std::mutex> lock(mutex_);
    if (batches_ == 0) return {0, 0};
    return {static_cast<uint32_t>(next_deliver_ / batches_), next_deliver_ % batches_};
  }

  bool running() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return running_;
  }

  Result<std::shared_ptr<const Batch>> next() {
    const Clock::time_point entered = Clock::now();
    std::unique_lock<std::mutex> lock(mutex_);
    if (!running_ || next_deliver_ >= run_end_) {
      end_run(lock);
      return std::shared_ptr<const Batch>();
    }
    schedule_locked();
    int64_t ready = 0;
    for (const auto& job : jobs_) ready += job->ready ? 1 : 0;
    ready_sum_ += ready;
    std::shared_ptr<Job> job = jobs_.front();
    ready_cv_.wait(lock, [&] { return job->ready; });
    jobs_.pop_front();
    ++next_deliver_;
    if (!job->error.ok()) {
      end_run(lock);
      return job->error;
    }
    schedule_locked();
    data_wait_s_.push_back(std::chrono::duration<double>(Clock::now() - entered).count());
    ++delivered_batches_;
    delivered_samples_ += job->batch->size();
    skipped_ += static_cast<int64_t>(job->skips.size());
    for (SkipRecord& skip : job->skips) {
      if (skips_.size() < kMaxSkipRecords) skips_.push_back(std::move(skip));
    }
    std::shared_ptr<const Batch> batch = std::move(job->batch);
    if (next_deliver_ >= run_end_) end_run(lock);  // the run's last: its threads can go
    return batch;
  }

  void stop() {
    std::unique_lock<std::mutex> lock(mutex_);
    end_run(lock);
  }

  LoaderStats stats() const {
    LoaderStats s;
    auto seconds = [](const std::atomic<int64_t>& ns) { return ns.load() * 1e-9; };
    s.sampling_s = seconds(sampling_ns_);
    s.index_s = seconds(index_ns_);
    s.decode_s = seconds(decode_ns_);
    s.transform_s = seconds(transform_ns_);
    s.collate_s = seconds(collate_ns_);
    s.decode.containers_opened = decode_counters_[0];
    s.decode.decoders_built = decode_counters_[1];
    s.decode.seeks = decode_counters_[2];
    s.decode.packets_read = decode_counters_[3];
    s.decode.packets_decoded = decode_counters_[4];
    s.decode.packets_skippable = decode_counters_[5];
    s.decode.frames_received = decode_counters_[6];
    s.decode.frames_converted = decode_counters_[7];
    s.decode.seek_ns = decode_counters_[8];
    s.decode.convert_ns = decode_counters_[9];
    s.decode_calls = decode_calls_;
    s.batch_bytes = pool_->bytes();
    s.pool_batches = pool_->capacity();
    s.buffers_allocated = pool_->allocated();
    s.threads = threads_;
    s.pinned_memory = pool_->pinned();
    std::lock_guard<std::mutex> lock(mutex_);
    s.batches = delivered_batches_;
    s.samples = delivered_samples_;
    s.data_wait_s = data_wait_s_;
    for (const auto& job : jobs_) s.ready_batches += job->ready ? 1 : 0;
    s.mean_ready_batches = data_wait_s_.empty() ? 0 : double(ready_sum_) / data_wait_s_.size();
    s.skipped = skipped_;
    s.skips = skips_;
    return s;
  }

  void reset_stats() {
    for (auto* counter : {&sampling_ns_, &index_ns_, &decode_ns_, &transform_ns_, &collate_ns_}) {
      counter->store(0);
    }
    for (auto& counter : decode_counters_) counter.store(0);
    decode_calls_.store(0);
    std::lock_guard<std::mutex> lock(mutex_);
    delivered_batches_ = delivered_samples_ = ready_sum_ = skipped_ = 0;
    data_wait_s_.clear();
    skips_.clear();
  }

 private:
  // ---- Scheduling (consumer thread, under mutex_) ----------------------------------------

  void schedule_locked() {
    while (running_ && next_start_ < run_end_ && static_cast<int>(jobs_.size()) < depth()) {
      auto job = std::make_shared<Job>();
      job->epoch = static_cast<uint32_t>(next_start_ / batches_);
      job->index = next_start_ % batches_;
      ++next_start_;
      job->serial = serial_++;
      job->executor = executor_.get();
      const int64_t first = job->index * options_.batch_size;
      const int64_t size = std::min(options_.batch_size, sampler_->size() - first);
      Result<uint8_t*> buffer = pool_->acquire();
      if (!buffer.ok()) {
        job->error = buffer.status();
        job->ready = true;
      } else {
        job->batch =
            std::make_shared<PooledBatch>(pool_, fields_, *buffer, job->epoch, job->index, size);
        executor_->submit(job->serial, [this, job] { guarded(job, [&] { plan_batch(job); }); });
      }
      jobs_.push_back(std::move(job));
    }
  }

  // Drops the jobs in flight and joins the run's threads, with the lock released: a running
  // task may need it to finish.
  void end_run(std::unique_lock<std::mutex>& lock) {
    for (const auto& job : jobs_) job->cancelled = true;
    jobs_.clear();
    running_ = false;
    std::unique_ptr<pipeline::Executor> executor = std::move(executor_);
    lock.unlock();
    executor.reset();
    lock.lock();
  }

  // Runs one task; an exception (out of memory) fails the batch instead of escaping.
  template <typename F>
  void guarded(const std::shared_ptr<Job>& job, F&& body) {
    if (job->cancelled) return;
    try {
      body();
    } catch (const std::exception& error) {
      finish_job(job, Status(StatusCode::kInternal,
                             "batch " + std::to_string(job->index) + ": " + error.what()));
    }
  }

  void finish_job(const std::shared_ptr<Job>& job, Status error) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (job->ready) return;
      if (job->error.ok()) job->error = std::move(error);
      job->ready = true;
    }
    ready_cv_.notify_all();
  }

  // ---- Building a batch (worker threads) -------------------------------------------------

  std::string describe_sample(const Job& job, int64_t row) const {
    return "sample " + std::to_string(row) + " (episode " +
           std::to_string(index_->episode_of_row(row)) + ", batch " + std::to_string(job.index) +
           " of epoch " + std::to_string(job.epoch) + ")";
  }

  void plan_batch(const std::shared_ptr<Job>& job) {
    PooledBatch& batch = *job->batch;
    const int64_t size = batch.size();
    Clock::time_point start = Clock::now();
    Status status = sampler_->fill(job->epoch, job->index * options_.batch_size,
                                   std::span<int64_t>(batch.mutable_samples()));
    sampling_ns_ += nanoseconds_since(start);
    if (!status.ok()) return finish_job(job, status);

    job->plans.resize(size);
    job->slot_error.assign(size, Status());
    job->geometry.assign(size * index_->num_cameras(), FrameGeometry{});
    for (int64_t slot = 0; slot < size; ++slot) {
      Status planned = plan_slot(*job, slot, batch.samples()[slot]);
      if (!planned.ok()) job->slot_error[slot] = planned;
    }

    // Group the reads by file, then by the GOPs they touch: one decode pass per group.
    start = Clock::now();
    std::vector<std::vector<SlotRead>> groups = group_reads(*job);
    index_ns_ += nanoseconds_since(start);
    if (groups.empty()) return finalize(job);
    job->pending = static_cast<int64_t>(groups.size());
    for (auto& group : groups) {
      job->executor->submit(job->serial, [this, job, group = std::move(group)] {
        guarded(job, [&] {
          decode_group(*job, group);
          if (--job->pending == 0) finalize(job);
        });
      });
    }
  }

  // Plans sample `row` into `slot`: rows into the column fields, pad masks, transform draws.
  Status plan_slot(Job& job, int64_t slot, int64_t row) {
    Clock::time_point start = Clock::now();
    WindowPlan& plan = job.plans[slot];
    Status planned = planner_->plan(row, &plan);
    index_ns_ += nanoseconds_since(start);
    if (!planned.ok()) return planned.with_context(describe_sample(job, row));
    job.batch->mutable_samples()[slot] = row;
    job.batch->mutable_episodes()[slot] = plan.episode;

    start = Clock::now();
    for (size_t k = 0; k < keys_.size(); ++k) {
      const KeyLayout& key = keys_[k];
      const int64_t begin = plan.key_begin[k];
      uint8_t* buffer = job.batch->buffer();
      if (key.pad_field >= 0) {
        uint8_t* pad = buffer + (*fields_)[key.pad_field].offset + slot * key.steps;
        std::memcpy(pad, plan.pad.data() + begin, key.steps);
      }
      if (key.column < 0) continue;
      const EpisodeIndex::ColumnView& column = index_->columns()[key.column];
      uint8_t* out = buffer + (*fields_)[key.field].offset + slot * key.steps * key.step_bytes;
      for (int64_t t = 0; t < key.steps; ++t) {
        std::memcpy(out + t * key.step_bytes,
                    column.data.data() + plan.rows[begin + t] * key.step_bytes, key.step_bytes);
      }
    }
    collate_ns_ += nanoseconds_since(start);

    for (const WindowPlan::Read& read : plan.reads) {
      const std::string context =
          describe_sample(job, row) + ", camera '" + index_->cameras()[read.camera] + "'";
      Result<const VideoReader*> reader = reader_of(read.video_file);
      if (!reader.ok()) return reader.status().with_context(context);
      const VideoStreamInfo& stream = (*reader)->frame_table().stream();
      Result<FrameGeometry> geometry =
          transform_->geometry(stream.height, stream.width, options_.seed, job.epoch,
                               static_cast<uint64_t>(row), static_cast<int>(read.camera));
      if (!geometry.ok()) return geometry.status().with_context(context);
      job.geometry[slot * index_->num_cameras() + read.camera] = *geometry;
    }
    return Status();
  }

  std::vector<std::vector<SlotRead>> group_reads(const Job& job) {
    struct Span {
      int64_t video, first, last;
      SlotRead read;
    };
    std::vector<Span> spans;
    for (int64_t slot = 0; slot < job.batch->size(); ++slot) {
      if (!job.slot_error[slot].ok()) continue;
      const WindowPlan& plan = job.plans[slot];
      for (size_t r = 0; r < plan.reads.size(); ++r) {
        const WindowPlan::Read& read = plan.reads[r];
        Result<const VideoReader*> reader = reader_of(read.video_file);
        if (!reader.ok()) continue;  // plan_slot opened it already
        const FrameTable& table = (*reader)->frame_table();
        const auto [lo, hi] = std::minmax_element(read.frames.begin(), read.frames.end());
        int64_t last = 0;
        for (int64_t frame : read.frames) last = std::max(last, table.packet_of_frame(frame));
        spans.push_back({read.video_file, table.sync_packet_of_frame(*lo), last, {slot, r}});
        (void)hi;
      }
    }
    std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
      return a.video != b.video ? a.video < b.video : a.first < b.first;
    });
    std::vector<std::vector<SlotRead>> groups;
    int64_t video = -1, reach = -1;
    for (const Span& span : spans) {
      if (span.video != video || span.first > reach) {
        groups.emplace_back();
        video = span.video;
        reach = span.last;
      }
      reach = std::max(reach, span.last);
      groups.back().push_back(span.read);
    }
    return groups;
  }

  // Where frame j of a slot's read goes: the key it belongs to and its time step.
  struct Destination {
    uint8_t* out;
    const KeyLayout* key;
  };
  std::vector<Destination> destinations(Job& job, int64_t slot, size_t r) {
    const WindowPlan& plan = job.plans[slot];
    std::vector<Destination> result(plan.reads[r].frames.size(), Destination{nullptr, nullptr});
    for (size_t k = 0; k < keys_.size(); ++k) {
      if (plan.key_read[k] != static_cast<int64_t>(r)) continue;
      const KeyLayout& key = keys_[k];
      uint8_t* base =
          job.batch->buffer() + (*fields_)[key.field].offset + slot * key.steps * key.step_bytes;
      for (int64_t t = 0; t < key.steps; ++t) {
        result[plan.key_read_begin[k] + t] = Destination{base + t * key.step_bytes, &key};
      }
    }
    return result;
  }

  // Decodes `reads` (all from one file) in one pass; on failure, each read alone, to find
  // which samples fail.
  void decode_group(Job& job, const std::vector<SlotRead>& reads) {
    if (reads.size() > 1 && decode_reads(job, reads).ok()) return;
    if (reads.size() == 1) {
      Status status = decode_reads(job, reads);
      if (!status.ok()) fail_slot(job, reads[0], status);
      return;
    }
    for (const SlotRead& read : reads) {
      Status status = decode_reads(job, {read});
      if (!status.ok()) fail_slot(job, read, status);
    }
  }

  void fail_slot(Job& job, const SlotRead& read, const Status& status) {
    const int64_t row = job.batch->samples()[read.slot];
    const int64_t camera = job.plans[read.slot].reads[read.read].camera;
    std::lock_guard<std::mutex> lock(job.errors_mutex);
    job.slot_error[read.slot] = status.with_context(describe_sample(job, row) + ", camera '" +
                                                    index_->cameras()[camera] + "'");
  }

  Status decode_reads(Job& job, const std::vector<SlotRead>& reads) {
    const WindowPlan::Read& first = job.plans[reads[0].slot].reads[reads[0].read];
    STOKER_ASSIGN_OR_RETURN(const VideoReader* reader, reader_of(first.video_file));
    const VideoStreamInfo& stream = reader->frame_table().stream();
    const auto [height, width] = camera_size_[first.camera];
    const OutputOptions conversion = transform_->conversion(stream.height, stream.width);
    if (conversion.height != height || conversion.width != width) {
      return Status(StatusCode::kInvalidArgument,
                    "video '" + reader->path() + "' has " + std::to_string(stream.width) + "x" +
                        std::to_string(stream.height) + " frames, which come out " +
                        std::to_string(conversion.width) + "x" + std::to_string(conversion.height) +
                        " while the batch holds " + std::to_string(width) + "x" +
                        std::to_string(height) + " for this camera; give the spec a size");
    }
    const bool in_place = transform_->writes_in_place();
    const size_t converted_bytes = ImageTransform::converted_bytes(height, width);

    struct Finish {
      const uint8_t* converted;
      uint8_t* out;
      bool flip;
    };
    std::vector<FrameRequest> requests;
    std::vector<Finish> finishes;
    size_t total = 0;
    for (const SlotRead& read : reads) total += job.plans[read.slot].reads[read.read].frames.size();
    std::vector<uint8_t> scratch(in_place ? 0 : total * converted_bytes);
    requests.reserve(total);
    for (const SlotRead& read : reads) {
      const WindowPlan::Read& r = job.plans[read.slot].reads[read.read];
      const FrameGeometry& geometry = job.geometry[read.slot * index_->num_cameras() + r.camera];
      std::vector<Destination> where = destinations(job, read.slot, read.read);
      for (size_t j = 0; j < r.frames.size(); ++j) {
        uint8_t* converted =
            in_place ? where[j].out : scratch.data() + requests.size() * converted_bytes;
        if (converted == nullptr) {
          return Status(StatusCode::kInternal, "frame with no destination in the batch");
        }
        requests.push_back(
            FrameRequest{.frame = r.frames[j], .crop = geometry.source, .out = converted});
        if (!in_place || geometry.flip)
          finishes.push_back({converted, where[j].out, geometry.flip});
      }
    }

    DecodeStats stats;
    Clock::time_point start = Clock::now();
    Status status = reader->get_frames(requests, conversion, &stats);
    decode_ns_ += nanoseconds_since(start);
    add_decode_stats(stats);
    STOKER_RETURN_IF_ERROR(status);

    start = Clock::now();
    for (const Finish& finish : finishes) {
      if (in_place) {
        transform_->flip_in_place(finish.out, height, width);
      } else {
        transform_->finish(finish.converted, height, width, finish.flip, finish.out);
      }
    }
    transform_ns_ += nanoseconds_since(start);
    return Status();
  }

  void add_decode_stats(const DecodeStats& s) {
    const int64_t values[] = {s.containers_opened, s.decoders_built,   s.seeks,
                              s.packets_read,      s.packets_decoded,  s.packets_skippable,
                              s.frames_received,   s.frames_converted, s.seek_ns,
                              s.convert_ns};
    for (size_t k = 0; k < std::size(values); ++k) decode_counters_[k] += values[k];
    ++decode_calls_;
  }

  // After every group: fail the batch (kRaise) or replace the failed samples (kSkip).
  void finalize(const std::shared_ptr<Job>& job) {
    Status error;
    for (int64_t slot = 0; slot < job->batch->size() && error.ok(); ++slot) {
      if (job->slot_error[slot].ok()) continue;
      if (options_.on_error == ErrorPolicy::kRaise) {
        error = job->slot_error[slot];
      } else {
        error = replace(*job, slot);
      }
    }
    finish_job(job, error);
  }

  Status replace(Job& job, int64_t slot) {
    const int64_t failed = job.batch->samples()[slot];
    Status last = job.slot_error[slot];
    for (int attempt = 0; attempt < options_.max_replacements; ++attempt) {
      const auto words = sampling::random_words(
          options_.seed, job.epoch, static_cast<uint64_t>(failed),
          sampling::detail::kReplaceStream | (static_cast<uint32_t>(attempt) << 4));
      const int64_t row = sampling::detail::uniform_below(words[0], words[1], index_->num_rows());
      Status status = plan_slot(job, slot, row);
      const WindowPlan& plan = job.plans[slot];
      for (size_t r = 0; r < plan.reads.size() && status.ok(); ++r) {
        status = decode_reads(job, {SlotRead{slot, r}});
        if (!status.ok()) {
          status = status.with_context(describe_sample(job, row) + ", camera '" +
                                       index_->cameras()[plan.reads[r].camera] + "'");
        }
      }
      if (status.ok()) {
        job.skips.push_back(SkipRecord{.epoch = job.epoch,
                                       .batch = job.index,
                                       .sample = failed,
                                       .replacement = row,
                                       .reason = job.slot_error[slot].message()});
        return Status();
      }
      last = status;
    }
    return Status(last.code(), job.slot_error[slot].message() + "; and " +
                                   std::to_string(options_.max_replacements) +
                                   " replacements failed too, the last with: " + last.message());
  }

  Result<const VideoReader*> reader_of(int64_t video) {
    std::lock_guard<std::mutex> lock(readers_mutex_);
    std::unique_ptr<VideoReader>& reader = readers_[video];
    if (reader == nullptr) {
      STOKER_ASSIGN_OR_RETURN(std::shared_ptr<const FrameTable> table, index_->frame_table(video));
      STOKER_ASSIGN_OR_RETURN(reader, VideoReader::open(index_->video_files()[video],
                                                        VideoReaderOptions{.frame_table = table}));
    }
    return reader.get();
  }

  const std::shared_ptr<const EpisodeIndex> index_;
  const std::unique_ptr<WindowPlanner> planner_;
  const std::shared_ptr<const sampling::Sampler> sampler_;
  const std::shared_ptr<const ImageTransform> transform_;
  const LoaderOptions options_;
  const std::vector<KeyLayout> keys_;
  const std::shared_ptr<const std::vector<BatchField>> fields_;
  std::vector<std::pair<int, int>> camera_size_;
  int64_t batches_ = 0;

  std::mutex readers_mutex_;
  std::vector<std::unique_ptr<VideoReader>> readers_;  // GUARDED_BY(readers_mutex_)

  std::shared_ptr<BufferPool> pool_;

  std::atomic<int64_t> sampling_ns_{0}, index_ns_{0}, decode_ns_{0}, transform_ns_{0},
      collate_ns_{0};
  std::array<std::atomic<int64_t>, 10> decode_counters_{};
  std::atomic<int64_t> decode_calls_{0};

  mutable std::mutex mutex_;
  std::condition_variable ready_cv_;
  std::deque<std::shared_ptr<Job>> jobs_;  // GUARDED_BY(mutex_): started, not delivered
  bool running_ = false;                   // GUARDED_BY(mutex_)
  // Batches are numbered across epochs: epoch * batches_ + index. The run delivers
  // [next_deliver_, run_end_).
  int64_t next_start_ = 0;           // GUARDED_BY(mutex_)
  int64_t next_deliver_ = 0;         // GUARDED_BY(mutex_)
  int64_t run_end_ = 0;              // GUARDED_BY(mutex_)
  int64_t serial_ = 0;               // GUARDED_BY(mutex_)
  int64_t delivered_batches_ = 0;    // GUARDED_BY(mutex_)
  int64_t delivered_samples_ = 0;    // GUARDED_BY(mutex_)
  int64_t ready_sum_ = 0;            // GUARDED_BY(mutex_)
  std::vector<double> data_wait_s_;  // GUARDED_BY(mutex_)
  int64_t skipped_ = 0;              // GUARDED_BY(mutex_)
  std::vector<SkipRecord> skips_;    // GUARDED_BY(mutex_)

  // The threads of the current run (start() to the epoch's end, an error or stop()). Joined
  // by end_run() before anything they use is destroyed.
  const int threads_;
  std::unique_ptr<pipeline::Executor> executor_;  // GUARDED_BY(mutex_)
};

Result<std::unique_ptr<Loader>> Loader::create(std::shared_ptr<const EpisodeIndex> index,
                                               std::vector<WindowKey> keys,
                                               std::shared_ptr<const sampling::Sampler> sampler,
                                               std::shared_ptr<const ImageTransform> transform,
                                               const LoaderOptions& options) {
  auto invalid = [](const std::string& why) {
    return Status(StatusCode::kInvalidArgument, "loader: " + why);
  };
  if (index == nullptr || sampler == nullptr || transform == nullptr) {
    return invalid("an index, a sampler and a transform are required");
  }
  if (options.batch_size < 1) return invalid("batch_size must be at least 1");
  if (options.prefetch < 1) return invalid("prefetch must be at least 1");
  if (options.threads < 0) return invalid("threads must be 0 (all cores) or more");
  if (options.max_replacements < 1 || options.max_replacements > kMaxReplacements) {
    return invalid("max_replacements must lie in [1, " + std::to_string(kMaxReplacements) + "]");
  }
  if (index->num_rows() == 0) return invalid("the dataset is empty (it has no samples)");
  STOKER_ASSIGN_OR_RETURN(std::unique_ptr<WindowPlanner> planner,
                          WindowPlanner::create(index, std::move(keys)));

  // The batch's fields, in key order: the key, then its pad mask when windowed.
  const int64_t batch = options.batch_size;
  std::vector<Impl::KeyLayout> layouts;
  auto fields = std::make_shared<std::vector<BatchField>>();
  size_t offset = 0;
  auto add_field = [&](std::string name, ElementType type, std::vector<int64_t> shape) {
    size_t bytes = element_size(type);
    for (int64_t side : shape) bytes *= static_cast<size_t>(side);
    fields->push_back(BatchField{std::move(name), type, std::move(shape), offset, bytes});
    offset += align_up(bytes);
    return fields->size() - 1;
  };
  for (size_t k = 0; k < planner->keys().size(); ++k) {
    const WindowKey& key = planner->keys()[k];
    Impl::KeyLayout layout;
    layout.camera = planner->key_camera()[k];
    layout.column = planner->key_column()[k];
    const bool windowed = !key.offsets.empty();
    layout.steps = windowed ? static_cast<int64_t>(key.offsets.size()) : 1;
    std::vector<int64_t> shape = {batch};
    if (windowed) shape.push_back(layout.steps);
    if (layout.camera >= 0) {
      // The camera's output size, from its first video: every batch has one size per key.
      const int64_t video = index->video_of(layout.camera, 0);
      Result<std::shared_ptr<const FrameTable>> table = index->frame_table(video);
      if (!table.ok()) {
        return table.status().with_context("loader: camera '" + key.source + "'");
      }
      const VideoStreamInfo& stream = (*table)->stream();
      std::tie(layout.height, layout.width) = transform->output_size(stream.height, stream.width);
      layout.step_bytes = transform->output_bytes(layout.height, layout.width);
      if (transform->options().layout == Layout::kNCHW) {
        shape.insert(shape.end(), {3, layout.height, layout.width});
      } else {
        shape.insert(shape.end(), {layout.height, layout.width, 3});
      }
      layout.field = add_field(key.name, image_element(transform->options().dtype), shape);
    } else {
      const EpisodeIndex::ColumnView& column = index->columns()[layout.column];
      layout.step_bytes = column_type_size(column.type) * static_cast<size_t>(column.dim);
      shape.push_back(column.dim);
      layout.field = add_field(key.name, column_element(column.type), shape);
    }
    if (windowed) {
      layout.pad_field = static_cast<int64_t>(
          add_field(key.name + "_is_pad", ElementType::kBool, {batch, layout.steps}));
    }
    layouts.push_back(layout);
  }
  // The pool holds the batches in the pipeline (prefetch), the one being handed over, and the
  // one the consumer still holds while it asks for the next: a consumer that keeps no more
  // than that never allocates. One buffer is made now, so that memory that cannot be had
  // (pinned, without a GPU) fails here.
  STOKER_ASSIGN_OR_RETURN(std::shared_ptr<const HostMemory> memory,
                          HostMemory::create(options.pinned_memory));
  auto pool = std::make_shared<BufferPool>(std::move(memory), offset, options.prefetch + 2);
  Result<uint8_t*> first = pool->acquire();
  if (!first.ok()) return first.status().with_context("loader");
  pool->release(*first);
  const int threads = options.threads > 0 ? options.threads : available_cores();
  auto impl = std::make_unique<Impl>(std::move(index), std::move(planner), std::move(sampler),
                                     std::move(transform), options, std::move(layouts),
                                     std::move(fields), std::move(pool), threads);
  return std::unique_ptr<Loader>(new Loader(std::move(impl)));
}

Loader::Loader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Loader::~Loader() = default;
int64_t Loader::batches_per_epoch() const { return impl_->batches(); }
const std::vector<BatchField>& Loader::fields() const { return impl_->fields(); }
int Loader::pipeline_depth() const { return impl_->depth(); }
Status Loader::start(uint32_t epoch, int64_t batch, int64_t epochs) {
  return impl_->start(epoch, batch, epochs);
}
std::pair<uint32_t, int64_t> Loader::position() const { return impl_->position(); }
bool Loader::running() const { return impl_->running(); }
Result<std::shared_ptr<const Batch>> Loader::next() { return impl_->next(); }
void Loader::stop() { impl_->stop(); }
LoaderStats Loader::stats() const { return impl_->stats(); }
void Loader::reset_stats() { impl_->reset_stats(); }

}  // namespace stoker
