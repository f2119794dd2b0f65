// The order of a sharded dataset's samples in one epoch, for one rank: which shards the rank
// reads (dealt by bytes), in which order, and what a bounded shuffle buffer makes of the stream.
//
// Everything here is a pure function of (seed, epoch, rank, world size) and the shard sizes,
// so the order is the same whatever the thread count, and a run resumes mid-epoch by
// recomputing it: the shard cursor and the buffer's contents at any position are derived, not
// stored (see shuffle_buffer_state()).
//
// ShardStreamSampler puts those functions behind the Sampler interface, so a loader draws a
// shard dataset's ids as it draws any other dataset's.
//
// Thread-safety: the functions are pure; ShardStreamSampler's const methods may run
// concurrently from any number of threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
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

/// Positions [begin, end) of rank `rank`'s order in an epoch of a shard stream.
struct StreamPiece {
  int64_t rank = 0;
  int64_t begin = 0;
  int64_t end = 0;
  bool operator==(const StreamPiece&) const = default;
};

/// An epoch of a shard stream resumed on another world size (elastic resume): what a run of
/// `world_size` ranks, with these options otherwise, had not delivered of `epoch`, as pieces
/// of its ranks' orders (ShardStreamSampler::remainder(): each rank's rest, its shuffle
/// buffer's held ids included). The pieces are laid end to end and cut into this run's
/// world_size contiguous blocks, rank 0's first (the first ones one id longer when they do not
/// divide evenly), so each rank carries on one or a few saving ranks' streams; the cuts
/// (equal_batches, drop_last) then apply to the blocks. Every other epoch is as usual.
struct ElasticStream {
  uint32_t epoch = 0;
  int64_t world_size = 1;
  std::vector<StreamPiece> pieces;
};

struct ShardStreamOptions {
  /// Shards permuted per epoch and a shuffle buffer over the stream; false reads the shards in
  /// the given order, with no buffer (whatever shuffle_buffer says). Default: true.
  bool shuffle = true;
  uint64_t seed = 0;
  /// Samples in the bounded shuffle buffer (shuffle_buffer_order()); 0 or 1: none.
  /// Default: 8192, the shard loader's.
  int64_t shuffle_buffer = 8192;
  /// This process's rank, in [0, world_size), and the number of ranks. Default: 0 of 1.
  int64_t rank = 0;
  int64_t world_size = 1;
  /// Every rank's epoch cut to the smallest rank's sample count in that epoch, so every rank
  /// takes as many batches (DDP). Default: false (each rank takes all of its shards' samples).
  bool equal_batches = false;
  /// The epoch cut (after equal_batches) to a multiple of batch_size. Default: false.
  bool drop_last = false;
  /// REQUIRES: >= 1; only drop_last reads it. Default: 1.
  int64_t batch_size = 1;
  /// Resumes an epoch a run of another world size had partly delivered. Default: none.
  std::optional<ElasticStream> resume;
};

/// One rank's epoch of a sharded dataset as a Sampler: the shards deal_shards() gives the rank,
/// read in order (shard s holds the ids [first[s], first[s] + count[s]), first being the prefix
/// sum of the counts), through shuffle_buffer_order(), cut by equal_batches and drop_last. The
/// ids are exactly those of python/stoker/shard_loader.py's ShardLoader.epoch_order().
///
/// Ranks and epochs get different counts (the dealing is by bytes): epoch_size(epoch) says how
/// many; size() is epoch 0's. Without equal_batches and drop_last, the ranks of an epoch
/// together take every sample exactly once.
///
/// Memory and cost: the order a shuffle buffer makes has to be computed whole, so an epoch is
/// computed by the first call that needs it (O(this rank's samples): one RNG draw per sample,
/// about 60 ms per million) and kept. Two epochs are kept, the most recently used (a run that
/// spans epochs plans the next one's first batches while the current one finishes), each
/// O(this rank's samples per epoch): its stream and its order, 16 bytes per sample. A call
/// for a kept epoch costs a lock and a copy (about 1 ns per id); one for the epoch being
/// computed waits for that computation (done once, no failure path) and one for a kept epoch
/// is not held up by it. epoch_size() of an epoch not kept deals the shards again
/// (O(shards log shards + shards * world_size)) instead of computing the order.
///
/// Ownership: create() copies the counts and sizes. An EpochOrder handed out stays valid as
/// long as its holder keeps it, whatever the cache does meanwhile.
/// Thread-safety: every const method may run concurrently from any number of threads.
class ShardStreamSampler final : public Sampler {
 public:
  /// One epoch of this rank.
  struct EpochOrder {
    /// The rank's samples in reading order, before the shuffle buffer: what
    /// shuffle_buffer_state() takes to find the shard cursor at a position.
    std::vector<int64_t> stream;
    /// The ids the epoch's positions give: the buffer's output, cut by equal_batches and
    /// drop_last (a prefix of a permutation of `stream`).
    std::vector<int64_t> order;
  };

