#include "stoker/shard_source.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "media/testing/test_videos.h"
#include "pipeline/test_shard.h"
#include "stoker/byte_source.h"

namespace stoker {
namespace {

using testing::make_shard;
using testing::run_command;
using testing::test_media_dir;
using testing::TestShard;

namespace fs = std::filesystem;

std::unique_ptr<Loader> loader_of(const TestShard& shard, int samples, LoaderOptions options) {
  auto sampler = sampling::DistributedSampler::create(samples, {.shuffle = false});
  EXPECT_TRUE(sampler.ok());
  auto loader = testing::shard_loader(shard.samples, testing::shard_spec(),
                                      std::move(sampler).value(), options);
  EXPECT_TRUE(loader.ok()) << loader.status().message();
  return std::move(loader).value();
}

std::vector<std::shared_ptr<const Batch>> epoch(Loader& loader) {
  EXPECT_TRUE(loader.start(0, 0).ok());
  std::vector<std::shared_ptr<const Batch>> batches;
  while (true) {
    auto batch = loader.next();
    EXPECT_TRUE(batch.ok()) << batch.status().message();
    if (!batch.ok() || *batch == nullptr) break;
    batches.push_back(*batch);
  }
  return batches;
}

const BatchColumn& column(const Batch& batch, const std::string& name) {
  for (const BatchColumn& c : batch.columns()) {
    if (c.name == name) return c;
  }
  ADD_FAILURE() << "no column " << name;
  return batch.columns().front();
}

std::string string_at(const BatchColumn& column, int64_t k) {
  return std::string(column.bytes.begin() + column.offsets[k],
                     column.bytes.begin() + column.offsets[k + 1]);
}

TEST(Loader, ReadBuildsTheSamplesAskedForAsARunWouldWithoutMovingTheRun) {
  const int n = 10;
  const TestShard shard = make_shard("read-samples", n);
  auto loader = loader_of(shard, n, {.batch_size = 4, .threads = 2});
  const auto batches = epoch(*loader);
  ASSERT_EQ(batches.size(), 3u);
  // Samples 5 and 6 are slots 1 and 2 of the run's second batch.
  const int64_t wanted[] = {5, 6};
  auto read = loader->read(wanted);
  ASSERT_TRUE(read.ok()) << read.status().message();
  const Batch& batch = **read;
  ASSERT_EQ(batch.size(), 2);
  EXPECT_EQ(std::vector<int64_t>(batch.samples().begin(), batch.samples().end()),
            (std::vector<int64_t>{5, 6}));
  const size_t image = 3 * 32 * 32;
  for (int64_t slot = 0; slot < 2; ++slot) {
    EXPECT_TRUE(std::equal(batch.data(0) + slot * image, batch.data(0) + (slot + 1) * image,
                           batches[1]->data(0) + (slot + 1) * image));
    EXPECT_EQ(reinterpret_cast<const int64_t*>(batch.data(1))[slot], wanted[slot] % 5);
    EXPECT_EQ(string_at(column(batch, "caption"), slot),
              "caption " + std::to_string(wanted[slot]) + " \xc3\xa9");
  }
  EXPECT_EQ(loader->position(), (std::pair<uint32_t, int64_t>{1, 0}));
  EXPECT_EQ(loader->stats().batches, 3);

  const int64_t too_many[] = {0, 1, 2, 3, 4};
  EXPECT_EQ(loader->read(too_many).status().code(), StatusCode::kInvalidArgument);
  const int64_t outside[] = {n};
  EXPECT_EQ(loader->read(outside).status().code(), StatusCode::kInvalidArgument);
}

TEST(ShardSource, ABatchHoldsEveryFieldTheSameWhateverTheThreadCount) {
  const int n = 10;
  const TestShard shard = make_shard("every-field", n);
  std::vector<std::vector<uint8_t>> images;
  for (int threads : {1, 3}) {
    auto loader = loader_of(shard, n, {.batch_size = 4, .threads = threads});
    ASSERT_EQ(loader->batches_per_epoch(), 3);
    const auto batches = epoch(*loader);
    ASSERT_EQ(batches.size(), 3u);
    std::vector<uint8_t> bytes;
    for (const auto& batch : batches) {
      const std::vector<BatchField>& fields = batch->fields();
      ASSERT_EQ(fields[0].name, "image");
      EXPECT_EQ(fields[0].shape, (std::vector<int64_t>{4, 3, 32, 32}));
      bytes.insert(bytes.end(), batch->data(0), batch->data(0) + batch->size() * 3 * 32 * 32);
      for (int64_t slot = 0; slot < batch->size(); ++slot) {
        const int64_t k = batch->samples()[slot];
        EXPECT_EQ(k, batch->index() * 4 + slot);
        EXPECT_EQ(reinterpret_cast<const int64_t*>(batch->data(1))[slot], k % 5);    // label
        EXPECT_EQ(reinterpret_cast<const int64_t*>(batch->data(2))[slot], 100 + k);  // w
        EXPECT_EQ(string_at(column(*batch, "caption"), slot),
                  "caption " + std::to_string(k) + " \xc3\xa9");
        EXPECT_EQ(string_at(column(*batch, "url"), slot),
                  std::string("u").append(std::to_string(k)));
        EXPECT_EQ(string_at(column(*batch, "__key__"), slot),
                  std::string("s").append(std::to_string(k)));
      }
    }
    images.push_back(std::move(bytes));
  }
  EXPECT_EQ(images[0], images[1]);
  // The test pattern is not black: every image was decoded into its slot.
  EXPECT_GT(*std::max_element(images[0].begin(), images[0].end()), 100);
}

TEST(ShardSource, ABadMemberIsNamedOrItsSampleReplaced) {
  const int n = 6;
  const TestShard shard = make_shard("bad-member", n, /*bad_label=*/2);
  auto raising = loader_of(shard, n, {.batch_size = 6});
  ASSERT_TRUE(raising->start(0, 0).ok());
  auto failed = raising->next();
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find(shard.path + ": sample 's2', field 'cls'"),
            std::string::npos)
      << failed.status().message();
  EXPECT_NE(failed.status().message().find("seven"), std::string::npos);

