// The batch builder's steps, called on the test's own thread: no executor, no Loader.
#include "pipeline/episode_source.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>

#include "core/host_memory.h"
#include "pipeline/test_dataset.h"
#include "stoker/image_decoder.h"

namespace stoker::pipeline {
namespace {

using testing::keys;
using testing::kRows;
using testing::make_index;
using testing::transform;

std::shared_ptr<const sampling::Sampler> in_order(const EpisodeIndex& index) {
  auto sampler = sampling::DistributedSampler::create(index.num_rows(), {.shuffle = false});
  EXPECT_TRUE(sampler.ok());
  return std::shared_ptr<const sampling::Sampler>(std::move(sampler).value());
}

// A builder over `index`, and a pool of buffers for its batches.
struct Fixture {
  Fixture(std::shared_ptr<const EpisodeIndex> index, std::shared_ptr<const sampling::Sampler> s,
          LoaderOptions options) {
    auto planner = WindowPlanner::create(index, keys());
    EXPECT_TRUE(planner.ok());
    auto t = transform();
    auto layout = BatchLayout::create(*index, **planner, *t, options.batch_size);
    EXPECT_TRUE(layout.ok()) << layout.status().message();
    auto memory = HostMemory::create(false);
    EXPECT_TRUE(memory.ok());
    pool = std::make_shared<BufferPool>(*memory, layout->batch_bytes, 2);
    builder = std::make_unique<EpisodeSource>(index, std::move(planner).value(), std::move(s), t,
                                              std::move(layout).value(), options, EpisodeOptions{});
  }

  std::unique_ptr<EpisodeWork> work(int64_t batch) {
    const int64_t size = std::min<int64_t>(
        builder->layout().fields->front().shape[0],
        builder->sampler().size() - batch * builder->layout().fields->front().shape[0]);
    auto buffer = pool->acquire();
    EXPECT_TRUE(buffer.ok());
    return std::make_unique<EpisodeWork>(
        0, batch,
        std::make_shared<PooledBatch>(pool, builder->layout().fields, *buffer, 0, batch, size));
  }

