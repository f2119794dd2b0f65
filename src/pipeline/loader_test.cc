#include "stoker/loader.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <set>
#include <thread>

#include "pipeline/batch_pool.h"
#include "pipeline/test_dataset.h"

namespace stoker {
namespace {

namespace fs = std::filesystem;
using testing::kEpisodes;
using testing::keys;
using testing::kRows;
using testing::make_index;
using testing::shuffled;
using testing::transform;

std::unique_ptr<Loader> make_loader(std::shared_ptr<const EpisodeIndex> index,
                                    LoaderOptions options,
                                    std::shared_ptr<const sampling::Sampler> sampler = nullptr,
                                    std::shared_ptr<const ImageTransform> t = nullptr) {
  if (sampler == nullptr) sampler = shuffled(*index);
  if (t == nullptr) t = transform();
  auto loader = testing::episode_loader(index, keys(), sampler, t, options);
  EXPECT_TRUE(loader.ok()) << loader.status().message();
  return std::move(loader).value();
}

// Every batch of one epoch, each flattened to its bytes (only the filled rows of a short one).
std::vector<std::vector<uint8_t>> epoch_bytes(Loader& loader, uint32_t epoch, int64_t from = 0) {
  EXPECT_TRUE(loader.start(epoch, from).ok());
  std::vector<std::vector<uint8_t>> batches;
  while (true) {
    auto batch = loader.next();
    EXPECT_TRUE(batch.ok()) << batch.status().message();
    if (!batch.ok() || *batch == nullptr) break;
    std::vector<uint8_t> bytes;
    for (size_t f = 0; f < (*batch)->fields().size(); ++f) {
      const BatchField& field = (*batch)->fields()[f];
      const size_t used = field.bytes / field.shape[0] * (*batch)->size();
      bytes.insert(bytes.end(), (*batch)->data(f), (*batch)->data(f) + used);
    }
    for (int64_t sample : (*batch)->samples()) {
      bytes.insert(bytes.end(), reinterpret_cast<const uint8_t*>(&sample),
                   reinterpret_cast<const uint8_t*>(&sample) + sizeof sample);
    }
    batches.push_back(std::move(bytes));
  }
  return batches;
}

TEST(Loader, BatchesHoldEachSamplesRowsAndFramesAsTheReaderDecodesThem) {
  auto index = make_index("loader_plain");
  auto loader = make_loader(index, {.batch_size = 8, .threads = 2});
  EXPECT_EQ(loader->batches_per_epoch(), 12);  // 90 samples: 11 full batches and 2 left
  const std::vector<BatchField>& fields = loader->fields();
  ASSERT_EQ(fields.size(), 5u);  // front, front_is_pad, side, state, state_is_pad
  EXPECT_EQ(fields[0].shape, (std::vector<int64_t>{8, 3, 3, 32, 32}));
  EXPECT_EQ(fields[1].name, "front_is_pad");
  EXPECT_EQ(fields[2].shape, (std::vector<int64_t>{8, 3, 32, 32}));
  EXPECT_EQ(fields[3].shape, (std::vector<int64_t>{8, 3, 2}));

  auto planner = WindowPlanner::create(index, keys());
  ASSERT_TRUE(planner.ok());
  const OutputOptions output{.height = 32, .width = 32, .layout = Layout::kNCHW};
  ASSERT_TRUE(loader->start(0, 0).ok());
  std::multiset<int64_t> seen;
  int64_t batches = 0;
  while (true) {
    auto batch = loader->next();
    ASSERT_TRUE(batch.ok()) << batch.status().message();
    if (*batch == nullptr) break;
    ++batches;
    const Batch& b = **batch;
    EXPECT_EQ(b.size(), b.index() == 11 ? 2 : 8);
    for (int64_t slot = 0; slot < b.size(); ++slot) {
      const int64_t row = b.samples()[slot];
      seen.insert(row);
      EXPECT_EQ(b.episodes()[slot], row / kRows);
      WindowPlan plan;
      ASSERT_TRUE((*planner)->plan(row, &plan).ok());
      for (size_t k = 0; k < 2; ++k) {  // the cameras: the reader's frames, byte for byte
        const WindowPlan::Read& read = plan.reads[plan.key_read[k == 0 ? 0 : 1]];
        auto reader = VideoReader::open(index->video_files()[read.video_file]);
        ASSERT_TRUE(reader.ok());
        const size_t field = k == 0 ? 0 : 2;
        const int64_t begin = plan.key_read_begin[k == 0 ? 0 : 1];
        const int64_t steps = k == 0 ? 3 : 1;
        std::vector<int64_t> frames(read.frames.begin() + begin,
                                    read.frames.begin() + begin + steps);
        std::vector<uint8_t> expected(steps * 32 * 32 * 3);
        ASSERT_TRUE((*reader)->get_frames(frames, output, expected).ok());
        EXPECT_EQ(0, std::memcmp(b.data(field) + slot * expected.size(), expected.data(),
                                 expected.size()))
            << "row " << row << " key " << k;
      }
      const float* state = reinterpret_cast<const float*>(b.data(3)) + slot * 6;
      const uint8_t* pad = b.data(4) + slot * 3;
      for (int t = 0; t < 3; ++t) {
        EXPECT_EQ(state[2 * t], static_cast<float>(plan.rows[plan.key_begin[2] + t]));
        EXPECT_EQ(state[2 * t + 1], -state[2 * t]);
        EXPECT_EQ(pad[t], plan.pad[plan.key_begin[2] + t]);
      }
    }
  }
  EXPECT_EQ(batches, 12);
  EXPECT_EQ(seen.size(), 90u);
  for (int64_t row = 0; row < 90; ++row) EXPECT_EQ(seen.count(row), 1u) << row;
  LoaderStats stats = loader->stats();
  EXPECT_EQ(stats.batches, 12);
  EXPECT_EQ(stats.samples, 90);
  EXPECT_EQ(stats.data_wait_s.size(), 12u);
  double total = 0;
  for (double wait : stats.data_wait_s) total += wait;
  EXPECT_DOUBLE_EQ(stats.data_wait_total_s, total);
  EXPECT_GT(stats.decode_s, 0);
  EXPECT_EQ(stats.pool_batches, loader->pipeline_depth() + 2);
  EXPECT_LE(stats.buffers_allocated, stats.pool_batches);
}

TEST(Loader, StatsKeepTheLatestWaitsAndTheirTotalInBoundedMemory) {
  auto index = make_index("loader_waits");
  LoaderOptions options{.batch_size = 8, .threads = 2};
  options.max_wait_records = 5;
  auto loader = make_loader(index, options);
  ASSERT_TRUE(loader->start(0, 0).ok());
  ASSERT_TRUE(loader->next().ok());
  const double first = loader->stats().data_wait_s.at(0);  // waited for the first decode
  for (int b = 1; b < 12; ++b) {
    std::this_thread::sleep_for(std::chrono::milliseconds(40));  // the next one is ready
    ASSERT_TRUE(loader->next().ok());
  }
  LoaderStats stats = loader->stats();
  EXPECT_EQ(stats.batches, 12);
  ASSERT_EQ(stats.data_wait_s.size(), 5u);  // the latest five
  double kept = 0;
  for (double wait : stats.data_wait_s) {
    EXPECT_LT(wait, first);
    kept += wait;
  }
  EXPECT_GE(stats.data_wait_total_s, first + kept);
  options.max_wait_records = 0;
  EXPECT_FALSE(testing::episode_loader(index, keys(), shuffled(*index), transform(), options).ok());
}

TEST(Loader, SameSeedSameBytesWhateverTheThreadCount) {
  auto index = make_index("loader_threads");
  TransformOptions random{.crop = CropMode::kRandomResized,
                          .crop_height = 24,
                          .crop_width = 24,
                          .hflip_probability = 0.5,
                          .dtype = DType::kBFloat16};
  std::vector<std::vector<uint8_t>> first;
  for (int threads : {1, 2, 4}) {
    auto loader = make_loader(index, {.batch_size = 7, .threads = threads, .seed = 3}, nullptr,
                              transform(random));
    auto batches = epoch_bytes(*loader, 2);
    EXPECT_EQ(batches.size(), 13u);
    if (first.empty()) {
      first = batches;
    } else {
      EXPECT_TRUE(batches == first) << threads << " threads";
    }
  }
  // Another epoch is another order and other crops.
  auto loader =
      make_loader(index, {.batch_size = 7, .threads = 2, .seed = 3}, nullptr, transform(random));
  EXPECT_FALSE(epoch_bytes(*loader, 3) == first);
}

TEST(BufferPool, APoisonFillsEveryBufferItHandsOutNewOrRecycled) {
  auto memory = HostMemory::create(false);
  ASSERT_TRUE(memory.ok());
  pipeline::BufferPool pool(*memory, 4096, 1, uint8_t{0xA5});
  const auto poisoned = [](const uint8_t* buffer) {
    return std::all_of(buffer, buffer + 4096, [](uint8_t b) { return b == 0xA5; });
  };
  auto first = pool.acquire();
  ASSERT_TRUE(first.ok());
  EXPECT_TRUE(poisoned(*first));
  std::memset(*first, 1, 4096);  // a batch's bytes
  pool.release(*first);
  auto again = pool.acquire();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *first);  // recycled, and poisoned again
  EXPECT_TRUE(poisoned(*again));
  pool.release(*again);
}

// STOKER_POISON_BATCHES fills every batch buffer, new or recycled, before its batch is built:
// batches built over poison 0x00 and poison 0xFF are the same only if every byte of them is
// written by the batch (frames with random crops, bfloat16, rows, pad masks at episode ends).
TEST(Loader, EveryByteOfABatchIsWrittenWhateverThePoolHeld) {
  auto index = make_index("loader_poison");
  TransformOptions random{.crop = CropMode::kRandomResized,
                          .crop_height = 17,
                          .crop_width = 23,
                          .hflip_probability = 0.5,
                          .dtype = DType::kBFloat16};
  std::vector<std::vector<std::vector<uint8_t>>> runs;
  for (const char* poison : {"0", "255"}) {
    ASSERT_EQ(setenv(pipeline::kPoisonVariable, poison, 1), 0);
    // 13 batches through a pool of 3 buffers: most are recycled.
    auto loader = make_loader(index, {.batch_size = 7, .threads = 2, .prefetch = 1, .seed = 3},
                              nullptr, transform(random));
    runs.push_back(epoch_bytes(*loader, 1));
  }
  ASSERT_EQ(setenv(pipeline::kPoisonVariable, "256", 1), 0);
  auto refused =
      testing::episode_loader(index, keys(), shuffled(*index), transform(), {.batch_size = 7});
  ASSERT_EQ(unsetenv(pipeline::kPoisonVariable), 0);
  EXPECT_EQ(runs[0].size(), 13u);
  EXPECT_TRUE(runs[0] == runs[1]);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("STOKER_POISON_BATCHES"), std::string::npos)
      << refused.status().message();
}

