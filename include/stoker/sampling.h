// Samplers: which sample ids a rank visits in an epoch, and in what order.
//
// Every random choice comes from a counter-based RNG (Philox4x32-10) keyed by (seed, epoch,
// id, stream), so a sampler is a pure function: the id at (epoch, position) is computed, never
// stored, and is the same whichever thread asks, in whatever order, whenever. Consequences:
//   - a random order over a huge dataset needs no stored permutation (Permutation below);
//   - resuming is exact from a two-number state (SamplerState): the epoch and the next position;
//   - a run saved on W ranks resumes on W' ranks (ElasticStart): the epoch's global order is
//     known to every rank, so the part the W ranks had consumed is a prefix of it, and the rest
//     is dealt over the W' ranks with nothing stored;
//   - results do not depend on the number of threads that read them.
//
// Ownership: create() returns a sampler the caller owns; it copies what it needs from its
// arguments (weights, costs), which may be freed afterwards.
// Thread-safety: samplers and Permutation are immutable after construction; every const method
// may run concurrently from any number of threads.
//
// An empty dataset (n = 0) gives an empty epoch for the samplers that only order samples
// (DistributedSampler, LoadBalancedSampler); WeightedSampler cannot draw from nothing and fails.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "stoker/status.h"

namespace stoker::sampling {

// ---- Permutations --------------------------------------------------------------------

/// A random permutation of [0, n), computed position by position and never stored: a Feistel
/// network over the smallest power of two >= n, keyed by 128 bits, with cycle-walking for the
/// values >= n. A lookup costs eight rounds of integer mixing (24 for n <= 64, where few rounds
/// are measurably non-uniform) times fewer than two walks on average. Any n >= 0 works;
/// construction is O(1).
class Permutation {
 public:
  /// `key`: 128 random bits, e.g. from the counter-based RNG keyed by (seed, epoch).
  Permutation(int64_t n, std::array<uint32_t, 4> key);

  int64_t size() const { return n_; }
  /// The value at position i. REQUIRES: 0 <= i < size().
  int64_t operator()(int64_t i) const;
  /// The position of value x: inverse(operator()(i)) == i. REQUIRES: 0 <= x < size().
  int64_t inverse(int64_t x) const;

 private:
  static constexpr int kMaxRounds = 24;
  uint64_t encrypt(uint64_t x) const;
  uint64_t decrypt(uint64_t x) const;

  int64_t n_;
  int left_bits_;  // high half; the low half has the rest of the domain's bits
  int right_bits_;
  int rounds_;  // even
  std::array<uint64_t, kMaxRounds> round_keys_;
};

// ---- Samplers ---------------------------------------------------------------------------

/// Where iteration stands: the next position to hand out, in an epoch. Restoring it restores
/// exactly the remaining order.
struct SamplerState {
  uint32_t epoch = 0;
  int64_t position = 0;
};

/// An epoch resumed on another world size (elastic resume). Every rank r of a run of W ranks
/// visits the global positions r, r + W, r + 2W, ... of the epoch's global order (for
/// DistributedSampler and LoadBalancedSampler the shuffled samples, for WeightedSampler and
/// MixSampler the draws), so after p positions per rank the run has consumed the global
/// positions [0, p * W), whatever W. A sampler given an ElasticStart deals the global positions
/// [start, total) of `epoch` over its own ranks as it deals a whole epoch (padded, or cut with
/// drop_last, to equal counts per rank), and every other epoch as usual. `start` past the end
/// gives an empty epoch.
struct ElasticStart {
  uint32_t epoch = 0;
  int64_t start = 0;
};

/// What every sampler answers. Positions are this rank's: 0 .. epoch_size(epoch) - 1.
class Sampler {
 public:
  virtual ~Sampler() = default;

  /// The number of ids this rank visits in a whole epoch (the same for every rank and epoch),
  /// or for a sampler whose epochs differ (a stream of shards dealt by bytes), its first
  /// epoch's.
  virtual int64_t size() const = 0;

  /// The number of ids this rank visits in `epoch`: size(), but for the epoch an ElasticStart
  /// resumes and for a stream of shards dealt by bytes, whose ranks and epochs get different
  /// counts.
  virtual int64_t epoch_size(uint32_t /*epoch*/) const { return size(); }

