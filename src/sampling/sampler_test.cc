// Properties every sampler shares: reading from many threads gives the single-threaded result,
// and a mid-epoch state resumes exactly.
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "sampling/test_util.h"
#include "stoker/sampling.h"

namespace stoker::sampling {
namespace {

using testing::epoch_ids;
using testing::must;

std::vector<std::unique_ptr<Sampler>> samplers() {
  std::mt19937_64 rng(77);
  std::lognormal_distribution<double> cost(0.0, 1.0);
  std::vector<double> costs(5000);
  for (double& c : costs) c = cost(rng);
  std::vector<std::unique_ptr<Sampler>> all;
  all.push_back(must(DistributedSampler::create(5000, {.shuffle = false})));
  all.push_back(must(DistributedSampler::create(5000, {.seed = 1})));
  all.push_back(must(DistributedSampler::create(5000, {.seed = 1, .rank = 2, .world_size = 3})));
  all.push_back(must(WeightedSampler::create(costs, {.seed = 1, .rank = 1, .world_size = 2})));
  const std::vector<double> mix_weights{1, 2};
  const std::vector<int64_t> mix_sizes{40, static_cast<int64_t>(costs.size()) - 40};
  all.push_back(
      must(MixSampler::create(mix_weights, mix_sizes, {.seed = 3, .rank = 1, .world_size = 3})));
  all.push_back(must(LoadBalancedSampler::create(
      costs, {.batch_size = 16, .seed = 1, .rank = 1, .world_size = 4})));
  return all;
}

TEST(Sampler, ThreadsReadTheSameIds) {
  for (const auto& sampler : samplers()) {
    const int64_t n = sampler->size();
    const auto expected = epoch_ids(*sampler, 3);
    for (int threads : {2, 4, 7}) {
      // Thread t takes chunks t, t + threads, ... of 37 positions (starting mid-step), by fill(),
      // and every position at() once more.
      std::vector<int64_t> got(n, -1), got_at(n, -1);
      std::vector<std::thread> pool;
      for (int t = 0; t < threads; ++t) {
        pool.emplace_back([&, t] {
          for (int64_t start = 37 * t; start < n; start += 37 * threads) {
            const int64_t count = std::min<int64_t>(37, n - start);
            Status status = sampler->fill(3, start, std::span(got).subspan(start, count));
            EXPECT_TRUE(status.ok());
          }
          for (int64_t p = t; p < n; p += threads) got_at[p] = sampler->at(3, p);
        });
      }
      for (auto& thread : pool) thread.join();
      EXPECT_EQ(got, expected) << threads << " threads";
      EXPECT_EQ(got_at, expected) << threads << " threads";
    }
  }
}

TEST(Sampler, ResumesFromAMidEpochState) {
  for (const auto& sampler : samplers()) {
    const auto expected = epoch_ids(*sampler, 5);
    SamplerState state{.epoch = 5, .position = 0};
    std::vector<int64_t> first(777);
    ASSERT_EQ(must(sampler->next(&state, first)), 777);
    EXPECT_EQ(state.position, 777);

    // A fresh reader given only the two numbers continues with the identical remainder.
    SamplerState restored{.epoch = state.epoch, .position = state.position};
    std::vector<int64_t> rest;
    std::vector<int64_t> chunk(1000);
    while (true) {
      const int64_t count = must(sampler->next(&restored, chunk));
      if (count == 0) break;
      rest.insert(rest.end(), chunk.begin(), chunk.begin() + count);
    }
    EXPECT_EQ(restored.position, sampler->size());
    first.insert(first.end(), rest.begin(), rest.end());
    EXPECT_EQ(first, expected);
  }
}

TEST(Sampler, NextRejectsAPositionOutsideTheEpoch) {
  auto sampler = must(DistributedSampler::create(10));
  std::vector<int64_t> out(4);
  SamplerState past{.epoch = 0, .position = 11};
  EXPECT_EQ(sampler->next(&past, out).status().code(), StatusCode::kInvalidArgument);
  SamplerState negative{.epoch = 0, .position = -1};
  EXPECT_FALSE(sampler->next(&negative, out).ok());
}

}  // namespace
}  // namespace stoker::sampling
