// MappedSampler: the inner sampler's order, translated through an id table.
#include <gtest/gtest.h>

#include "sampling/test_util.h"
#include "stoker/sampling.h"

namespace stoker::sampling {
namespace {

using testing::epoch_ids;
using testing::must;

TEST(MappedSampler, GivesTheTableEntryOfEveryInnerId) {
  const std::vector<int64_t> ids = {40, 41, 42, 90, 91, 7};
  std::shared_ptr<const Sampler> inner =
      must(DistributedSampler::create(static_cast<int64_t>(ids.size()), {.seed = 3}));
  auto mapped = must(MappedSampler::create(inner, ids));
  EXPECT_EQ(mapped->size(), inner->size());
  for (uint32_t epoch : {0u, 1u, 5u}) {
    const std::vector<int64_t> order = epoch_ids(*inner, epoch);
    const std::vector<int64_t> got = epoch_ids(*mapped, epoch);
    for (size_t k = 0; k < order.size(); ++k) {
      EXPECT_EQ(got[k], ids[order[k]]);
      EXPECT_EQ(mapped->at(epoch, static_cast<int64_t>(k)), ids[order[k]]);
    }
  }
}

TEST(MappedSampler, RefusesIdsOutsideItsTable) {
  std::shared_ptr<const Sampler> inner = must(DistributedSampler::create(10, {.shuffle = false}));
  auto mapped = must(MappedSampler::create(inner, std::vector<int64_t>{1, 2, 3}));
  std::vector<int64_t> out(10);
  Status status = mapped->fill(0, 0, out);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("id 3 at position 3"), std::string::npos) << status.message();
  EXPECT_EQ(mapped->at(0, 5), -1);
  EXPECT_FALSE(MappedSampler::create(nullptr, std::vector<int64_t>{1}).ok());
  EXPECT_FALSE(MappedSampler::create(inner, std::vector<int64_t>{1, -2}).ok());
}

}  // namespace
}  // namespace stoker::sampling