  /// The sample id at `position` of `epoch`. O(1) for DistributedSampler and WeightedSampler;
  /// LoadBalancedSampler solves the position's whole step.
  /// REQUIRES: 0 <= position < epoch_size(epoch).
  virtual int64_t at(uint32_t epoch, int64_t position) const = 0;

  /// out[k] = at(epoch, start + k), at less cost per id than at(). Errors (kInvalidArgument):
  /// the range [start, start + out.size()) leaves [0, epoch_size(epoch)].
  virtual Status fill(uint32_t epoch, int64_t start, std::span<int64_t> out) const;

  /// Fills out with the ids from *state onward, stopping at the end of its epoch, and advances
  /// state->position past them. Returns how many were written: 0 once the epoch is done (the
  /// caller moves on with {epoch + 1, 0}). Errors: a position outside [0, size()].
  Result<int64_t> next(SamplerState* state, std::span<int64_t> out) const;

  /// The elastic resume that goes on with `epoch` on any world size once every rank of this
  /// sampler's run has delivered its first `delivered` positions of it (each rank r its
  /// global positions r, r + W, ...: [0, delivered * W) of what this run dealt are consumed).
  /// Errors (kInvalidArgument): `delivered` outside [0, epoch_size(epoch)], or inside a step
  /// of a LoadBalancedSampler; kUnsupported: a sampler that deals otherwise (a stream of
  /// shards: ShardStreamSampler::remainder).
  virtual Result<ElasticStart> elastic_remainder(uint32_t epoch, int64_t delivered) const;

 protected:
  Status check_range(uint32_t epoch, int64_t start, size_t count) const;
  /// elastic_remainder of a sampler whose rank r of `world_size` visits r, r + W, ... of the
  /// epoch's global positions, after `resume`'s start when it resumes `epoch`.
  Result<ElasticStart> interleaved_remainder(uint32_t epoch, int64_t delivered,
                                             const std::optional<ElasticStart>& resume,
                                             int64_t world_size) const;
};

/// Sequential, random and distributed order, as torch's SequentialSampler, RandomSampler and
/// DistributedSampler: every sample once per epoch, split between ranks.
struct DistributedOptions {
  /// A new random order each epoch (a Permutation keyed by seed and epoch) instead of
  /// 0, 1, 2, ... Default: true.
  bool shuffle = true;
  uint64_t seed = 0;
  /// This process's rank, in [0, world_size), and the number of ranks. Default: 0 of 1.
  int64_t rank = 0;
  int64_t world_size = 1;
  /// When n is not a multiple of world_size: false pads to ceil(n / world_size) ids per rank by
  /// repeating the epoch's order from its start; true drops the order's tail, giving
  /// floor(n / world_size) per rank. Default: false.
  bool drop_last = false;
  /// Resumes an epoch a run of another world size had partly consumed. Default: none.
  std::optional<ElasticStart> resume;
};

/// Rank r visits positions r, r + world_size, ... of the epoch's (padded or cut) order.
class DistributedSampler final : public Sampler {
 public:
  /// Errors (kInvalidArgument): n < 0, world_size < 1, rank outside [0, world_size).
  static Result<std::unique_ptr<DistributedSampler>> create(int64_t n,
                                                            DistributedOptions options = {});
  int64_t size() const override { return per_rank_; }
  int64_t epoch_size(uint32_t epoch) const override;
  int64_t at(uint32_t epoch, int64_t position) const override;
  Status fill(uint32_t epoch, int64_t start, std::span<int64_t> out) const override;
  Result<ElasticStart> elastic_remainder(uint32_t epoch, int64_t delivered) const override {
    return interleaved_remainder(epoch, delivered, options_.resume, options_.world_size);
  }

