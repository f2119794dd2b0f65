#include "stoker/episode_index.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include "media/testing/test_videos.h"
#include "stoker/window_plan.h"

namespace stoker {
namespace {

using testing::make_test_video;
using testing::run_command;
using testing::test_media_dir;
using testing::TestVideoSpec;

constexpr int kFrames = 30;  // per episode: 1 s at 30 fps

std::string episode_video(const std::string& name, const std::string& filter = "") {
  TestVideoSpec spec{.name = name,
                     .extension = "mp4",
                     .seconds = 1,
                     .encoder_args = "-c:v libx264 -preset veryfast -pix_fmt yuv420p -g 10 -bf 2",
                     .filter = filter};
  auto path = make_test_video(spec);
  EXPECT_TRUE(path.ok()) << path.status().message();
  return path.ok() ? *path : "";
}

std::string scratch(const std::string& name) {
  return (std::filesystem::path(test_media_dir()) / name).string();
}

// Episodes of kFrames rows, one camera, each in the file `files[file_of[e]]` at `offset[e]`.
EpisodeIndexSource make_source(const std::vector<std::string>& files,
                               const std::vector<int64_t>& file_of,
                               const std::vector<double>& offset) {
  EpisodeIndexSource s;
  s.fps = 30;
  s.cameras = {"observation.images.front"};
  s.video_files = files;
  s.episode_video = {file_of};
  s.episode_video_offset = {offset};
  EpisodeIndexSource::Column state{.name = "observation.state", .type = DType::kFloat32, .dim = 2};
  for (size_t e = 0; e < file_of.size(); ++e) {
    s.episode_from_row.push_back(static_cast<int64_t>(e) * kFrames);
    s.episode_length.push_back(kFrames);
    s.episode_task.push_back(static_cast<int64_t>(e % 2));
    for (int k = 0; k < kFrames; ++k) {
      s.row_timestamp.push_back(k / 30.0);
      for (float v : {static_cast<float>(e), static_cast<float>(k)}) {
        const auto* bytes = reinterpret_cast<const uint8_t*>(&v);
        state.data.insert(state.data.end(), bytes, bytes + sizeof(v));
      }
    }
  }
  s.columns.push_back(std::move(state));
  return s;
}

std::shared_ptr<const EpisodeIndex> build_and_open(const EpisodeIndexSource& source,
                                                   const std::string& path,
                                                   EpisodeIndexBuildReport* report = nullptr) {
  std::vector<int64_t> progress;
  Status built = EpisodeIndex::build(
      source, path,
      {.threads = 2, .progress = [&](int64_t done, int64_t) { progress.push_back(done); }}, report);
  EXPECT_TRUE(built.ok()) << built.message();
  if (!built.ok()) return nullptr;
  EXPECT_EQ(progress.back(), static_cast<int64_t>(source.video_files.size()));
  auto index = EpisodeIndex::open(path);
  EXPECT_TRUE(index.ok()) << index.status().message();
  return index.ok() ? *index : nullptr;
}

TEST(EpisodeIndex, OneFilePerEpisode) {
  const std::vector<std::string> files = {episode_video("index_ep0"),
                                          episode_video("index_ep1", "hflip"),
                                          episode_video("index_ep2", "vflip")};
  const std::string path = scratch("per_episode.index");
  auto index = build_and_open(make_source(files, {0, 1, 2}, {0, 0, 0}), path);
  ASSERT_NE(index, nullptr);
  EXPECT_EQ(index->num_episodes(), 3);
  EXPECT_EQ(index->num_rows(), 90);
  EXPECT_EQ(index->fps(), 30);
  EXPECT_EQ(index->cameras(), std::vector<std::string>{"observation.images.front"});
  for (int64_t row = 0; row < 90; ++row) {
    EXPECT_EQ(index->episode_of_row(row), row / kFrames);
    EXPECT_EQ(index->frame_of_row(0, row), row % kFrames);
    EXPECT_EQ(index->video_of(0, row / kFrames), row / kFrames);
  }
  EXPECT_EQ(index->episode_task(1), 1);
  ASSERT_EQ(index->columns().size(), 1u);
  const auto& state = index->columns()[0];
  EXPECT_EQ(state.name, "observation.state");
  EXPECT_EQ(state.dim, 2);
  const auto* values = reinterpret_cast<const float*>(state.data.data());
  EXPECT_EQ(values[2 * 45], 1.0f);
  EXPECT_EQ(values[2 * 45 + 1], 15.0f);
  auto table = index->frame_table(2);
  ASSERT_TRUE(table.ok());
  EXPECT_EQ((*table)->num_frames(), kFrames);
  EXPECT_TRUE(index->stale_files().empty());
}

TEST(EpisodeIndex, PackedFileWithDriftingOffsetsIsPlacedFrameByFrame) {
  // Three episodes packed into one file by stream copy, as LeRobot v3.0 does, with stated
  // offsets that drift by a whole frame per episode: frame arithmetic still places them.
  const std::string a = episode_video("index_ep0");
  const std::string b = episode_video("index_ep1", "hflip");
  const std::string packed = scratch("packed3.mp4");
  const std::string list = scratch("packed3.txt");
  std::ofstream(list) << "file '" << a << "'\nfile '" << b << "'\nfile '" << a << "'\n";
  ASSERT_TRUE(run_command("ffmpeg -nostdin -y -loglevel error -f concat -safe 0 -i '" + list +
                          "' -c copy '" + packed + "'")
                  .ok());
  EpisodeIndexBuildReport report;
  auto index =
      build_and_open(make_source({packed}, {0, 0, 0}, {0.0, 1.0 + 1 / 30.0, 2.0 + 2 / 30.0}),
                     scratch("packed3.index"), &report);
  ASSERT_NE(index, nullptr);
  EXPECT_EQ(index->first_frame(0, 0), 0);
  EXPECT_EQ(index->first_frame(0, 1), kFrames);
  EXPECT_EQ(index->first_frame(0, 2), 2 * kFrames);
  EXPECT_EQ(index->frame_of_row(0, 2 * kFrames + 7), 2 * kFrames + 7);
  EXPECT_NEAR(index->drift(0, 2), -2 / 30.0, 2e-3);
  ASSERT_EQ(report.max_drift_s.size(), 1u);
  EXPECT_NEAR(report.max_drift_s[0], 2 / 30.0, 2e-3);
}

// Regression: in a file holding more frames than its listed episodes' rows, episodes are
// snapped to the pts nearest their stated start; stated starts whose drift has grown past half
// a frame picked the previous episode's last frame. Snapping relative to the previous
// episode's drift follows the slowly growing drift.
TEST(EpisodeIndex, SnappingFollowsDriftThatGrowsPastHalfAFrame) {
  const std::string a = episode_video("index_ep0");
  const std::string packed = scratch("packed5.mp4");
  const std::string list = scratch("packed5.txt");
  std::ofstream(list) << std::string("file '" + a + "'\n") + "file '" + a + "'\nfile '" + a +
                             "'\nfile '" + a + "'\nfile '" + a + "'\n";
  ASSERT_TRUE(run_command("ffmpeg -nostdin -y -loglevel error -f concat -safe 0 -i '" + list +
                          "' -c copy '" + packed + "'")
                  .ok());
  // Four of the five episodes listed; each stated start 0.2 frame later than the one before.
  std::vector<double> offsets;
  for (int e = 0; e < 4; ++e) offsets.push_back(e * (1.0 + 0.2 / 30));
  auto index =
      build_and_open(make_source({packed}, {0, 0, 0, 0}, offsets), scratch("packed5.index"));
  ASSERT_NE(index, nullptr);
  for (int e = 0; e < 4; ++e) EXPECT_EQ(index->first_frame(0, e), e * kFrames) << e;
  EXPECT_NEAR(index->drift(0, 3), -0.6 / 30, 2e-3);
}

TEST(EpisodeIndex, ChangedSourceFilesAreReportedStale) {
  const std::string copy = scratch("index_stale_copy.mp4");
  std::filesystem::copy_file(episode_video("index_ep0"), copy,
                             std::filesystem::copy_options::overwrite_existing);
  const std::string tracked = scratch("index_stale_info.json");
  std::ofstream(tracked) << "{}";
  EpisodeIndexSource source = make_source({copy}, {0}, {0});
  source.tracked_files = {tracked};
  auto index = build_and_open(source, scratch("stale.index"));
  ASSERT_NE(index, nullptr);
  EXPECT_TRUE(index->stale_files().empty());
  std::ofstream(tracked) << "{\"changed\": true}";
  EXPECT_EQ(index->stale_files(), std::vector<std::string>{tracked});
  std::filesystem::remove(copy);
  EXPECT_EQ(index->stale_files().size(), 2u);
}

TEST(EpisodeIndex, AttachedArraysAndStringsComeBackFromTheMapping) {
  EpisodeIndexSource source = make_source({episode_video("index_ep0")}, {0}, {0});
  const std::vector<int32_t> numbers = {7, -1, 2};
  const std::vector<double> spans = {0.5, 1.25};
  auto bytes_of = [](const auto& values) {
    const auto* data = reinterpret_cast<const uint8_t*>(values.data());
    return std::vector<uint8_t>(data, data + values.size() * sizeof(values[0]));
  };
  source.attached_arrays = {{.name = "numbers", .type = DType::kInt32, .data = bytes_of(numbers)},
                            {.name = "spans", .type = DType::kFloat64, .data = bytes_of(spans)},
                            {.name = "none", .type = DType::kInt64, .data = {}}};
  source.attached_strings = {{.name = "files", .values = {"a/b.parquet", "", "c\xc3\xa9"}},
                             {.name = "empty", .values = {}}};
  auto index = build_and_open(source, scratch("attached.index"));
  ASSERT_NE(index, nullptr);
  const EpisodeIndex::AttachedArrayView* got = index->attached_array("numbers");
  ASSERT_NE(got, nullptr);
  EXPECT_EQ(got->type, DType::kInt32);
  EXPECT_EQ(std::vector<uint8_t>(got->data.begin(), got->data.end()), bytes_of(numbers));
  // In the mapping, aligned for its type: a reader may view it in place.
  EXPECT_EQ(reinterpret_cast<uintptr_t>(got->data.data()) % alignof(int32_t), 0u);
  ASSERT_NE(index->attached_array("spans"), nullptr);
  EXPECT_EQ(index->attached_array("spans")->data.size(), 2 * sizeof(double));
  ASSERT_NE(index->attached_array("none"), nullptr);
  EXPECT_TRUE(index->attached_array("none")->data.empty());
  EXPECT_EQ(index->attached_array("files"), nullptr);  // a list of strings, not an array
  Result<std::vector<std::string>> files = index->attached_strings("files");
  ASSERT_TRUE(files.ok()) << files.status().message();
  EXPECT_EQ(*files, (std::vector<std::string>{"a/b.parquet", "", "c\xc3\xa9"}));
  ASSERT_TRUE(index->attached_strings("empty").ok());
  EXPECT_TRUE(index->attached_strings("empty")->empty());
  EXPECT_EQ(index->attached_strings("numbers").status().code(), StatusCode::kNotFound);
  // The per-episode arrays are views of the mapping too.
  EXPECT_EQ(index->episode_lengths().size(), 1u);
  EXPECT_EQ(index->episode_lengths()[0], kFrames);
  EXPECT_EQ(index->episode_from_rows()[0], 0);
  EXPECT_EQ(index->episode_tasks()[0], 0);
}

TEST(EpisodeIndexBadInput, AttachedArraysOfOtherTypesOrRepeatedNamesAreRefused) {
  EpisodeIndexSource source = make_source({episode_video("index_ep0")}, {0}, {0});
  source.attached_arrays = {{.name = "flags", .type = DType::kUint8, .data = {1}}};
  Status built = EpisodeIndex::build(source, scratch("attached-bad.index"));
  EXPECT_EQ(built.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(built.message().find("'flags'"), std::string::npos) << built.message();
  source.attached_arrays = {{.name = "odd", .type = DType::kInt64, .data = {1, 2, 3}}};
  EXPECT_EQ(EpisodeIndex::build(source, scratch("attached-bad.index")).code(),
            StatusCode::kInvalidArgument);
  source.attached_arrays = {};
  source.attached_strings = {{.name = "twice", .values = {}}, {.name = "twice", .values = {"x"}}};
  built = EpisodeIndex::build(source, scratch("attached-bad.index"));
  EXPECT_EQ(built.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(built.message().find("'twice'"), std::string::npos) << built.message();
}

TEST(EpisodeIndexBadInput, EmptyDataset) {
  EpisodeIndexSource source;
  source.fps = 30;
  Status status = EpisodeIndex::build(source, scratch("empty.index"));
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("no episodes"), std::string::npos);
}

TEST(EpisodeIndexBadInput, MissingVideosAreAllListed) {
  Status status = EpisodeIndex::build(
      make_source({scratch("gone-a.mp4"), scratch("gone-b.mp4")}, {0, 1}, {0, 0}),
      scratch("missing.index"));
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("2 problems"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("gone-a.mp4"), std::string::npos);
  EXPECT_NE(status.message().find("gone-b.mp4"), std::string::npos);
}

TEST(EpisodeIndexBadInput, VideoShorterThanItsRows) {
  EpisodeIndexSource source = make_source({episode_video("index_ep0")}, {0}, {0});
  source.episode_length = {kFrames + 5};
  source.row_timestamp.resize(kFrames + 5);
  for (int k = 0; k < kFrames + 5; ++k) source.row_timestamp[k] = k / 30.0;
  source.columns.clear();
  Status status = EpisodeIndex::build(source, scratch("short.index"));
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("episode 0, camera 'observation.images.front', file '"),
            std::string::npos)
      << status.message();
}

TEST(EpisodeIndexBadInput, TimestampsInconsistentWithTheVideo) {
  EpisodeIndexSource source = make_source({episode_video("index_ep0")}, {0}, {0});
  for (int k = 0; k < kFrames; ++k) source.row_timestamp[k] = k / 15.0;  // says 15 fps
  Status status = EpisodeIndex::build(source, scratch("timing.index"));
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("timestamps inconsistent"), std::string::npos)
      << status.message();
}

TEST(EpisodeIndexBadInput, BrokenEpisodesAreRecordedWhenKeptAndTheirRowsRefused) {
  // Episode 1's video does not open, episode 2's has 30 frames for 35 rows: kept, the build
  // writes the index and records both; episode 0 reads as ever.
  const std::string garbage = scratch("broken-episode.mp4");
  std::ofstream(garbage, std::ios::binary) << std::string(1000, '\0');
  EpisodeIndexSource source =
      make_source({episode_video("index_ep0"), garbage, episode_video("index_ep1", "hflip")},
                  {0, 1, 2}, {0, 0, 0});
  source.columns.clear();
  source.episode_length[2] = kFrames + 5;
  for (int k = kFrames; k < kFrames + 5; ++k) source.row_timestamp.push_back(k / 30.0);
  const std::string path = scratch("broken-episodes.index");
  std::filesystem::remove(path);
  ASSERT_FALSE(EpisodeIndex::build(source, path).ok());  // by default: refused, nothing written
  EXPECT_FALSE(std::filesystem::exists(path));
  ASSERT_TRUE(EpisodeIndex::build(source, path, {.threads = 2, .keep_broken_episodes = true}).ok());
  auto opened = EpisodeIndex::open(path);
  ASSERT_TRUE(opened.ok()) << opened.status().message();
  const EpisodeIndex& index = **opened;
  ASSERT_EQ(index.broken_episodes().size(), 2u);
  EXPECT_EQ(index.broken_episodes()[0].episode, 1);
  EXPECT_EQ(index.broken_episodes()[0].camera, 0);
  EXPECT_NE(index.broken_episodes()[0].why.find("cannot open"), std::string::npos)
      << index.broken_episodes()[0].why;
  EXPECT_EQ(index.broken_episodes()[1].episode, 2);
  EXPECT_NE(index.broken_episodes()[1].why.find("needs 35 frames"), std::string::npos);
  EXPECT_FALSE(index.is_broken(0, 0));
  EXPECT_TRUE(index.is_broken(0, 1));
  EXPECT_TRUE(index.is_broken(0, 2));
  EXPECT_TRUE(index.stale_files().empty());  // the unreadable file is tracked too
  Result<std::shared_ptr<const FrameTable>> unscanned = index.frame_table(1);
  EXPECT_EQ(unscanned.status().code(), StatusCode::kCorruptData);
  EXPECT_NE(unscanned.status().message().find("could not be read"), std::string::npos);

  auto planner = WindowPlanner::create(
      *opened, {{.name = "front", .source = "observation.images.front", .offsets = {-1, 0}}});
  ASSERT_TRUE(planner.ok());
  WindowPlan plan;
  EXPECT_TRUE((*planner)->plan(kFrames - 1, &plan).ok());
  for (int64_t row : {int64_t{kFrames}, int64_t{2 * kFrames + 3}}) {
    Status refused = (*planner)->plan(row, &plan);
    EXPECT_EQ(refused.code(), StatusCode::kCorruptData) << row;
    EXPECT_NE(refused.message().find("was left out of the index"), std::string::npos)
        << refused.message();
  }
  // Repaired, the file makes the index stale.
  std::filesystem::copy_file(episode_video("index_ep0"), garbage,
                             std::filesystem::copy_options::overwrite_existing);
  EXPECT_EQ(index.stale_files(), std::vector<std::string>{garbage});
}

TEST(EpisodeIndexBadInput, DamagedIndexFilesAreRefused) {
  const std::string path = scratch("damaged-source.index");
  auto index = build_and_open(make_source({episode_video("index_ep0")}, {0}, {0}), path);
  ASSERT_NE(index, nullptr);
  std::ifstream in(path, std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), {});
  const std::string damaged = scratch("damaged.index");
  auto write = [&](const std::vector<char>& b) {
    std::ofstream(damaged, std::ios::binary | std::ios::trunc)
        .write(b.data(), static_cast<std::streamsize>(b.size()));
  };
  for (size_t size : {size_t{0}, size_t{10}, bytes.size() / 3, bytes.size() - 1}) {
    write(std::vector<char>(bytes.begin(), bytes.begin() + size));
    EXPECT_EQ(EpisodeIndex::open(damaged).status().code(), StatusCode::kCorruptData) << size;
  }
  // Any damaged byte, anywhere, is caught by the checksums: before them, a flipped byte could
  // give a wrong frame or row silently.
  std::mt19937 rng(3);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<char> b = bytes;
    const size_t at = rng() % b.size();
    b[at] ^= static_cast<char>(1 + rng() % 255);
    write(b);
    auto opened = EpisodeIndex::open(damaged);
    EXPECT_EQ(opened.status().code(), StatusCode::kCorruptData)
        << "byte " << at << " of " << b.size();
  }
  std::vector<char> longer = bytes;
  longer.push_back(0);
  write(longer);
  EXPECT_NE(EpisodeIndex::open(damaged).status().message().find("truncated or extended"),
            std::string::npos);
  EXPECT_EQ(EpisodeIndex::open(scratch("no-such.index")).status().code(), StatusCode::kNotFound);
}

