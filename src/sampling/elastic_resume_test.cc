// Elastic resume: an epoch saved by a run of W ranks, resumed by a run of W' ranks, gives
// every sample once (plus the padding equal counts need), and the later epochs are those of a
// W'-rank run, for every sampler.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <numeric>
#include <vector>

#include "sampling/test_util.h"
#include "stoker/sampling.h"
#include "stoker/shard_order.h"

namespace stoker::sampling {
namespace {

using testing::epoch_ids;
using testing::must;

// Makes rank `rank` of `world` ranks, resuming epoch `resume->epoch` when given.
using MakeSampler = std::function<std::unique_ptr<Sampler>(int64_t rank, int64_t world,
                                                           std::optional<ElasticStart> resume)>;

constexpr uint32_t kEpoch = 3;

// The ids rank r of a `world`-rank run delivers in its first `positions` positions of kEpoch.
std::vector<int64_t> delivered(const MakeSampler& make, int64_t world, int64_t positions,
                               std::optional<ElasticStart> resume = std::nullopt) {
  std::vector<int64_t> ids;
  for (int64_t r = 0; r < world; ++r) {
    std::unique_ptr<Sampler> sampler = make(r, world, resume);
    std::vector<int64_t> part(positions);
    EXPECT_TRUE(sampler->fill(kEpoch, 0, part).ok());
    ids.insert(ids.end(), part.begin(), part.end());
  }
  return ids;
}

// Every id of [0, n) once in `ids`, and at most `extra` more.
void expect_each_once(std::vector<int64_t> ids, int64_t n, int64_t extra) {
  std::vector<int64_t> counts = testing::counts_of(ids, n);
  for (int64_t id = 0; id < n; ++id) EXPECT_GE(counts[id], 1) << "id " << id << " is lost";
  EXPECT_LE(static_cast<int64_t>(ids.size()), n + extra);
}

// Saves after `positions` per rank on `world` ranks, resumes on other world sizes, saves
// again there and resumes on 3 ranks. `step`: the positions a save falls on a multiple of (a
// load-balanced order is a prefix of the global order only at its steps' ends, where a loader
// of its batch size saves).
void check_order_sampler(const MakeSampler& make, int64_t n, int64_t world, int64_t positions,
                         int64_t step = 1) {
  const std::vector<int64_t> before = delivered(make, world, positions);
  for (int64_t new_world : {1, 2, 5, 7}) {
    SCOPED_TRACE("resumed on " + std::to_string(new_world) + " ranks");
    // What the saving run hands on: the sampler's own arithmetic (elastic_remainder).
    const ElasticStart resume = must(make(0, world, {})->elastic_remainder(kEpoch, positions));
    EXPECT_EQ(resume.start, positions * world);
    std::vector<int64_t> ids = before;
    int64_t per_rank = -1;
    for (int64_t r = 0; r < new_world; ++r) {
      std::unique_ptr<Sampler> sampler = make(r, new_world, resume);
      if (per_rank < 0) per_rank = sampler->epoch_size(kEpoch);
      EXPECT_EQ(sampler->epoch_size(kEpoch), per_rank) << "ranks take equal counts";
      std::vector<int64_t> rest = epoch_ids(*sampler, kEpoch);
      ids.insert(ids.end(), rest.begin(), rest.end());
      // The next epoch is a plain new_world-rank run's.
      EXPECT_EQ(epoch_ids(*sampler, kEpoch + 1), epoch_ids(*make(r, new_world, {}), kEpoch + 1));
      EXPECT_EQ(sampler->size(), make(r, new_world, {})->size());
    }
    EXPECT_EQ(per_rank, (n - positions * world + new_world - 1) / new_world);
    expect_each_once(ids, n, new_world - 1);
    // Saved again mid-way on new_world ranks, resumed on 3: still each sample once.
    const int64_t again = per_rank / 2 / step * step;
    std::vector<int64_t> twice = before;
    std::vector<int64_t> middle = delivered(make, new_world, again, resume);
    twice.insert(twice.end(), middle.begin(), middle.end());
    const ElasticStart next =
        must(make(1 % new_world, new_world, resume)->elastic_remainder(kEpoch, again));
    EXPECT_EQ(next.start, resume.start + again * new_world);
    for (int64_t r = 0; r < 3; ++r) {
      std::vector<int64_t> rest = epoch_ids(*make(r, 3, next), kEpoch);
      twice.insert(twice.end(), rest.begin(), rest.end());
    }
    expect_each_once(twice, n, 2);
  }
}

TEST(ElasticResume, DistributedSamplerDealsTheRestOfTheEpochOverTheNewRanks) {
  const int64_t n = 103;
  for (bool shuffle : {false, true}) {
    MakeSampler make = [&](int64_t rank, int64_t world, std::optional<ElasticStart> resume) {
      return must(DistributedSampler::create(
          n, {.shuffle = shuffle, .seed = 9, .rank = rank, .world_size = world, .resume = resume}));
    };
    check_order_sampler(make, n, 4, 10);
  }
}

TEST(ElasticResume, TheRestOfAShuffledEpochKeepsItsOrder) {
  // The resumed epoch is the saving run's global order from the saved position on.
  const int64_t n = 50;
  std::unique_ptr<Sampler> whole = must(DistributedSampler::create(n, {.seed = 2}));
  const std::vector<int64_t> order = epoch_ids(*whole, kEpoch);
  std::unique_ptr<Sampler> resumed = must(DistributedSampler::create(
      n, {.seed = 2, .resume = ElasticStart{.epoch = kEpoch, .start = 20}}));
  EXPECT_EQ(epoch_ids(*resumed, kEpoch), std::vector<int64_t>(order.begin() + 20, order.end()));
}

TEST(ElasticResume, EpisodeSubsetsResumeThroughTheirInnerSampler) {
  std::vector<int64_t> kept(40);
  std::iota(kept.begin(), kept.end(), 0);
  for (int64_t& id : kept) id = id * 3 + 1;  // the ids a MappedSampler maps to
  MakeSampler make = [&](int64_t rank, int64_t world, std::optional<ElasticStart> resume) {
    std::shared_ptr<const Sampler> inner = must(DistributedSampler::create(
        40, {.seed = 4, .rank = rank, .world_size = world, .resume = resume}));
    return must(MappedSampler::create(inner, kept));
  };
  const std::vector<int64_t> before = delivered(make, 2, 7);
  std::vector<int64_t> ids = before;
  for (int64_t r = 0; r < 3; ++r) {
    std::unique_ptr<Sampler> sampler = make(r, 3, ElasticStart{.epoch = kEpoch, .start = 14});
    std::vector<int64_t> rest = epoch_ids(*sampler, kEpoch);
    ids.insert(ids.end(), rest.begin(), rest.end());
  }
  std::vector<int64_t> counts = testing::counts_of(ids, 121);
  for (int64_t id : kept) EXPECT_GE(counts[id], 1) << id;
  EXPECT_EQ(ids.size(), 14 + 9 * 3);  // 26 left over 3 ranks: 9 each, one padding
}

TEST(ElasticResume, WeightedAndMixSamplersContinueTheSequenceOfDraws) {
  const std::vector<double> weights = {1, 2, 3, 4, 5, 6, 7};
  const std::vector<int64_t> sizes = {5, 0, 9};
  const std::vector<double> mix_weights = {1, 0, 2};
  for (bool mix : {false, true}) {
    SCOPED_TRACE(mix ? "MixSampler" : "WeightedSampler");
    MakeSampler make = [&](int64_t rank, int64_t world,
                           std::optional<ElasticStart> resume) -> std::unique_ptr<Sampler> {
      const WeightedOptions options{
          .num_samples = 61, .seed = 5, .rank = rank, .world_size = world, .resume = resume};
      if (mix) return must(MixSampler::create(mix_weights, sizes, options));
      return must(WeightedSampler::create(weights, options));
    };
    // Draw g of the epoch, whichever run makes it, is the one-rank run's position g.
    std::unique_ptr<Sampler> one = make(0, 1, {});
    const std::vector<int64_t> draws = epoch_ids(*one, kEpoch);
    const ElasticStart resume{.epoch = kEpoch, .start = 24};  // 3 ranks x 8 draws
    for (int64_t world : {2, 4}) {
      for (int64_t r = 0; r < world; ++r) {
        std::unique_ptr<Sampler> sampler = make(r, world, resume);
        EXPECT_EQ(sampler->epoch_size(kEpoch), (61 - 24 + world - 1) / world);
        const std::vector<int64_t> rest = epoch_ids(*sampler, kEpoch);
        for (size_t p = 0; p < rest.size(); ++p) {
          const int64_t g = 24 + r + static_cast<int64_t>(p) * world;
          if (g < 61) {
            EXPECT_EQ(rest[p], draws[g]) << "draw " << g;
          }
        }
        EXPECT_EQ(epoch_ids(*sampler, kEpoch + 1), epoch_ids(*make(r, world, {}), kEpoch + 1));
      }
    }
  }
}

TEST(ElasticResume, LoadBalancedSamplerBalancesTheRestInTheNewRanksSteps) {
  std::vector<double> costs(150);
  for (size_t i = 0; i < costs.size(); ++i) costs[i] = static_cast<double>((i * 37) % 11 + 1);
  MakeSampler make = [&](int64_t rank, int64_t world, std::optional<ElasticStart> resume) {
    return must(LoadBalancedSampler::create(
        costs, {.batch_size = 4, .seed = 1, .rank = rank, .world_size = world, .resume = resume}));
  };
  // 2 steps of 4 ranks x 4 samples delivered.
  check_order_sampler(make, 150, 4, 8, /*step=*/4);
  auto resumed = must(
      LoadBalancedSampler::create(costs, {.batch_size = 4,
                                          .seed = 1,
                                          .rank = 0,
                                          .world_size = 3,
                                          .resume = ElasticStart{.epoch = kEpoch, .start = 32}}));
  const BalanceReport report = resumed->report(kEpoch);
  EXPECT_EQ(report.steps, (150 - 32 + 11) / 12);
  EXPECT_LT(report.after.total, report.before.total);
}

TEST(ElasticResume, ARemainderOutsideTheEpochInsideAStepOrOfAStreamIsRefused) {
  auto distributed = must(DistributedSampler::create(10, {.world_size = 2}));
  EXPECT_EQ(distributed->elastic_remainder(0, 6).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(distributed->elastic_remainder(0, -1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(must(distributed->elastic_remainder(0, 5)).start, 10);  // the whole epoch
  const std::vector<double> costs(12, 1.0);
  auto balanced = must(LoadBalancedSampler::create(costs, {.batch_size = 3, .world_size = 2}));
  const auto inside = balanced->elastic_remainder(0, 2);
  ASSERT_FALSE(inside.ok());
  EXPECT_NE(inside.status().message().find("step's end"), std::string::npos);
  EXPECT_EQ(must(balanced->elastic_remainder(0, 3)).start, 6);
  const std::vector<int64_t> counts{4, 4}, bytes{100, 100};
  auto stream = must(ShardStreamSampler::create(counts, bytes, {}));
  EXPECT_EQ(stream->elastic_remainder(0, 1).status().code(), StatusCode::kUnsupported);
}

TEST(ElasticResume, AStartPastTheEndGivesAnEmptyEpochAndANegativeOneIsRefused) {
  auto done = must(DistributedSampler::create(
      10, {.world_size = 2, .resume = ElasticStart{.epoch = 0, .start = 12}}));
  EXPECT_EQ(done->epoch_size(0), 0);
  EXPECT_EQ(done->epoch_size(1), 5);
  auto refused = DistributedSampler::create(10, {.resume = ElasticStart{.epoch = 0, .start = -1}});
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("elastic resume"), std::string::npos);
}

// ---- Shard streams ----------------------------------------------------------------------

struct Shards {
  std::vector<int64_t> samples = {30, 25, 40, 10, 35, 20, 15, 45, 5, 28};
  std::vector<int64_t> bytes = {300, 250, 400, 100, 350, 200, 150, 450, 50, 280};
  int64_t total() const { return std::accumulate(samples.begin(), samples.end(), int64_t{0}); }

  std::unique_ptr<ShardStreamSampler> make(int64_t rank, int64_t world,
                                           std::optional<ElasticStream> resume = {}) const {
    return must(ShardStreamSampler::create(samples, bytes,
                                           {.seed = 7,
                                            .shuffle_buffer = 16,
                                            .rank = rank,
                                            .world_size = world,
                                            .resume = std::move(resume)}));
  }
};

// The ids ranks deliver of kEpoch, rank r its first delivered[r].
std::vector<int64_t> delivered_ids(const Shards& shards, int64_t world,
                                   const std::vector<int64_t>& positions,
                                   const std::optional<ElasticStream>& resume = {}) {
  std::vector<int64_t> ids;
  for (int64_t r = 0; r < world; ++r) {
    const std::vector<int64_t> order = epoch_ids(*shards.make(r, world, resume), kEpoch);
    const auto take = std::min<size_t>(order.size(), static_cast<size_t>(positions[r]));
    ids.insert(ids.end(), order.begin(), order.begin() + static_cast<int64_t>(take));
  }
  return ids;
}

void expect_exactly_once(const std::vector<int64_t>& ids, int64_t n) {
  std::vector<int64_t> counts = testing::counts_of(ids, n);
  for (int64_t id = 0; id < n; ++id) EXPECT_EQ(counts[id], 1) << "sample " << id;
}

TEST(ElasticResume, AShardStreamsRestIncludingItsBuffersIsDealtOnceOverTheNewRanks) {
  const Shards shards;
  const int64_t n = shards.total();
  // Ranks of a 3-rank run stopped at different positions (their buffers held 16 ids each).
  const std::vector<int64_t> positions = {20, 31, 9};
  std::vector<int64_t> ids = delivered_ids(shards, 3, positions);
  const ElasticStream rest = must(shards.make(0, 3)->remainder(kEpoch, positions));
  EXPECT_EQ(rest.world_size, 3);
  int64_t left = 0;
  for (const StreamPiece& piece : rest.pieces) left += piece.end - piece.begin;
  EXPECT_EQ(left, n - 60);
  std::vector<int64_t> sizes;
  for (int64_t r = 0; r < 2; ++r) {
    auto sampler = shards.make(r, 2, rest);
    sizes.push_back(sampler->epoch_size(kEpoch));
    std::vector<int64_t> part = epoch_ids(*sampler, kEpoch);
    ids.insert(ids.end(), part.begin(), part.end());
    EXPECT_EQ(epoch_ids(*sampler, kEpoch + 1), epoch_ids(*shards.make(r, 2), kEpoch + 1));
  }
  EXPECT_LE(std::abs(sizes[0] - sizes[1]), 1);
  expect_exactly_once(ids, n);

  // Saved again on the 2 ranks, resumed on 4: the pieces still name the first run's orders.
  const std::vector<int64_t> again = {13, 40};
  std::vector<int64_t> twice = delivered_ids(shards, 3, positions);
  std::vector<int64_t> middle = delivered_ids(shards, 2, again, rest);
  twice.insert(twice.end(), middle.begin(), middle.end());
  const ElasticStream last = must(shards.make(1, 2, rest)->remainder(kEpoch, again));
  EXPECT_EQ(last.world_size, 3);
  for (int64_t r = 0; r < 4; ++r) {
    std::vector<int64_t> part = epoch_ids(*shards.make(r, 4, last), kEpoch);
    twice.insert(twice.end(), part.begin(), part.end());
  }
  expect_exactly_once(twice, n);
}

TEST(ElasticResume, AShardStreamBlockContinuesTheSavingRanksOrders) {
  // Resumed on one rank, the rest is every saving rank's remainder in rank order.
  const Shards shards;
  const std::vector<int64_t> positions = {5, 5};
  const ElasticStream rest = must(shards.make(0, 2)->remainder(kEpoch, positions));
  std::vector<int64_t> expected;
  for (int64_t r = 0; r < 2; ++r) {
    const std::vector<int64_t> order = epoch_ids(*shards.make(r, 2), kEpoch);
    expected.insert(expected.end(), order.begin() + 5, order.end());
  }
  EXPECT_EQ(epoch_ids(*shards.make(0, 1, rest), kEpoch), expected);
}

TEST(ElasticResume, AShardStreamResumeThatLeavesTheShardsIsRefused) {
  const Shards shards;
  ElasticStream wrong{.epoch = kEpoch, .world_size = 2, .pieces = {{.rank = 1, .end = 10000}}};
  auto refused = ShardStreamSampler::create(shards.samples, shards.bytes, {.resume = wrong});
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("the shards differ"), std::string::npos);
  EXPECT_FALSE(shards.make(0, 2)->remainder(kEpoch, std::vector<int64_t>{1}).ok());
}

}  // namespace
}  // namespace stoker::sampling
