// Depth maps (PixelFormat::kGray16): single-channel 10- to 16-bit video read as its stored
// samples, frame-exact against a full sequential decode, resized by nearest neighbour.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "media/testing/sequential_decode.h"
#include "media/testing/test_videos.h"
#include "stoker/video_reader.h"

namespace stoker {
namespace {

using testing::decode_all_frames;
using testing::make_test_video;
using testing::TestVideoSpec;

constexpr OutputOptions kGray16{.pixel_format = PixelFormat::kGray16};

std::vector<TestVideoSpec> depth_specs() {
  return {
      {.name = "depth_ffv1_gray16le",
       .extension = "mkv",
       .width = 64,
       .height = 48,
       .seconds = 1,
       .encoder_args = "-c:v ffv1 -pix_fmt gray16le -g 10"},
      {.name = "depth_ffv1_gray12le",
       .extension = "mkv",
       .width = 64,
       .height = 48,
       .seconds = 1,
       .encoder_args = "-c:v ffv1 -pix_fmt gray12le -g 10"},
      {.name = "depth_x265_gray12le_bframes",
       .extension = "mp4",
       .width = 64,
       .height = 48,
       .seconds = 2,
       .encoder_args = "-c:v libx265 -preset veryfast -pix_fmt gray12le -tag:v hvc1 "
                       "-x265-params log-level=error:keyint=15:min-keyint=15:bframes=3"},
  };
}

std::vector<uint16_t> words(const std::vector<uint8_t>& bytes) {
  std::vector<uint16_t> out(bytes.size() / 2);
  std::memcpy(out.data(), bytes.data(), out.size() * 2);
  return out;
}

class DepthFrameExact : public ::testing::TestWithParam<TestVideoSpec> {
 protected:
  void SetUp() override {
    auto made = make_test_video(GetParam());
    ASSERT_TRUE(made.ok()) << made.status().message();
    auto reader = VideoReader::open(*made);
    ASSERT_TRUE(reader.ok()) << reader.status().message();
    reader_ = std::move(reader).value();
    auto frames = decode_all_frames(*made, kGray16);
    ASSERT_TRUE(frames.ok()) << frames.status().message();
    reference_ = std::move(frames).value();
    ASSERT_EQ(static_cast<int64_t>(reference_.size()), reader_->num_frames());
  }

  // get_frames(indices) in gray16 equals the reference frames, in request order.
  void expect_frames(const std::vector<int64_t>& indices) {
    const size_t frame_size = reader_->frame_bytes(kGray16);
    ASSERT_EQ(frame_size, 64u * 48u * 2u);
    std::vector<uint8_t> out(indices.size() * frame_size, 0xAB);
    Status status = reader_->get_frames(indices, kGray16, out);
    ASSERT_TRUE(status.ok()) << status.message();
    for (size_t k = 0; k < indices.size(); ++k) {
      ASSERT_TRUE(std::equal(reference_[indices[k]].begin(), reference_[indices[k]].end(),
                             out.begin() + k * frame_size))
          << reader_->name() << ": frame " << indices[k] << " differs from the sequential decode";
    }
  }

  std::unique_ptr<VideoReader> reader_;
  std::vector<std::vector<uint8_t>> reference_;
};

TEST_P(DepthFrameExact, EveryIndexAloneAndAllAtOnce) {
  for (int64_t i = 0; i < reader_->num_frames(); ++i) expect_frames({i});
  for (int64_t i = reader_->num_frames() - 1; i >= 0; i -= 5) expect_frames({i});
  std::vector<int64_t> all(reader_->num_frames());
  for (int64_t i = 0; i < reader_->num_frames(); ++i) all[i] = i;
  expect_frames(all);
}

TEST_P(DepthFrameExact, RandomUnsortedSetsWithRepeats) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 15; ++trial) {
    std::vector<int64_t> indices(1 + rng() % 8);
    for (int64_t& i : indices) i = static_cast<int64_t>(rng() % reader_->num_frames());
    indices.push_back(indices.front());
    expect_frames(indices);
  }
}