 private:
  DistributedSampler(int64_t n, DistributedOptions options, int64_t per_rank)
      : n_(n), options_(options), per_rank_(per_rank) {}
  int64_t n_;
  DistributedOptions options_;
  int64_t per_rank_;
};

/// Another sampler's order with each id it gives replaced by ids[id]: the order of a subset of
/// a dataset (chosen episodes; episodes without their first or last frames) drawn by any
/// sampler over [0, ids.size()). Positions, sizes and epochs are the inner sampler's.
class MappedSampler final : public Sampler {
 public:
  /// `inner` draws positions into `ids` (copied). Errors (kInvalidArgument): no inner sampler,
  /// a negative id.
  static Result<std::unique_ptr<MappedSampler>> create(std::shared_ptr<const Sampler> inner,
                                                       std::span<const int64_t> ids);
  int64_t size() const override { return inner_->size(); }
  int64_t epoch_size(uint32_t epoch) const override { return inner_->epoch_size(epoch); }
  /// -1 when the inner sampler gives an id outside [0, ids.size()) (fill() says so instead).
  int64_t at(uint32_t epoch, int64_t position) const override;
  /// Errors (kInvalidArgument): the range leaves [0, size()], or the inner sampler gives an id
  /// outside [0, ids.size()).
  Status fill(uint32_t epoch, int64_t start, std::span<int64_t> out) const override;
  /// The inner sampler's: positions are its.
  Result<ElasticStart> elastic_remainder(uint32_t epoch, int64_t delivered) const override {
    return inner_->elastic_remainder(epoch, delivered);
  }

 private:
  MappedSampler(std::shared_ptr<const Sampler> inner, std::vector<int64_t> ids)
      : inner_(std::move(inner)), ids_(std::move(ids)) {}
  std::shared_ptr<const Sampler> inner_;
  std::vector<int64_t> ids_;
};

struct WeightedOptions {
  /// Draws per epoch over all ranks. Default: the number of weights.
  std::optional<int64_t> num_samples;
  uint64_t seed = 0;
  /// As DistributedOptions: rank r makes draws r, r + world_size, ... of the epoch; drop_last
  /// chooses floor instead of ceil(num_samples / world_size) draws per rank. Default: 0 of 1.
  int64_t rank = 0;
  int64_t world_size = 1;
  bool drop_last = false;
  /// As DistributedOptions: global position g is draw g. Default: none.
  std::optional<ElasticStart> resume;
};

/// Draws with replacement, sample i with probability weights[i] / sum(weights), by Walker's
/// alias method: O(1) per draw, each draw a pure function of (seed, epoch, draw index).
class WeightedSampler final : public Sampler {
 public:
  /// Errors (kInvalidArgument): no weights, a negative, NaN or infinite weight, all weights
  /// zero, num_samples < 0, world_size < 1, rank outside [0, world_size).
  static Result<std::unique_ptr<WeightedSampler>> create(std::span<const double> weights,
                                                         WeightedOptions options = {});
  int64_t size() const override { return per_rank_; }
  int64_t epoch_size(uint32_t epoch) const override;
  int64_t at(uint32_t epoch, int64_t position) const override;
  /// The draw (global position) this rank makes at `position` of `epoch`.
  int64_t draw(uint32_t epoch, int64_t position) const;
  Result<ElasticStart> elastic_remainder(uint32_t epoch, int64_t delivered) const override {
    return interleaved_remainder(epoch, delivered, options_.resume, options_.world_size);
  }

 private:
  WeightedSampler(WeightedOptions options, int64_t per_rank)
      : options_(options), per_rank_(per_rank) {}

  WeightedOptions options_;
  int64_t per_rank_;
  std::vector<double> accept_;  // alias table: keep column i with this probability,
  std::vector<int64_t> alias_;  // else take alias_[i]
};

/// Draws from several datasets laid end to end (dataset k's sample i is id offsets()[k] + i):
/// each draw picks dataset k with probability weights[k] / sum(weights), independently of every
/// other draw (WeightedSampler over the datasets), then one of its samples uniformly; both pure
/// functions of (seed, epoch, draw index). O(datasets) memory, whatever the datasets' sizes.
/// `options.num_samples` defaults to the datasets' total size.
class MixSampler final : public Sampler {
 public:
  /// Errors (kInvalidArgument): as WeightedSampler's for the weights; sizes of another count,
  /// a negative size, a positive weight on an empty dataset.
  static Result<std::unique_ptr<MixSampler>> create(std::span<const double> weights,
                                                    std::span<const int64_t> sizes,
                                                    WeightedOptions options = {});
  int64_t size() const override { return datasets_->size(); }
  int64_t epoch_size(uint32_t epoch) const override { return datasets_->epoch_size(epoch); }
  int64_t at(uint32_t epoch, int64_t position) const override;
  /// The first id of each dataset, and the total: datasets + 1 values.
  const std::vector<int64_t>& offsets() const { return offsets_; }
  Result<ElasticStart> elastic_remainder(uint32_t epoch, int64_t delivered) const override {
    return datasets_->elastic_remainder(epoch, delivered);
  }

