#include "stoker/loader.h"

#include <atomic>
#include <chrono>
#include <deque>
#include <exception>
#include <limits>
#include <numeric>

#include "core/env.h"
#include "core/fork.h"
#include "core/host_memory.h"
#include "core/mutex.h"
#include "pipeline/batch_layout.h"
#include "pipeline/batch_pool.h"
#include "pipeline/batch_source.h"
#include "pipeline/executor.h"
#include "stoker/cores.h"

namespace stoker {
namespace {

using pipeline::BatchSource;
using pipeline::BufferPool;
using pipeline::PooledBatch;

using pipeline::Clock;
constexpr size_t kMaxSkipRecords = 1000;
constexpr int kMaxReplacements = 16;  // replacement streams: core/random.h

// One batch in the pipeline: what is built, and the bookkeeping of the tasks building it. Its
// tasks hold it by shared_ptr, so a dropped job stays valid until its last task returns.
struct Job {
  Job(const BatchSource& source, uint32_t epoch, int64_t index, std::shared_ptr<PooledBatch> batch,
      int64_t serial, pipeline::Executor* executor)
      : work(source.new_work(epoch, index, std::move(batch))), serial(serial), executor(executor) {}

  const std::unique_ptr<pipeline::BatchWork> work;
  const int64_t serial;                // the executor's priority: lower batches first
  pipeline::Executor* const executor;  // the run's; alive while any of its tasks runs
  std::atomic<int64_t> pending{0};     // decode groups not finished
  std::atomic<bool> cancelled{false};  // dropped by the run's end: its tasks do nothing
};

// A batch's place: its epoch and its number in the epoch. Epochs may differ in length (a
// stream of shards dealt by bytes).
struct Position {
  int64_t epoch = 0;
  int64_t batch = 0;
};

}  // namespace

class Loader::Impl {
 public:
  Impl(std::unique_ptr<BatchSource> source, const LoaderOptions& options,
       std::shared_ptr<BufferPool> pool, int threads)
      : source_(std::move(source)), options_(options), pool_(std::move(pool)), threads_(threads) {}

  ~Impl() { stop(); }

  int64_t batches(uint32_t epoch) const {
    const int64_t samples = source_->sampler().epoch_size(epoch);
    return options_.drop_last ? samples / options_.batch_size
                              : (samples + options_.batch_size - 1) / options_.batch_size;
  }
  int depth() const { return options_.prefetch; }
  const std::vector<BatchField>& fields() const { return *source_->fields(); }
  std::vector<std::string> column_names() const { return source_->column_names(); }

  Status start(uint32_t epoch, int64_t batch, int64_t epochs) EXCLUDES(mutex_) {
    const int64_t in_epoch = batches(epoch);
    if (batch < 0 || batch > in_epoch) {
      return Status(StatusCode::kInvalidArgument, "loader: batch " + std::to_string(batch) +
                                                      " is outside epoch " + std::to_string(epoch) +
                                                      "'s [0, " + std::to_string(in_epoch) + "]");
    }
    if (epochs < 0) return Status(StatusCode::kInvalidArgument, "loader: epochs must be >= 0");
    stop();
    core::MutexLock lock(&mutex_);
    Result<std::unique_ptr<pipeline::Executor>> executor = pipeline::Executor::create(threads_);
    if (!executor.ok()) return executor.status().with_context("loader");
    executor_ = std::move(executor).value();
    run_end_epoch_ = epochs == 0 ? int64_t{std::numeric_limits<uint32_t>::max()} + 1
                                 : static_cast<int64_t>(epoch) + epochs;
    next_start_ = next_deliver_ = settled(Position{epoch, batch});
    running_ = true;
    schedule();
    return Status();
  }

  std::pair<uint32_t, int64_t> position() const EXCLUDES(mutex_) {
    core::MutexLock lock(&mutex_);
    return {static_cast<uint32_t>(next_deliver_.epoch), next_deliver_.batch};
  }

  bool running() const EXCLUDES(mutex_) {
    core::MutexLock lock(&mutex_);
    return running_;
  }

