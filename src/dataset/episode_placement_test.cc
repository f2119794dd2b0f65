#include "dataset/episode_placement.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

namespace stoker {
namespace {

// A frame table of frames at `pts` (in 1/3000 s: 100 a frame at 30 fps), every one a keyframe.
std::shared_ptr<const FrameTable> table_of(const std::vector<int64_t>& pts) {
  VideoStreamInfo stream;
  stream.codec = "h264";
  stream.width = 64;
  stream.height = 48;
  stream.time_base_den = 3000;
  std::vector<PacketEntry> packets;
  for (size_t k = 0; k < pts.size(); ++k) {
    packets.push_back({.pts = pts[k], .dts = static_cast<int64_t>(k), .is_key = true});
  }
  auto table = FrameTable::create(stream, std::move(packets), 1000, 1);
  EXPECT_TRUE(table.ok()) << table.status().message();
  return table.ok() ? *table : nullptr;
}

// `frames` frames, one every 1/30 s from `start` (in 1/3000 s).
std::shared_ptr<const FrameTable> regular(int64_t frames, int64_t start = 0) {
  std::vector<int64_t> pts;
  for (int64_t k = 0; k < frames; ++k) pts.push_back(start + 100 * k);
  return table_of(pts);
}

// One camera; episode e has lengths[e] rows 1/30 s apart, in file `file_of[e]` at `offset[e]`.
EpisodeIndexSource source_of(const std::vector<int64_t>& lengths,
                             const std::vector<int64_t>& file_of, const std::vector<double>& offset,
                             size_t files) {
  EpisodeIndexSource s;
  s.fps = 30;
  s.cameras = {"front"};
  s.video_files.assign(files, "video.mp4");
  s.episode_video = {file_of};
  s.episode_video_offset = {offset};
  int64_t row = 0;
  for (int64_t length : lengths) {
    s.episode_from_row.push_back(row);
    s.episode_length.push_back(length);
    for (int64_t k = 0; k < length; ++k) s.row_timestamp.push_back(k / 30.0);
    row += length;
  }
  return s;
}

TEST(EpisodePlacement, EpisodesTileAFileInTheOrderOfTheirOffsetsNotOfTheDataset) {
  // Episode 0 is stated after episode 1 in the file: it starts after episode 1's 4 frames.
  const auto file = regular(7);
  const std::vector<const FrameTable*> tables = {file.get()};
  auto placed = place_episodes(source_of({3, 4}, {0, 0}, {4 / 30.0, 0.0}, 1), 0, tables);
  ASSERT_TRUE(placed.ok()) << placed.status().message();
  EXPECT_EQ(placed->first_frame, (std::vector<int64_t>{4, 0}));
  EXPECT_EQ(placed->order, (std::vector<int64_t>{1, 0}));
  EXPECT_NEAR(placed->drift[0], 0, 1e-9);
  EXPECT_EQ(placed->snap, (std::vector<double>{0, 0}));
  EXPECT_TRUE(placed->problems.empty());
}

TEST(EpisodePlacement, AnEpisodeAFileCannotServeIsRecordedAndTheNextIsPlacedStill) {
  // 3 + 4 + 3 rows, 8 frames: not tiled, so snapped. Episode 1 (second by offset) runs past
  // the file's end; episode 2, stated last but at the start of the file, is placed all the same.
  const auto file = regular(8);
  const std::vector<const FrameTable*> tables = {file.get()};
  auto placed = place_episodes(source_of({3, 4, 3}, {0, 0, 0}, {0.0, 5 / 30.0, 0.0}, 1), 0, tables);
  ASSERT_TRUE(placed.ok()) << placed.status().message();
  EXPECT_EQ(placed->order, (std::vector<int64_t>{0, 2, 1}));
  EXPECT_EQ(placed->first_frame, (std::vector<int64_t>{0, 5, 0}));
  ASSERT_EQ(placed->problems.size(), 1u);
  EXPECT_EQ(placed->problems[0].episode, 1);
  EXPECT_EQ(placed->problems[0].camera, 0);
  EXPECT_EQ(placed->problems[0].video, 0);
  EXPECT_EQ(placed->problems[0].why, "the episode needs 4 frames from frame 5, the file has 8");
}

TEST(EpisodePlacement, NoFrameNearTheStatedStartIsAProblemWithItsSnap) {
  // Frames only from 1 s on: the episode stated at 0 snaps to the first, a whole second away.
  const auto file = regular(5, 3000);
  const std::vector<const FrameTable*> tables = {file.get()};
  auto placed = place_episodes(source_of({3}, {0}, {0.0}, 1), 0, tables);
  ASSERT_TRUE(placed.ok());
  EXPECT_EQ(placed->first_frame[0], 0);
  EXPECT_NEAR(placed->snap[0], 1.0, 1e-9);
  EXPECT_NEAR(placed->drift[0], 1.0, 1e-9);
  ASSERT_EQ(placed->problems.size(), 1u);
  EXPECT_NE(placed->problems[0].why.find("no frame near its stated start"), std::string::npos);
}

TEST(EpisodePlacement, RowsOffTheirFramesAreAProblem) {
  const auto file = table_of({0, 100, 250});  // the third frame 1/60 s late
  const std::vector<const FrameTable*> tables = {file.get()};
  auto placed = place_episodes(source_of({3}, {0}, {0.0}, 1), 0, tables);
  ASSERT_TRUE(placed.ok());
  ASSERT_EQ(placed->problems.size(), 1u);
  EXPECT_NE(placed->problems[0].why.find("timestamps inconsistent with the video"),
            std::string::npos);
}

TEST(EpisodePlacement, EpisodesOfAnUnscannedFileOrWithoutRowsAreLeftUnplaced) {
  const auto file = regular(3);
  const std::vector<const FrameTable*> tables = {file.get(), nullptr};
  auto placed = place_episodes(source_of({3, 2, 0}, {0, 1, 0}, {0.0, 0.0, 0.0}, 2), 0, tables);
  ASSERT_TRUE(placed.ok()) << placed.status().message();
  EXPECT_EQ(placed->first_frame, (std::vector<int64_t>{0, -1, -1}));
  EXPECT_TRUE(std::isnan(placed->drift[1]) && std::isnan(placed->snap[2]));
  EXPECT_EQ(placed->order, std::vector<int64_t>{0});
  EXPECT_TRUE(placed->problems.empty());
}

TEST(EpisodePlacement, AStartThatIsNoNumberIsAProblemAndTheOthersAreSnappedNotTiled) {
  // 3 + 4 + 3 rows tile the 10 frames, but episode 1's offset is NaN: where episode 2 begins
  // cannot be counted, so episodes 0 and 2 are snapped to their stated starts.
  const auto file = regular(10);
  const std::vector<const FrameTable*> tables = {file.get()};
  const double nan = std::nan("");
  auto placed = place_episodes(source_of({3, 4, 3}, {0, 0, 0}, {0.0, nan, 7 / 30.0}, 1), 0, tables);
  ASSERT_TRUE(placed.ok()) << placed.status().message();
  EXPECT_EQ(placed->first_frame, (std::vector<int64_t>{0, -1, 7}));
  EXPECT_EQ(placed->order, (std::vector<int64_t>{0, 2, 1}));
  ASSERT_EQ(placed->problems.size(), 1u);
  EXPECT_EQ(placed->problems[0].episode, 1);
  EXPECT_NE(placed->problems[0].why.find("its stated start is not a number"), std::string::npos);
}

TEST(EpisodePlacementBadInput, InputsOutsideTheirArraysAreRefused) {
  const auto file = regular(3);
  const std::vector<const FrameTable*> tables = {file.get()};
  EpisodeIndexSource s = source_of({3}, {0}, {0.0}, 1);
  EXPECT_EQ(place_episodes(s, 1, tables).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(place_episodes(s, 0, {}).status().code(), StatusCode::kInvalidArgument);
  s.episode_length = {4};
  EXPECT_EQ(place_episodes(s, 0, tables).status().code(), StatusCode::kInvalidArgument);
  s.episode_length = {3};
  s.episode_video = {{1}};
  EXPECT_EQ(place_episodes(s, 0, tables).status().code(), StatusCode::kInvalidArgument);
  s.episode_video = {{0}};
  s.fps = 0;
  EXPECT_EQ(place_episodes(s, 0, tables).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace stoker
