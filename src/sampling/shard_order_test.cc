#include "stoker/shard_order.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>
#include <thread>
#include <vector>

namespace stoker::sampling {
namespace {

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), int64_t{0});
  return v;
}

TEST(DealShards, GivesEveryShardToExactlyOneRank) {
  const std::vector<int64_t> bytes = {5, 9, 1, 7, 7, 3, 8, 2, 6, 4};
  for (int64_t world : {1, 2, 3, 4, 11}) {
    auto ranks = deal_shards(bytes, true, 3, 1, world);
    ASSERT_TRUE(ranks.ok());
    std::vector<int64_t> all;
    for (const auto& shards : *ranks) all.insert(all.end(), shards.begin(), shards.end());
    std::sort(all.begin(), all.end());
    EXPECT_EQ(all, iota(10)) << "world " << world;
  }
}

TEST(DealShards, BalancesBytesNotCounts) {
  // One big shard and many small ones: equal counts would give one rank 100 + 4, the other 5.
  const std::vector<int64_t> bytes = {100, 10, 10, 10, 10, 10, 10, 10, 10, 10, 10};
  auto ranks = deal_shards(bytes, true, 0, 0, 2);
  ASSERT_TRUE(ranks.ok());
  int64_t load[2] = {0, 0};
  for (int r = 0; r < 2; ++r) {
    for (int64_t s : (*ranks)[r]) load[r] += bytes[s];
  }
  EXPECT_EQ(load[0], 100);
  EXPECT_EQ(load[1], 100);
}

TEST(DealShards, OrderChangesWithTheEpochAndNotWithoutShuffle) {
  const std::vector<int64_t> bytes(16, 1);
  auto a = deal_shards(bytes, true, 7, 0, 1);
  auto b = deal_shards(bytes, true, 7, 1, 1);
  auto fixed = deal_shards(bytes, false, 7, 1, 1);
  ASSERT_TRUE(a.ok() && b.ok() && fixed.ok());
  EXPECT_NE((*a)[0], (*b)[0]);
  EXPECT_EQ((*fixed)[0], iota(16));
}

TEST(DealShards, RefusesBadInput) {
  const std::vector<int64_t> bytes = {1, -1};
  EXPECT_FALSE(deal_shards(bytes, true, 0, 0, 1).ok());
  EXPECT_FALSE(deal_shards(std::vector<int64_t>{1}, true, 0, 0, 0).ok());
}

TEST(ShuffleBuffer, EmitsAPermutationOfTheStream) {
  const auto stream = iota(1000);
  for (int64_t buffer : {0, 1, 2, 10, 999, 1000, 5000}) {
    auto order = shuffle_buffer_order(stream, buffer, 1, 2, 0);
    ASSERT_EQ(order.size(), stream.size());
    if (buffer > 1) {
      EXPECT_NE(order, stream) << "buffer " << buffer;
    }
    std::sort(order.begin(), order.end());
    EXPECT_EQ(order, stream) << "buffer " << buffer;
  }
}

TEST(ShuffleBuffer, MovesASampleAtMostAboutTheBufferEarly) {
  // An id leaves no earlier than when the buffer fills behind it: position >= id - buffer.
  const auto stream = iota(2000);
  const auto order = shuffle_buffer_order(stream, 50, 4, 0, 1);
  for (size_t p = 0; p < order.size(); ++p) EXPECT_GE(static_cast<int64_t>(p), order[p] - 50);
}

TEST(ShuffleBuffer, StateAtAPositionContinuesTheOrder) {
  const auto stream = iota(300);
  const auto order = shuffle_buffer_order(stream, 64, 9, 3, 2);
  for (int64_t at : {0, 1, 63, 64, 100, 236, 237, 250, 300}) {
    auto state = shuffle_buffer_state(stream, 64, 9, 3, 2, at);
    ASSERT_TRUE(state.ok());
    // What was emitted, plus the buffer, plus the stream not yet taken in, is everything.
    std::vector<int64_t> all(order.begin(), order.begin() + at);
    all.insert(all.end(), state->buffer.begin(), state->buffer.end());
    all.insert(all.end(), stream.begin() + state->consumed, stream.end());
    std::sort(all.begin(), all.end());
    EXPECT_EQ(all, stream) << "at " << at;
  }
  EXPECT_FALSE(shuffle_buffer_state(stream, 64, 9, 3, 2, 301).ok());
}