  Result<std::shared_ptr<const Batch>> next() EXCLUDES(mutex_) {
    const Clock::time_point entered = core::now();
    core::MutexLock lock(&mutex_);
    if (!running_ || next_deliver_.epoch >= run_end_epoch_) {
      end_run();
      return std::shared_ptr<const Batch>();
    }
    schedule();
    int64_t ready = 0;
    for (const InFlight& in_flight : jobs_) ready += in_flight.ready ? 1 : 0;
    ready_sum_ += ready;
    const std::shared_ptr<Job> job = jobs_.front().job;
    while (running_ && !jobs_.front().ready) ready_cv_.wait(&mutex_);
    if (!running_ || jobs_.empty() || jobs_.front().job != job) {
      return Status(StatusCode::kInvalidArgument,
                    "loader: the loader was closed while waiting for a batch");
    }
    const Status error = jobs_.front().error;
    jobs_.pop_front();
    next_deliver_ = following(next_deliver_);
    if (!error.ok()) {
      end_run();
      return error;
    }
    schedule();
    const double waited = core::seconds_since(entered);
    data_wait_total_s_ += waited;
    // A ring of the latest waits: slot delivered_batches_ % max_wait_records.
    if (static_cast<int64_t>(data_wait_s_.size()) < options_.max_wait_records) {
      data_wait_s_.push_back(waited);
    } else {
      data_wait_s_[delivered_batches_ % options_.max_wait_records] = waited;
    }
    ++delivered_batches_;
    delivered_samples_ += job->work->batch->size();
    skipped_ += static_cast<int64_t>(job->work->skips.size());
    for (SkipRecord& skip : job->work->skips) {
      if (skips_.size() < kMaxSkipRecords) skips_.push_back(std::move(skip));
    }
    job->work->batch->mutable_columns() = std::move(job->work->columns);
    // The job may outlive delivery in a worker's last task: it must not keep the buffer.
    std::shared_ptr<const Batch> batch = std::move(job->work->batch);
    if (next_deliver_.epoch >= run_end_epoch_) end_run();  // the run's last: its threads can go
    return batch;
  }

  void stop() EXCLUDES(mutex_) {
    core::MutexLock lock(&mutex_);
    end_run();
  }

  Result<std::shared_ptr<const Batch>> read(std::span<const int64_t> samples, uint32_t epoch) {
    const auto size = static_cast<int64_t>(samples.size());
    if (size < 1 || size > options_.batch_size) {
      return Status(StatusCode::kInvalidArgument, "loader: read takes 1 to batch_size (" +
                                                      std::to_string(options_.batch_size) +
                                                      ") samples, not " + std::to_string(size));
    }
    STOKER_ASSIGN_OR_RETURN(uint8_t * buffer, pool_->acquire());
    auto batch = std::make_shared<PooledBatch>(pool_, source_->fields(), buffer, epoch, 0, size);
    const std::unique_ptr<pipeline::BatchWork> work = source_->new_work(epoch, 0, batch);
    std::vector<int64_t> slots(samples.size());
    std::iota(slots.begin(), slots.end(), 0);
    STOKER_RETURN_IF_ERROR(source_->plan_samples(*work, std::move(slots), samples));
    const std::vector<pipeline::ReadGroup> groups = source_->group_reads(*work);
    source_->prefetch(*work, groups);
    for (const pipeline::ReadGroup& group : groups) source_->decode_group(*work, group);
    STOKER_RETURN_IF_ERROR(source_->finish(*work));
    batch->mutable_columns() = std::move(work->columns);
    return std::shared_ptr<const Batch>(std::move(batch));
  }

  LoaderStats stats() const EXCLUDES(mutex_) {
    LoaderStats s;
    const pipeline::BuildStats built = source_->stats();
    s.sampling_s = built.sampling_s;
    s.index_s = built.index_s;
    s.decode_s = built.decode_s;
    s.transform_s = built.transform_s;
    s.collate_s = built.collate_s;
    s.decode = built.decode;
    s.decode_calls = built.decode_calls;
    s.bytes_read = built.bytes_read;
    s.batch_bytes = pool_->bytes();
    s.pool_batches = pool_->capacity();
    s.buffers_allocated = pool_->allocated();
    s.threads = threads_;
    s.pinned_memory = pool_->pinned();
    core::MutexLock lock(&mutex_);
    s.batches = delivered_batches_;
    s.samples = delivered_samples_;
    // The ring, oldest first.
    const size_t oldest = static_cast<int64_t>(data_wait_s_.size()) < options_.max_wait_records
                              ? 0
                              : static_cast<size_t>(delivered_batches_ % options_.max_wait_records);
    s.data_wait_s.assign(data_wait_s_.begin() + oldest, data_wait_s_.end());
    s.data_wait_s.insert(s.data_wait_s.end(), data_wait_s_.begin(), data_wait_s_.begin() + oldest);
    s.data_wait_total_s = data_wait_total_s_;
    for (const InFlight& in_flight : jobs_) s.ready_batches += in_flight.ready ? 1 : 0;
    s.mean_ready_batches =
        delivered_batches_ == 0 ? 0 : double(ready_sum_) / static_cast<double>(delivered_batches_);
    s.skipped = skipped_;
    s.skips = skips_;
    return s;
  }

