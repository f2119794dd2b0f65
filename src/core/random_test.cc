#include "core/random.h"

#include <gtest/gtest.h>

#include <set>

namespace stoker::core {
namespace {

// Random123's tests/kat_vectors, the three "philox4x32 10" lines: counter, key -> output.
TEST(Philox, MatchesTheKnownAnswers) {
  EXPECT_EQ(philox4x32({0, 0, 0, 0}, {0, 0}),
            (std::array<uint32_t, 4>{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
            (std::array<uint32_t, 4>{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox4x32({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (std::array<uint32_t, 4>{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(Philox, EveryPartOfTheKeyChangesTheWords) {
  const auto base = random_words(7, 3, 11, 1);
  EXPECT_EQ(random_words(7, 3, 11, 1), base);  // a pure function
  std::set<std::array<uint32_t, 4>> seen = {base};
  seen.insert(random_words(8, 3, 11, 1));
  seen.insert(random_words(7 + (uint64_t{1} << 32), 3, 11, 1));  // the seed's high word counts
  seen.insert(random_words(7, 4, 11, 1));
  seen.insert(random_words(7, 3, 12, 1));
  seen.insert(random_words(7, 3, 11 + (uint64_t{1} << 32), 1));  // so does the id's
  seen.insert(random_words(7, 3, 11, 2));
  EXPECT_EQ(seen.size(), 7u);
}

TEST(Philox, UnitDoubleCoversZeroToOne) {
  EXPECT_EQ(unit_double(0, 0), 0.0);
  EXPECT_LT(unit_double(0xffffffff, 0xffffffff), 1.0);
  EXPECT_GT(unit_double(0xffffffff, 0xffffffff), 1.0 - 1e-15);
  double sum = 0;
  constexpr int kDraws = 100000;
  for (uint64_t i = 0; i < kDraws; ++i) {
    const auto w = random_words(1, 0, i, 9);
    sum += unit_double(w[0], w[1]);
  }
  EXPECT_NEAR(sum / kDraws, 0.5, 0.005);  // sd of the mean is 0.0009
}

}  // namespace
}  // namespace stoker::core
