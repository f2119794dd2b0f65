// transcode_frames on real encoded video: the output has exactly the source's frames (counted,
// timed, and pictured within encoder tolerance), keyframes every gop frames, and is written
// atomically; bad options and undecodable sources fail by name and leave no file behind.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#if defined(__GLIBC__)
#include <malloc.h>
#endif
#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#endif

#include "media/testing/test_videos.h"
#include "stoker/transcode.h"
#include "stoker/video_reader.h"

namespace stoker {
namespace {

using testing::make_test_video;
using testing::test_media_dir;
using testing::TestVideoSpec;

std::string output_path(const std::string& name) {
  const auto folder = std::filesystem::path(test_media_dir()) / "etl";
  std::filesystem::create_directories(folder);
  const auto path = folder / name;
  std::filesystem::remove(path);
  return path.string();
}

std::unique_ptr<VideoReader> open_video(const std::string& name) {
  for (const TestVideoSpec& spec : testing::frame_exact_specs()) {
    if (spec.name != name) continue;
    auto path = make_test_video(spec);
    EXPECT_TRUE(path.ok()) << path.status().message();
    if (!path.ok()) return nullptr;
    auto reader = VideoReader::open(*path);
    EXPECT_TRUE(reader.ok()) << reader.status().message();
    return reader.ok() ? std::move(reader).value() : nullptr;
  }
  ADD_FAILURE() << "no test video " << name;
  return nullptr;
}

// Frames [first, first + count) of `reader` as RGB of the given size.
std::vector<uint8_t> frames_of(const VideoReader& reader, int64_t first, int64_t count, int height,
                               int width) {
  std::vector<int64_t> indices(count);
  for (int64_t i = 0; i < count; ++i) indices[i] = first + i;
  const OutputOptions options{.height = height, .width = width};
  std::vector<uint8_t> out(count * reader.frame_bytes(options));
  Status status = reader.get_frames(indices, options, out);
  EXPECT_TRUE(status.ok()) << status.message();
  return out;
}

// Mean absolute difference of the luma (BT.601 weights) of two RGB24 buffers. Luma, because
// the test pictures' saturated one-pixel details cannot survive 4:2:0 chroma at these tiny
// sizes, even losslessly encoded; the brightness must.
double mean_luma_difference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  EXPECT_EQ(a.size(), b.size());
  double sum = 0;
  size_t pixels = 0;
  for (size_t i = 0; i + 2 < a.size() && i + 2 < b.size(); i += 3, ++pixels) {
    const double ya = 0.299 * a[i] + 0.587 * a[i + 1] + 0.114 * a[i + 2];
    const double yb = 0.299 * b[i] + 0.587 * b[i + 1] + 0.114 * b[i + 2];
    sum += std::abs(ya - yb);
  }
  return pixels == 0 ? 0 : sum / pixels;
}

// Checks the written file against frames [first, first + count) of `source`: same count, each
// pts equal to the source's minus the first one's (to 1 us), pictures close to the source's
// resized ones (in luma), a keyframe exactly every gop frames, no partial file left.
void expect_faithful(const VideoReader& source, int64_t first, int64_t count,
                     const std::string& target, const TranscodeOptions& options,
                     const TranscodeResult& result, double max_difference) {
  ASSERT_TRUE(std::filesystem::exists(target));
  EXPECT_FALSE(std::filesystem::exists(target + ".partial"));
  EXPECT_EQ(result.frames, count);
  EXPECT_EQ(result.bytes, static_cast<int64_t>(std::filesystem::file_size(target)));
  auto written = VideoReader::open(target);
  ASSERT_TRUE(written.ok()) << written.status().message();
  const FrameTable& table = (*written)->frame_table();
  ASSERT_EQ(table.num_frames(), count);
  EXPECT_EQ(table.stream().width, options.width);
  EXPECT_EQ(table.stream().height, options.height);
  const double origin = source.frame_table().pts_seconds(first);
  for (int64_t i = 0; i < count; ++i) {
    const double expected = source.frame_table().pts_seconds(first + i) - origin;
    EXPECT_NEAR(table.pts_seconds(i) - table.pts_seconds(0), expected, 1e-6) << "frame " << i;
    EXPECT_NEAR(result.pts_seconds[i], expected, 1e-6) << "frame " << i;
    EXPECT_EQ(table.is_key()[i], i % options.encoder.gop == 0 ? 1 : 0) << "frame " << i;
  }
  EXPECT_EQ(table.pts_seconds(0), 0.0);
  EXPECT_NEAR(result.duration, table.duration(), 1e-9);
  const auto expected = frames_of(source, first, count, options.height, options.width);
  const auto got = frames_of(**written, 0, count, options.height, options.width);
  const double difference = mean_luma_difference(expected, got);
  EXPECT_LT(difference, max_difference);
}

TEST(Transcode, H264RangeKeepsFramesAndTimes) {
  auto source = open_video("h264_gop30_bframes");  // 160x120, 3 B-frames, GOP 30
  ASSERT_TRUE(source);
  const std::string target = output_path("h264_range.mp4");
  const TranscodeOptions options{.height = 64, .width = 96, .encoder = {.gop = 5, .crf = 18}};
  // A range that starts and ends mid-GOP, across a source keyframe, decoded in several chunks.
  TranscodeOptions chunked = options;
  chunked.chunk_frames = 7;
  auto result = transcode_frames(*source, 17, 40, target, chunked);
  ASSERT_TRUE(result.ok()) << result.status().message();
  expect_faithful(*source, 17, 40, target, options, *result, 3.0);
  auto written = VideoReader::open(target);
  ASSERT_TRUE(written.ok());
  EXPECT_EQ((*written)->frame_table().stream().codec, "h264");
  EXPECT_EQ((*written)->frame_table().stream().video_delay, 0);  // no B-frames
  EXPECT_EQ((*written)->frame_table().stream().color_space, 6);  // AVCOL_SPC_SMPTE170M
  EXPECT_EQ((*written)->frame_table().stream().color_range, 1);  // AVCOL_RANGE_MPEG
}

TEST(Transcode, WithoutFastDecodeTuning) {
  auto source = open_video("h264_gop30_bframes");
  ASSERT_TRUE(source);
  const std::string tuned = output_path("tuned.mp4");
  const std::string plain = output_path("plain.mp4");
  const TranscodeOptions options{.height = 64, .width = 96, .encoder = {.gop = 10}};
  TranscodeOptions untuned = options;
  untuned.encoder.fast_decode = false;
  auto a = transcode_frames(*source, 0, 30, tuned, options);
  auto b = transcode_frames(*source, 0, 30, plain, untuned);
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_TRUE(b.ok()) << b.status().message();
  expect_faithful(*source, 0, 30, plain, untuned, *b, 3.0);
  // CABAC and the deblocking filter make the untuned file the smaller one.
  EXPECT_LT(b->bytes, a->bytes);
}

TEST(Transcode, Av1) {
  auto source = open_video("av1_lerobot");  // 160x120, g=2
  ASSERT_TRUE(source);
  const std::string target = output_path("av1.mp4");
  const TranscodeOptions options{
      .height = 64, .width = 64, .encoder = {.codec = VideoCodec::kAV1, .gop = 8, .preset = "12"}};
  auto result = transcode_frames(*source, 3, 20, target, options);
  ASSERT_TRUE(result.ok()) << result.status().message();
  expect_faithful(*source, 3, 20, target, options, *result, 4.0);
  auto written = VideoReader::open(target);
  ASSERT_TRUE(written.ok());
  EXPECT_EQ((*written)->frame_table().stream().codec, "av1");
}

// SVT-AV1 switches the thread that opens an encoder to SCHED_FIFO at the highest priority when it
// may (as root): every ETL worker that encoded an AV1 unit stayed real-time, and two such
// threads spinning on two cores starved the rest of the process (this binary hung in the next
// test). The writer gives the thread its scheduling back.
TEST(Transcode, Av1LeavesTheCallersSchedulingAsItWas) {
#if defined(__linux__)
  auto source = open_video("av1_lerobot");
  ASSERT_TRUE(source);
  int policy_before = -1;
  sched_param param_before{};
  ASSERT_EQ(pthread_getschedparam(pthread_self(), &policy_before, &param_before), 0);
  const TranscodeOptions options{
      .height = 64, .width = 64, .encoder = {.codec = VideoCodec::kAV1, .gop = 8, .preset = "12"}};
  auto result = transcode_frames(*source, 0, 4, output_path("av1_scheduling.mp4"), options);
  ASSERT_TRUE(result.ok()) << result.status().message();
  int policy_after = -1;
  sched_param param_after{};
  ASSERT_EQ(pthread_getschedparam(pthread_self(), &policy_after, &param_after), 0);
  EXPECT_EQ(policy_after, policy_before) << "SCHED_FIFO is " << SCHED_FIFO;
  EXPECT_EQ(param_after.sched_priority, param_before.sched_priority);
#else
  GTEST_SKIP() << "scheduling policies are Linux's here";
#endif
}

TEST(Transcode, VariableFrameRateKeepsEveryTimestamp) {
  auto source = open_video("h264_vfr");  // MKV, 1 ms time base, 33 ms then 50 ms steps
  ASSERT_TRUE(source);
  const std::string target = output_path("vfr.mp4");
  const TranscodeOptions options{.height = 48, .width = 64, .encoder = {.gop = 4}};
  auto result = transcode_frames(*source, 20, 25, target, options);
  ASSERT_TRUE(result.ok()) << result.status().message();
  expect_faithful(*source, 20, 25, target, options, *result, 5.0);
}

TEST(Transcode, OffsetStartBeginsAtZero) {
  auto source = open_video("h264_mov_offset_start");  // pts start at 1.25 s
  ASSERT_TRUE(source);
  ASSERT_GT(source->frame_table().pts_seconds(0), 1.0);
  const std::string target = output_path("offset.mp4");
  const TranscodeOptions options{.height = 60, .width = 80, .encoder = {.gop = 30}};
  auto result = transcode_frames(*source, 0, source->num_frames(), target, options);
  ASSERT_TRUE(result.ok()) << result.status().message();
  expect_faithful(*source, 0, source->num_frames(), target, options, *result, 5.0);
}

TEST(Transcode, ReplacesAnExistingTarget) {
  auto source = open_video("h264_all_intra");
  ASSERT_TRUE(source);
  const std::string target = output_path("replaced.mp4");
  std::ofstream(target) << "an old file";
  // 32x32: chroma-heavy details blur most here.
  const TranscodeOptions options{.height = 32, .width = 32, .encoder = {.gop = 1}};
  auto result = transcode_frames(*source, 0, 3, target, options);
  ASSERT_TRUE(result.ok()) << result.status().message();
  expect_faithful(*source, 0, 3, target, options, *result, 8.0);
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The ETL's promises (a rerun after a kill equals an uninterrupted run, --ray writes the same
// bytes) need a unit's file to be a function of its frames and options alone. Twelve runs, two
// at a time on their own threads beside two threads burning CPU, each pair after glibc was told
// to fill every block malloc returns or frees with another byte (M_PERTURB): an encoder that
// reads memory nothing wrote gives itself away. x264's AVX-512 functions did (at 144x144 and
// up; 1 unit in 3 of `stoker etl` under load came out as other bytes).
TEST(Transcode, SameBytesWhateverTheHeapHeldAndTheLoad) {
  const TestVideoSpec spec{.name = "etl_noisy_h264",
                           .extension = "mp4",
                           .seconds = 1,
                           .encoder_args = "-c:v libx264 -g 30 -bf 2 -pix_fmt yuv420p",
                           .filter = "noise=alls=12:allf=t"};
  auto path = make_test_video(spec);
  ASSERT_TRUE(path.ok()) << path.status().message();
  const TranscodeOptions options{.height = 144, .width = 144};
  constexpr int kRuns = 12;
  constexpr int kPerturb[kRuns / 2] = {0, 1, 0x55, 0xAA, 0xFE, 0x80};
  std::atomic<bool> stop{false};
  std::vector<std::thread> burners;
  for (int i = 0; i < 2; ++i) {
    burners.emplace_back([&stop] {
      volatile uint64_t x = 0;
      while (!stop.load(std::memory_order_relaxed)) x = x * 6364136223846793005ull + 1;
    });
  }
  std::vector<std::string> files(kRuns);
  std::vector<Status> statuses(kRuns);
  for (int run = 0; run < kRuns; run += 2) {
#if defined(__GLIBC__)
    mallopt(M_PERTURB, kPerturb[run / 2]);
#endif
    std::vector<std::thread> pair;
    for (int k = run; k < run + 2; ++k) {
      pair.emplace_back([&, k] {
        const std::string target = output_path("same_bytes_" + std::to_string(k) + ".mp4");
        auto reader = VideoReader::open(*path);
        if (!reader.ok()) {
          statuses[k] = reader.status();
          return;
        }
        auto result = transcode_frames(**reader, 0, 10, target, options);
        statuses[k] = result.status();
        if (result.ok()) files[k] = file_bytes(target);
      });
    }
    for (std::thread& thread : pair) thread.join();
  }
#if defined(__GLIBC__)
  mallopt(M_PERTURB, 0);
#endif
  stop = true;
  for (std::thread& thread : burners) thread.join();
  for (int k = 0; k < kRuns; ++k) {
    ASSERT_TRUE(statuses[k].ok()) << "run " << k << ": " << statuses[k].message();
    ASSERT_FALSE(files[k].empty());
    EXPECT_TRUE(files[k] == files[0]) << "run " << k << " (heap filled with byte "
                                      << kPerturb[k / 2] << ") wrote other bytes than run 0";
  }
}

TEST(Transcode, BadOptionsFailWithoutWriting) {
  auto source = open_video("h264_all_intra");
  ASSERT_TRUE(source);
  const std::string target = output_path("never.mp4");
  auto expect_invalid = [&](const TranscodeOptions& options, int64_t first, int64_t count,
                            const std::string& says) {
    auto result = transcode_frames(*source, first, count, target, options);
    ASSERT_FALSE(result.ok());
    EXPECT_EQ(result.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(result.status().message().find(says), std::string::npos) << result.status().message();
    EXPECT_NE(result.status().message().find(source->name()), std::string::npos);
  };
  expect_invalid({.height = 63, .width = 64}, 0, 2, "even");
  expect_invalid({.height = 0, .width = 64}, 0, 2, "invalid");
  expect_invalid({.height = 32, .width = 32, .encoder = {.codec = VideoCodec::kAV1}}, 0, 2,
                 "at least 64x64");
  expect_invalid({.height = 32, .width = 32, .encoder = {.gop = 0}}, 0, 2, "gop");
  expect_invalid({.height = 32, .width = 32, .encoder = {.crf = 60}}, 0, 2, "crf");
  expect_invalid({.height = 32, .width = 32}, source->num_frames() - 1, 2, "range");
  expect_invalid({.height = 32, .width = 32}, 0, 0, "range");
  auto preset = transcode_frames(
      *source, 0, 2, target, {.height = 32, .width = 32, .encoder = {.preset = "no-such-preset"}});
  EXPECT_FALSE(preset.ok());
  EXPECT_FALSE(std::filesystem::exists(target));
  EXPECT_FALSE(std::filesystem::exists(target + ".partial"));
}

TEST(Transcode, UndecodableSourceFailsNamingFileAndFrame) {
  TestVideoSpec spec{.name = "etl_truncated_source",
                     .extension = "mp4",
                     .seconds = 2,
                     .encoder_args =
                         "-c:v libx264 -preset veryfast -pix_fmt yuv420p -g 10 -bf 0 "
                         "-movflags +faststart"};
  auto path = make_test_video(spec);
  ASSERT_TRUE(path.ok()) << path.status().message();
  // Keep the index (at the front) but cut away the second half of the media data.
  std::ifstream in(*path, std::ios::binary);
  std::vector<char> bytes(std::istreambuf_iterator<char>(in), {});
  const std::string damaged = output_path("truncated_source.mp4");
  std::ofstream(damaged, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size() / 2));
  auto source = VideoReader::open(damaged);
  ASSERT_TRUE(source.ok()) << source.status().message();

  const std::string target = output_path("from_truncated.mp4");
  auto result = transcode_frames(**source, 0, (*source)->num_frames(), target,
                                 {.height = 32, .width = 32, .chunk_frames = 8});
  ASSERT_FALSE(result.ok());
  const std::string message = result.status().message();
  EXPECT_NE(message.find(damaged), std::string::npos) << message;
  EXPECT_NE(message.find(target), std::string::npos) << message;
  EXPECT_NE(message.find("frame "), std::string::npos) << message;
  EXPECT_FALSE(std::filesystem::exists(target));
  EXPECT_FALSE(std::filesystem::exists(target + ".partial"));
}

}  // namespace
}  // namespace stoker
