// Helpers shared by the samplers: the RNG streams they draw from, argument checks, and the
// epoch's base order. Internal; not installed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "stoker/sampling.h"

namespace stoker::sampling::detail {

/// The random_words streams stoker's samplers use. Values are part of the output's definition:
/// changing one changes every order drawn with it.
enum Stream : uint32_t {
  kShuffleStream = 1,       // the epoch's order (DistributedSampler, LoadBalancedSampler)
  kWeightedStream = 2,      // one draw of WeightedSampler
  kBalanceRanksStream = 3,  // which rank gets which bin, per load-balanced step
  kBalanceOrderStream = 4,  // the order inside one rank's batch, per load-balanced step
  kReplaceStream = 5,       // the loader's replacement for a failed sample (on_error = skip)
  // The loader's per-sample image transforms: kTransformStream | camera << 4 | draw, for
  // cameras below 256 and up to 16 draws per camera (see src/transform/image_transform.cc).
  kTransformStream = 1 << 12,
};

/// A 64-bit finalizer (splitmix64's): every input bit flips about half the output bits.
inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// A uniform integer in [0, n) from two random words (multiply-shift; the bias, n / 2^64, is
/// far below anything measurable).
inline int64_t uniform_below(uint32_t hi, uint32_t lo, int64_t n) {
  const uint64_t r = (static_cast<uint64_t>(hi) << 32) | lo;
  return static_cast<int64_t>((static_cast<unsigned __int128>(r) * static_cast<uint64_t>(n)) >> 64);
}

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
    if (shuffle) permutation_.emplace(n, random_words(seed, epoch, 0, kShuffleStream));
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