  void reset_stats() EXCLUDES(mutex_) {
    source_->reset_stats();
    core::MutexLock lock(&mutex_);
    delivered_batches_ = delivered_samples_ = ready_sum_ = skipped_ = 0;
    data_wait_s_.clear();
    data_wait_total_s_ = 0;
    skips_.clear();
  }

 private:
  // A batch the consumer takes in order, and its outcome once its tasks are done.
  struct InFlight {
    std::shared_ptr<Job> job;
    bool ready = false;
    Status error;
  };

  // ---- Scheduling (consumer thread, under mutex_) ----------------------------------------

  // Starts batches until `prefetch` are in the pipeline. Memory the system refuses fails the
  // batch that needed it, delivered in order like any other failure.
  void schedule() REQUIRES(mutex_) {
    try {
      schedule_batches();
    } catch (const std::bad_alloc&) {
      jobs_.push_back(InFlight{.job = nullptr,
                               .ready = true,
                               .error = Status(StatusCode::kResourceExhausted,
                                               "loader: out of memory starting a batch")});
      next_start_ = Position{run_end_epoch_, 0};  // nothing after the failure starts
    }
  }

  void schedule_batches() REQUIRES(mutex_) {
    while (running_ && next_start_.epoch < run_end_epoch_ &&
           static_cast<int>(jobs_.size()) < depth()) {
      const auto epoch = static_cast<uint32_t>(next_start_.epoch);
      const int64_t index = next_start_.batch;
      next_start_ = following(next_start_);
      const int64_t first = index * options_.batch_size;
      const int64_t size =
          std::min(options_.batch_size, source_->sampler().epoch_size(epoch) - first);
      Result<uint8_t*> buffer = pool_->acquire();
      if (!buffer.ok()) {
        jobs_.push_back(InFlight{.job = std::make_shared<Job>(*source_, epoch, index, nullptr,
                                                              serial_++, executor_.get()),
                                 .ready = true,
                                 .error = buffer.status()});
        continue;
      }
      auto batch =
          std::make_shared<PooledBatch>(pool_, source_->fields(), *buffer, epoch, index, size);
      auto job = std::make_shared<Job>(*source_, epoch, index, std::move(batch), serial_++,
                                       executor_.get());
      jobs_.push_back(InFlight{.job = job});
      executor_->submit(job->serial, [this, job] { guarded(job, [&] { plan(job); }); });
    }
  }

  // Drops the jobs in flight and joins the run's threads, with the lock released: a running
  // task may need it to finish.
  void end_run() REQUIRES(mutex_) {
    for (const InFlight& in_flight : jobs_) {
      if (in_flight.job != nullptr) in_flight.job->cancelled = true;
    }
    jobs_.clear();
    running_ = false;
    ready_cv_.signal_all();
    std::unique_ptr<pipeline::Executor> executor = std::move(executor_);
    mutex_.unlock();
    executor.reset();
    mutex_.lock();
  }

  // ---- Tasks (worker threads) ------------------------------------------------------------

  // Runs one task of `job`; an exception (out of memory) fails the batch instead of escaping.
  template <typename F>
  void guarded(const std::shared_ptr<Job>& job, F&& body) EXCLUDES(mutex_) {
    if (job->cancelled) return;
    try {
      body();
    } catch (const std::exception& error) {
      finish_job(job, Status(StatusCode::kInternal,
                             "batch " + std::to_string(job->work->index) + ": " + error.what()));
    }
  }

  // Plans the batch, then submits one decode task per group of reads.
  void plan(const std::shared_ptr<Job>& job) EXCLUDES(mutex_) {
    Status planned = source_->plan(*job->work);
    if (!planned.ok()) return finish_job(job, planned);
    std::vector<pipeline::ReadGroup> groups = source_->group_reads(*job->work);
    if (groups.empty()) return finish_job(job, source_->finish(*job->work));
    source_->prefetch(*job->work, groups);
    job->pending = static_cast<int64_t>(groups.size());
    for (auto& group : groups) {
      job->executor->submit(job->serial, [this, job, group = std::move(group)] {
        guarded(job, [&] {
          source_->decode_group(*job->work, group);
          if (--job->pending == 0) finish_job(job, source_->finish(*job->work));
        });
      });
    }
  }