  std::shared_ptr<BufferPool> pool;
  std::unique_ptr<EpisodeSource> builder;
};

// Builds batch `batch` the way the Loader's tasks do, one step after the other.
Status build(EpisodeSource& builder, BatchWork& work) {
  STOKER_RETURN_IF_ERROR(builder.plan(work));
  for (const ReadGroup& group : builder.group_reads(work)) builder.decode_group(work, group);
  return builder.finish(work);
}

std::vector<uint8_t> bytes_of(const Batch& batch) {
  std::vector<uint8_t> bytes;
  for (size_t f = 0; f < batch.fields().size(); ++f) {
    bytes.insert(bytes.end(), batch.data(f), batch.data(f) + batch.fields()[f].bytes);
  }
  return bytes;
}

TEST(EpisodeSource, BuildsOnOneThreadWhatTheLoaderDelivers) {
  auto index = make_index("builder_plain");
  const LoaderOptions options{.batch_size = 8, .threads = 2};
  Fixture fixture(index, testing::shuffled(*index), options);
  auto work = fixture.work(3);
  ASSERT_TRUE(build(*fixture.builder, *work).ok());

  auto loader =
      testing::episode_loader(index, keys(), testing::shuffled(*index), transform(), options);
  ASSERT_TRUE(loader.ok()) << loader.status().message();
  ASSERT_TRUE((*loader)->start(0, 3).ok());
  auto delivered = (*loader)->next();
  ASSERT_TRUE(delivered.ok() && *delivered != nullptr);
  EXPECT_EQ(bytes_of(*work->batch), bytes_of(**delivered));
  EXPECT_TRUE(std::equal(work->batch->samples().begin(), work->batch->samples().end(),
                         (*delivered)->samples().begin()));
}

TEST(EpisodeSource, BatchFieldsHaveTheItemsShapes) {
  auto index = make_index("builder_shapes");
  const std::vector<WindowKey> keys{
      {.name = "front", .source = "front", .offsets = {0}, .drop_time_axis = true},
      {.name = "reward", .source = "reward", .offsets = {}},
      {.name = "rewards", .source = "reward", .offsets = {-1, 0}},
      {.name = "state", .source = "state", .offsets = {}}};
  const LoaderOptions options{.batch_size = 4, .threads = 1};
  auto loader = testing::episode_loader(index, keys, in_order(*index), transform(), options);
  ASSERT_TRUE(loader.ok()) << loader.status().message();
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes;
  for (const BatchField& field : (*loader)->fields()) shapes.emplace_back(field.name, field.shape);
  const std::vector<std::pair<std::string, std::vector<int64_t>>> expected{
      {"front", {4, 3, 32, 32}}, {"front_is_pad", {4, 1}},   {"reward", {4}},
      {"rewards", {4, 2}},       {"rewards_is_pad", {4, 2}}, {"state", {4, 2}}};
  EXPECT_EQ(shapes, expected);
  ASSERT_TRUE((*loader)->start(0, 1).ok());
  auto batch = (*loader)->next();
  ASSERT_TRUE(batch.ok() && *batch != nullptr);
  const auto* reward = reinterpret_cast<const float*>((*batch)->data(2));
  const auto* rewards = reinterpret_cast<const float*>((*batch)->data(3));
  for (int64_t slot = 0; slot < 4; ++slot) {
    const int64_t row = (*batch)->samples()[slot];
    EXPECT_EQ(reward[slot], 0.5F * row);
    EXPECT_EQ(rewards[2 * slot + 1], 0.5F * row);
  }

  const std::vector<WindowKey> three{
      {.name = "front", .source = "front", .offsets = {-1, 0, 1}, .drop_time_axis = true}};
  auto refused = testing::episode_loader(index, three, in_order(*index), transform(), options);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("needs one offset"), std::string::npos);
}

TEST(EpisodeSource, RowKeysAreFieldsAndTheTaskAColumn) {
  auto index = make_index("builder_row_keys");
  RowKeys row_keys{.index = true,
                   .episode_index = true,
                   .frame_index = true,
                   .task_index = true,
                   .task = true,
                   .tasks = {"pick", "place"}};
  for (int64_t e = 0; e < index->num_episodes(); ++e) row_keys.episode_numbers.push_back(10 + e);
  const LoaderOptions options{.batch_size = 8, .threads = 2};
  auto loader = testing::episode_loader(index, keys(), testing::shuffled(*index), transform(),
                                        options, {.row_keys = row_keys});
  ASSERT_TRUE(loader.ok()) << loader.status().message();
  EXPECT_EQ((*loader)->column_names(), std::vector<std::string>{"task"});
  ASSERT_TRUE((*loader)->start(0, 0).ok());
  auto batch = (*loader)->next();
  ASSERT_TRUE(batch.ok() && *batch != nullptr);
  auto field = [&](const std::string& name) {
    for (size_t f = 0; f < (*batch)->fields().size(); ++f) {
      if ((*batch)->fields()[f].name == name) {
        EXPECT_EQ((*batch)->fields()[f].shape, std::vector<int64_t>{8});
        return reinterpret_cast<const int64_t*>((*batch)->data(f));
      }
    }
    ADD_FAILURE() << "no field " << name;
    return static_cast<const int64_t*>(nullptr);
  };
  const int64_t* rows = field("index");
  const int64_t* numbers = field("episode_index");
  const int64_t* frames = field("frame_index");
  const int64_t* tasks = field("task_index");
  const BatchColumn& task = (*batch)->columns().at(0);
  ASSERT_EQ(task.name, "task");
  for (int64_t slot = 0; slot < 8; ++slot) {
    const int64_t row = (*batch)->samples()[slot];
    const int64_t episode = (*batch)->episodes()[slot];
    EXPECT_EQ(rows[slot], row);
    EXPECT_EQ(numbers[slot], 10 + episode);
    EXPECT_EQ(frames[slot], row - index->episode_from_row(episode));
    EXPECT_EQ(tasks[slot], index->episode_task(episode));
    const int64_t t = index->episode_task(episode);
    const std::string text(task.bytes.begin() + task.offsets[slot],
                           task.bytes.begin() + task.offsets[slot + 1]);
    EXPECT_EQ(text, t >= 0 && t < 2 ? row_keys.tasks[t] : "");
  }
  // Episode numbers for another number of episodes are refused.
  row_keys.episode_numbers.pop_back();
  auto refused = testing::episode_loader(index, keys(), testing::shuffled(*index), transform(),
                                         options, {.row_keys = row_keys});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("episode numbers"), std::string::npos);
}

