#include "stoker/video_reader.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <thread>

#include "media/testing/sequential_decode.h"
#include "media/testing/test_videos.h"

namespace stoker {
namespace {

using testing::decode_all_frames;
using testing::frame_exact_specs;
using testing::make_test_video;
using testing::TestVideoSpec;

// The reference decode of a file is shared by every test on that file.
const std::vector<std::vector<uint8_t>>& reference_frames(const std::string& path) {
  static std::map<std::string, std::vector<std::vector<uint8_t>>> cache;
  auto it = cache.find(path);
  if (it == cache.end()) {
    auto frames = decode_all_frames(path, OutputOptions{});
    EXPECT_TRUE(frames.ok()) << frames.status().message();
    it = cache
             .emplace(path,
                      frames.ok() ? std::move(frames).value() : std::vector<std::vector<uint8_t>>{})
             .first;
  }
  return it->second;
}

std::unique_ptr<VideoReader> open_reader(const std::string& path, VideoReaderOptions options = {}) {
  auto reader = VideoReader::open(path, std::move(options));
  EXPECT_TRUE(reader.ok()) << reader.status().message();
  return reader.ok() ? std::move(reader).value() : nullptr;
}

// Asserts that get_frames(indices) returns exactly the reference frames, in request order.
void expect_frames(const VideoReader& reader, const std::vector<int64_t>& indices,
                   const std::vector<std::vector<uint8_t>>& reference,
                   DecodeStats* stats = nullptr) {
  const size_t frame_size = reader.frame_bytes({});
  std::vector<uint8_t> out(indices.size() * frame_size, 0xAB);
  Status status = reader.get_frames(indices, {}, out, stats);
  ASSERT_TRUE(status.ok()) << status.message();
  for (size_t k = 0; k < indices.size(); ++k) {
    const auto& want = reference.at(indices[k]);
    ASSERT_TRUE(std::equal(want.begin(), want.end(), out.begin() + k * frame_size))
        << reader.path() << ": frame " << indices[k] << " (request " << k
        << ") differs from the sequential decode";
  }
}

class FrameExact : public ::testing::TestWithParam<TestVideoSpec> {
 protected:
  void SetUp() override {
    auto made = make_test_video(GetParam());
    ASSERT_TRUE(made.ok()) << made.status().message();
    path_ = *made;
    reader_ = open_reader(path_);
    ASSERT_NE(reader_, nullptr);
  }
  std::string path_;
  std::unique_ptr<VideoReader> reader_;
};

TEST_P(FrameExact, TableMatchesTheSequentialDecode) {
  const auto& reference = reference_frames(path_);
  EXPECT_EQ(reader_->num_frames(), static_cast<int64_t>(reference.size()));
  EXPECT_GT(reader_->num_frames(), 0);
  EXPECT_EQ(reader_->frame_table().is_key()[0], 1);
}

TEST_P(FrameExact, EveryIndexAlone) {
  const auto& reference = reference_frames(path_);
  for (int64_t i = 0; i < reader_->num_frames(); ++i) expect_frames(*reader_, {i}, reference);
  // Backwards too: every call must seek back.
  for (int64_t i = reader_->num_frames() - 1; i >= 0; i -= 7) {
    expect_frames(*reader_, {i}, reference);
  }
}

TEST_P(FrameExact, AllIndicesInOneCall) {
  const auto& reference = reference_frames(path_);
  std::vector<int64_t> all(reader_->num_frames());
  for (int64_t i = 0; i < reader_->num_frames(); ++i) all[i] = i;
  expect_frames(*reader_, all, reference);
}

TEST_P(FrameExact, RandomUnsortedSetsWithRepeats) {
  const auto& reference = reference_frames(path_);
  std::mt19937_64 rng(12345);
  const int64_t n = reader_->num_frames();
  for (int trial = 0; trial < 25; ++trial) {
    std::vector<int64_t> indices(1 + rng() % 12);
    for (int64_t& i : indices) i = static_cast<int64_t>(rng() % n);
    indices.push_back(indices.front());  // a repeat
    expect_frames(*reader_, indices, reference);
  }
}

TEST_P(FrameExact, SavedTableReopensWithoutScanning) {
  const auto& reference = reference_frames(path_);
  auto table = FrameTable::deserialize(reader_->frame_table().serialize());
  ASSERT_TRUE(table.ok()) << table.status().message();
  // Another thread has a cold cache: it opens the container without probing, from the table.
  std::thread([&] {
    auto reopened = open_reader(path_, {.frame_table = *table});
    ASSERT_NE(reopened, nullptr);
    DecodeStats stats;
    const int64_t last = reopened->num_frames() - 1;
    expect_frames(*reopened, {last, 0, last / 2}, reference, &stats);
    EXPECT_EQ(stats.containers_opened, 1);
    EXPECT_EQ(stats.decoders_built, 1);
  }).join();
}

TEST_P(FrameExact, TwoDecoderThreads) {
  const auto& reference = reference_frames(path_);
  auto reader = open_reader(path_, {.threads = 2});
  ASSERT_NE(reader, nullptr);
  const int64_t n = reader->num_frames();
  expect_frames(*reader, {n - 1, 0, n / 3, n / 3 + 1, n / 2}, reference);
}

INSTANTIATE_TEST_SUITE_P(Videos, FrameExact, ::testing::ValuesIn(frame_exact_specs()),
                         [](const auto& info) { return info.param.name; });

TestVideoSpec gop30_spec() { return frame_exact_specs().front(); }

TEST(VideoReader, Attributes) {
  auto path = make_test_video(gop30_spec());
  ASSERT_TRUE(path.ok());
  auto reader = open_reader(*path);
  ASSERT_NE(reader, nullptr);
  const FrameTable& table = reader->frame_table();
  EXPECT_EQ(table.stream().codec, "h264");
  EXPECT_EQ(table.stream().width, 160);
  EXPECT_EQ(table.stream().height, 120);
  EXPECT_EQ(reader->num_frames(), 120);
  EXPECT_NEAR(table.fps(), 30.0, 1e-9);
  EXPECT_NEAR(table.duration(), 4.0, 1e-9);
  for (int64_t i = 0; i < 120; ++i) {
    EXPECT_NEAR(table.pts_seconds(i), i / 30.0, 1e-9);
    EXPECT_EQ(table.is_key()[i], i % 30 == 0 ? 1 : 0) << i;
  }
}

TEST(VideoReader, VariableFrameRateTimestamps) {
  auto path = make_test_video(frame_exact_specs()[6]);
  ASSERT_TRUE(path.ok());
  auto reader = open_reader(*path);
  ASSERT_NE(reader, nullptr);
  const FrameTable& table = reader->frame_table();
  EXPECT_NEAR(table.pts_seconds(31) - table.pts_seconds(30), 0.05, 1e-3);
  EXPECT_NEAR(table.pts_seconds(11) - table.pts_seconds(10), 1 / 30.0, 1e-3);
  // Each frame is found at its own time, not at index * average frame period.
  const auto& reference = reference_frames(*path);
  std::vector<double> times = {table.pts_seconds(45), table.pts_seconds(70)};
  std::vector<uint8_t> out(2 * reader->frame_bytes({}));
  ASSERT_TRUE(reader->get_frames_at(times, 1e-4, {}, out).ok());
  EXPECT_TRUE(std::equal(reference[45].begin(), reference[45].end(), out.begin()));
}

TEST(VideoReader, FirstPtsNotZero) {
  auto path = make_test_video(frame_exact_specs()[7]);
  ASSERT_TRUE(path.ok());
  auto reader = open_reader(*path);
  ASSERT_NE(reader, nullptr);
  EXPECT_NEAR(reader->frame_table().pts_seconds(0), 2.5, 1e-3);
}

// The minimal-work contract, checked through the work counters.
TEST(VideoReader, WindowDecodesForwardWithOneSeekAndSkipsUnrequestedFrames) {
  auto path = make_test_video(gop30_spec());
  ASSERT_TRUE(path.ok());
  auto reader = open_reader(*path);
  ASSERT_NE(reader, nullptr);
  const auto& reference = reference_frames(*path);
  // 9 frames spread over 33 inside one GOP plus the next: one seek, then forward only.
  std::vector<int64_t> window;
  for (int64_t k = 0; k < 9; ++k) window.push_back(34 + 4 * k);
  DecodeStats stats;
  expect_frames(*reader, window, reference, &stats);
  EXPECT_EQ(stats.seeks, 1);
  EXPECT_EQ(stats.frames_converted, 9);
  EXPECT_EQ(stats.containers_opened, 0);  // opened by the scan, so warm
  // Exactly the packets from the keyframe to the last needed one go to the decoder (the frames
  // that reordering still holds are flushed out, not waited for), unrequested ones with the
  // non-reference skip on.
  const FrameTable& table = reader->frame_table();
  int64_t last_packet = 0;
  for (int64_t frame : window) last_packet = std::max(last_packet, table.packet_of_frame(frame));
  EXPECT_EQ(stats.packets_decoded, last_packet - table.sync_packet_of_frame(window.front()) + 1);
  EXPECT_EQ(stats.packets_skippable, stats.packets_decoded - 9);
  // Only the non-reference frames were dropped: fewer frames came out than went in.
  EXPECT_LT(stats.frames_received, stats.packets_decoded);
}

TEST(VideoReader, NoSeekWithinTheSameGopOnAWarmFile) {
  // Without B-frames each frame leaves the decoder as soon as its packet is in, so the decoder
  // stays positioned after a call and the next call continues forward when it can.
  TestVideoSpec spec = gop30_spec();
  spec.name = "h264_gop30_no_bframes";
  spec.encoder_args = "-c:v libx264 -preset veryfast -pix_fmt yuv420p -g 30 -bf 0";
  auto path = make_test_video(spec);
  ASSERT_TRUE(path.ok());
  auto reader = open_reader(*path);
  ASSERT_NE(reader, nullptr);
  const auto& reference = reference_frames(*path);
  DecodeStats first, second, third;
  expect_frames(*reader, {31}, reference, &first);
  expect_frames(*reader, {40}, reference, &second);  // same GOP, later: continue forward
  expect_frames(*reader, {75}, reference, &third);   // a later GOP: seek
  EXPECT_EQ(first.seeks, 1);
  EXPECT_EQ(second.seeks, 0);
  EXPECT_EQ(second.packets_decoded, 40 - 31);
  EXPECT_EQ(second.containers_opened + second.decoders_built, 0);
  EXPECT_EQ(third.seeks, 1);
}

TEST(VideoReader, DuplicatesAreDecodedOnce) {
  auto path = make_test_video(gop30_spec());
  ASSERT_TRUE(path.ok());
  auto reader = open_reader(*path);
  ASSERT_NE(reader, nullptr);
  DecodeStats stats;
  expect_frames(*reader, {50, 10, 50, 10, 10}, reference_frames(*path), &stats);
  EXPECT_EQ(stats.frames_converted, 2);
}

TEST(VideoReader, DecoderIsSharedAcrossFilesWithIdenticalParameters) {
  // Two episodes encoded alike: one decoder, flushed between them, never rebuilt.
  TestVideoSpec a = gop30_spec();
  a.name = "episode_a";
  a.seconds = 1;
  TestVideoSpec b = a;
  b.name = "episode_b";
  b.filter = "hflip";
  auto path_a = make_test_video(a);
  auto path_b = make_test_video(b);
  ASSERT_TRUE(path_a.ok() && path_b.ok());
  std::thread([&] {
    auto reader_a = open_reader(*path_a);
    auto reader_b = open_reader(*path_b);
    ASSERT_TRUE(reader_a && reader_b);
    if (reader_a->frame_table().stream().extradata != reader_b->frame_table().stream().extradata) {
      GTEST_SKIP() << "x264 wrote different headers for the two episodes";
    }
    DecodeStats sa, sb, sa2;
    expect_frames(*reader_a, {5}, reference_frames(*path_a), &sa);
    expect_frames(*reader_b, {5}, reference_frames(*path_b), &sb);
    expect_frames(*reader_a, {20}, reference_frames(*path_a), &sa2);
    EXPECT_EQ(sa.decoders_built, 1);
    EXPECT_EQ(sb.decoders_built, 0);
    EXPECT_EQ(sa2.decoders_built, 0);
    EXPECT_EQ(sa2.containers_opened, 0);
  }).join();
}

TEST(VideoReader, ResizeAndLayoutMatchTheReferenceConversion) {
  auto path = make_test_video(gop30_spec());
  ASSERT_TRUE(path.ok());
  auto reader = open_reader(*path);
  ASSERT_NE(reader, nullptr);
  for (Interpolation interpolation : {Interpolation::kBilinear, Interpolation::kArea}) {
    const OutputOptions nhwc{.height = 56, .width = 72, .interpolation = interpolation};
    OutputOptions nchw = nhwc;
    nchw.layout = Layout::kNCHW;
    auto reference = decode_all_frames(*path, nhwc);
    auto planar_reference = decode_all_frames(*path, nchw);
    ASSERT_TRUE(reference.ok() && planar_reference.ok());
    const std::vector<int64_t> indices = {3, 77, 40};
    const size_t frame_size = reader->frame_bytes(nhwc);
    ASSERT_EQ(frame_size, 56u * 72 * 3);
    std::vector<uint8_t> interleaved(indices.size() * frame_size);
    std::vector<uint8_t> planar(indices.size() * frame_size);
    ASSERT_TRUE(reader->get_frames(indices, nhwc, interleaved).ok());
    ASSERT_TRUE(reader->get_frames(indices, nchw, planar).ok());
    for (size_t k = 0; k < indices.size(); ++k) {
      const auto& want = (*reference)[indices[k]];
      ASSERT_TRUE(std::equal(want.begin(), want.end(), interleaved.begin() + k * frame_size));
      const auto& want_planar = (*planar_reference)[indices[k]];
      ASSERT_TRUE(
          std::equal(want_planar.begin(), want_planar.end(), planar.begin() + k * frame_size));
      // Planar output is the same picture, up to swscale's rounding in its planar path.
      for (size_t pixel = 0; pixel < 56u * 72; ++pixel) {
        for (size_t c = 0; c < 3; ++c) {
          ASSERT_NEAR(planar[k * frame_size + c * 56 * 72 + pixel], want[pixel * 3 + c], 3);
        }
      }
    }
  }
}

TEST(VideoReader, ConcurrentCallsFromManyThreads) {
  auto path = make_test_video(gop30_spec());
  ASSERT_TRUE(path.ok());
  auto reader = open_reader(*path);
  ASSERT_NE(reader, nullptr);
  const auto& reference = reference_frames(*path);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      for (int call = 0; call < 10; ++call) {
        expect_frames(*reader,
                      {static_cast<int64_t>(rng() % 120), static_cast<int64_t>(rng() % 120)},
                      reference);
      }
    });
  }
  for (auto& thread : threads) thread.join();
}

}  // namespace
}  // namespace stoker