// Seeds for the episode index's fuzz target (`make test-fuzz`), written where
// $STOKER_FUZZ_CORPUS says: indexes of one file per episode, of a packed file, of two cameras,
// of a broken episode.
TEST(FuzzSeeds, Indexes) {
  const char* corpus = std::getenv("STOKER_FUZZ_CORPUS");
  if (corpus == nullptr) GTEST_SKIP() << "STOKER_FUZZ_CORPUS is not set";
  const std::filesystem::path folder = std::filesystem::path(corpus) / "episode_index_fuzz";
  std::filesystem::create_directories(folder);
  const std::string ep0 = episode_video("index_ep0");
  const std::string ep1 = episode_video("index_ep1", "hflip");
  std::vector<EpisodeIndexSource> sources = {make_source({ep0, ep1}, {0, 1}, {0, 0}),
                                             make_source({ep0}, {0}, {0})};
  EpisodeIndexSource two_cameras = make_source({ep0, ep1}, {0, 1}, {0, 0});
  two_cameras.cameras.push_back("observation.images.side");
  two_cameras.episode_video.push_back({1, 0});
  two_cameras.episode_video_offset.push_back({0, 0});
  const int64_t numbers[] = {3, 5};
  const auto* number_bytes = reinterpret_cast<const uint8_t*>(numbers);
  two_cameras.attached_arrays = {
      {.name = "meta/episode_index",
       .type = DType::kInt64,
       .data = std::vector<uint8_t>(number_bytes, number_bytes + sizeof(numbers))}};
  two_cameras.attached_strings = {{.name = "meta/data_files", .values = {"/d/a.parquet", "/d/b"}}};
  sources.push_back(two_cameras);
  for (size_t k = 0; k < sources.size(); ++k) {
    const std::string path = (folder / ("index-" + std::to_string(k))).string();
    ASSERT_TRUE(EpisodeIndex::build(sources[k], path).ok());
  }
  // And one that records a broken episode (a video that does not open, without a frame table).
  const std::string garbage = scratch("fuzz-seed-broken.mp4");
  std::ofstream(garbage, std::ios::binary) << std::string(1000, '\0');
  ASSERT_TRUE(EpisodeIndex::build(make_source({ep0, garbage}, {0, 1}, {0, 0}),
                                  (folder / "index-broken").string(),
                                  {.keep_broken_episodes = true})
                  .ok());
}