TEST(EpisodeSource, ReadsOfOneFileAndGopShareOneDecoderPass) {
  auto index = make_index("builder_groups");
  // Samples 0..7: episode 0, frames 0..7 of its files. Each needs front frames {row - 4,
  // row - 2, row} (clamped) inside front's first GOP of 10, and side's frame `row`.
  Fixture fixture(index, in_order(*index), {.batch_size = 8});
  auto work = fixture.work(0);
  ASSERT_TRUE(fixture.builder->plan(*work).ok());
  const std::vector<ReadGroup> groups = fixture.builder->group_reads(*work);
  ASSERT_EQ(groups.size(), 2u);  // one pass over front's file, one over side's
  std::set<int64_t> cameras;
  for (const ReadGroup& group : groups) {
    EXPECT_EQ(group.size(), 8u);
    std::set<int64_t> videos;
    for (const SlotRead& read : group) {
      videos.insert(work->plans[read.slot].reads[read.read].video_file);
      cameras.insert(work->plans[read.slot].reads[read.read].camera);
    }
    EXPECT_EQ(videos.size(), 1u);
  }
  EXPECT_EQ(cameras.size(), 2u);
  for (const ReadGroup& group : groups) fixture.builder->decode_group(*work, group);
  ASSERT_TRUE(fixture.builder->finish(*work).ok());
  EXPECT_EQ(fixture.builder->stats().decode_calls, 2);
  EXPECT_EQ(fixture.builder->stats().decode.seeks, 2);
}

TEST(EpisodeSource, SamplesAcrossGopsAndFilesNeedMorePasses) {
  auto index = make_index("builder_spread");
  // Batch 1 of an in-order epoch with batch size 25: rows 25..49, across episodes 0 and 1.
  Fixture fixture(index, in_order(*index), {.batch_size = 25});
  auto work = fixture.work(1);
  ASSERT_TRUE(fixture.builder->plan(*work).ok());
  const std::vector<ReadGroup> groups = fixture.builder->group_reads(*work);
  // front: one pass in episode 0's file (rows 25-29 need frames 21-29, one GOP) and one in
  // episode 1's, whose windows overlap from GOP to GOP and chain into one; side: one per file.
  EXPECT_EQ(groups.size(), 4u);
  size_t reads = 0;
  for (const ReadGroup& group : groups) reads += group.size();
  EXPECT_EQ(reads, 50u);  // two cameras per sample
}

TEST(EpisodeSource, AFailingSlotFailsAloneAndIsReplacedUnderSkip) {
  auto index = make_index("builder_skip");
  const std::string gone = index->video_files()[index->video_of(0, 1)];  // front, episode 1
  std::filesystem::remove(gone);
  for (ErrorPolicy policy : {ErrorPolicy::kRaise, ErrorPolicy::kSkip}) {
    // Rows 25..49: slots 5..24 are episode 1's and fail; the others decode.
    Fixture fixture(index, in_order(*index), {.batch_size = 25, .on_error = policy});
    auto work = fixture.work(1);
    ASSERT_TRUE(fixture.builder->plan(*work).ok());
    for (const ReadGroup& group : fixture.builder->group_reads(*work)) {
      fixture.builder->decode_group(*work, group);
    }
    {
      core::MutexLock lock(&work->errors_mutex);
      for (int64_t slot = 0; slot < 25; ++slot) {
        EXPECT_EQ(work->slot_errors[slot].ok(), slot < 5) << "slot " << slot;
      }
    }
    const Status finished = fixture.builder->finish(*work);
    if (policy == ErrorPolicy::kRaise) {
      EXPECT_NE(finished.message().find(gone), std::string::npos) << finished.message();
      EXPECT_TRUE(work->skips.empty());
      continue;
    }
    ASSERT_TRUE(finished.ok()) << finished.message();
    EXPECT_EQ(work->skips.size(), 20u);
    for (const SkipRecord& skip : work->skips) {
      EXPECT_EQ(skip.sample / kRows, 1);
      EXPECT_NE(skip.replacement / kRows, 1);
      EXPECT_NE(skip.reason.find(gone), std::string::npos);
    }
    for (int64_t row : work->batch->samples()) EXPECT_NE(row / kRows, 1) << row;
  }
}

// An index whose only camera is an image camera: 8 rows in 2 episodes, each row's image a PNG
// that FFmpeg made of a moving test pattern, all in one side file.
std::shared_ptr<const EpisodeIndex> image_index(const std::string& folder) {
  const std::filesystem::path dir = std::filesystem::path(testing::test_media_dir()) / folder;
  std::filesystem::create_directories(dir);
  Status made = testing::run_command(
      "ffmpeg -nostdin -y -loglevel error -f lavfi -i testsrc2=size=36x28:rate=30 -frames:v 8 " +
      (dir / "row_%d.png").string());
  EXPECT_TRUE(made.ok()) << made.message();
  EpisodeIndexSource s;
  s.fps = 30;
  s.episode_from_row = {0, 4};
  s.episode_length = {4, 4};
  s.episode_task = {0, 0};
  s.image_cameras = {"cam"};
  s.image_file = (dir / "images.bin").string();
  s.image_offset.emplace_back();
  s.image_length.emplace_back();
  std::ofstream side(s.image_file, std::ios::binary);
  int64_t offset = 0;
  for (int row = 0; row < 8; ++row) {
    s.row_timestamp.push_back((row % 4) / 30.0);
    std::ifstream png(dir / ("row_" + std::to_string(row + 1) + ".png"), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(png)), {});
    side << bytes;
    s.image_offset[0].push_back(offset);
    s.image_length[0].push_back(static_cast<int64_t>(bytes.size()));
    offset += static_cast<int64_t>(bytes.size());
  }
  side.close();
  const std::string path = (dir / "index.bin").string();
  Status built = EpisodeIndex::build(s, path);
  EXPECT_TRUE(built.ok()) << built.message();
  auto index = EpisodeIndex::open(path);
  EXPECT_TRUE(index.ok()) << index.status().message();
  return index.ok() ? *index : nullptr;
}

