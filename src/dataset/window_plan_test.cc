#include "stoker/window_plan.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "media/testing/test_videos.h"

namespace stoker {
namespace {

// Two episodes of 30 rows, each in its own 30-frame file; one camera, one column.
std::shared_ptr<const EpisodeIndex> two_episode_index() {
  std::vector<std::string> files;
  for (const char* name : {"window_ep0", "window_ep1"}) {
    auto path = testing::make_test_video(
        {.name = name,
         .extension = "mp4",
         .seconds = 1,
         .encoder_args = "-c:v libx264 -preset veryfast -pix_fmt yuv420p -g 10"});
    EXPECT_TRUE(path.ok());
    files.push_back(*path);
  }
  EpisodeIndexSource s;
  s.fps = 30;
  s.episode_from_row = {0, 30};
  s.episode_length = {30, 30};
  s.episode_task = {0, 0};
  for (int e = 0; e < 2; ++e) {
    for (int k = 0; k < 30; ++k) s.row_timestamp.push_back(k / 30.0);
  }
  s.cameras = {"front"};
  s.video_files = files;
  s.episode_video = {{0, 1}};
  s.episode_video_offset = {{0, 0}};
  s.columns.push_back(
      {.name = "action", .type = DType::kFloat64, .dim = 1, .data = std::vector<uint8_t>(60 * 8)});
  const std::string path =
      (std::filesystem::path(testing::test_media_dir()) / "window.index").string();
  EXPECT_TRUE(EpisodeIndex::build(s, path).ok());
  auto index = EpisodeIndex::open(path);
  EXPECT_TRUE(index.ok());
  return *index;
}

std::vector<int64_t> slice(const std::vector<int64_t>& v, int64_t begin, int64_t end) {
  return std::vector<int64_t>(v.begin() + begin, v.begin() + end);
}

TEST(WindowPlanner, ClampsAtEpisodeEdgesWithPadMasksAndOneReadPerCamera) {
  auto planner = WindowPlanner::create(
      two_episode_index(), {{.name = "past", .source = "front", .offsets = {-3, -1}},
                            {.name = "now", .source = "front", .offsets = {0}},
                            {.name = "action", .source = "action", .offsets = {-1, 0, 1}},
                            {.name = "front", .source = "front"}});
  ASSERT_TRUE(planner.ok()) << planner.status().message();
  EXPECT_EQ((*planner)->key_camera(), (std::vector<int64_t>{0, 0, -1, 0}));
  EXPECT_EQ((*planner)->key_column(), (std::vector<int64_t>{-1, -1, 0, -1}));

  WindowPlan plan;
  ASSERT_TRUE((*planner)->plan(31, &plan).ok());  // second row of episode 1
  EXPECT_EQ(plan.episode, 1);
  EXPECT_EQ(plan.key_begin, (std::vector<int64_t>{0, 2, 3, 6, 7}));
  EXPECT_EQ(plan.rows, (std::vector<int64_t>{30, 30, 31, 30, 31, 32, 31}));
  EXPECT_EQ(plan.pad, (std::vector<uint8_t>{1, 0, 0, 0, 0, 0, 0}));
  ASSERT_EQ(plan.reads.size(), 1u);
  EXPECT_EQ(plan.reads[0].video_file, 1);
  EXPECT_EQ(plan.reads[0].frames, (std::vector<int64_t>{0, 0, 1, 1}));
  EXPECT_EQ(plan.key_read, (std::vector<int64_t>{0, 0, -1, 0}));
  EXPECT_EQ(plan.key_read_begin, (std::vector<int64_t>{0, 2, 0, 3}));

  ASSERT_TRUE((*planner)->plan(29, &plan).ok());  // last row of episode 0
  EXPECT_EQ(slice(plan.rows, 3, 6), (std::vector<int64_t>{28, 29, 29}));
  EXPECT_EQ(plan.pad[5], 1);
  EXPECT_EQ(plan.reads[0].frames, (std::vector<int64_t>{26, 28, 29, 29}));
}

TEST(WindowPlanner, CostCountsThePacketsTheDecoderMustProcess) {
  auto index = two_episode_index();
  auto one = WindowPlanner::create(index, {{.name = "front", .source = "front", .offsets = {0}}});
  auto two =
      WindowPlanner::create(index, {{.name = "front", .source = "front", .offsets = {0, 4}}});
  ASSERT_TRUE(one.ok() && two.ok());
  auto table = index->frame_table(0);
  ASSERT_TRUE(table.ok());
  const FrameTable& t = **table;
  const double pixels = 160.0 * 120;
  auto packets = [&](int64_t from_frame, int64_t to_frame) {
    return t.packet_of_frame(to_frame) - t.sync_packet_of_frame(from_frame) + 1;
  };
  // One frame: from its keyframe's packet to its own.
  EXPECT_EQ(*(*one)->cost(13), pixels * packets(13, 13));
  // Frames 13 and 17 share a GOP: one run from 13's keyframe to 17.
  ASSERT_EQ(t.sync_packet_of_frame(13), t.sync_packet_of_frame(17));
  EXPECT_EQ(*(*two)->cost(13), pixels * packets(13, 17));
  // Frames 8 and 12 lie in two GOPs: two runs, each from its own keyframe.
  ASSERT_GT(t.sync_packet_of_frame(12), t.packet_of_frame(8) + 1);
  EXPECT_EQ(*(*two)->cost(8), pixels * (packets(8, 8) + packets(12, 12)));
}

TEST(WindowPlanner, BadKeysAndRows) {
  auto index = two_episode_index();
  auto unknown = WindowPlanner::create(index, {{.name = "x", .source = "wrist"}});
  EXPECT_EQ(unknown.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("'wrist'"), std::string::npos);
  EXPECT_NE(unknown.status().message().find("'front'"), std::string::npos);
  auto twice = WindowPlanner::create(
      index, {{.name = "a", .source = "front"}, {.name = "a", .source = "action"}});
  EXPECT_EQ(twice.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(WindowPlanner::create(index, {}).status().code(), StatusCode::kInvalidArgument);
  auto planner = WindowPlanner::create(index, {{.name = "front", .source = "front"}});
  ASSERT_TRUE(planner.ok());
  WindowPlan plan;
  EXPECT_EQ((*planner)->plan(60, &plan).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*planner)->plan(-1, &plan).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace stoker
