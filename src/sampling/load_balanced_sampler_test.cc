#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <random>
#include <set>

#include "sampling/test_util.h"
#include "stoker/sampling.h"

namespace stoker::sampling {
namespace {

using testing::counts_of;
using testing::epoch_ids;
using testing::must;

std::vector<double> lognormal_costs(int64_t n, double sigma) {
  std::mt19937_64 rng(1234);
  std::lognormal_distribution<double> cost(0.0, sigma);
  std::vector<double> costs(n);
  for (double& c : costs) c = cost(rng);
  return costs;
}

std::vector<std::vector<int64_t>> all_ranks(const std::vector<double>& costs,
                                            LoadBalancedOptions options, uint32_t epoch) {
  std::vector<std::vector<int64_t>> ranks;
  for (int64_t rank = 0; rank < options.world_size; ++rank) {
    options.rank = rank;
    ranks.push_back(epoch_ids(*must(LoadBalancedSampler::create(costs, options)), epoch));
  }
  return ranks;
}

TEST(LoadBalancedSampler, CoversEverySampleWithEqualCounts) {
  const auto costs = lognormal_costs(1000, 1.0);
  for (int64_t world : {1, 2, 3, 8}) {
    for (int64_t batch : {1, 4, 7}) {
      for (bool drop_last : {false, true}) {
        const LoadBalancedOptions options{
            .batch_size = batch, .seed = 3, .world_size = world, .drop_last = drop_last};
        const auto ranks = all_ranks(costs, options, 1);
        const int64_t per_rank = drop_last ? 1000 / world : (1000 + world - 1) / world;
        std::vector<int64_t> all;
        for (const auto& ids : ranks) {
          ASSERT_EQ(static_cast<int64_t>(ids.size()), per_rank);
          all.insert(all.end(), ids.begin(), ids.end());
        }
        const auto counts = counts_of(all, 1000);
        int64_t seen = 0, extra = 0;
        for (int64_t c : counts) {
          seen += c > 0;
          extra += std::max<int64_t>(c - 1, 0);
        }
        if (drop_last) {
          EXPECT_EQ(extra, 0);
          EXPECT_EQ(seen, per_rank * world);
        } else {
          EXPECT_EQ(seen, 1000);
          EXPECT_EQ(extra, per_rank * world - 1000);
        }
      }
    }
  }
}

// Balancing only moves samples between ranks inside a step: each step holds the same samples
// as DistributedSampler's step with the same seed.
TEST(LoadBalancedSampler, StepsHoldDistributedSamplersSamples) {
  const auto costs = lognormal_costs(203, 1.5);
  const int64_t world = 4, batch = 5;
  const auto balanced = all_ranks(costs, {.batch_size = batch, .seed = 9, .world_size = world}, 2);
  std::vector<std::vector<int64_t>> plain;
  for (int64_t rank = 0; rank < world; ++rank) {
    plain.push_back(epoch_ids(
        *must(DistributedSampler::create(203, {.seed = 9, .rank = rank, .world_size = world})), 2));
  }
  const int64_t per_rank = static_cast<int64_t>(plain[0].size());
  for (int64_t start = 0; start < per_rank; start += batch) {
    std::multiset<int64_t> a, b;
    for (int64_t r = 0; r < world; ++r) {
      for (int64_t p = start; p < std::min(start + batch, per_rank); ++p) {
        a.insert(balanced[r][p]);
        b.insert(plain[r][p]);
      }
    }
    EXPECT_EQ(a, b) << "step " << start / batch;
  }
}

TEST(LoadBalancedSampler, LowersImbalanceOnSkewedCosts) {
  const auto costs = lognormal_costs(4096, 1.5);
  for (int64_t world : {2, 4, 8}) {
    auto sampler =
        must(LoadBalancedSampler::create(costs, {.batch_size = 8, .seed = 1, .world_size = world}));
    const BalanceReport report = sampler->report(0);
    EXPECT_EQ(report.steps, (4096 / world + 7) / 8);
    EXPECT_GT(report.before.mean, 1.3) << "world " << world;
    EXPECT_LT(report.after.mean, report.before.mean);
    EXPECT_LT(report.after.worst, report.before.worst);
    EXPECT_GE(report.after.mean, 1.0);
    // Most of the excess step time goes away ...
    EXPECT_LT(report.after.total - 1, 0.5 * (report.before.total - 1)) << "world " << world;
    // ... and what is left is mostly forced: a rank's total can be no less than the mean, nor
    // than the step's heaviest sample.
    const auto order = epoch_ids(*must(DistributedSampler::create(4096, {.seed = 1})), 0);
    double bound_sum = 0, mean_sum = 0;
    for (size_t start = 0; start < order.size(); start += 8 * world) {
      double sum = 0, heaviest = 0;
      for (size_t i = start; i < std::min(order.size(), start + 8 * world); ++i) {
        sum += costs[order[i]];
        heaviest = std::max(heaviest, costs[order[i]]);
      }
      bound_sum += std::max(sum / world, heaviest);
      mean_sum += sum / world;
    }
    EXPECT_LT(report.after.total, 1.05 * bound_sum / mean_sum) << "world " << world;
    // The report matches the ranks' real batches.
    const auto ranks = all_ranks(costs, {.batch_size = 8, .seed = 1, .world_size = world}, 0);
    double worst = 1.0;
    for (size_t start = 0; start < ranks[0].size(); start += 8) {
      double max = 0, sum = 0;
      for (const auto& ids : ranks) {
        double total = 0;
        for (size_t p = start; p < std::min(start + 8, ids.size()); ++p) total += costs[ids[p]];
        max = std::max(max, total);
        sum += total;
      }
      worst = std::max(worst, max / (sum / static_cast<double>(world)));
    }
    EXPECT_DOUBLE_EQ(worst, report.after.worst);
  }
}

// The heavy bin lands on a different rank from step to step, and batches are not cost-sorted.
TEST(LoadBalancedSampler, RanksAndBatchOrderAreShuffled) {
  const auto costs = lognormal_costs(800, 1.0);
  const int64_t world = 4, batch = 10;
  const auto ranks = all_ranks(costs, {.batch_size = batch, .seed = 6, .world_size = world}, 0);
  std::set<int64_t> first_rank_of_heaviest;
  int sorted_batches = 0, batches = 0;
  for (int64_t start = 0; start < 200; start += batch) {
    int64_t heaviest_rank = 0;
    double heaviest = -1;
    for (int64_t r = 0; r < world; ++r) {
      for (int64_t p = start; p < start + batch; ++p) {
        if (costs[ranks[r][p]] > heaviest) {
          heaviest = costs[ranks[r][p]];
          heaviest_rank = r;
        }
      }
      std::vector<double> c;
      for (int64_t p = start; p < start + batch; ++p) c.push_back(costs[ranks[r][p]]);
      sorted_batches += std::is_sorted(c.rbegin(), c.rend());
      ++batches;
    }
    first_rank_of_heaviest.insert(heaviest_rank);
  }
  EXPECT_EQ(first_rank_of_heaviest.size(), 4u);
  EXPECT_LT(sorted_batches, batches / 10);
}

TEST(LoadBalancedSampler, DeterministicAndEpochDependent) {
  const auto costs = lognormal_costs(300, 1.0);
  const LoadBalancedOptions options{.batch_size = 4, .seed = 2, .rank = 1, .world_size = 3};
  auto a = must(LoadBalancedSampler::create(costs, options));
  auto b = must(LoadBalancedSampler::create(costs, options));
  EXPECT_EQ(epoch_ids(*a, 0), epoch_ids(*b, 0));
  EXPECT_NE(epoch_ids(*a, 0), epoch_ids(*a, 1));
  const auto ids = epoch_ids(*a, 4);
  for (int64_t p = 0; p < a->size(); ++p) ASSERT_EQ(a->at(4, p), ids[p]);
  // Any sub-range, starting mid-step, matches the whole epoch's.
  for (int64_t start : {1, 3, 5, 50, 99}) {
    std::vector<int64_t> part(a->size() - start);
    ASSERT_TRUE(a->fill(4, start, part).ok());
    EXPECT_TRUE(std::equal(part.begin(), part.end(), ids.begin() + start));
  }
}

TEST(LoadBalancedSampler, UnshuffledKeepsTheStepsInOrder) {
  const std::vector<double> costs = {1, 9, 2, 8, 3, 7, 4, 6};
  const auto ranks = all_ranks(costs, {.batch_size = 2, .shuffle = false, .world_size = 2}, 0);
  // Step 0 holds samples 0..3 ({1, 9, 2, 8}): 9 + 1 on one rank, 8 + 2 on the other.
  std::multiset<double> step0_rank0 = {costs[ranks[0][0]], costs[ranks[0][1]]};
  std::multiset<double> step0_rank1 = {costs[ranks[1][0]], costs[ranks[1][1]]};
  std::set<std::multiset<double>> expected = {{9, 1}, {8, 2}};
  EXPECT_EQ((std::set<std::multiset<double>>{step0_rank0, step0_rank1}), expected);
  for (const auto& ids : ranks) {
    for (int64_t id : {ids[0], ids[1]}) EXPECT_LT(id, 4);
    for (int64_t id : {ids[2], ids[3]}) EXPECT_GE(id, 4);
  }
}

TEST(LoadBalancedSampler, EmptyAndZeroCosts) {
  auto empty = must(LoadBalancedSampler::create(std::vector<double>{}, {.world_size = 2}));
  EXPECT_EQ(empty->size(), 0);
  EXPECT_EQ(empty->report(0).steps, 0);
  auto zeros = must(LoadBalancedSampler::create(std::vector<double>(10, 0.0), {.batch_size = 2}));
  EXPECT_EQ(counts_of(epoch_ids(*zeros, 0), 10), std::vector<int64_t>(10, 1));
  EXPECT_EQ(zeros->report(0).after.mean, 1.0);
}

TEST(LoadBalancedSampler, RejectsBadArguments) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (const std::vector<double>& costs : {std::vector<double>{1, -1}, {nan}, {1, inf}}) {
    EXPECT_EQ(LoadBalancedSampler::create(costs).status().code(), StatusCode::kInvalidArgument);
  }
  const std::vector<double> ok = {1, 2};
  EXPECT_FALSE(LoadBalancedSampler::create(ok, {.batch_size = 0}).ok());
  EXPECT_FALSE(LoadBalancedSampler::create(ok, {.world_size = 0}).ok());
  EXPECT_FALSE(LoadBalancedSampler::create(ok, {.rank = 1, .world_size = 1}).ok());
  EXPECT_FALSE(LoadBalancedSampler::create(ok, {.rank = -1, .world_size = 2}).ok());
}

}  // namespace
}  // namespace stoker::sampling