TEST(EpisodeSource, ImageCameraSlotsHoldTheirRowsDecodedImages) {
  auto index = image_index("builder_images");
  ASSERT_NE(index, nullptr);
  const std::vector<WindowKey> window = {{.name = "cam", .source = "cam", .offsets = {-1, 0}}};
  auto uint8_chw = ImageTransform::create({});
  ASSERT_TRUE(uint8_chw.ok());
  for (int threads : {1, 2}) {
    auto loader = testing::episode_loader(index, window, in_order(*index), *uint8_chw,
                                          LoaderOptions{.batch_size = 8, .threads = threads});
    ASSERT_TRUE(loader.ok()) << loader.status().message();
    ASSERT_TRUE((*loader)->start(0, 0).ok());
    auto batch = (*loader)->next();
    ASSERT_TRUE(batch.ok() && *batch != nullptr) << batch.status().message();
    const BatchField& field = (*batch)->fields()[0];
    EXPECT_EQ(field.shape, (std::vector<int64_t>{8, 2, 3, 28, 36}));
    const uint8_t* data = (*batch)->data(0);
    for (int64_t row = 0; row < 8; ++row) {
      for (int64_t t = 0; t < 2; ++t) {
        const int64_t shown = t == 0 && row % 4 != 0 ? row - 1 : row;  // clamped to the episode
        auto image = decode_image(index->image_bytes(0, shown));
        ASSERT_TRUE(image.ok());
        const uint8_t* slot = data + (row * 2 + t) * 3 * 28 * 36;
        for (int c = 0; c < 3; ++c) {
          for (int p = 0; p < 28 * 36; ++p) {
            ASSERT_EQ(slot[c * 28 * 36 + p], image->pixels[p * 3 + c])
                << "row " << row << ", step " << t << ", threads " << threads;
          }
        }
      }
    }
  }
}

// An index whose only camera, "depth", is 12-bit gray FFV1 video (in MOV: exact timestamps,
// where Matroska rounds them to milliseconds): 2 episodes of 15 rows.
std::shared_ptr<const EpisodeIndex> depth_index(const std::string& folder) {
  const std::filesystem::path dir = std::filesystem::path(testing::test_media_dir()) / folder;
  std::filesystem::create_directories(dir);
  EpisodeIndexSource s;
  s.fps = 30;
  s.cameras = {"depth"};
  s.episode_video = {{}};
  s.episode_video_offset = {{}};
  for (int e = 0; e < 2; ++e) {
    auto path = testing::make_test_video({.name = "builder_depth_" + std::to_string(e),
                                          .extension = "mov",
                                          .width = 64,
                                          .height = 48,
                                          .seconds = 0.5,
                                          .encoder_args = "-c:v ffv1 -pix_fmt gray12le -g 6"});
    EXPECT_TRUE(path.ok()) << path.status().message();
    s.episode_from_row.push_back(e * 15);
    s.episode_length.push_back(15);
    s.episode_task.push_back(0);
    for (int k = 0; k < 15; ++k) s.row_timestamp.push_back(k / 30.0);
    s.episode_video[0].push_back(e);
    s.episode_video_offset[0].push_back(0);
    s.video_files.push_back(*path);
  }
  const std::string path = (dir / "index.bin").string();
  Status built = EpisodeIndex::build(s, path);
  EXPECT_TRUE(built.ok()) << built.message();
  auto index = EpisodeIndex::open(path);
  EXPECT_TRUE(index.ok()) << index.status().message();
  return index.ok() ? *index : nullptr;
}

