// The pipeline tests' dataset: 3 episodes, each in its own files: camera "front" (64x48,
// GOP 10), camera "side" (48x32, GOP 30), column "state" = (row, -row) as float32; and the
// window, transform and sampler the tests build loaders and batches with. Test-only.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "media/testing/test_videos.h"
#include "pipeline/batch_source.h"
#include "stoker/episode_index.h"
#include "stoker/episode_source.h"
#include "stoker/image_transform.h"
#include "stoker/loader.h"
#include "stoker/sampling.h"
#include "stoker/window_plan.h"

namespace stoker::testing {

constexpr int kEpisodes = 3;
constexpr int kRows = 30;  // per episode, one second at 30 fps

// The dataset, its files copied into `folder` (under the test media folder), which keeps each
// test's copies apart, so a test may damage its own.
inline std::shared_ptr<const EpisodeIndex> make_index(const std::string& folder) {
  const std::filesystem::path dir = std::filesystem::path(test_media_dir()) / folder;
  std::filesystem::create_directories(dir);
  EpisodeIndexSource s;
  s.fps = 30;
  s.cameras = {"front", "side"};
  s.episode_video = {{}, {}};
  s.episode_video_offset = {{}, {}};
  for (int e = 0; e < kEpisodes; ++e) {
    s.episode_from_row.push_back(e * kRows);
    s.episode_length.push_back(kRows);
    s.episode_task.push_back(e % 2);
    for (int k = 0; k < kRows; ++k) s.row_timestamp.push_back(k / 30.0);
    for (int c = 0; c < 2; ++c) {
      auto path = make_test_video(
          {.name = "loader_" + std::to_string(c) + "_" + std::to_string(e),
           .extension = "mp4",
           .width = c == 0 ? 64 : 48,
           .height = c == 0 ? 48 : 32,
           .seconds = 1,
           .encoder_args = std::string("-c:v libx264 -preset veryfast -pix_fmt yuv420p -bf 2 -g ") +
                           (c == 0 ? "10" : "30")});
      EXPECT_TRUE(path.ok()) << path.status().message();
      const std::filesystem::path copy = dir / std::filesystem::path(*path).filename();
      std::filesystem::copy_file(*path, copy, std::filesystem::copy_options::overwrite_existing);
      s.episode_video[c].push_back(static_cast<int64_t>(s.video_files.size()));
      s.episode_video_offset[c].push_back(0);
      s.video_files.push_back(copy.string());
    }
  }
  std::vector<float> state;
  for (int row = 0; row < kEpisodes * kRows; ++row) {
    state.push_back(static_cast<float>(row));
    state.push_back(-static_cast<float>(row));
  }
  EpisodeIndexSource::Column column{.name = "state", .type = DType::kFloat32, .dim = 2};
  column.data.resize(state.size() * sizeof(float));
  std::memcpy(column.data.data(), state.data(), column.data.size());
  s.columns.push_back(std::move(column));
  // A column of one value per row (LeRobot's scalar features): row / 2.
  std::vector<float> reward;
  for (int row = 0; row < kEpisodes * kRows; ++row) reward.push_back(0.5F * row);
  EpisodeIndexSource::Column scalar{.name = "reward", .type = DType::kFloat32, .dim = 1};
  scalar.data.resize(reward.size() * sizeof(float));
  std::memcpy(scalar.data.data(), reward.data(), scalar.data.size());
  s.columns.push_back(std::move(scalar));
  const std::string path = (dir / "index.bin").string();
  Status built = EpisodeIndex::build(s, path);
  EXPECT_TRUE(built.ok()) << built.message();
  auto index = EpisodeIndex::open(path);
  EXPECT_TRUE(index.ok());
  return *index;
}

inline std::vector<WindowKey> keys() {
  return {{.name = "front", .source = "front", .offsets = {-4, -2, 0}},
          {.name = "side", .source = "side", .offsets = {}},
          {.name = "state", .source = "state", .offsets = {-1, 0, 1}}};
}

inline std::shared_ptr<const ImageTransform> transform(TransformOptions options = {
                                                           .resize_height = 32,
                                                           .resize_width = 32}) {
  auto t = ImageTransform::create(options);
  EXPECT_TRUE(t.ok());
  return *t;
}

inline std::shared_ptr<const sampling::Sampler> shuffled(const EpisodeIndex& index,
                                                         uint64_t seed = 1) {
  auto sampler = sampling::DistributedSampler::create(index.num_rows(), {.seed = seed});
  EXPECT_TRUE(sampler.ok());
  return std::shared_ptr<const sampling::Sampler>(std::move(sampler).value());
}

// A Loader of an episode dataset's source, as the Python front makes one.
inline Result<std::unique_ptr<Loader>> episode_loader(
    std::shared_ptr<const EpisodeIndex> index, std::vector<WindowKey> keys,
    std::shared_ptr<const sampling::Sampler> sampler,
    std::shared_ptr<const ImageTransform> transform, const LoaderOptions& options,
    EpisodeOptions episode = {}) {
  STOKER_ASSIGN_OR_RETURN(std::unique_ptr<pipeline::BatchSource> source,
                          make_episode_source(std::move(index), std::move(keys), std::move(sampler),
                                              std::move(transform), options, std::move(episode)));
  return Loader::create(std::move(source), options);
}

}  // namespace stoker::testing