  /// `shard_samples[s]`, `shard_bytes[s]`: shard s's sample count and size in bytes.
  /// Errors (kInvalidArgument): the two lengths differ, a negative count or size, counts
  /// summing past int64, shuffle_buffer < 0, batch_size < 1, world_size < 1, rank outside
  /// [0, world_size); a resume whose world size is < 1 or whose piece leaves its rank's order.
  static Result<std::unique_ptr<ShardStreamSampler>> create(std::span<const int64_t> shard_samples,
                                                            std::span<const int64_t> shard_bytes,
                                                            ShardStreamOptions options = {});
  ~ShardStreamSampler() override;

  int64_t size() const override { return size_; }
  int64_t epoch_size(uint32_t epoch) const override;
  /// O(1) once the epoch is kept. -1 when position is outside [0, epoch_size(epoch)).
  int64_t at(uint32_t epoch, int64_t position) const override;
  /// Errors (kInvalidArgument): the range [start, start + out.size()) leaves
  /// [0, epoch_size(epoch)].
  Status fill(uint32_t epoch, int64_t start, std::span<int64_t> out) const override;

  /// The epoch's stream and order (computed, or the kept one). Never null. In the epoch a
  /// resume names, the stream is the rank's block of the pieces, which is also its order.
  std::shared_ptr<const EpochOrder> epoch_order(uint32_t epoch) const;

  /// What the ranks of this sampler's run had not delivered of `epoch` when rank r had
  /// delivered delivered[r] positions (clamped to its epoch_size()): each rank's rest of its
  /// order before the cuts, rank by rank, as pieces of the orders an ElasticStream names — this
  /// run's, or in a resumed epoch the saving run's. O(shards log shards + world_size) plus the
  /// pieces; computes no order. The rank this sampler was made for does not matter.
  /// Errors (kInvalidArgument): delivered has another length than world_size, or a negative
  /// count.
  Result<ElasticStream> remainder(uint32_t epoch, std::span<const int64_t> delivered) const;

 private:
  class Cache;
  ShardStreamSampler(std::vector<int64_t> shard_samples, std::vector<int64_t> shard_bytes,
                     ShardStreamOptions options);
  /// The sample count of each of `world_size` ranks' shards in `epoch`, and the shards dealt
  /// to rank `rank`.
  void deal(uint32_t epoch, int64_t world_size, int64_t rank, std::vector<int64_t>* rank_samples,
            std::vector<int64_t>* shards) const;
  /// The ids rank `rank` takes of `rank_samples` (each rank's uncut count): the cuts.
  int64_t cut_size(const std::vector<int64_t>& rank_samples, int64_t rank) const;
  /// Each rank's uncut count in `epoch`: its shards' samples, or its block of the resume.
  std::vector<int64_t> uncut_sizes(uint32_t epoch) const;
  /// Rank `rank`'s block of a resume's pieces: the pieces, clipped, in order.
  std::vector<StreamPiece> block(const ElasticStream& resume, int64_t rank) const;
  std::shared_ptr<const EpochOrder> compute(uint32_t epoch) const;
  /// The uncut order of rank `rank` of `world_size` in an epoch no resume names.
  std::vector<int64_t> whole_order(uint32_t epoch, int64_t world_size, int64_t rank,
                                   std::vector<int64_t>* stream) const;

  std::vector<int64_t> shard_samples_;
  std::vector<int64_t> shard_bytes_;
  std::vector<int64_t> shard_first_;
  ShardStreamOptions options_;
  int64_t size_ = 0;
  std::unique_ptr<Cache> cache_;
};

}  // namespace stoker::sampling