TEST(Loader, ResumingMidEpochGivesTheRemainingBatches) {
  auto index = make_index("loader_resume");
  auto loader = make_loader(index, {.batch_size = 8, .threads = 2, .drop_last = true});
  EXPECT_EQ(loader->batches_per_epoch(), 11);
  auto whole = epoch_bytes(*loader, 4);
  ASSERT_EQ(whole.size(), 11u);
  auto fresh = make_loader(index, {.batch_size = 8, .threads = 3, .drop_last = true});
  auto rest = epoch_bytes(*fresh, 4, 6);
  EXPECT_TRUE(rest == std::vector<std::vector<uint8_t>>(whole.begin() + 6, whole.end()));
  EXPECT_TRUE(epoch_bytes(*fresh, 4, 11).empty());
  EXPECT_FALSE(fresh->start(4, 12).ok());
}

TEST(Loader, ARunAcrossEpochsDeliversEachEpochInTurn) {
  auto index = make_index("loader_epochs");
  auto loader = make_loader(index, {.batch_size = 8, .threads = 2});
  auto epoch_1 = epoch_bytes(*loader, 1);
  auto epoch_2 = epoch_bytes(*loader, 2);
  ASSERT_TRUE(loader->start(1, 5, /*epochs=*/2).ok());
  EXPECT_EQ(loader->position(), std::make_pair(uint32_t{1}, int64_t{5}));
  std::vector<std::pair<uint32_t, int64_t>> order;
  size_t k = 0;
  while (true) {
    auto batch = loader->next();
    ASSERT_TRUE(batch.ok());
    if (*batch == nullptr) break;
    order.emplace_back((*batch)->epoch(), (*batch)->index());
    const auto& expected =
        (*batch)->epoch() == 1 ? epoch_1[(*batch)->index()] : epoch_2[(*batch)->index()];
    const BatchField& field = (*batch)->fields()[0];
    const size_t used = field.bytes / field.shape[0] * (*batch)->size();
    EXPECT_EQ(0, std::memcmp((*batch)->data(0), expected.data(), used)) << k++;
  }
  ASSERT_EQ(order.size(), 12u - 5u + 12u);
  EXPECT_EQ(order.front(), std::make_pair(uint32_t{1}, int64_t{5}));
  EXPECT_EQ(order[7], std::make_pair(uint32_t{2}, int64_t{0}));
  EXPECT_EQ(order.back(), std::make_pair(uint32_t{2}, int64_t{11}));
  EXPECT_FALSE(loader->running());
  EXPECT_FALSE(loader->start(0, 0, -1).ok());
}

