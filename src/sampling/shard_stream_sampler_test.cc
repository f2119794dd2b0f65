#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "sampling/test_util.h"
#include "stoker/shard_order.h"

namespace stoker::sampling {
namespace {

using testing::epoch_ids;
using testing::must;

// Twelve shards of unequal counts, their bytes not proportional to their counts (so equal
// bytes give unequal counts).
const std::vector<int64_t> kSamples = {40, 7, 23, 61, 5, 18, 33, 12, 50, 9, 27, 15};
const std::vector<int64_t> kBytes = {900, 300, 410, 1200, 800, 150, 700, 260, 640, 500, 330, 90};

int64_t total_samples() { return std::accumulate(kSamples.begin(), kSamples.end(), int64_t{0}); }

std::unique_ptr<ShardStreamSampler> make(ShardStreamOptions options) {
  return must(ShardStreamSampler::create(kSamples, kBytes, options));
}

// The order re-stated from the functions it is built of, as python/stoker/shard_loader.py does.
std::vector<int64_t> reference(ShardStreamOptions o, uint32_t epoch) {
  auto ranks = must(deal_shards(kBytes, o.shuffle, o.seed, epoch, o.world_size));
  std::vector<int64_t> first(kSamples.size(), 0);
  std::exclusive_scan(kSamples.begin(), kSamples.end(), first.begin(), int64_t{0});
  std::vector<int64_t> counts;
  std::vector<int64_t> stream;
  for (size_t r = 0; r < ranks.size(); ++r) {
    int64_t count = 0;
    for (int64_t s : ranks[r]) {
      count += kSamples[s];
      if (static_cast<int64_t>(r) != o.rank) continue;
      for (int64_t k = 0; k < kSamples[s]; ++k) stream.push_back(first[s] + k);
    }
    counts.push_back(count);
  }
  auto order =
      shuffle_buffer_order(stream, o.shuffle ? o.shuffle_buffer : 0, o.seed, epoch, o.rank);
  if (o.equal_batches) order.resize(*std::min_element(counts.begin(), counts.end()));
  if (o.drop_last) order.resize(order.size() - order.size() % o.batch_size);
  return order;
}

TEST(ShardStreamSampler, IsTheShardLoadersOrderForEveryOption) {
  for (bool shuffle : {true, false}) {
    for (int64_t buffer : {0, 1, 16, 1000}) {
      for (int64_t world : {1, 3}) {
        for (bool equal : {false, true}) {
          for (bool drop : {false, true}) {
            for (int64_t rank = 0; rank < world; ++rank) {
              const ShardStreamOptions o = {.shuffle = shuffle,
                                            .seed = 5,
                                            .shuffle_buffer = buffer,
                                            .rank = rank,
                                            .world_size = world,
                                            .equal_batches = equal,
                                            .drop_last = drop,
                                            .batch_size = 8};
              auto sampler = make(o);
              for (uint32_t epoch : {0u, 1u, 2u}) {
                EXPECT_EQ(epoch_ids(*sampler, epoch), reference(o, epoch))
                    << "shuffle " << shuffle << " buffer " << buffer << " rank " << rank << "/"
                    << world << " equal " << equal << " drop " << drop << " epoch " << epoch;
              }
            }
          }
        }
      }
    }
  }
}

TEST(ShardStreamSampler, RanksTogetherTakeEverySampleOncePerEpoch) {
  for (int64_t world : {1, 2, 3, 5, 12}) {
    for (uint32_t epoch : {0u, 1u, 2u}) {
      std::vector<int64_t> all;
      for (int64_t rank = 0; rank < world; ++rank) {
        auto sampler = make({.seed = 3, .shuffle_buffer = 20, .rank = rank, .world_size = world});
        const auto ids = epoch_ids(*sampler, epoch);
        all.insert(all.end(), ids.begin(), ids.end());
      }
      EXPECT_EQ(testing::counts_of(all, total_samples()), std::vector<int64_t>(total_samples(), 1))
          << "world " << world << " epoch " << epoch;
    }
  }
}

TEST(ShardStreamSampler, RanksGetUnequalCountsThatEqualBatchesCutToTheSmallest) {
  const int64_t world = 3;
  for (uint32_t epoch : {0u, 1u, 2u, 3u}) {
    std::vector<int64_t> sizes;
    for (int64_t rank = 0; rank < world; ++rank) {
      sizes.push_back(make({.seed = 1, .rank = rank, .world_size = world})->epoch_size(epoch));
    }
    const int64_t fewest = *std::min_element(sizes.begin(), sizes.end());
    EXPECT_NE(fewest, *std::max_element(sizes.begin(), sizes.end())) << "epoch " << epoch;
    for (int64_t rank = 0; rank < world; ++rank) {
      auto whole = make({.seed = 1, .rank = rank, .world_size = world});
      auto cut = make({.seed = 1, .rank = rank, .world_size = world, .equal_batches = true});
      ASSERT_EQ(cut->epoch_size(epoch), fewest) << "rank " << rank << " epoch " << epoch;
      const auto ids = epoch_ids(*cut, epoch);
      const auto all = epoch_ids(*whole, epoch);
      EXPECT_TRUE(std::equal(ids.begin(), ids.end(), all.begin())) << "a prefix";
    }
  }
}

TEST(ShardStreamSampler, DropLastCutsEachRankToAMultipleOfTheBatch) {
  for (bool equal : {false, true}) {
    for (int64_t rank = 0; rank < 3; ++rank) {
      ShardStreamOptions o = {.seed = 2, .rank = rank, .world_size = 3, .equal_batches = equal};
      auto uncut = make(o);
      o.drop_last = true;
      o.batch_size = 16;
      auto cut = make(o);
      for (uint32_t epoch : {0u, 1u}) {
        const auto ids = epoch_ids(*cut, epoch);
        const auto all = epoch_ids(*uncut, epoch);
        EXPECT_EQ(ids.size() % 16, 0u);
        EXPECT_EQ(ids.size(), all.size() - all.size() % 16);
        EXPECT_TRUE(std::equal(ids.begin(), ids.end(), all.begin())) << "a prefix";
      }
    }
  }
}

TEST(ShardStreamSampler, OrderDependsOnSeedAndEpochOnly) {
  const ShardStreamOptions o = {.seed = 9, .shuffle_buffer = 32, .rank = 1, .world_size = 2};
  auto a = make(o);
  auto b = make(o);
  ShardStreamOptions other_seed = o;
  other_seed.seed = 10;
  EXPECT_EQ(epoch_ids(*a, 2), epoch_ids(*b, 2));
  EXPECT_NE(epoch_ids(*a, 2), epoch_ids(*a, 3));
  EXPECT_NE(epoch_ids(*a, 2), epoch_ids(*make(other_seed), 2));
}

TEST(ShardStreamSampler, WithoutShuffleReadsTheShardsInOrderWithNoBuffer) {
  auto sampler = make({.shuffle = false, .shuffle_buffer = 64});
  std::vector<int64_t> all(static_cast<size_t>(total_samples()));
  std::iota(all.begin(), all.end(), int64_t{0});
  EXPECT_EQ(epoch_ids(*sampler, 0), all);
  EXPECT_EQ(epoch_ids(*sampler, 7), all);
}

TEST(ShardStreamSampler, EpochOrderHoldsTheStreamBeforeTheBuffer) {
  auto sampler = make({.seed = 4, .shuffle_buffer = 10, .rank = 0, .world_size = 2});
  const auto epoch = sampler->epoch_order(1);
  ASSERT_NE(epoch, nullptr);
  EXPECT_EQ(epoch->order, epoch_ids(*sampler, 1));
  EXPECT_EQ(epoch->order, shuffle_buffer_order(epoch->stream, 10, 4, 1, 0));
  // The stream is whole shards, each in its own order.
  for (size_t k = 1; k < epoch->stream.size(); ++k) {
    if (epoch->stream[k] != epoch->stream[k - 1] + 1) {
      const int64_t id = epoch->stream[k];
      int64_t first = 0;
      for (int64_t count : kSamples) {
        if (first >= id) break;
        first += count;
      }
      EXPECT_EQ(first, id) << "a shard starts at position " << k;
    }
  }
}

TEST(ShardStreamSampler, SizesAreEachEpochsWithTheOrderComputedOrNot) {
  for (int64_t rank = 0; rank < 3; ++rank) {
    auto fresh = make({.seed = 6, .rank = rank, .world_size = 3, .equal_batches = false});
    auto warm = make({.seed = 6, .rank = rank, .world_size = 3, .equal_batches = false});
    EXPECT_EQ(fresh->size(), fresh->epoch_size(0));
    for (uint32_t epoch : {0u, 1u, 2u, 3u}) {
      const auto ids = epoch_ids(*warm, epoch);
      EXPECT_EQ(warm->epoch_size(epoch), static_cast<int64_t>(ids.size()));
      EXPECT_EQ(fresh->epoch_size(epoch), static_cast<int64_t>(ids.size()));
    }
  }
}

TEST(ShardStreamSampler, AtAgreesWithFillAndNextStopsAtTheEpochsSize) {
  auto sampler = make({.seed = 8, .shuffle_buffer = 50, .rank = 2, .world_size = 3});
  const auto ids = epoch_ids(*sampler, 1);
  for (size_t k = 0; k < ids.size(); ++k) ASSERT_EQ(sampler->at(1, k), ids[k]);
  EXPECT_EQ(sampler->at(1, -1), -1);
  EXPECT_EQ(sampler->at(1, static_cast<int64_t>(ids.size())), -1);
  SamplerState state = {.epoch = 1, .position = 0};
  std::vector<int64_t> got;
  std::vector<int64_t> block(37);
  for (;;) {
    const int64_t n = must(sampler->next(&state, block));
    if (n == 0) break;
    got.insert(got.end(), block.begin(), block.begin() + n);
  }
  EXPECT_EQ(got, ids);
}

TEST(ShardStreamSampler, FillRefusesARangeOutsideTheEpochNamingItsSize) {
  auto sampler = make({.seed = 8, .rank = 1, .world_size = 3});
  const int64_t n = sampler->epoch_size(2);
  std::vector<int64_t> out(2);
  const Status status = sampler->fill(2, n - 1, out);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("epoch 2's " + std::to_string(n) + " positions"),
            std::string::npos)
      << status.message();
  EXPECT_FALSE(sampler->fill(2, -1, std::span(out).first(1)).ok());
  EXPECT_TRUE(sampler->fill(2, n, std::span(out).first(0)).ok());
}

TEST(ShardStreamSampler, AnEpochOrderHeldOutlivesItsEviction) {
  auto sampler = make({.seed = 11, .shuffle_buffer = 30});
  const auto held = sampler->epoch_order(0);
  const auto copy = held->order;
  for (uint32_t epoch : {1u, 2u, 3u, 4u}) epoch_ids(*sampler, epoch);
  EXPECT_EQ(held->order, copy);
  EXPECT_EQ(sampler->epoch_order(0)->order, copy);  // computed again, the same
  EXPECT_NE(sampler->epoch_order(0), held);
  // The two most recent are kept: asking for them again hands out the same object.
  const auto four = sampler->epoch_order(4);
  EXPECT_EQ(sampler->epoch_order(4), four);
}

TEST(ShardStreamSampler, ManyThreadsFillingThreeEpochsGetTheSingleThreadedIds) {
  const ShardStreamOptions o = {.seed = 12, .shuffle_buffer = 40, .rank = 1, .world_size = 2};
  std::vector<std::vector<int64_t>> expected;
  for (uint32_t epoch = 0; epoch < 3; ++epoch) expected.push_back(reference(o, epoch));
  auto sampler = make(o);
  constexpr int kThreads = 8;
  std::vector<int> mismatches(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      std::vector<int64_t> out;
      for (int k = 0; k < 300; ++k) {
        const uint32_t epoch = rng() % 3;
        const auto& want = expected[epoch];
        const int64_t start = static_cast<int64_t>(rng() % (want.size() + 1));
        const int64_t count = static_cast<int64_t>(rng() % (want.size() - start + 1));
        out.resize(static_cast<size_t>(count));
        if (!sampler->fill(epoch, start, out).ok() ||
            !std::equal(out.begin(), out.end(), want.begin() + start) ||
            sampler->epoch_size(epoch) != static_cast<int64_t>(want.size())) {
          ++mismatches[t];
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(mismatches, std::vector<int>(kThreads, 0));
}

TEST(ShardStreamSampler, RanksWithoutAShardGetAnEmptyEpoch) {
  const std::vector<int64_t> samples = {4, 6};
  const std::vector<int64_t> bytes = {10, 10};
  int64_t taken = 0;
  for (int64_t rank = 0; rank < 3; ++rank) {
    auto sampler =
        must(ShardStreamSampler::create(samples, bytes, {.rank = rank, .world_size = 3}));
    taken += sampler->epoch_size(0);
    auto equal = must(ShardStreamSampler::create(
        samples, bytes, {.rank = rank, .world_size = 3, .equal_batches = true}));
    EXPECT_EQ(equal->epoch_size(0), 0);
    EXPECT_TRUE(epoch_ids(*equal, 0).empty());
  }
  EXPECT_EQ(taken, 10);
  auto none = must(ShardStreamSampler::create({}, {}, {}));
  EXPECT_EQ(none->size(), 0);
  EXPECT_TRUE(epoch_ids(*none, 3).empty());
}

TEST(ShardStreamSampler, RejectsBadArguments) {
  const std::vector<int64_t> two = {1, 2};
  const std::vector<int64_t> three = {1, 2, 3};
  const std::vector<int64_t> negative = {1, -2};
  auto refused = [](Result<std::unique_ptr<ShardStreamSampler>> result, const std::string& says) {
    EXPECT_FALSE(result.ok());
    if (result.ok()) return;
    EXPECT_EQ(result.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(result.status().message().find(says), std::string::npos) << result.status().message();
  };
  refused(ShardStreamSampler::create(two, three), "2 counts and 3 sizes");
  refused(ShardStreamSampler::create(negative, two), "negative sample count");
  refused(ShardStreamSampler::create(two, negative), "negative size");
  refused(ShardStreamSampler::create(two, two, {.rank = 2, .world_size = 2}), "rank");
  refused(ShardStreamSampler::create(two, two, {.rank = -1, .world_size = 2}), "rank");
  refused(ShardStreamSampler::create(two, two, {.rank = 0, .world_size = 0}), "world_size");
  refused(ShardStreamSampler::create(two, two, {.batch_size = 0}), "batch_size");
  refused(ShardStreamSampler::create(two, two, {.shuffle_buffer = -1}), "shuffle_buffer");
  const std::vector<int64_t> huge = {INT64_MAX, 1};
  refused(ShardStreamSampler::create(huge, two), "sum past int64");
}

}  // namespace
}  // namespace stoker::sampling
