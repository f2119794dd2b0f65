#include "stoker/shard_order.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
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

}  // namespace
}  // namespace stoker::sampling
