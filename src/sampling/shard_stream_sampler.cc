#include <algorithm>
#include <limits>
#include <numeric>
#include <optional>
#include <string>
#include <utility>

#include "core/mutex.h"
#include "sampling/detail/common.h"
#include "stoker/shard_order.h"

namespace stoker::sampling {

// The kept epochs. A computation runs outside the lock, so a caller of a kept epoch takes the
// lock only for a lookup, never for another epoch's computation; callers of the epoch being
// computed wait for it instead of computing it again.
class ShardStreamSampler::Cache {
 public:
  std::shared_ptr<const EpochOrder> get(const ShardStreamSampler& sampler, uint32_t epoch) {
    core::MutexLock lock(&mutex_);
    for (;;) {
      Entry* entry = find(epoch);
      if (entry == nullptr) break;
      entry->last_use = ++uses_;
      if (entry->order != nullptr) return entry->order;
      computed_.wait(&mutex_);  // another thread computes it
    }
    entries_.push_back({.epoch = epoch, .last_use = ++uses_, .order = nullptr});
    lock.unlock();
    std::shared_ptr<const EpochOrder> order = sampler.compute(epoch);
    lock.lock();
    find(epoch)->order = order;
    trim();
    computed_.signal_all();
    return order;
  }

  /// The kept epoch's size, when it is kept (and not being computed).
  std::optional<int64_t> kept_size(uint32_t epoch) {
    core::MutexLock lock(&mutex_);
    const Entry* entry = find(epoch);
    if (entry == nullptr || entry->order == nullptr) return std::nullopt;
    return static_cast<int64_t>(entry->order->order.size());
  }

 private:
  static constexpr size_t kKept = 2;

  struct Entry {
    uint32_t epoch;
    uint64_t last_use;
    std::shared_ptr<const EpochOrder> order;  // null while being computed
  };

  Entry* find(uint32_t epoch) REQUIRES(mutex_) {
    for (Entry& entry : entries_) {
      if (entry.epoch == epoch) return &entry;
    }
    return nullptr;
  }

  // Drops the least recently used computed epochs past kKept. An epoch being computed stays
  // (its waiters look for it): with many epochs asked at once, more than kKept are held a while.
  void trim() REQUIRES(mutex_) {
    for (;;) {
      size_t computed = 0;
      auto oldest = entries_.end();
      for (auto it = entries_.begin(); it != entries_.end(); ++it) {
        if (it->order == nullptr) continue;
        ++computed;
        if (oldest == entries_.end() || it->last_use < oldest->last_use) oldest = it;
      }
      if (computed <= kKept) return;
      entries_.erase(oldest);
    }
  }

