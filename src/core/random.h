// Counter-based random numbers: every random choice stoker makes (sample order, weighted
// draws, crops, flips, replacements of skipped samples) is a pure function of
// (seed, epoch, id, stream), so results never depend on which thread asks, or when.
//
// Thread-safety: pure functions.
#pragma once

#include <array>
#include <cstdint>

namespace stoker::core {

/// One Philox4x32-10 block (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
/// SC'11): a keyed bijection of the 128-bit counter. Bit-exact with Random123's philox4x32_10.
std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

/// 128 random bits for one choice: philox4x32 with key = seed and counter = (id, epoch,
/// stream). Each kind of choice has its own `stream` (below), so choices never share bits.
std::array<uint32_t, 4> random_words(uint64_t seed, uint32_t epoch, uint64_t id, uint32_t stream);

/// The streams of random_words. Values are part of the output's definition: changing one
/// changes every order and draw made with it.
enum Stream : uint32_t {
  kShuffleStream = 1,        // the epoch's order (DistributedSampler, LoadBalancedSampler)
  kWeightedStream = 2,       // one draw of WeightedSampler
  kBalanceRanksStream = 3,   // which rank gets which bin, per load-balanced step
  kBalanceOrderStream = 4,   // the order inside one rank's batch, per load-balanced step
  kReplaceStream = 5,        // the loader's replacement for a failed sample (on_error = skip):
                             // kReplaceStream | attempt << 4, for attempts below 16
  kShardOrderStream = 6,     // the order of a sharded dataset's shards, per epoch
  kShuffleBufferStream = 7,  // a shuffle buffer's draws: id = rank << 40 | arrival
  kMixSampleStream = 8,      // MixSampler: the sample drawn inside the dataset a draw picked
  // The loader's per-sample image transforms: kTransformStream | camera << 4 | draw, for
  // cameras below 256 and up to 16 draws per camera (see src/transform/image_transform.cc).
  kTransformStream = 1 << 12,
};

/// A uniform double in [0, 1) from 53 of the bits of two words.
double unit_double(uint32_t hi, uint32_t lo);

/// A uniform integer in [0, n) from two random words (multiply-shift; the bias, n / 2^64, is
/// far below anything measurable).
inline int64_t uniform_below(uint32_t hi, uint32_t lo, int64_t n) {
  const uint64_t r = (static_cast<uint64_t>(hi) << 32) | lo;
  return static_cast<int64_t>((static_cast<unsigned __int128>(r) * static_cast<uint64_t>(n)) >> 64);
}

/// A 64-bit finalizer (splitmix64's): every input bit flips about half the output bits.
inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace stoker::core
