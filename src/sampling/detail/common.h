// Helpers shared by the samplers: argument checks and the epoch's base order.
// Internal; not installed.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

#include "core/random.h"
#include "stoker/sampling.h"

namespace stoker::sampling::detail {

/// kInvalidArgument unless 1 <= world_size and 0 <= rank < world_size.
Status check_partition(int64_t rank, int64_t world_size);

/// kInvalidArgument for an ElasticStart with a negative start.
Status check_resume(const std::optional<ElasticStart>& resume);

/// The global positions an epoch deals over the ranks, [first, first + count) of its `total`:
/// all of them, or for the epoch an ElasticStart resumes, those from its start on.
struct EpochSpan {
  int64_t first = 0;
  int64_t count = 0;
};
inline EpochSpan epoch_span(int64_t total, const std::optional<ElasticStart>& resume,
                            uint32_t epoch) {
  if (!resume || resume->epoch != epoch) return {0, total};
  const int64_t first = std::min(resume->start, total);
  return {first, total - first};
}

/// Ids per rank when `total` are split over `world_size` ranks: ceil, or floor with drop_last.
inline int64_t per_rank_count(int64_t total, int64_t world_size, bool drop_last) {
  return drop_last ? total / world_size : total / world_size + (total % world_size != 0);
}

/// The order every rank cuts its share from in one epoch: base being a Permutation of [0, n)
/// keyed by (seed, epoch) or the identity, and the epoch dealing the span [first, first +
/// count) of it, position g (which may run past count when padding) holds sample
/// base(first + g mod count). Cheap to build (one Philox block); build one per epoch and call.
class EpochOrder {
 public:
  EpochOrder(int64_t n, bool shuffle, uint64_t seed, uint32_t epoch, EpochSpan span) : span_(span) {
    if (shuffle) permutation_.emplace(n, core::random_words(seed, epoch, 0, core::kShuffleStream));
  }
  /// REQUIRES: span.count > 0, g >= 0.
  int64_t operator()(int64_t g) const {
    const int64_t i = span_.first + (g < span_.count ? g : g % span_.count);
    return permutation_ ? (*permutation_)(i) : i;
  }

 private:
  EpochSpan span_;
  std::optional<Permutation> permutation_;
};

}  // namespace stoker::sampling::detail