 private:
  MixSampler(std::unique_ptr<WeightedSampler> datasets, std::vector<int64_t> offsets,
             WeightedOptions options)
      : datasets_(std::move(datasets)), offsets_(std::move(offsets)), options_(options) {}

  std::unique_ptr<WeightedSampler> datasets_;  // which dataset each draw takes
  std::vector<int64_t> offsets_;
  WeightedOptions options_;
};

/// How expand_group_weights reads a group's weight.
enum class GroupWeight {
  kTotal,      // the group's share of all draws, spread evenly over its samples (datasets mixed
               // by ratio; episodes drawn equally often whatever their length)
  kPerSample,  // every sample of the group gets the weight
};

/// Per-sample weights from per-group weights (groups of consecutive samples: episodes, or
/// datasets), for WeightedSampler. Errors (kInvalidArgument): lengths differ, a negative size,
/// a negative or non-finite weight, a positive kTotal weight on an empty group.
Result<std::vector<double>> expand_group_weights(std::span<const double> group_weights,
                                                 std::span<const int64_t> group_sizes,
                                                 GroupWeight mode = GroupWeight::kTotal);

struct LoadBalancedOptions {
  /// Samples per rank per step. REQUIRES: >= 1. Default: 1.
  int64_t batch_size = 1;
  /// As DistributedOptions. Default: shuffled, seed 0, rank 0 of 1, padded.
  bool shuffle = true;
  uint64_t seed = 0;
  int64_t rank = 0;
  int64_t world_size = 1;
  bool drop_last = false;
  /// As DistributedOptions: the resumed epoch's remaining samples, in their order, are cut
  /// into steps of this run's world_size * batch_size and balanced. Default: none.
  std::optional<ElasticStart> resume;
};

/// max / mean of the ranks' summed costs in a step, summarized over an epoch's steps.
struct Imbalance {
  double mean = 1.0;   // the average step's ratio
  double worst = 1.0;  // the largest step's ratio
  /// sum over steps of the largest rank cost / sum of the mean rank cost: how much longer
  /// synchronous steps take than perfectly balanced ones.
  double total = 1.0;
};

struct BalanceReport {
  int64_t steps = 0;
  Imbalance before;  // the step's samples dealt round-robin, as DistributedSampler does
  Imbalance after;   // as this sampler assigns them
};

/// DistributedSampler's order, cut into global steps of world_size * batch_size samples (the
/// last step may be smaller, the same count on every rank); each step's samples are
/// re-dealt so the ranks' summed costs are even:
///   1. sort the step's samples by cost, descending (ties by position);
///   2. give each to the bin (one per rank) with the least total so far among those not yet
///      full, so every bin ends with the same count;
///   3. map the bins to rank ids by a random permutation per step, and shuffle the order
///      inside each rank's batch, so no rank is always the heavy one and batches are not
///      sorted by cost.
/// Every rank computes the same global assignment from the same costs, with no communication.
class LoadBalancedSampler final : public Sampler {
 public:
  /// `costs`: one per sample, e.g. frames to decode plus pixels to convert.
  /// Errors (kInvalidArgument): a negative, NaN or infinite cost, batch_size < 1,
  /// world_size < 1, rank outside [0, world_size).
  static Result<std::unique_ptr<LoadBalancedSampler>> create(std::span<const double> costs,
                                                             LoadBalancedOptions options = {});
  int64_t size() const override { return per_rank_; }
  int64_t epoch_size(uint32_t epoch) const override;
  /// O(s log s) for a step of s = world_size * batch_size samples.
  int64_t at(uint32_t epoch, int64_t position) const override;
  Status fill(uint32_t epoch, int64_t start, std::span<int64_t> out) const override;

  /// The imbalance of `epoch`'s steps before and after balancing (the same on every rank).
  BalanceReport report(uint32_t epoch) const;
  /// As Sampler's; `delivered` must end a step (a multiple of batch_size).
  Result<ElasticStart> elastic_remainder(uint32_t epoch, int64_t delivered) const override;

 private:
  LoadBalancedSampler(std::vector<double> costs, LoadBalancedOptions options, int64_t per_rank)
      : costs_(std::move(costs)), options_(options), per_rank_(per_rank) {}

  std::vector<double> costs_;
  LoadBalancedOptions options_;
  int64_t per_rank_;
};

}  // namespace stoker::sampling