  core::Mutex mutex_;
  core::CondVar computed_;
  std::vector<Entry> entries_ GUARDED_BY(mutex_);
  uint64_t uses_ GUARDED_BY(mutex_) = 0;
};

Result<std::unique_ptr<ShardStreamSampler>> ShardStreamSampler::create(
    std::span<const int64_t> shard_samples, std::span<const int64_t> shard_bytes,
    ShardStreamOptions options) {
  STOKER_RETURN_IF_ERROR(detail::check_partition(options.rank, options.world_size));
  if (shard_samples.size() != shard_bytes.size()) {
    return Status(StatusCode::kInvalidArgument,
                  "a shard stream needs a sample count and a size per shard, got " +
                      std::to_string(shard_samples.size()) + " counts and " +
                      std::to_string(shard_bytes.size()) + " sizes");
  }
  int64_t total = 0;
  for (size_t s = 0; s < shard_samples.size(); ++s) {
    if (shard_samples[s] < 0 || shard_bytes[s] < 0) {
      return Status(StatusCode::kInvalidArgument,
                    "shard " + std::to_string(s) + " has a negative " +
                        (shard_samples[s] < 0 ? "sample count, " + std::to_string(shard_samples[s])
                                              : "size, " + std::to_string(shard_bytes[s])));
    }
    if (shard_samples[s] > std::numeric_limits<int64_t>::max() - total) {
      return Status(StatusCode::kInvalidArgument,
                    "the shards' sample counts sum past int64 at shard " + std::to_string(s));
    }
    total += shard_samples[s];
  }
  if (options.shuffle_buffer < 0) {
    return Status(StatusCode::kInvalidArgument, "shuffle_buffer must be non-negative, got " +
                                                    std::to_string(options.shuffle_buffer));
  }
  if (options.batch_size < 1) {
    return Status(StatusCode::kInvalidArgument,
                  "batch_size must be at least 1, got " + std::to_string(options.batch_size));
  }
  std::unique_ptr<ShardStreamSampler> sampler(new ShardStreamSampler(
      std::vector<int64_t>(shard_samples.begin(), shard_samples.end()),
      std::vector<int64_t>(shard_bytes.begin(), shard_bytes.end()), options));
  if (options.resume) {
    const ElasticStream& resume = *options.resume;
    if (resume.world_size < 1) {
      return Status(StatusCode::kInvalidArgument,
                    "an elastic resume's saving run has world_size >= 1, got " +
                        std::to_string(resume.world_size));
    }
    std::vector<int64_t> saved_sizes;
    sampler->deal(resume.epoch, resume.world_size, 0, &saved_sizes, nullptr);
    for (const StreamPiece& piece : resume.pieces) {
      if (piece.rank < 0 || piece.rank >= resume.world_size || piece.begin < 0 ||
          piece.begin > piece.end || piece.end > saved_sizes[piece.rank]) {
        return Status(StatusCode::kInvalidArgument,
                      "an elastic resume's piece, positions [" + std::to_string(piece.begin) +
                          ", " + std::to_string(piece.end) + ") of rank " +
                          std::to_string(piece.rank) + ", leaves that rank's order of epoch " +
                          std::to_string(resume.epoch) + " (world_size " +
                          std::to_string(resume.world_size) +
                          "): the shards differ from the "
                          "saving run's");
      }
    }
  }
  sampler->size_ = sampler->cut_size(sampler->uncut_sizes(0), options.rank);
  return sampler;
}

ShardStreamSampler::ShardStreamSampler(std::vector<int64_t> shard_samples,
                                       std::vector<int64_t> shard_bytes, ShardStreamOptions options)
    : shard_samples_(std::move(shard_samples)),
      shard_bytes_(std::move(shard_bytes)),
      shard_first_(shard_samples_.size()),
      options_(std::move(options)),
      cache_(std::make_unique<Cache>()) {
  std::exclusive_scan(shard_samples_.begin(), shard_samples_.end(), shard_first_.begin(),
                      int64_t{0});
}

ShardStreamSampler::~ShardStreamSampler() = default;

void ShardStreamSampler::deal(uint32_t epoch, int64_t world_size, int64_t rank,
                              std::vector<int64_t>* rank_samples,
                              std::vector<int64_t>* shards) const {
  // Cannot fail: create() checked the world sizes and the sizes.
  std::vector<std::vector<int64_t>> ranks =
      deal_shards(shard_bytes_, options_.shuffle, options_.seed, epoch, world_size).value();
  rank_samples->assign(ranks.size(), 0);
  for (size_t r = 0; r < ranks.size(); ++r) {
    for (int64_t s : ranks[r]) (*rank_samples)[r] += shard_samples_[s];
  }
  if (shards != nullptr) *shards = std::move(ranks[rank]);
}

int64_t ShardStreamSampler::cut_size(const std::vector<int64_t>& rank_samples, int64_t rank) const {
  int64_t n = rank_samples[rank];
  if (options_.equal_batches) n = *std::min_element(rank_samples.begin(), rank_samples.end());
  if (options_.drop_last) n -= n % options_.batch_size;
  return n;
}

namespace {

bool resumes(const std::optional<ElasticStream>& resume, uint32_t epoch) {
  return resume && resume->epoch == epoch;
}

int64_t pieces_length(const std::vector<StreamPiece>& pieces) {
  int64_t total = 0;
  for (const StreamPiece& piece : pieces) total += piece.end - piece.begin;
  return total;
}

// The rest of `pieces` after their first `skip` positions.
std::vector<StreamPiece> after(const std::vector<StreamPiece>& pieces, int64_t skip) {
  std::vector<StreamPiece> rest;
  for (StreamPiece piece : pieces) {
    const int64_t taken = std::min(skip, piece.end - piece.begin);
    piece.begin += taken;
    skip -= taken;
    if (piece.begin < piece.end) rest.push_back(piece);
  }
  return rest;
}

}  // namespace

std::vector<int64_t> ShardStreamSampler::uncut_sizes(uint32_t epoch) const {
  std::vector<int64_t> sizes;
  if (!resumes(options_.resume, epoch)) {
    deal(epoch, options_.world_size, options_.rank, &sizes, nullptr);
    return sizes;
  }
  const int64_t total = pieces_length(options_.resume->pieces);
  const int64_t world = options_.world_size;
  for (int64_t r = 0; r < world; ++r) sizes.push_back(total / world + (r < total % world));
  return sizes;
}

std::vector<StreamPiece> ShardStreamSampler::block(const ElasticStream& resume,
                                                   int64_t rank) const {
  const int64_t total = pieces_length(resume.pieces);
  const int64_t world = options_.world_size;
  const int64_t first = rank * (total / world) + std::min(rank, total % world);
  const int64_t length = total / world + (rank < total % world);
  std::vector<StreamPiece> mine = after(resume.pieces, first);
  int64_t left = length;
  for (size_t k = 0; k < mine.size(); ++k) {
    const int64_t taken = std::min(left, mine[k].end - mine[k].begin);
    mine[k].end = mine[k].begin + taken;
    left -= taken;
    if (left == 0) {
      mine.resize(k + 1);
      break;
    }
  }
  return mine;
}

std::vector<int64_t> ShardStreamSampler::whole_order(uint32_t epoch, int64_t world_size,
                                                     int64_t rank,
                                                     std::vector<int64_t>* stream) const {
  std::vector<int64_t> rank_samples;
  std::vector<int64_t> shards;
  deal(epoch, world_size, rank, &rank_samples, &shards);
  stream->clear();
  stream->reserve(static_cast<size_t>(rank_samples[rank]));
  for (int64_t s : shards) {
    for (int64_t id = shard_first_[s]; id < shard_first_[s] + shard_samples_[s]; ++id) {
      stream->push_back(id);
    }
  }
  // As the shard loader: without shuffle, no buffer either.
  const int64_t buffer = options_.shuffle ? options_.shuffle_buffer : 0;
  return shuffle_buffer_order(*stream, buffer, options_.seed, epoch, rank);
}

std::shared_ptr<const ShardStreamSampler::EpochOrder> ShardStreamSampler::compute(
    uint32_t epoch) const {
  auto result = std::make_shared<EpochOrder>();
  if (!resumes(options_.resume, epoch)) {
    result->order = whole_order(epoch, options_.world_size, options_.rank, &result->stream);
  } else {
    // The saving ranks' orders this rank's block cuts from, one at a time.
    const ElasticStream& resume = *options_.resume;
    std::vector<int64_t> saved_order, saved_stream;
    int64_t saved_rank = -1;
    for (const StreamPiece& piece : block(resume, options_.rank)) {
      if (piece.rank != saved_rank) {
        saved_order = whole_order(epoch, resume.world_size, piece.rank, &saved_stream);
        saved_rank = piece.rank;
      }
      result->order.insert(result->order.end(), saved_order.begin() + piece.begin,
                           saved_order.begin() + piece.end);
    }
    result->stream = result->order;
  }
  result->order.resize(static_cast<size_t>(cut_size(uncut_sizes(epoch), options_.rank)));
  return result;
}

int64_t ShardStreamSampler::epoch_size(uint32_t epoch) const {
  if (std::optional<int64_t> kept = cache_->kept_size(epoch)) return *kept;
  return cut_size(uncut_sizes(epoch), options_.rank);
}

Result<ElasticStream> ShardStreamSampler::remainder(uint32_t epoch,
                                                    std::span<const int64_t> delivered) const {
  const int64_t world = options_.world_size;
  if (static_cast<int64_t>(delivered.size()) != world) {
    return Status(StatusCode::kInvalidArgument,
                  "a remainder needs the positions delivered by each of the " +
                      std::to_string(world) + " ranks, got " + std::to_string(delivered.size()));
  }
  const std::vector<int64_t> sizes = uncut_sizes(epoch);
  ElasticStream rest{.epoch = epoch, .world_size = world, .pieces = {}};
  if (resumes(options_.resume, epoch)) rest.world_size = options_.resume->world_size;
  for (int64_t r = 0; r < world; ++r) {
    if (delivered[r] < 0) {
      return Status(StatusCode::kInvalidArgument, "rank " + std::to_string(r) +
                                                      " delivered a negative count of positions, " +
                                                      std::to_string(delivered[r]));
    }
    const int64_t done = std::min(delivered[r], cut_size(sizes, r));
    std::vector<StreamPiece> left =
        resumes(options_.resume, epoch)
            ? after(block(*options_.resume, r), done)
            : std::vector<StreamPiece>{{.rank = r, .begin = done, .end = sizes[r]}};
    for (const StreamPiece& piece : left) {
      if (piece.begin < piece.end) rest.pieces.push_back(piece);
    }
  }
  return rest;
}

std::shared_ptr<const ShardStreamSampler::EpochOrder> ShardStreamSampler::epoch_order(
    uint32_t epoch) const {
  return cache_->get(*this, epoch);
}

int64_t ShardStreamSampler::at(uint32_t epoch, int64_t position) const {
  const std::shared_ptr<const EpochOrder> order = epoch_order(epoch);
  if (position < 0 || position >= static_cast<int64_t>(order->order.size())) return -1;
  return order->order[position];
}

Status ShardStreamSampler::fill(uint32_t epoch, int64_t start, std::span<int64_t> out) const {
  const std::shared_ptr<const EpochOrder> order = epoch_order(epoch);
  const int64_t n = static_cast<int64_t>(order->order.size());
  const auto count = static_cast<int64_t>(out.size());
  if (start < 0 || start > n || count > n - start) {
    return Status(StatusCode::kInvalidArgument, "positions [" + std::to_string(start) + ", " +
                                                    std::to_string(start + count) +
                                                    ") are outside epoch " + std::to_string(epoch) +
                                                    "'s " + std::to_string(n) + " positions");
  }
  std::copy_n(order->order.begin() + start, count, out.begin());
  return ok_status();
}

}  // namespace stoker::sampling
