#include "stoker/image_transform.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <set>

namespace stoker {
namespace {

std::shared_ptr<const ImageTransform> make(const TransformOptions& options) {
  auto transform = ImageTransform::create(options);
  EXPECT_TRUE(transform.ok()) << transform.status().message();
  return transform.ok() ? *transform : nullptr;
}

// A 2 x 3 RGB frame with distinct bytes, in the given layout.
std::vector<uint8_t> frame(Layout layout) {
  std::vector<uint8_t> pixels(18);
  for (int y = 0; y < 2; ++y) {
    for (int x = 0; x < 3; ++x) {
      for (int c = 0; c < 3; ++c) {
        const uint8_t value = static_cast<uint8_t>(100 * c + 10 * y + x);
        if (layout == Layout::kNCHW) {
          pixels[(c * 2 + y) * 3 + x] = value;
        } else {
          pixels[(y * 3 + x) * 3 + c] = value;
        }
      }
    }
  }
  return pixels;
}

TEST(ImageTransform, FloatOutputsScaleNormalizeAndFlip) {
  for (Layout layout : {Layout::kNCHW, Layout::kNHWC}) {
    auto transform = make({.normalize = true,
                           .mean = {0.5f, 0.25f, 0.f},
                           .std = {0.5f, 2.f, 1.f},
                           .dtype = DType::kFloat32,
                           .layout = layout});
    const std::vector<uint8_t> in = frame(layout);
    std::vector<float> out(18);
    transform->finish(in.data(), 2, 3, /*flip=*/true, reinterpret_cast<uint8_t*>(out.data()));
    const float mean[3] = {0.5f, 0.25f, 0.f}, std[3] = {0.5f, 2.f, 1.f};
    for (int y = 0; y < 2; ++y) {
      for (int x = 0; x < 3; ++x) {
        for (int c = 0; c < 3; ++c) {
          const int source = 100 * c + 10 * y + (2 - x);  // flipped
          const float expected = (source / 255.f - mean[c]) / std[c];
          const size_t at = layout == Layout::kNCHW ? (c * 2 + y) * 3 + x : (y * 3 + x) * 3 + c;
          EXPECT_FLOAT_EQ(out[at], expected) << y << " " << x << " " << c;
        }
      }
    }
  }
}

TEST(ImageTransform, HalfAndBfloat16RoundToNearest) {
  auto half = make({.dtype = DType::kFloat16});
  auto bf16 = make({.dtype = DType::kBFloat16});
  const std::vector<uint8_t> in = frame(Layout::kNCHW);
  std::vector<uint16_t> h(18), b(18);
  half->finish(in.data(), 2, 3, false, reinterpret_cast<uint8_t*>(h.data()));
  bf16->finish(in.data(), 2, 3, false, reinterpret_cast<uint8_t*>(b.data()));
  for (size_t k = 0; k < in.size(); ++k) {
    const float exact = in[k] / 255.f;
    const _Float16 as_half = static_cast<_Float16>(exact);
    uint16_t half_bits;
    std::memcpy(&half_bits, &as_half, 2);
    EXPECT_EQ(h[k], half_bits);
    uint32_t widened = static_cast<uint32_t>(b[k]) << 16;
    float back;
    std::memcpy(&back, &widened, 4);
    EXPECT_NEAR(back, exact, exact / 256) << k;  // 8 bits of mantissa
  }
}

TEST(ImageTransform, FlipInPlaceMirrorsBothLayouts) {
  for (Layout layout : {Layout::kNCHW, Layout::kNHWC}) {
    auto transform = make({.layout = layout});
    std::vector<uint8_t> pixels = frame(layout);
    transform->flip_in_place(pixels.data(), 2, 3);
    for (int y = 0; y < 2; ++y) {
      for (int x = 0; x < 3; ++x) {
        for (int c = 0; c < 3; ++c) {
          const size_t at = layout == Layout::kNCHW ? (c * 2 + y) * 3 + x : (y * 3 + x) * 3 + c;
          EXPECT_EQ(pixels[at], 100 * c + 10 * y + (2 - x));
        }
      }
    }
  }
}

TEST(ImageTransform, CenterCropOfTheResizedFrameIsASourceRegion) {
  auto transform = make({.resize_height = 256,
                         .resize_width = 256,
                         .crop = CropMode::kCenter,
                         .crop_height = 224,
                         .crop_width = 224});
  EXPECT_EQ(transform->output_size(480, 640), std::make_pair(224, 224));
  auto geometry = transform->geometry(480, 640, 0, 0, 7, 0);
  ASSERT_TRUE(geometry.ok());
  EXPECT_EQ(geometry->source, (CropRect{.x = 40, .y = 30, .width = 560, .height = 420}));
  EXPECT_FALSE(geometry->flip);
  // Without a resize, the crop is taken from the source and must fit it.
  auto direct = make({.crop = CropMode::kCenter, .crop_height = 100, .crop_width = 100});
  EXPECT_EQ(direct->geometry(480, 640, 0, 0, 7, 0)->source,
            (CropRect{.x = 270, .y = 190, .width = 100, .height = 100}));
  EXPECT_FALSE(direct->geometry(90, 640, 0, 0, 7, 0).ok());
}

TEST(ImageTransform, RandomDrawsAreAFunctionOfSeedEpochSampleAndCamera) {
  auto transform = make({.crop = CropMode::kRandomResized,
                         .crop_height = 64,
                         .crop_width = 64,
                         .hflip_probability = 0.5});
  std::set<std::tuple<int, int, int, int>> distinct;
  int flips = 0;
  for (uint64_t id = 0; id < 400; ++id) {
    auto a = transform->geometry(120, 160, 5, 1, id, 0);
    auto again = transform->geometry(120, 160, 5, 1, id, 0);
    ASSERT_TRUE(a.ok() && again.ok());
    EXPECT_EQ(a->source, again->source);
    EXPECT_EQ(a->flip, again->flip);
    const CropRect& r = a->source;
    EXPECT_GE(r.x, 0);
    EXPECT_GE(r.y, 0);
    EXPECT_LE(r.x + r.width, 160);
    EXPECT_LE(r.y + r.height, 120);
    const double area = double(r.width) * r.height / (160.0 * 120.0);
    EXPECT_GE(area, 0.08 * 0.9);
    const double ratio = double(r.width) / r.height;
    EXPECT_GE(ratio, 0.75 * 0.9);
    EXPECT_LE(ratio, 4.0 / 3.0 * 1.1);
    distinct.insert({r.x, r.y, r.width, r.height});
    flips += a->flip ? 1 : 0;
  }
  EXPECT_GT(distinct.size(), 350u);
  EXPECT_GT(flips, 150);
  EXPECT_LT(flips, 250);
  // Another camera, epoch or seed draws differently.
  auto base = transform->geometry(120, 160, 5, 1, 3, 0)->source;
  EXPECT_NE(transform->geometry(120, 160, 5, 1, 3, 1)->source, base);
  EXPECT_NE(transform->geometry(120, 160, 5, 2, 3, 0)->source, base);
  EXPECT_NE(transform->geometry(120, 160, 6, 1, 3, 0)->source, base);
}

TEST(ImageTransform, RejectsBadOptions) {
  const TransformOptions bad[] = {
      {.resize_height = 10},
      {.crop = CropMode::kCenter},
      {.resize_height = 10,
       .resize_width = 10,
       .crop = CropMode::kCenter,
       .crop_height = 20,
       .crop_width = 5},
      {.resize_height = 10,
       .resize_width = 10,
       .crop = CropMode::kRandomResized,
       .crop_height = 5,
       .crop_width = 5},
      {.crop = CropMode::kRandomResized, .crop_height = 5, .crop_width = 5, .scale_min = 0},
      {.crop = CropMode::kRandomResized,
       .crop_height = 5,
       .crop_width = 5,
       .ratio_min = 2,
       .ratio_max = 1},
      {.hflip_probability = 1.5},
      {.normalize = true},
      {.normalize = true, .std = {1.f, 0.f, 1.f}, .dtype = DType::kFloat32},
      {.normalize = true, .mean = {NAN, 0.f, 0.f}, .dtype = DType::kFloat32},
  };
  for (const TransformOptions& options : bad) {
    auto transform = ImageTransform::create(options);
    EXPECT_FALSE(transform.ok());
    EXPECT_EQ(transform.status().code(), StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace stoker