// Ids from a list: the same samples several times in one batch.
class ListSampler final : public sampling::Sampler {
 public:
  explicit ListSampler(std::vector<int64_t> ids) : ids_(std::move(ids)) {}
  int64_t size() const override { return static_cast<int64_t>(ids_.size()); }
  int64_t at(uint32_t, int64_t position) const override { return ids_[position]; }

 private:
  std::vector<int64_t> ids_;
};

TEST(Loader, AFrameSeveralSamplesShareIsDecodedOnceInOnePass) {
  auto index = make_index("loader_shared");
  // Rows 40 and 41 (episode 1) read front frames {6, 8, 10} and {7, 9, 11}: one GOP.
  auto sampler = std::make_shared<ListSampler>(std::vector<int64_t>{40, 41, 40, 41});
  auto loader = make_loader(index, {.batch_size = 4, .threads = 2}, sampler);
  auto bytes = epoch_bytes(*loader, 0);
  ASSERT_EQ(bytes.size(), 1u);
  LoaderStats stats = loader->stats();
  EXPECT_EQ(stats.decode_calls, 2);  // one pass per camera's file
  // front: 6 distinct frames; side: 2 (frames 10 and 11).
  EXPECT_EQ(stats.decode.frames_converted, 8);
  EXPECT_EQ(stats.decode.seeks, 2);
}