TEST_P(DepthFrameExact, SamplesKeepTheirStoredRange) {
  // Not rescaled: 12-bit streams stay in [0, 4095], 16-bit ones reach above it. Either way the
  // frames use more than 8 bits.
  const bool twelve = GetParam().name.find("gray12") != std::string::npos;
  uint16_t high = 0;
  for (const auto& frame : reference_) {
    for (uint16_t v : words(frame)) {
      high = std::max(high, v);
    }
  }
  EXPECT_GT(high, 255);
  if (twelve) {
    EXPECT_LE(high, 4095);
  } else {
    EXPECT_GT(high, 4095);
  }
}

TEST_P(DepthFrameExact, ResizeAndCropTakeTheNearestStoredSample) {
  const std::vector<uint16_t> full = words(reference_[7]);
  const int W = 64;
  const CropRect crop{.x = 5, .y = 3, .width = 37, .height = 29};
  for (const auto& [h, w, region] :
       {std::tuple{20, 30, CropRect{}}, std::tuple{100, 90, CropRect{}}, std::tuple{16, 16, crop},
        std::tuple{29, 37, crop}}) {
    const OutputOptions options{.height = h, .width = w, .pixel_format = PixelFormat::kGray16};
    std::vector<uint16_t> out(static_cast<size_t>(h) * w);
    const FrameRequest request{
        .frame = 7, .crop = region, .out = reinterpret_cast<uint8_t*>(out.data())};
    Status status = reader_->get_frames(std::span(&request, 1), options);
    ASSERT_TRUE(status.ok()) << status.message();
    const int x0 = region.empty() ? 0 : region.x, y0 = region.empty() ? 0 : region.y;
    const int rw = region.empty() ? 64 : region.width, rh = region.empty() ? 48 : region.height;
    for (int y = 0; y < h; ++y) {
      for (int x = 0; x < w; ++x) {
        const int sy = y0 + (2 * y + 1) * rh / (2 * h);
        const int sx = x0 + (2 * x + 1) * rw / (2 * w);
        ASSERT_EQ(out[y * w + x], full[sy * W + sx]) << h << "x" << w << " at " << x << "," << y;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Videos, DepthFrameExact, ::testing::ValuesIn(depth_specs()),
                         [](const auto& info) { return info.param.name; });

TEST(DepthFrames, AnRgbStreamIsRefusedNamingItsPixelFormat) {
  auto made = make_test_video({.name = "depth_refused_gbrp",
                               .extension = "mkv",
                               .width = 32,
                               .height = 24,
                               .seconds = 0.2,
                               .encoder_args = "-c:v ffv1 -pix_fmt gbrp"});
  ASSERT_TRUE(made.ok()) << made.status().message();
  auto reader = VideoReader::open(*made);
  ASSERT_TRUE(reader.ok());
  std::vector<uint8_t> out((*reader)->frame_bytes(kGray16));
  const std::vector<int64_t> first = {0};
  Status status = (*reader)->get_frames(first, kGray16, out);
  EXPECT_EQ(status.code(), StatusCode::kUnsupported);
  EXPECT_NE(status.message().find("gbrp"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find(*made), std::string::npos) << status.message();
}

TEST(DepthFrames, EightBitGrayIsWidened) {
  auto made = make_test_video({.name = "depth_gray8",
                               .extension = "mkv",
                               .width = 32,
                               .height = 24,
                               .seconds = 0.2,
                               .encoder_args = "-c:v ffv1 -pix_fmt gray"});
  ASSERT_TRUE(made.ok()) << made.status().message();
  auto reader = VideoReader::open(*made);
  ASSERT_TRUE(reader.ok());
  std::vector<uint8_t> wide((*reader)->frame_bytes(kGray16));
  const std::vector<int64_t> first = {0};
  ASSERT_TRUE((*reader)->get_frames(first, kGray16, wide).ok());
  uint16_t high = 0;
  for (uint16_t v : words(wide)) high = std::max(high, v);
  EXPECT_LE(high, 255);
  EXPECT_GT(high, 0);
}

}  // namespace
}  // namespace stoker