// An image camera beside the video camera: each row's "image" is bytes that name the row (the
// index does not parse images), all in one side file.
EpisodeIndexSource with_image_camera(const std::string& side_file) {
  EpisodeIndexSource source = make_source({episode_video("index_ep0")}, {0}, {0});
  source.image_cameras = {"observation.images.wrist"};
  source.image_file = side_file;
  std::string bytes;
  source.image_offset.emplace_back();
  source.image_length.emplace_back();
  for (int row = 0; row < kFrames; ++row) {
    const std::string image = "image of row " + std::to_string(row);
    source.image_offset[0].push_back(static_cast<int64_t>(bytes.size()));
    source.image_length[0].push_back(static_cast<int64_t>(image.size()));
    bytes += image;
  }
  std::ofstream(side_file, std::ios::binary) << bytes;
  return source;
}

TEST(EpisodeIndex, ImageCamerasFollowTheVideoCamerasAndMapTheirSideFile) {
  const std::string side = scratch("images.side");
  auto index = build_and_open(with_image_camera(side), scratch("images.index"));
  ASSERT_NE(index, nullptr);
  EXPECT_EQ(index->num_cameras(), 2);
  EXPECT_EQ(index->num_video_cameras(), 1);
  EXPECT_FALSE(index->is_image_camera(0));
  EXPECT_TRUE(index->is_image_camera(1));
  EXPECT_EQ(index->cameras()[1], "observation.images.wrist");
  EXPECT_EQ(index->image_file(), side);
  for (int row : {0, 7, kFrames - 1}) {
    const auto bytes = index->image_bytes(1, row);
    EXPECT_EQ(std::string(bytes.begin(), bytes.end()), "image of row " + std::to_string(row));
  }
  // The planner reads an image camera by rows, from no video file.
  auto planner = WindowPlanner::create(
      index, {{.name = "wrist", .source = "observation.images.wrist", .offsets = {-2, 0}}});
  ASSERT_TRUE(planner.ok()) << planner.status().message();
  WindowPlan plan;
  ASSERT_TRUE((*planner)->plan(5, &plan).ok());
  ASSERT_EQ(plan.reads.size(), 1u);
  EXPECT_EQ(plan.reads[0].video_file, -1);
  EXPECT_EQ(plan.reads[0].frames, (std::vector<int64_t>{3, 5}));
  auto cost = (*planner)->cost(5);
  ASSERT_TRUE(cost.ok());
  EXPECT_EQ(*cost, 8.0 * static_cast<double>(index->image_bytes(1, 3).size() +
                                             index->image_bytes(1, 5).size()));
}

TEST(EpisodeIndexBadInput, ASideFileTooShortForItsImagesIsRefused) {
  const std::string side = scratch("short-images.side");
  EpisodeIndexSource source = with_image_camera(side);
  source.image_length[0].back() += 1;  // past the end of the file
  Status built = EpisodeIndex::build(source, scratch("short-images.index"));
  EXPECT_EQ(built.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(built.message().find("observation.images.wrist', row 29"), std::string::npos)
      << built.message();

  // Built over a whole file that is then truncated: refused when opened, never read past.
  const std::string path = scratch("truncated-images.index");
  ASSERT_NE(build_and_open(with_image_camera(side), path), nullptr);
  std::filesystem::resize_file(side, 10);
  auto opened = EpisodeIndex::open(path);
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), StatusCode::kCorruptData);
  std::filesystem::remove(side);
  opened = EpisodeIndex::open(path);
  EXPECT_EQ(opened.status().code(), StatusCode::kCorruptData);
}

}  // namespace
}  // namespace stoker
