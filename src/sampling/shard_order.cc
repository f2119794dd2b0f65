#include "stoker/shard_order.h"

#include <algorithm>
#include <numeric>
#include <string>
#include <utility>

#include "core/random.h"
#include "stoker/sampling.h"

namespace stoker::sampling {
namespace {

// Arrivals are numbered below 2^40 per rank and epoch, so (rank, arrival) is one 64-bit id.
constexpr int kArrivalBits = 40;

int64_t draw(uint64_t seed, uint32_t epoch, int64_t rank, int64_t arrival, int64_t n) {
  const uint64_t id =
      (static_cast<uint64_t>(rank) << kArrivalBits) | static_cast<uint64_t>(arrival);
  const auto words = core::random_words(seed, epoch, id, core::kShuffleBufferStream);
  return core::uniform_below(words[0], words[1], n);
}

// Runs the buffer over `stream` until `stop` ids were emitted, appending them to `out` when it
// is not null. Returns the buffer's state at that point.
ShuffleBufferState run_buffer(std::span<const int64_t> stream, int64_t buffer_size, uint64_t seed,
                              uint32_t epoch, int64_t rank, int64_t stop,
                              std::vector<int64_t>* out) {
  ShuffleBufferState state;
  const int64_t n = static_cast<int64_t>(stream.size());
  int64_t emitted = 0;
  if (buffer_size <= 1) {
    if (out != nullptr) out->assign(stream.begin(), stream.begin() + stop);
    state.consumed = stop;
    return state;
  }
  auto& buffer = state.buffer;
  buffer.reserve(static_cast<size_t>(std::min(buffer_size, n)));
  int64_t i = 0;
  for (; i < n && emitted < stop; ++i) {
    if (static_cast<int64_t>(buffer.size()) < buffer_size) {
      buffer.push_back(stream[i]);
      continue;
    }
    const int64_t slot = draw(seed, epoch, rank, i, buffer_size);
    if (out != nullptr) out->push_back(buffer[slot]);
    ++emitted;
    buffer[slot] = stream[i];
  }
  // The stream's end: the rest leaves in a random order, one uniform draw among what is left
  // per emission (a Fisher-Yates pass, keyed by arrivals past the stream's end).
  for (int64_t k = 0; emitted < stop && !buffer.empty(); ++k) {
    const int64_t slot = draw(seed, epoch, rank, n + k, static_cast<int64_t>(buffer.size()));
    if (out != nullptr) out->push_back(buffer[slot]);
    ++emitted;
    buffer[slot] = buffer.back();
    buffer.pop_back();
  }
  // A buffer still filling when it stopped has taken in the stream up to i.
  state.consumed = i;
  return state;
}

}  // namespace

Result<std::vector<std::vector<int64_t>>> deal_shards(std::span<const int64_t> shard_bytes,
                                                      bool shuffle, uint64_t seed, uint32_t epoch,
                                                      int64_t world_size) {
  if (world_size < 1) {
    return Status(StatusCode::kInvalidArgument,
                  "world_size must be at least 1, got " + std::to_string(world_size));
  }
  const int64_t n = static_cast<int64_t>(shard_bytes.size());
  for (int64_t i = 0; i < n; ++i) {
    if (shard_bytes[i] < 0) {
      return Status(StatusCode::kInvalidArgument,
                    "shard " + std::to_string(i) + " has a negative size");
    }
  }
  // The epoch's shard order.
  std::vector<int64_t> order(static_cast<size_t>(n));
  if (shuffle) {
    const Permutation permutation(n, core::random_words(seed, epoch, 0, core::kShardOrderStream));
    for (int64_t i = 0; i < n; ++i) order[i] = permutation(i);
  } else {
    std::iota(order.begin(), order.end(), int64_t{0});
  }
  // Largest first, ties in epoch order: the greedy deal then stays within one shard's bytes
  // of an equal split.
  std::vector<int64_t> by_size = order;
  std::stable_sort(by_size.begin(), by_size.end(),
                   [&](int64_t a, int64_t b) { return shard_bytes[a] > shard_bytes[b]; });
  std::vector<int64_t> rank_of(static_cast<size_t>(n));
  std::vector<int64_t> load(static_cast<size_t>(world_size), 0);
  for (int64_t shard : by_size) {
    const auto least = std::min_element(load.begin(), load.end());
    rank_of[shard] = least - load.begin();
    *least += shard_bytes[shard];
  }
  std::vector<std::vector<int64_t>> ranks(static_cast<size_t>(world_size));
  for (int64_t shard : order) ranks[rank_of[shard]].push_back(shard);
  return ranks;
}

std::vector<int64_t> shuffle_buffer_order(std::span<const int64_t> stream, int64_t buffer_size,
                                          uint64_t seed, uint32_t epoch, int64_t rank) {
  std::vector<int64_t> out;
  out.reserve(stream.size());
  run_buffer(stream, buffer_size, seed, epoch, rank, static_cast<int64_t>(stream.size()), &out);
  return out;
}

Result<ShuffleBufferState> shuffle_buffer_state(std::span<const int64_t> stream,
                                                int64_t buffer_size, uint64_t seed, uint32_t epoch,
                                                int64_t rank, int64_t emitted) {
  const int64_t n = static_cast<int64_t>(stream.size());
  if (emitted < 0 || emitted > n) {
    return Status(StatusCode::kInvalidArgument, "position " + std::to_string(emitted) +
                                                    " is outside the stream of " +
                                                    std::to_string(n) + " samples");
  }
  return run_buffer(stream, buffer_size, seed, epoch, rank, emitted, nullptr);
}

}  // namespace stoker::sampling