  // Records the outcome of `job`, if it is still in flight and not already finished.
  void finish_job(const std::shared_ptr<Job>& job, Status error) EXCLUDES(mutex_) {
    core::MutexLock lock(&mutex_);
    for (InFlight& in_flight : jobs_) {
      if (in_flight.job != job) continue;
      if (in_flight.ready) return;
      in_flight.error = std::move(error);
      in_flight.ready = true;
      ready_cv_.signal_all();
      return;
    }
  }

  // The place after `p`: its epoch's next batch, else the first batch of the next epoch that
  // has one, or the run's end.
  Position following(Position p) const REQUIRES(mutex_) {
    return settled(Position{p.epoch, p.batch + 1});
  }
  // `p`, or when its epoch has no batch `p.batch`, the first batch of the next epoch that has
  // one, or the run's end (Position{run_end_epoch_, 0}).
  Position settled(Position p) const REQUIRES(mutex_) {
    while (p.epoch < run_end_epoch_ && p.batch >= batches(static_cast<uint32_t>(p.epoch))) {
      p = Position{p.epoch + 1, 0};
    }
    return p;
  }

  const std::unique_ptr<BatchSource> source_;
  const LoaderOptions options_;
  const std::shared_ptr<BufferPool> pool_;

  mutable core::Mutex mutex_;
  core::CondVar ready_cv_;
  std::deque<InFlight> jobs_ GUARDED_BY(mutex_);  // started, not delivered, in order
  bool running_ GUARDED_BY(mutex_) = false;
  // The run delivers from next_deliver_ to the end of epoch run_end_epoch_ - 1.
  Position next_start_ GUARDED_BY(mutex_);
  Position next_deliver_ GUARDED_BY(mutex_);
  int64_t run_end_epoch_ GUARDED_BY(mutex_) = 0;
  int64_t serial_ GUARDED_BY(mutex_) = 0;
  int64_t delivered_batches_ GUARDED_BY(mutex_) = 0;
  int64_t delivered_samples_ GUARDED_BY(mutex_) = 0;
  int64_t ready_sum_ GUARDED_BY(mutex_) = 0;
  std::vector<double> data_wait_s_ GUARDED_BY(mutex_);  // a ring of max_wait_records
  double data_wait_total_s_ GUARDED_BY(mutex_) = 0;
  int64_t skipped_ GUARDED_BY(mutex_) = 0;
  std::vector<SkipRecord> skips_ GUARDED_BY(mutex_);

