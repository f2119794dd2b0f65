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
#include <span>
#include <vector>

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

}  // namespace stoker::sampling
