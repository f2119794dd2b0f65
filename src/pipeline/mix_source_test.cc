#include "stoker/mix_source.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "pipeline/batch_source.h"
#include "pipeline/test_dataset.h"
#include "pipeline/test_shard.h"
#include "stoker/shard_source.h"

namespace stoker {
namespace {

constexpr int kShardSamples = 12;
constexpr int64_t kBatch = 16;

// The two datasets: the pipeline tests' episodes (front, side, state) and a shard whose image
// field is named "side" (the same size and dtype as the episodes' side camera), with caption,
// label and json fields.
struct Datasets {
  // Files of their own per test: ctest runs tests in parallel processes.
  Datasets()
      : index(testing::make_index(std::string("mix-episodes-") + test_name())),
        shard(testing::make_shard(std::string("mix-") + test_name(), kShardSamples)) {}
  static const char* test_name() {
    return ::testing::UnitTest::GetInstance()->current_test_info()->name();
  }
  std::vector<ShardField> shard_fields() const {
    std::vector<ShardField> fields = testing::shard_spec();
    fields[0].name = "side";
    return fields;
  }
  std::shared_ptr<const EpisodeIndex> index;
  testing::TestShard shard;
};

std::shared_ptr<const sampling::Sampler> listed(std::vector<int64_t> ids) {
  auto inner =
      sampling::DistributedSampler::create(static_cast<int64_t>(ids.size()), {.shuffle = false});
  EXPECT_TRUE(inner.ok());
  auto mapped = sampling::MappedSampler::create(std::move(inner).value(), ids);
  EXPECT_TRUE(mapped.ok());
  return std::move(mapped).value();
}

std::vector<MixPart> parts_of(const Datasets& d, const LoaderOptions& options) {
  std::vector<MixPart> parts(2);
  auto episodes = make_episode_part(d.index, testing::keys(), testing::transform(), options);
  EXPECT_TRUE(episodes.ok()) << episodes.status().message();
  parts[0] = std::move(episodes).value();
  parts[0].front_keys = {"task"};
  parts[0].name = "episodes";
  auto shards = make_shard_part(d.shard.samples, d.shard_fields(), options);
  EXPECT_TRUE(shards.ok()) << shards.status().message();
  parts[1] = std::move(shards).value();
  parts[1].name = "shards";
  return parts;
}

std::shared_ptr<const sampling::Sampler> mix_sampler(const Datasets& d, uint64_t seed) {
  const std::vector<double> weights{1, 1};
  const std::vector<int64_t> sizes{d.index->num_rows(), kShardSamples};
  auto sampler = sampling::MixSampler::create(weights, sizes, {.seed = seed});
  EXPECT_TRUE(sampler.ok()) << sampler.status().message();
  return std::move(sampler).value();
}

Result<std::unique_ptr<Loader>> mix_loader(std::vector<MixPart> parts,
                                           std::shared_ptr<const sampling::Sampler> sampler,
                                           const LoaderOptions& options) {
  STOKER_ASSIGN_OR_RETURN(std::unique_ptr<pipeline::BatchSource> source,
                          make_mix_source(std::move(parts), std::move(sampler), options));
  return Loader::create(std::move(source), options);
}

std::shared_ptr<const Batch> first_batch(Loader& loader) {
  EXPECT_TRUE(loader.start(0, 0).ok());
  auto batch = loader.next();
  EXPECT_TRUE(batch.ok()) << batch.status().message();
  loader.stop();
  return batch.ok() ? *batch : nullptr;
}

const BatchField* field_named(const Batch& batch, const std::string& name, size_t* index) {
  for (size_t f = 0; f < batch.fields().size(); ++f) {
    if (batch.fields()[f].name == name) {
      *index = f;
      return &batch.fields()[f];
    }
  }
  return nullptr;
}

// Slot `slot` of field `name`: its bytes.
std::vector<uint8_t> slot_bytes(const Batch& batch, const std::string& name, int64_t slot) {
  size_t f = 0;
  const BatchField* field = field_named(batch, name, &f);
  EXPECT_NE(field, nullptr) << name;
  if (field == nullptr) return {};
  const size_t stride = field->bytes / field->shape[0];
  return std::vector<uint8_t>(batch.data(f) + slot * stride, batch.data(f) + (slot + 1) * stride);
}

std::string string_at(const Batch& batch, const std::string& name, int64_t slot) {
  for (const BatchColumn& c : batch.columns()) {
    if (c.name == name) {
      return std::string(c.bytes.begin() + c.offsets[slot], c.bytes.begin() + c.offsets[slot + 1]);
    }
  }
  ADD_FAILURE() << "no column " << name;
  return "";
}

TEST(MixSource, EverySlotHoldsWhatItsDatasetsOwnLoaderBuildsForItsSample) {
  const Datasets d;
  const LoaderOptions options{.batch_size = kBatch, .threads = 3, .seed = 5};
  auto mix = mix_loader(parts_of(d, options), mix_sampler(d, 7), options);
  ASSERT_TRUE(mix.ok()) << mix.status().message();
  const auto batch = first_batch(**mix);
  ASSERT_NE(batch, nullptr);

  // The union: the episodes' fields and masks, the shard's label and json number, a mask for
  // every key one dataset lacks, dataset_index; "side" is shared, so it has no mask.
  std::vector<std::string> names;
  for (const BatchField& field : batch->fields()) names.push_back(field.name);
  EXPECT_EQ(names,
            (std::vector<std::string>{"front", "front_is_pad", "side", "state", "state_is_pad",
                                      "label", "w", "task_is_pad", "label_is_pad", "w_is_pad",
                                      "caption_is_pad", "url_is_pad", "dataset_index"}));

  // Each dataset's slots, rebuilt by a loader of that dataset alone over the same samples.
  const auto* dataset =
      reinterpret_cast<const int64_t*>(slot_bytes(*batch, "dataset_index", 0).data());
  std::vector<int64_t> part_of(kBatch);
  std::vector<std::vector<int64_t>> slots(2), samples(2);
  for (int64_t slot = 0; slot < kBatch; ++slot) {
    std::vector<uint8_t> value = slot_bytes(*batch, "dataset_index", slot);
    std::memcpy(&part_of[slot], value.data(), 8);
    slots[part_of[slot]].push_back(slot);
    samples[part_of[slot]].push_back(batch->samples()[slot]);
  }
  (void)dataset;
  ASSERT_FALSE(slots[0].empty());
  ASSERT_FALSE(slots[1].empty());
  const LoaderOptions alone{.batch_size = kBatch, .threads = 1, .seed = 5};
  auto episodes = testing::episode_loader(d.index, testing::keys(), listed(samples[0]),
                                          testing::transform(), alone);
  ASSERT_TRUE(episodes.ok());
  auto shards = testing::shard_loader(d.shard.samples, d.shard_fields(), listed(samples[1]), alone);
  ASSERT_TRUE(shards.ok());
  const auto reference =
      std::vector<std::shared_ptr<const Batch>>{first_batch(**episodes), first_batch(**shards)};
  for (int64_t k = 0; k < 2; ++k) {
    for (size_t p = 0; p < slots[k].size(); ++p) {
      const int64_t slot = slots[k][p];
      EXPECT_EQ(reference[k]->samples()[p], batch->samples()[slot]);
      for (const BatchField& field : reference[k]->fields()) {
        EXPECT_EQ(slot_bytes(*reference[k], field.name, p), slot_bytes(*batch, field.name, slot))
            << "dataset " << k << ", slot " << slot << ", field " << field.name;
      }
    }
  }
  // What a slot's dataset lacks: zeros, masked; the episodes' window masks all true.
  for (int64_t slot : slots[0]) {
    EXPECT_EQ(slot_bytes(*batch, "label", slot), std::vector<uint8_t>(8, 0));
    EXPECT_EQ(slot_bytes(*batch, "label_is_pad", slot), std::vector<uint8_t>{1});
    EXPECT_EQ(slot_bytes(*batch, "task_is_pad", slot), std::vector<uint8_t>{0});
    EXPECT_EQ(string_at(*batch, "caption", slot), "");
    EXPECT_EQ(string_at(*batch, "__key__", slot), "");
  }
  for (int64_t slot : slots[1]) {
    EXPECT_EQ(slot_bytes(*batch, "state_is_pad", slot), std::vector<uint8_t>(3, 1));
    EXPECT_EQ(slot_bytes(*batch, "front", slot), std::vector<uint8_t>(3 * 3 * 32 * 32, 0));
    EXPECT_EQ(slot_bytes(*batch, "task_is_pad", slot), std::vector<uint8_t>{1});
    EXPECT_EQ(slot_bytes(*batch, "label_is_pad", slot), std::vector<uint8_t>{0});
    const int64_t sample = batch->samples()[slot];
    EXPECT_EQ(string_at(*batch, "caption", slot),
              "caption " + std::to_string(sample) + " \xc3\xa9");
    EXPECT_EQ(string_at(*batch, "__key__", slot), "s" + std::to_string(sample));
  }
}

TEST(MixSource, BatchesAreTheSameWhateverTheThreadCount) {
  const Datasets d;
  std::vector<std::vector<uint8_t>> seen;
  for (int threads : {1, 4}) {
    const LoaderOptions options{.batch_size = kBatch, .threads = threads, .seed = 2};
    auto mix = mix_loader(parts_of(d, options), mix_sampler(d, 3), options);
    ASSERT_TRUE(mix.ok()) << mix.status().message();
    const auto batch = first_batch(**mix);
    ASSERT_NE(batch, nullptr);
    std::vector<uint8_t> bytes;
    for (size_t f = 0; f < batch->fields().size(); ++f) {
      bytes.insert(bytes.end(), batch->data(f), batch->data(f) + batch->fields()[f].bytes);
    }
    for (const BatchColumn& c : batch->columns())
      bytes.insert(bytes.end(), c.bytes.begin(), c.bytes.end());
    seen.push_back(bytes);
  }
  EXPECT_EQ(seen[0], seen[1]);
}

TEST(MixSource, DatasetsThatDisagreeOnAKeyAreNamed) {
  const Datasets d;
  const LoaderOptions options{.batch_size = kBatch};
  std::vector<MixPart> parts = parts_of(d, options);
  std::vector<ShardField> fields = d.shard_fields();
  fields[0].height = fields[0].width = 24;  // "side" at 24x24, the episodes' at 32x32
  fields[0].transform.resize_height = fields[0].transform.resize_width = 24;
  auto shards = make_shard_part(d.shard.samples, fields, options);
  ASSERT_TRUE(shards.ok());
  parts[1].source = std::move(shards->source);
  auto mix = mix_loader(std::move(parts), mix_sampler(d, 0), options);
  ASSERT_FALSE(mix.ok());
  EXPECT_EQ(mix.status().code(), StatusCode::kCorruptData);
  EXPECT_EQ(mix.status().message(),
            "mix: dataset 0 (episodes) and dataset 1 (shards) disagree on key 'side': uint8 [3, "
            "32, 32] against uint8 [3, 24, 24] (give their specs one size, dtype and window)");
}

TEST(MixSource, ASkippedSampleIsReplacedFromItsOwnDataset) {
  const Datasets d;
  // Shard sample 3's label is no integer.
  const testing::TestShard bad = testing::make_shard("mix-bad-shard", kShardSamples, 3);
  for (ErrorPolicy policy : {ErrorPolicy::kRaise, ErrorPolicy::kSkip}) {
    const LoaderOptions options{.batch_size = kBatch, .on_error = policy};
    std::vector<MixPart> parts = parts_of(d, options);
    auto shards = make_shard_part(bad.samples, d.shard_fields(), options);
    ASSERT_TRUE(shards.ok());
    parts[1].source = std::move(shards->source);
    // Every shard sample once, then episodes: sample 3 of the shards is in the batch.
    std::vector<int64_t> ids;
    for (int k = 0; k < kShardSamples; ++k) ids.push_back(d.index->num_rows() + k);
    for (int64_t k = 0; k < kBatch - kShardSamples; ++k) ids.push_back(k);
    auto mix = mix_loader(std::move(parts), listed(ids), options);
    ASSERT_TRUE(mix.ok()) << mix.status().message();
    ASSERT_TRUE((*mix)->start(0, 0).ok());
    auto batch = (*mix)->next();
    if (policy == ErrorPolicy::kRaise) {
      ASSERT_FALSE(batch.ok());
      EXPECT_NE(batch.status().message().find("dataset 1 (shards)"), std::string::npos)
          << batch.status().message();
      EXPECT_NE(batch.status().message().find("'s3'"), std::string::npos);
      continue;
    }
    ASSERT_TRUE(batch.ok()) << batch.status().message();
    const LoaderStats stats = (*mix)->stats();
    ASSERT_EQ(stats.skips.size(), 1u);
    EXPECT_EQ(stats.skips[0].sample, 3);
    EXPECT_NE(stats.skips[0].reason.find("dataset 1 (shards)"), std::string::npos);
    const int64_t replacement = (*batch)->samples()[3];
    EXPECT_NE(replacement, 3);
    EXPECT_LT(replacement, kShardSamples);  // a shard sample
    std::vector<uint8_t> dataset = slot_bytes(**batch, "dataset_index", 3);
    EXPECT_EQ(dataset[0], 1);
  }
}

}  // namespace
}  // namespace stoker