  // The threads of the current run (start() to the epoch's end, an error or stop()). Joined
  // by end_run() before anything they use is destroyed.
  const int threads_;
  std::unique_ptr<pipeline::Executor> executor_ GUARDED_BY(mutex_);
};

namespace {

Status invalid_option(const std::string& why) {
  return Status(StatusCode::kInvalidArgument, "loader: " + why);
}

// The options every kind of dataset shares, and whether `sampler`'s first epoch makes a batch.
Status check_options(const sampling::Sampler& sampler, const LoaderOptions& options) {
  if (options.batch_size < 1) return invalid_option("batch_size must be at least 1");
  if (options.prefetch < 1) return invalid_option("prefetch must be at least 1");
  if (options.threads < 0) return invalid_option("threads must be 0 (all cores) or more");
  if (options.max_wait_records < 1) {
    return invalid_option("max_wait_records must be at least 1, got " +
                          std::to_string(options.max_wait_records));
  }
  if (options.max_replacements < 1 || options.max_replacements > kMaxReplacements) {
    return invalid_option("max_replacements must lie in [1, " + std::to_string(kMaxReplacements) +
                          "]");
  }
  const int64_t samples = sampler.epoch_size(0);
  const int64_t batches = options.drop_last
                              ? samples / options.batch_size
                              : (samples + options.batch_size - 1) / options.batch_size;
  if (batches == 0) {
    return invalid_option(
        "an epoch would have no batch: the sampler gives this rank " + std::to_string(samples) +
        " samples" +
        (options.drop_last
             ? ", fewer than batch_size " + std::to_string(options.batch_size) + " with drop_last"
             : ""));
  }
  return Status();
}

}  // namespace

// The pool holds the batches in the pipeline (prefetch), the one being handed over, and the
// one the consumer still holds while it asks for the next: a consumer that keeps no more than
// that never allocates. One buffer is made now, so that memory that cannot be had (pinned,
// without a GPU) fails here; a pool the machine cannot hold now is refused here, not met as
// failed allocations later.
Result<std::unique_ptr<Loader>> Loader::create(std::unique_ptr<pipeline::BatchSource> source,
                                               const LoaderOptions& options) {
  if (source == nullptr) return invalid_option("a source is required");
  STOKER_RETURN_IF_ERROR(check_options(source->sampler(), options));
  const size_t batch_bytes = source->batch_bytes();
  const double pool_bytes = static_cast<double>(batch_bytes) * (options.prefetch + 2);
  const double machine_bytes = static_cast<double>(HostMemory::available_bytes());
  if (pool_bytes > machine_bytes) {
    return Status(StatusCode::kResourceExhausted,
                  "loader: prefetch " + std::to_string(options.prefetch) + " keeps up to " +
                      std::to_string(options.prefetch + 2) + " batches of " +
                      std::to_string(batch_bytes >> 20) + " MiB (" +
                      std::to_string(static_cast<int64_t>(pool_bytes / (1 << 30))) +
                      " GiB), more than the " +
                      std::to_string(static_cast<int64_t>(machine_bytes / (1 << 30))) +
                      " GiB of memory available: lower prefetch or batch_size");
  }
  STOKER_ASSIGN_OR_RETURN(std::shared_ptr<const HostMemory> memory,
                          HostMemory::create(options.pinned_memory));
  Result<std::optional<uint8_t>> poison = pipeline::poison_from_environment();
  if (!poison.ok()) return poison.status().with_context("loader");
  auto pool =
      std::make_shared<BufferPool>(std::move(memory), batch_bytes, options.prefetch + 2, *poison);
  Result<uint8_t*> first = pool->acquire();
  if (!first.ok()) return first.status().with_context("loader");
  pool->release(*first);
  const int threads = options.threads > 0 ? options.threads : usable_cores();
  return std::unique_ptr<Loader>(
      new Loader(std::make_unique<Impl>(std::move(source), options, std::move(pool), threads)));
}

Loader::Loader(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)), fork_generation_(core::fork_generation()) {}

Loader::~Loader() {
  // In a forked child the run's threads do not exist and its locks may be held by them.
  if (forked()) static_cast<void>(impl_.release());
}

bool Loader::forked() const { return core::fork_generation() != fork_generation_; }

Status Loader::refuse_if_forked() const {
  if (!forked()) return Status();
  return Status(StatusCode::kInvalidArgument,
                "loader: this loader was created before this process was forked; its threads "
                "stayed in the parent: create a new Loader in this process");
}

int64_t Loader::batches_per_epoch() const { return impl_->batches(0); }
int64_t Loader::batches_in_epoch(uint32_t epoch) const { return impl_->batches(epoch); }
const std::vector<BatchField>& Loader::fields() const { return impl_->fields(); }
std::vector<std::string> Loader::column_names() const { return impl_->column_names(); }
int Loader::pipeline_depth() const { return impl_->depth(); }
Status Loader::start(uint32_t epoch, int64_t batch, int64_t epochs) {
  STOKER_RETURN_IF_ERROR(refuse_if_forked());
  return impl_->start(epoch, batch, epochs);
}
std::pair<uint32_t, int64_t> Loader::position() const {
  return forked() ? std::pair<uint32_t, int64_t>{0, 0} : impl_->position();
}
bool Loader::running() const { return !forked() && impl_->running(); }
Result<std::shared_ptr<const Batch>> Loader::next() {
  STOKER_RETURN_IF_ERROR(refuse_if_forked());
  return impl_->next();
}
Result<std::shared_ptr<const Batch>> Loader::read(std::span<const int64_t> samples,
                                                  uint32_t epoch) {
  STOKER_RETURN_IF_ERROR(refuse_if_forked());
  return impl_->read(samples, epoch);
}
void Loader::stop() {
  if (!forked()) impl_->stop();
}
LoaderStats Loader::stats() const { return forked() ? LoaderStats() : impl_->stats(); }
void Loader::reset_stats() {
  if (!forked()) impl_->reset_stats();
}

}  // namespace stoker
