#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "sampling/test_util.h"
#include "stoker/sampling.h"

namespace stoker::sampling {
namespace {

using testing::counts_of;
using testing::epoch_ids;
using testing::must;

std::unique_ptr<DistributedSampler> make(int64_t n, DistributedOptions options) {
  return must(DistributedSampler::create(n, options));
}

TEST(DistributedSampler, SequentialIsTheIdentity) {
  auto sampler = make(10, {.shuffle = false});
  std::vector<int64_t> expected(10);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(epoch_ids(*sampler, 0), expected);
  EXPECT_EQ(epoch_ids(*sampler, 5), expected);
}

TEST(DistributedSampler, RandomVisitsEachSampleOncePerEpoch) {
  for (int64_t n : {1, 2, 3, 10, 1000, 4097}) {
    auto sampler = make(n, {.shuffle = true, .seed = 42});
    ASSERT_EQ(sampler->size(), n);
    for (uint32_t epoch : {0u, 1u, 7u}) {
      for (int64_t c : counts_of(epoch_ids(*sampler, epoch), n)) ASSERT_EQ(c, 1) << "n=" << n;
    }
  }
}

TEST(DistributedSampler, OrderDependsOnSeedAndEpochOnly) {
  auto a = make(500, {.seed = 1});
  auto b = make(500, {.seed = 1});
  auto c = make(500, {.seed = 2});
  EXPECT_EQ(epoch_ids(*a, 0), epoch_ids(*b, 0));
  EXPECT_NE(epoch_ids(*a, 0), epoch_ids(*a, 1));
  EXPECT_NE(epoch_ids(*a, 0), epoch_ids(*c, 0));
}

TEST(DistributedSampler, AtAgreesWithFill) {
  auto sampler = make(1001, {.seed = 3, .rank = 2, .world_size = 4});
  const auto ids = epoch_ids(*sampler, 9);
  for (int64_t p = 0; p < sampler->size(); ++p) ASSERT_EQ(sampler->at(9, p), ids[p]);
}

// Padding repeats the epoch's order from its start, as torch's DistributedSampler does: rank r
// takes positions r, r + world, ... of order + order[:pad].
TEST(DistributedSampler, PaddingRepeatsTheOrderFromItsStart) {
  for (int64_t n : {1, 2, 5, 10, 11, 13, 101}) {
    for (int64_t world : {1, 2, 3, 4, 8, 16}) {
      for (bool shuffle : {false, true}) {
        const auto order = epoch_ids(*make(n, {.shuffle = shuffle, .seed = 5}), 2);
        const int64_t per_rank = (n + world - 1) / world;
        std::vector<int64_t> all;
        for (int64_t rank = 0; rank < world; ++rank) {
          auto sampler =
              make(n, {.shuffle = shuffle, .seed = 5, .rank = rank, .world_size = world});
          ASSERT_EQ(sampler->size(), per_rank);
          const auto ids = epoch_ids(*sampler, 2);
          for (int64_t p = 0; p < per_rank; ++p) {
            ASSERT_EQ(ids[p], order[(rank + p * world) % n]);
          }
          all.insert(all.end(), ids.begin(), ids.end());
        }
        // Every sample at least once; exactly once but for the padding.
        const auto counts = counts_of(all, n);
        int64_t extra = 0;
        for (int64_t c : counts) {
          ASSERT_GE(c, 1);
          extra += c - 1;
        }
        EXPECT_EQ(extra, per_rank * world - n) << "n=" << n << " world=" << world;
      }
    }
  }
}

TEST(DistributedSampler, DropLastCutsTheTail) {
  for (int64_t n : {0, 1, 5, 10, 11, 103}) {
    for (int64_t world : {1, 2, 3, 4, 7}) {
      const auto order = epoch_ids(*make(n, {.seed = 8}), 0);
      std::vector<int64_t> all;
      for (int64_t rank = 0; rank < world; ++rank) {
        auto sampler = make(n, {.seed = 8, .rank = rank, .world_size = world, .drop_last = true});
        ASSERT_EQ(sampler->size(), n / world);
        const auto ids = epoch_ids(*sampler, 0);
        all.insert(all.end(), ids.begin(), ids.end());
      }
      std::sort(all.begin(), all.end());
      std::vector<int64_t> kept(order.begin(), order.begin() + (n / world) * world);
      std::sort(kept.begin(), kept.end());
      EXPECT_EQ(all, kept);  // the order's head, each once
    }
  }
}

TEST(DistributedSampler, EmptyDatasetGivesAnEmptyEpoch) {
  auto sampler = make(0, {.rank = 1, .world_size = 2});
  EXPECT_EQ(sampler->size(), 0);
  EXPECT_TRUE(epoch_ids(*sampler, 0).empty());
}

TEST(DistributedSampler, RejectsBadArguments) {
  EXPECT_EQ(DistributedSampler::create(-1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(DistributedSampler::create(10, {.world_size = 0}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(DistributedSampler::create(10, {.world_size = -2}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(DistributedSampler::create(10, {.rank = 2, .world_size = 2}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(DistributedSampler::create(10, {.rank = -1, .world_size = 2}).status().code(),
            StatusCode::kInvalidArgument);
  auto sampler = make(10, {});
  std::vector<int64_t> out(3);
  EXPECT_EQ(sampler->fill(0, 8, out).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(sampler->fill(0, -1, out).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(sampler->fill(0, 7, out).ok());
  EXPECT_TRUE(sampler->fill(0, 10, std::span<int64_t>()).ok());
}

}  // namespace
}  // namespace stoker::sampling