  auto skipping = loader_of(shard, n, {.batch_size = 6, .seed = 4, .on_error = ErrorPolicy::kSkip});
  const auto batches = epoch(*skipping);
  ASSERT_EQ(batches.size(), 1u);
  ASSERT_EQ(batches[0]->size(), 6);  // replaced, not dropped
  const int64_t replacement = batches[0]->samples()[2];
  EXPECT_NE(replacement, 2);
  EXPECT_EQ(string_at(column(*batches[0], "__key__"), 2),
            std::string("s").append(std::to_string(replacement)));
  const LoaderStats stats = skipping->stats();
  ASSERT_EQ(stats.skipped, 1);
  EXPECT_EQ(stats.skips[0].sample, 2);
  EXPECT_EQ(stats.skips[0].replacement, replacement);
  EXPECT_GT(stats.bytes_read, 0);
}

// A sampler whose epoch e has 5 + e ids: 0, 1, ... in order.
class GrowingSampler final : public sampling::Sampler {
 public:
  int64_t size() const override { return 5; }
  int64_t epoch_size(uint32_t epoch) const override { return 5 + epoch; }
  int64_t at(uint32_t /*epoch*/, int64_t position) const override { return position; }
  Status fill(uint32_t epoch, int64_t start, std::span<int64_t> out) const override {
    if (start < 0 || start + static_cast<int64_t>(out.size()) > epoch_size(epoch)) {
      return Status(StatusCode::kInvalidArgument, "outside the epoch");
    }
    for (size_t k = 0; k < out.size(); ++k) out[k] = start + static_cast<int64_t>(k);
    return Status();
  }
};

TEST(ShardSource, EpochsOfDifferentLengthsRunBackToBack) {
  const int n = 10;
  const TestShard shard = make_shard("growing", n);
  auto loader = testing::shard_loader(shard.samples, testing::shard_spec(),
                                      std::make_shared<GrowingSampler>(), {.batch_size = 2});
  ASSERT_TRUE(loader.ok()) << loader.status().message();
  EXPECT_EQ((*loader)->batches_in_epoch(0), 3);  // 5 ids
  EXPECT_EQ((*loader)->batches_in_epoch(3), 4);  // 8 ids
  // Three epochs in one run, starting mid-epoch: 2 + 3 + 4 batches, the last of each short
  // when its epoch is odd.
  ASSERT_TRUE((*loader)->start(0, 1, 3).ok());
  std::vector<std::pair<uint32_t, int64_t>> seen;
  std::vector<int64_t> sizes;
  while (true) {
    auto batch = (*loader)->next();
    ASSERT_TRUE(batch.ok()) << batch.status().message();
    if (*batch == nullptr) break;
    seen.emplace_back((*batch)->epoch(), (*batch)->index());
    sizes.push_back((*batch)->size());
  }
  EXPECT_EQ(seen, (std::vector<std::pair<uint32_t, int64_t>>{
                      {0, 1}, {0, 2}, {1, 0}, {1, 1}, {1, 2}, {2, 0}, {2, 1}, {2, 2}, {2, 3}}));
  EXPECT_EQ(sizes, (std::vector<int64_t>{2, 1, 2, 2, 2, 2, 2, 2, 1}));
  EXPECT_EQ((*loader)->position(), (std::pair<uint32_t, int64_t>{3, 0}));
  EXPECT_FALSE((*loader)->start(1, 4).ok());  // epoch 1 has 3 batches
}

}  // namespace
}  // namespace stoker
