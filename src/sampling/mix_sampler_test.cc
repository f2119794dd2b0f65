#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <vector>

#include "stoker/sampling.h"

namespace stoker::sampling {
namespace {

TEST(MixSampler, DrawsEachDatasetAtItsWeightIndependentlyPerDraw) {
  const std::vector<double> weights{1, 3, 6};
  const std::vector<int64_t> sizes{5, 1000, 7};
  const int64_t draws = 10000;
  auto sampler = MixSampler::create(weights, sizes, {.num_samples = draws, .seed = 11});
  ASSERT_TRUE(sampler.ok());
  std::vector<int64_t> counts(3);
  std::map<int64_t, int64_t> of_first;
  for (int64_t p = 0; p < draws; ++p) {
    const int64_t id = (*sampler)->at(0, p);
    ASSERT_GE(id, 0);
    ASSERT_LT(id, 1012);
    const int64_t k = id < 5 ? 0 : id < 1005 ? 1 : 2;
    ++counts[k];
    if (k == 0) ++of_first[id];
  }
  for (int k = 0; k < 3; ++k) {
    const double p = weights[k] / 10.0;
    const double sigma = std::sqrt(draws * p * (1 - p));
    EXPECT_LT(std::abs(counts[k] - draws * p), 3 * sigma) << "dataset " << k;
  }
  EXPECT_EQ(of_first.size(), 5u);  // every sample of a small dataset drawn
  // An empty dataset with a weight cannot be drawn from.
  const std::vector<int64_t> empty{5, 0, 7};
  EXPECT_FALSE(MixSampler::create(weights, empty).ok());
}

}  // namespace
}  // namespace stoker::sampling