TEST(Loader, AMissingVideoFailsItsBatchOrIsReplacedBySkip) {
  auto index = make_index("loader_missing");
  const std::string gone = index->video_files()[index->video_of(0, 1)];  // front, episode 1
  fs::remove(gone);

  auto raising = make_loader(index, {.batch_size = 8, .threads = 2});
  ASSERT_TRUE(raising->start(0, 0).ok());
  Status error;
  while (error.ok()) {
    auto batch = raising->next();
    if (!batch.ok()) error = batch.status();
    ASSERT_TRUE(!batch.ok() || *batch != nullptr) << "the epoch ended without the error";
  }
  EXPECT_NE(error.message().find("sample "), std::string::npos) << error.message();
  EXPECT_NE(error.message().find("episode 1"), std::string::npos) << error.message();
  EXPECT_NE(error.message().find(gone), std::string::npos) << error.message();
  auto after = raising->next();  // the loader stopped
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(*after, nullptr);

  for (int threads : {1, 3}) {
    auto skipping =
        make_loader(index, {.batch_size = 8, .threads = threads, .on_error = ErrorPolicy::kSkip});
    ASSERT_TRUE(skipping->start(0, 0).ok());
    int64_t samples = 0;
    while (true) {
      auto batch = skipping->next();
      ASSERT_TRUE(batch.ok()) << batch.status().message();
      if (*batch == nullptr) break;
      samples += (*batch)->size();
      for (int64_t row : (*batch)->samples()) EXPECT_NE(row / kRows, 1) << row;
    }
    EXPECT_EQ(samples, 90);  // every slot filled
    LoaderStats stats = skipping->stats();
    EXPECT_EQ(stats.skipped, 30);  // episode 1's samples
    ASSERT_EQ(stats.skips.size(), 30u);
    EXPECT_NE(stats.skips[0].reason.find(gone), std::string::npos);
  }
}

TEST(Loader, StoppingOrDestroyingMidEpochEndsPromptly) {
  auto index = make_index("loader_stop");
  for (int round = 0; round < 5; ++round) {
    auto loader = make_loader(index, {.batch_size = 4, .threads = 3, .prefetch = 4});
    ASSERT_TRUE(loader->start(0, 0).ok());
    auto batch = loader->next();
    ASSERT_TRUE(batch.ok() && *batch != nullptr);
    if (round % 2 == 0) {
      loader->stop();
      auto none = loader->next();
      ASSERT_TRUE(none.ok());
      EXPECT_EQ(*none, nullptr);
    }
    loader.reset();  // with batches in flight
    // A batch handed out outlives its loader.
    EXPECT_EQ((*batch)->fields().size(), 5u);
    EXPECT_EQ((*batch)->data(0)[0], (*batch)->data(0)[0]);
  }
}

// stop() from another thread while the consumer waits in next(): the consumer wakes at once
// with an error saying the loader was closed (it used to wait forever, or crash).
TEST(Loader, StopFromAnotherThreadWakesTheWaitingConsumer) {
  auto index = make_index("loader_stop_thread");
  for (int round = 0; round < 12; ++round) {
    // One thread, and a sampler over the whole dataset: the consumer is usually waiting.
    auto loader = make_loader(index, {.batch_size = 16, .threads = 1, .prefetch = 1});
    ASSERT_TRUE(loader->start(0, 0).ok());
    std::thread closer([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(round % 4));
      loader->stop();
    });
    Status ended;
    for (int k = 0; k < 100 && ended.ok(); ++k) {
      auto batch = loader->next();
      if (!batch.ok()) ended = batch.status();
      if (batch.ok() && *batch == nullptr) break;  // stopped between two calls
    }
    closer.join();
    if (!ended.ok()) {
      EXPECT_NE(ended.message().find("closed"), std::string::npos) << ended.message();
    }
    EXPECT_FALSE(loader->running());
  }
}

