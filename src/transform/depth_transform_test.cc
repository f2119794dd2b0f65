#include "stoker/depth_transform.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <utility>

namespace stoker {
namespace {

// LeRobot 0.6.1's dequantizer in double (lerobot.datasets.depth_utils.dequantize_depth), to
// which the float32 table is compared.
double lerobot_metres(int code, bool log, double low, double high, double shift) {
  if (!log) return std::clamp(low + code * (high - low) / 4095, low, high);
  const double a = std::log(low + shift);
  const double b = std::log(high + shift);
  return std::clamp(std::exp(a + code * (b - a) / 4095) - shift, low, high);
}

TEST(DepthTransform, AffineMetresAreComputedInDoubleAndRoundedOnce) {
  const DepthCamera camera{.camera = "d", .metric = true, .scale = 0.001, .offset = 0.5};
  ASSERT_TRUE(check_depth_camera(camera).ok());
  const std::vector<float> table = depth_value_table(camera);
  ASSERT_EQ(table.size(), 65536u);
  for (int sample : {0, 1, 777, 4095, 65535}) {
    EXPECT_EQ(table[sample], static_cast<float>(sample * 0.001 + 0.5)) << sample;
  }
  DepthCamera millimetres = camera;
  millimetres.unit = DepthUnit::kMillimetres;
  EXPECT_EQ(depth_value_table(millimetres)[777], static_cast<float>((0.777 + 0.5) * 1000.0));
}

TEST(DepthTransform, LeRobotQuantizersGiveItsMetresAndWholeMillimetres) {
  for (bool log : {true, false}) {
    DepthCamera camera{.camera = "d",
                       .metric = true,
                       .coding = log ? DepthCoding::kLeRobotLog : DepthCoding::kLeRobotLinear,
                       .depth_min = 0.2,
                       .depth_max = 6.0,
                       .shift = 1.5};
    ASSERT_TRUE(check_depth_camera(camera).ok());
    const std::vector<float> metres = depth_value_table(camera);
    camera.unit = DepthUnit::kMillimetres;
    const std::vector<float> millimetres = depth_value_table(camera);
    float previous = 0;
    for (int code = 0; code <= 4095; ++code) {
      const double want = lerobot_metres(code, log, 0.2, 6.0, 1.5);
      ASSERT_NEAR(metres[code], want, 2e-6) << code << (log ? " log" : " linear");
      ASSERT_GE(metres[code], previous) << code;  // monotonic
      previous = metres[code];
      ASSERT_EQ(millimetres[code], std::nearbyint(metres[code] * 1000.0f)) << code;
      ASSERT_NEAR(millimetres[code], want * 1000.0, 0.5 + 2e-3) << code;
    }
    EXPECT_FLOAT_EQ(metres[0], 0.2f);
    EXPECT_NEAR(metres[4095], 6.0f, 2e-6);
    // Codes past the quantizer's largest are clamped to its range, as LeRobot clamps them.
    EXPECT_EQ(metres[65535], 6.0f);
  }
}

TEST(DepthTransform, LookupsMirrorWhenFlipped) {
  const DepthCamera camera{.camera = "d", .metric = true, .coding = DepthCoding::kLeRobotLog};
  const std::vector<float> table = depth_value_table(camera);
  const uint16_t samples[6] = {0, 100, 4095, 7, 8, 9};
  float out[6];
  depth_to_values(samples, 2, 3, /*flip=*/true, table.data(), out);
  EXPECT_EQ(out[0], table[4095]);
  EXPECT_EQ(out[2], table[0]);
  EXPECT_EQ(out[3], table[9]);
  depth_to_values(samples, 2, 3, /*flip=*/false, table.data(), out);
  EXPECT_EQ(out[1], table[100]);
}

TEST(DepthTransform, BadCodingsAreRefusedNamingTheCamera) {
  for (const auto& [camera, why] :
       {std::pair{DepthCamera{.camera = "wrist", .metric = true, .scale = 0}, "scale"},
        std::pair{DepthCamera{.camera = "wrist",
        .metric = true,
        .coding = DepthCoding::kLeRobotLinear,
        .depth_min = 2,
        .depth_max = 1},
                  "depth_min < depth_max"},
        std::pair{DepthCamera{.camera = "wrist",
        .metric = true,
        .coding = DepthCoding::kLeRobotLog,
        .depth_min = 0.1,
        .shift = -0.5},
                  "depth_min + shift > 0"},
        std::pair{DepthCamera{.camera = "wrist",
        .metric = true,
        .coding = DepthCoding::kLeRobotLog,
        .code_max = 0},
                  "code_max"}}) {
    const Status status = check_depth_camera(camera);
    ASSERT_FALSE(status.ok()) << why;
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(status.message().find("'wrist'"), std::string::npos) << status.message();
    EXPECT_NE(status.message().find(why), std::string::npos) << status.message();
  }
}

}  // namespace
}  // namespace stoker
