// Helpers shared by the samplers: argument checks and the epoch's base order.
// Internal; not installed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/random.h"
#include "stoker/sampling.h"

namespace stoker::sampling::detail {

/// kInvalidArgument unless 1 <= world_size and 0 <= rank < world_size.
Status check_partition(int64_t rank, int64_t world_size);

/// Ids per rank when `total` are split over `world_size` ranks: ceil, or floor with drop_last.
inline int64_t per_rank_count(int64_t total, int64_t world_size, bool drop_last) {
  return drop_last ? total / world_size : total / world_size + (total % world_size != 0);
}

/// The order every rank cuts its share from in one epoch: global position g (which may run
/// past n when padding) holds sample base(g mod n), base being a Permutation keyed by (seed,
/// epoch) or the identity. Cheap to build (one Philox block); build one per epoch and call.
class EpochOrder {
 public:
  EpochOrder(int64_t n, bool shuffle, uint64_t seed, uint32_t epoch) : n_(n) {
    if (shuffle) permutation_.emplace(n, core::random_words(seed, epoch, 0, core::kShuffleStream));
  }
  /// REQUIRES: n > 0, g >= 0.
  int64_t operator()(int64_t g) const {
    const int64_t i = g < n_ ? g : g % n_;
    return permutation_ ? (*permutation_)(i) : i;
  }

 private:
  int64_t n_;
  std::optional<Permutation> permutation_;
};

}  // namespace stoker::sampling::detail