ShardStreamOptions stream_options(int64_t rank, int64_t world) {
  ShardStreamOptions o;
  o.shard_samples = {12, 7, 30, 1, 9, 16, 5, 22};
  o.shard_bytes = {120, 70, 300, 10, 90, 160, 50, 220};
  o.seed = 17;
  o.shuffle_buffer = 16;
  o.rank = rank;
  o.world_size = world;
  return o;
}

TEST(ShardStreamSampler, EachEpochIsTheBufferedStreamOfTheRanksShards) {
  for (int64_t world : {1, 3}) {
    std::multiset<int64_t> seen;
    for (int64_t rank = 0; rank < world; ++rank) {
      const ShardStreamOptions o = stream_options(rank, world);
      auto sampler = ShardStreamSampler::create(o);
      ASSERT_TRUE(sampler.ok());
      const auto ranks = deal_shards(o.shard_bytes, true, o.seed, 2, world).value();
      std::vector<int64_t> stream;
      std::vector<int64_t> first = {0};
      for (int64_t count : o.shard_samples) first.push_back(first.back() + count);
      for (int64_t shard : ranks[rank]) {
        for (int64_t k = 0; k < o.shard_samples[shard]; ++k) stream.push_back(first[shard] + k);
      }
      const std::vector<int64_t> expected = shuffle_buffer_order(stream, 16, o.seed, 2, rank);
      ASSERT_EQ((*sampler)->epoch_size(2), static_cast<int64_t>(expected.size()));
      std::vector<int64_t> ids(expected.size());
      ASSERT_TRUE((*sampler)->fill(2, 0, ids).ok());
      EXPECT_EQ(ids, expected);
      EXPECT_EQ((*sampler)->epoch_order(2)->stream, stream);
      seen.insert(ids.begin(), ids.end());
      EXPECT_FALSE((*sampler)->fill(2, 1, std::span(ids)).ok());  // past the epoch's end
    }
    const std::vector<int64_t> every = iota(102);
    EXPECT_EQ(seen, std::multiset<int64_t>(every.begin(), every.end()));
  }
}

TEST(ShardStreamSampler, EqualBatchesAndDropLastCutTheEpoch) {
  std::vector<int64_t> sizes;
  for (int64_t rank = 0; rank < 3; ++rank) {
    ShardStreamOptions o = stream_options(rank, 3);
    o.equal_batches = true;
    o.drop_last = true;
    o.batch_size = 4;
    auto sampler = ShardStreamSampler::create(o);
    ASSERT_TRUE(sampler.ok());
    sizes.push_back((*sampler)->epoch_size(0));
  }
  EXPECT_EQ(sizes[0], sizes[1]);
  EXPECT_EQ(sizes[1], sizes[2]);
  EXPECT_EQ(sizes[0] % 4, 0);
  EXPECT_GT(sizes[0], 0);
}

TEST(ShardStreamSampler, ThreadsReadingSeveralEpochsAtOnceGetTheOrderOfOne) {
  auto sampler = ShardStreamSampler::create(stream_options(1, 2));
  ASSERT_TRUE(sampler.ok());
  auto reference = ShardStreamSampler::create(stream_options(1, 2));
  std::vector<std::thread> threads;
  std::vector<int> mismatches(8, 0);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 50; ++round) {
        const auto epoch = static_cast<uint32_t>((t + round) % 3);
        const int64_t size = (*sampler)->epoch_size(epoch);
        const int64_t start = (t * 7 + round) % std::max<int64_t>(size, 1);
        std::vector<int64_t> ids(static_cast<size_t>(std::min<int64_t>(5, size - start)));
        if (!(*sampler)->fill(epoch, start, ids).ok()) ++mismatches[t];
        for (size_t k = 0; k < ids.size(); ++k) {
          if (ids[k] != (*reference)->at(epoch, start + static_cast<int64_t>(k))) ++mismatches[t];
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(mismatches, std::vector<int>(8, 0));
}

TEST(ShardStreamSampler, BadOptionsAreRefused) {
  ShardStreamOptions o = stream_options(0, 1);
  o.shard_bytes.pop_back();
  EXPECT_FALSE(ShardStreamSampler::create(o).ok());
  EXPECT_FALSE(ShardStreamSampler::create(stream_options(2, 2)).ok());
  ShardStreamOptions batch = stream_options(0, 1);
  batch.batch_size = 0;
  EXPECT_FALSE(ShardStreamSampler::create(batch).ok());
}

}  // namespace
}  // namespace stoker::sampling