TEST(Loader, FloatOutputIsTheUint8OutputScaled) {
  auto index = make_index("loader_float");
  auto bytes = make_loader(index, {.batch_size = 5, .threads = 2});
  auto floats =
      make_loader(index, {.batch_size = 5, .threads = 2}, nullptr,
                  transform({.resize_height = 32, .resize_width = 32, .dtype = DType::kFloat32}));
  ASSERT_TRUE(bytes->start(0, 0).ok());
  ASSERT_TRUE(floats->start(0, 0).ok());
  auto a = bytes->next();
  auto b = floats->next();
  ASSERT_TRUE(a.ok() && b.ok() && *a && *b);
  const BatchField& field = (*a)->fields()[0];
  EXPECT_EQ((*b)->fields()[0].type, DType::kFloat32);
  const float* values = reinterpret_cast<const float*>((*b)->data(0));
  for (size_t k = 0; k < field.bytes; ++k) {
    ASSERT_EQ(values[k], (*a)->data(0)[k] / 255.f) << k;
  }
}

TEST(Loader, RejectsBadOptionsAndEmptyInput) {
  auto index = make_index("loader_options");
  const LoaderOptions bad[] = {{.batch_size = 0},
                               {.batch_size = 1, .prefetch = 0},
                               {.batch_size = 1, .threads = -1},
                               {.batch_size = 1, .max_replacements = 0}};
  for (const LoaderOptions& options : bad) {
    auto loader = testing::episode_loader(index, keys(), shuffled(*index), transform(), options);
    EXPECT_EQ(loader.status().code(), StatusCode::kInvalidArgument);
  }
  auto unknown = testing::episode_loader(index, {{.name = "x", .source = "nope"}}, shuffled(*index),
                                         transform(), {.batch_size = 1});
  EXPECT_FALSE(unknown.ok());
}

// An epoch without a batch (a rank with no samples, or fewer than a batch with drop_last) is
// refused with the numbers: a run over it divided by zero batches per epoch (SIGFPE).
TEST(Loader, RefusesAnEpochWithoutBatches) {
  auto index = make_index("loader_no_batch");
  auto empty =
      testing::episode_loader(index, keys(), std::make_shared<ListSampler>(std::vector<int64_t>{}),
                              transform(), {.batch_size = 4});
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(empty.status().message().find("no batch"), std::string::npos);
  auto short_epoch = testing::episode_loader(
      index, keys(), std::make_shared<ListSampler>(std::vector<int64_t>{1, 2, 3}), transform(),
      {.batch_size = 4, .drop_last = true});
  EXPECT_EQ(short_epoch.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(short_epoch.status().message().find("3 samples, fewer than batch_size 4"),
            std::string::npos)
      << short_epoch.status().message();
}

// Resources the system refuses are errors, not aborts: a pool larger than the machine's memory
// is refused when the loader is made; threads that cannot start, when it starts.
TEST(Loader, RefusesAPoolLargerThanTheMachine) {
  auto index = make_index("loader_huge_pool");
  auto loader = testing::episode_loader(index, keys(), shuffled(*index), transform(),
                                        {.batch_size = 64, .prefetch = 1 << 30});
  EXPECT_EQ(loader.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(loader.status().message().find("lower prefetch"), std::string::npos)
      << loader.status().message();
}

TEST(Loader, PinnedMemoryIsUsedOrRefusedClearly) {
  auto index = make_index("loader_pinned");
  auto loader = testing::episode_loader(index, keys(), shuffled(*index), transform(),
                                        {.batch_size = 4, .threads = 1, .pinned_memory = true});
  if (loader.ok()) {  // a CUDA runtime and a device: batches come from pinned memory
    EXPECT_TRUE((*loader)->stats().pinned_memory);
    EXPECT_EQ(epoch_bytes(**loader, 0).size(), 23u);
  } else {
    EXPECT_EQ(loader.status().code(), StatusCode::kUnsupported);
    EXPECT_NE(loader.status().message().find("cuda"), std::string::npos)
        << loader.status().message();
  }
}

}  // namespace
}  // namespace stoker
