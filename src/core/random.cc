// Philox4x32-10, written from the description in Salmon, Moraes, Dror and Shaw, "Parallel
// random numbers: as easy as 1, 2, 3" (SC'11): ten rounds, each multiplying two of the four
// counter words by fixed odd constants and mixing the high halves of the products with the other
// two words and the round key; the key advances by two Weyl constants between rounds.
#include "core/random.h"

#include <cstdint>

namespace stoker::core {
namespace {

constexpr uint32_t kMultiplier0 = 0xD2511F53u;
constexpr uint32_t kMultiplier1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u;  // the golden ratio
constexpr uint32_t kWeyl1 = 0xBB67AE85u;  // sqrt(3) - 1
constexpr int kRounds = 10;

}  // namespace

std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key) {
  for (int round = 0; round < kRounds; ++round) {
    if (round > 0) {
      key[0] += kWeyl0;
      key[1] += kWeyl1;
    }
    const uint64_t product0 = static_cast<uint64_t>(kMultiplier0) * counter[0];
    const uint64_t product1 = static_cast<uint64_t>(kMultiplier1) * counter[2];
    const auto high0 = static_cast<uint32_t>(product0 >> 32);
    const auto high1 = static_cast<uint32_t>(product1 >> 32);
    counter = {high1 ^ counter[1] ^ key[0], static_cast<uint32_t>(product1),
               high0 ^ counter[3] ^ key[1], static_cast<uint32_t>(product0)};
  }
  return counter;
}

std::array<uint32_t, 4> random_words(uint64_t seed, uint32_t epoch, uint64_t id, uint32_t stream) {
  return philox4x32({static_cast<uint32_t>(id), static_cast<uint32_t>(id >> 32), epoch, stream},
                    {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
}

double unit_double(uint32_t hi, uint32_t lo) {
  const uint64_t bits = ((static_cast<uint64_t>(hi) << 32) | lo) >> 11;  // 53 bits
  return static_cast<double>(bits) * 0x1.0p-53;
}

}  // namespace stoker::core