TEST(EpisodeSource, DepthCameraSlotsHoldTheStoredSamplesOrMetres) {
  auto index = depth_index("builder_depth");
  ASSERT_NE(index, nullptr);
  const std::vector<WindowKey> window = {{.name = "depth", .source = "depth", .offsets = {-2, 0}}};
  // A float colour transform: the depth camera keeps its own dtype, takes the resize and flip.
  auto flipped = ImageTransform::create({.resize_height = 24,
                                         .resize_width = 32,
                                         .hflip_probability = 1.0,
                                         .dtype = DType::kFloat32});
  ASSERT_TRUE(flipped.ok());
  std::vector<std::unique_ptr<VideoReader>> readers;
  for (const std::string& file : index->video_files()) {
    auto reader = VideoReader::open(file);
    ASSERT_TRUE(reader.ok());
    readers.push_back(std::move(reader).value());
  }
  const OutputOptions gray{.height = 24, .width = 32, .pixel_format = PixelFormat::kGray16};
  // Stored samples; stoker's affine metres; LeRobot 0.6's log-quantized codes in millimetres.
  const std::vector<DepthCamera> cameras = {
      {.camera = "depth", .metric = false},
      {.camera = "depth", .metric = true, .scale = 0.001, .offset = 0.5},
      {.camera = "depth",
       .metric = true,
       .coding = DepthCoding::kLeRobotLog,
       .unit = DepthUnit::kMillimetres}};
  for (const DepthCamera& camera : cameras) {
    const bool metric = camera.metric;
    const std::vector<float> values = metric ? depth_value_table(camera) : std::vector<float>();
    std::vector<uint8_t> first_run;
    for (int threads : {1, 2}) {
      LoaderOptions options{.batch_size = 30, .threads = threads};
      auto loader = testing::episode_loader(index, window, in_order(*index), *flipped, options,
                                            {.depth_cameras = {camera}});
      ASSERT_TRUE(loader.ok()) << loader.status().message();
      ASSERT_TRUE((*loader)->start(0, 0).ok());
      auto batch = (*loader)->next();
      ASSERT_TRUE(batch.ok() && *batch != nullptr) << batch.status().message();
      const BatchField& field = (*batch)->fields()[0];
      EXPECT_EQ(field.shape, (std::vector<int64_t>{30, 2, 1, 24, 32}));
      EXPECT_EQ(field.type, metric ? DType::kFloat32 : DType::kUint16);
      for (int64_t row = 0; row < 30; ++row) {
        for (int64_t t = 0; t < 2; ++t) {
          const int64_t frame = t == 0 ? std::max<int64_t>(row % 15 - 2, 0) : row % 15;
          std::vector<uint16_t> want(24 * 32);
          const std::vector<int64_t> one = {frame};
          ASSERT_TRUE(
              readers[row / 15]
                  ->get_frames(one, gray, std::span(reinterpret_cast<uint8_t*>(want.data()), 1536))
                  .ok());
          const size_t slot = static_cast<size_t>(row * 2 + t) * 24 * 32;
          for (int y = 0; y < 24; ++y) {
            for (int x = 0; x < 32; ++x) {
              const uint16_t sample = want[y * 32 + (31 - x)];  // flipped
              if (metric) {
                const float got =
                    reinterpret_cast<const float*>((*batch)->data(0))[slot + y * 32 + x];
                ASSERT_EQ(got, values[sample]) << row << " " << t;
              } else {
                const uint16_t got =
                    reinterpret_cast<const uint16_t*>((*batch)->data(0))[slot + y * 32 + x];
                ASSERT_EQ(got, sample)
                    << "row " << row << ", step " << t << ", threads " << threads;
              }
            }
          }
        }
      }
      std::vector<uint8_t> bytes = bytes_of(**batch);
      if (threads == 1) {
        first_run = std::move(bytes);
      } else {
        EXPECT_EQ(bytes, first_run);
      }
    }
  }
}

TEST(EpisodeSource, DepthCamerasAreCheckedByName) {
  auto index = depth_index("builder_depth_names");
  ASSERT_NE(index, nullptr);
  const std::vector<WindowKey> window = {{.name = "depth", .source = "depth", .offsets = {}}};
  auto plain = ImageTransform::create({});
  ASSERT_TRUE(plain.ok());
  for (const auto& [depth, why] :
       {std::pair{DepthCamera{.camera = "nope"}, "no such camera"},
        std::pair{DepthCamera{.camera = "depth", .metric = true, .scale = -1}, "scale"}}) {
    LoaderOptions options{.batch_size = 4};
    auto loader = testing::episode_loader(index, window, in_order(*index), *plain, options,
                                          {.depth_cameras = {depth}});
    ASSERT_FALSE(loader.ok());
    EXPECT_EQ(loader.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(loader.status().message().find(why), std::string::npos) << loader.status().message();
  }
}

}  // namespace
}  // namespace stoker::pipeline
