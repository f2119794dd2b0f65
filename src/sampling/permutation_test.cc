#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <vector>

#include "core/random.h"
#include "stoker/sampling.h"

namespace stoker::sampling {
namespace {

std::vector<int64_t> values(const Permutation& p) {
  std::vector<int64_t> v(p.size());
  for (int64_t i = 0; i < p.size(); ++i) v[i] = p(i);
  return v;
}

TEST(Permutation, IsABijectionForManySizes) {
  const int64_t sizes[] = {0,    1,    2,    3,     4,     5,     7,     8,    9,
                           13,   16,   17,   31,    32,    33,    64,    97,   127,
                           128,  129,  255,  256,   257,   1000,  1023,  1024, 1025,
                           4099, 8191, 8192, 65521, 65536, 65537, 100003};
  for (int64_t n : sizes) {
    for (uint64_t seed : {0u, 1u, 99u}) {
      const Permutation p(n, core::random_words(seed, 0, 0, 1));
      ASSERT_EQ(p.size(), n);
      std::vector<char> seen(n, 0);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t x = p(i);
        ASSERT_GE(x, 0) << "n=" << n;
        ASSERT_LT(x, n) << "n=" << n;
        ASSERT_FALSE(seen[x]) << "n=" << n << ": " << x << " twice";
        seen[x] = 1;
        ASSERT_EQ(p.inverse(x), i) << "n=" << n;
      }
    }
  }
}

TEST(Permutation, HugeSizesNeedNoStorage) {
  for (int64_t n : {(int64_t{1} << 40) + 3, (int64_t{1} << 62) - 1, INT64_MAX}) {
    const Permutation p(n, core::random_words(5, 0, 0, 1));
    for (int64_t i : {int64_t{0}, int64_t{1}, n / 2, n - 1}) {
      const int64_t x = p(i);
      ASSERT_GE(x, 0);
      ASSERT_LT(x, n);
      EXPECT_EQ(p.inverse(x), i);
    }
  }
}

TEST(Permutation, DifferentKeysGiveDifferentOrders) {
  const Permutation a(1000, core::random_words(1, 0, 0, 1));
  const Permutation b(1000, core::random_words(1, 1, 0, 1));
  const Permutation a2(1000, core::random_words(1, 0, 0, 1));
  EXPECT_EQ(values(a), values(a2));
  EXPECT_NE(values(a), values(b));
  std::vector<int64_t> identity(1000);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_NE(values(a), identity);
}

// All 3! and 4! orders come up about equally often over many keys (chi-square, fixed seeds).
TEST(Permutation, SmallPermutationsAreUniform) {
  for (int64_t n : {2, 3, 4, 5}) {
    std::map<std::vector<int64_t>, int> counts;
    constexpr int kKeys = 24000;
    for (uint64_t key = 0; key < kKeys; ++key)
      counts[values(Permutation(n, core::random_words(key, 0, 0, 1)))]++;
    int64_t orders = 1;
    for (int64_t k = 2; k <= n; ++k) orders *= k;
    ASSERT_EQ(static_cast<int64_t>(counts.size()), orders) << "n=" << n;
    const double expected = static_cast<double>(kKeys) / orders;
    double chi2 = 0;
    for (const auto& [order, count] : counts) chi2 += std::pow(count - expected, 2) / expected;
    // dof = orders - 1 (at most 119); mean dof, sd sqrt(2 dof). Allow mean + 5 sd.
    const double dof = static_cast<double>(orders - 1);
    EXPECT_LT(chi2, dof + 5 * std::sqrt(2 * dof)) << "n=" << n;
  }
}

// Where value 0 lands is uniform over positions, for a size that needs cycle-walking.
TEST(Permutation, PositionsAreUniform) {
  constexpr int64_t kN = 37;
  constexpr int kKeys = 37000;
  std::vector<int> counts(kN, 0);
  for (uint64_t key = 0; key < kKeys; ++key)
    counts[Permutation(kN, core::random_words(key, 3, 0, 1)).inverse(0)]++;
  double chi2 = 0;
  for (int c : counts) chi2 += std::pow(c - 1000.0, 2) / 1000.0;
  EXPECT_LT(chi2, 36 + 5 * std::sqrt(72.0));
}

}  // namespace
}  // namespace stoker::sampling
