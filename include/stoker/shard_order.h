// The order of a sharded dataset's samples in one epoch, for one rank: which shards the rank
// reads (dealt by bytes), in which order, and what a bounded shuffle buffer makes of the stream.
//
// Everything here is a pure function of (seed, epoch, rank, world size) and the shard sizes,
// so the order is the same whatever the thread count, and a run resumes mid-epoch by
// recomputing it: the shard cursor and the buffer's contents at any position are derived, not
// stored (see shuffle_buffer_state()).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "stoker/sampling.h"
#include "stoker/status.h"

namespace stoker::sampling {

/// The shards of each rank in `epoch`: `shard_bytes[i]` is shard i's size. With `shuffle`,
/// shard order is a permutation keyed by (seed, epoch), else the given order. Shards are dealt
/// largest first (ties in that order) to the rank with the fewest bytes so far (ties: the lowest
/// rank), so ranks get equal bytes, not equal counts; each rank then reads its shards in the
/// epoch's order. Every shard goes to exactly one rank; a rank may get none when there are
/// fewer shards than ranks.
/// Errors (kInvalidArgument): world_size < 1, a negative size.
Result<std::vector<std::vector<int64_t>>> deal_shards(std::span<const int64_t> shard_bytes,
                                                      bool shuffle, uint64_t seed, uint32_t epoch,
                                                      int64_t world_size);

/// What a bounded shuffle buffer of `buffer_size` samples emits for `stream` (sample ids in
/// reading order): the first buffer_size ids fill it; then each arriving id takes the place of
/// one drawn uniformly from (seed, epoch, rank, arrival), which is emitted; at the end of the
/// stream the rest is emitted in a random order. buffer_size <= 1 emits the stream unchanged.
/// The result is a permutation of `stream`.
std::vector<int64_t> shuffle_buffer_order(std::span<const int64_t> stream, int64_t buffer_size,
                                          uint64_t seed, uint32_t epoch, int64_t rank);

/// The buffer after `emitted` ids of shuffle_buffer_order() left it: how many ids of the
/// stream it had taken in (the shard cursor), and the ids it holds, in slot order.
struct ShuffleBufferState {
  int64_t consumed = 0;
  std::vector<int64_t> buffer;
};

/// Errors (kInvalidArgument): emitted outside [0, stream.size()].
Result<ShuffleBufferState> shuffle_buffer_state(std::span<const int64_t> stream,
                                                int64_t buffer_size, uint64_t seed, uint32_t epoch,
                                                int64_t rank, int64_t emitted);

struct ShardStreamOptions {
  std::vector<int64_t> shard_samples;  // per shard: its samples, numbered shard after shard
  std::vector<int64_t> shard_bytes;    // per shard: its size, by which shards are dealt
  bool shuffle = true;
  uint64_t seed = 0;
  int64_t shuffle_buffer = 0;  // <= 1: none
  int64_t rank = 0;
  int64_t world_size = 1;
  /// Every rank cut to the smallest rank's count in the epoch.
  bool equal_batches = false;
  /// The epoch cut to a multiple of batch_size.
  bool drop_last = false;
  int64_t batch_size = 1;
};

/// One epoch of a stream for one rank: its ids in reading order (its shards' samples), and in
/// the order its batches take them (after the shuffle buffer and the cuts).
struct EpochOrder {
  std::vector<int64_t> stream;
  std::vector<int64_t> order;
};

/// The sampler of a stream of shards: per epoch, deal_shards, the rank's shards' samples in
/// order, shuffle_buffer_order, then the cuts of equal_batches and drop_last. Its epochs differ
/// in length (epoch_size). An epoch's order is computed whole, once, when first asked for, and
/// the last two epochs asked for are kept (a run that spans epochs builds the next one's first
/// batches while it finishes the current one): memory, 16 bytes per sample of this rank's
/// epoch, per kept epoch.
/// Thread-safety: every const method may run concurrently from any thread.
class ShardStreamSampler final : public Sampler {
 public:
  /// Errors (kInvalidArgument): shard counts and sizes of different lengths or negative,
  /// world_size < 1, rank outside [0, world_size), batch_size < 1.
  static Result<std::unique_ptr<ShardStreamSampler>> create(ShardStreamOptions options);

  int64_t size() const override { return epoch_size(0); }
  int64_t epoch_size(uint32_t epoch) const override;
  int64_t at(uint32_t epoch, int64_t position) const override;
  Status fill(uint32_t epoch, int64_t start, std::span<int64_t> out) const override;
  /// The epoch's stream and order, computed or kept.
  std::shared_ptr<const EpochOrder> epoch_order(uint32_t epoch) const;

  ~ShardStreamSampler() override;

 private:
  struct Kept;  // the epochs kept, under a lock
  explicit ShardStreamSampler(ShardStreamOptions options);
  std::shared_ptr<const EpochOrder> compute(uint32_t epoch) const;

  const ShardStreamOptions options_;
  std::vector<int64_t> first_;  // per shard: its first sample
  const std::unique_ptr<Kept> kept_;
};

}  // namespace stoker::sampling
