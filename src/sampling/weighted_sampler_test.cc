#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "sampling/test_util.h"
#include "stoker/sampling.h"

namespace stoker::sampling {
namespace {

using testing::counts_of;
using testing::epoch_ids;
using testing::must;

TEST(WeightedSampler, FrequenciesMatchTheWeights) {
  const std::vector<double> weights = {1, 2, 3, 4, 0, 10, 0.5, 0.5, 7, 2};
  double sum = 0;
  for (double w : weights) sum += w;
  constexpr int64_t kDraws = 300000;
  auto sampler = must(WeightedSampler::create(weights, {.num_samples = kDraws, .seed = 11}));
  ASSERT_EQ(sampler->size(), kDraws);
  const auto counts = counts_of(epoch_ids(*sampler, 0), static_cast<int64_t>(weights.size()));
  double chi2 = 0;
  int dof = -1;
  for (size_t i = 0; i < weights.size(); ++i) {
    const double expected = kDraws * weights[i] / sum;
    if (weights[i] == 0) {
      EXPECT_EQ(counts[i], 0) << "a zero weight was drawn";
      continue;
    }
    chi2 += std::pow(counts[i] - expected, 2) / expected;
    ++dof;
  }
  EXPECT_LT(chi2, dof + 5 * std::sqrt(2.0 * dof));  // 8 dof: about 28
}

TEST(WeightedSampler, ManyZeroWeightsAreNeverDrawn) {
  std::vector<double> weights(1000, 0.0);
  for (int i = 0; i < 1000; i += 97) weights[i] = 0.1 + i;  // rounding would leak to zeros
  auto sampler = must(WeightedSampler::create(weights, {.num_samples = 50000}));
  for (int64_t id : epoch_ids(*sampler, 3)) ASSERT_GT(weights[id], 0) << id;
}

TEST(WeightedSampler, DeterministicPerSeedEpochAndPosition) {
  const std::vector<double> weights = {1, 1, 1, 1, 1, 1, 1, 1};
  auto a = must(WeightedSampler::create(weights, {.num_samples = 200, .seed = 4}));
  auto b = must(WeightedSampler::create(weights, {.num_samples = 200, .seed = 4}));
  auto c = must(WeightedSampler::create(weights, {.num_samples = 200, .seed = 5}));
  EXPECT_EQ(epoch_ids(*a, 0), epoch_ids(*b, 0));
  EXPECT_NE(epoch_ids(*a, 0), epoch_ids(*a, 1));
  EXPECT_NE(epoch_ids(*a, 0), epoch_ids(*c, 0));
  for (int64_t p = 0; p < 200; ++p) ASSERT_EQ(a->at(0, p), epoch_ids(*a, 0)[p]);
}

// Ranks split one global sequence of draws: rank r makes draws r, r + world, ...
TEST(WeightedSampler, RanksShareTheGlobalDraws) {
  const std::vector<double> weights = {5, 1, 3, 2, 8};
  const auto global =
      epoch_ids(*must(WeightedSampler::create(weights, {.num_samples = 30, .seed = 2})), 1);
  for (int64_t rank = 0; rank < 4; ++rank) {
    auto sampler = must(WeightedSampler::create(
        weights, {.num_samples = 30, .seed = 2, .rank = rank, .world_size = 4}));
    ASSERT_EQ(sampler->size(), 8);  // ceil(30 / 4); the two past 30 are further draws
    const auto ids = epoch_ids(*sampler, 1);
    for (int64_t p = 0; p < 8 && rank + 4 * p < 30; ++p) ASSERT_EQ(ids[p], global[rank + 4 * p]);
    auto dropped = must(WeightedSampler::create(
        weights, {.num_samples = 30, .seed = 2, .rank = rank, .world_size = 4, .drop_last = true}));
    EXPECT_EQ(dropped->size(), 7);
  }
}

TEST(WeightedSampler, DefaultsToOneDrawPerWeight) {
  auto sampler = must(WeightedSampler::create(std::vector<double>{1, 2, 3}));
  EXPECT_EQ(sampler->size(), 3);
  auto none = must(WeightedSampler::create(std::vector<double>{1, 2, 3}, {.num_samples = 0}));
  EXPECT_EQ(none->size(), 0);
}

TEST(WeightedSampler, RejectsBadWeights) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (const std::vector<double>& weights :
       {std::vector<double>{}, {0, 0, 0}, {1, -1}, {1, nan}, {inf, 1}, {1e308, 1e308}}) {
    auto sampler = WeightedSampler::create(weights);
    EXPECT_EQ(sampler.status().code(), StatusCode::kInvalidArgument)
        << ::testing::PrintToString(weights);
  }
  const std::vector<double> ok = {1, 2};
  EXPECT_FALSE(WeightedSampler::create(ok, {.num_samples = -1}).ok());
  EXPECT_FALSE(WeightedSampler::create(ok, {.world_size = 0}).ok());
  EXPECT_FALSE(WeightedSampler::create(ok, {.rank = 3, .world_size = 3}).ok());
}

TEST(ExpandGroupWeights, SpreadsOrCopiesGroupWeights) {
  const std::vector<double> weights = {3, 1, 0};
  const std::vector<int64_t> sizes = {3, 2, 1};
  EXPECT_EQ(must(expand_group_weights(weights, sizes)),
            (std::vector<double>{1, 1, 1, 0.5, 0.5, 0}));
  EXPECT_EQ(must(expand_group_weights(weights, sizes, GroupWeight::kPerSample)),
            (std::vector<double>{3, 3, 3, 1, 1, 0}));
  // Empty groups: fine with no weight, impossible with a share to draw.
  EXPECT_EQ(must(expand_group_weights(std::vector<double>{0, 2}, std::vector<int64_t>{0, 2})),
            (std::vector<double>{1, 1}));
  EXPECT_FALSE(expand_group_weights(std::vector<double>{1, 2}, std::vector<int64_t>{0, 2}).ok());
  EXPECT_TRUE(expand_group_weights(std::vector<double>{1, 2}, std::vector<int64_t>{0, 2},
                                   GroupWeight::kPerSample)
                  .ok());
  EXPECT_FALSE(expand_group_weights(std::vector<double>{1}, sizes).ok());
  EXPECT_FALSE(expand_group_weights(std::vector<double>{1}, std::vector<int64_t>{-1}).ok());
  EXPECT_FALSE(expand_group_weights(std::vector<double>{-1}, std::vector<int64_t>{1}).ok());
}

// Datasets mixed 3:1 are drawn 3:1 whatever their sizes.
TEST(ExpandGroupWeights, GroupSharesHoldInDraws) {
  const auto weights =
      must(expand_group_weights(std::vector<double>{3, 1}, std::vector<int64_t>{10, 1000}));
  auto sampler = must(WeightedSampler::create(weights, {.num_samples = 40000, .seed = 1}));
  int64_t first = 0;
  for (int64_t id : epoch_ids(*sampler, 0)) first += id < 10;
  EXPECT_NEAR(first / 40000.0, 0.75, 0.011);  // sd 0.0022
}

}  // namespace
}  // namespace stoker::sampling
