#include "stoker/depth_transform.h"

#include <algorithm>
#include <cmath>

namespace stoker {

namespace {

constexpr size_t kSamples = 65536;  // every uint16 value

Status invalid(const DepthCamera& depth, const std::string& why) {
  return Status(StatusCode::kInvalidArgument, "depth camera '" + depth.camera + "': " + why);
}

// LeRobot 0.6.1's dequantizer (lerobot.datasets.depth_utils.dequantize_depth, torch path):
// the scale and offset in double, then per sample in float32: q * scale + offset, exp and
// minus shift (log), clamp to the range; millimetres: * 1000, rounded half to even, clamped
// to uint16's range.
float lerobot_value(const DepthCamera& depth, int code) {
  const bool log = depth.coding == DepthCoding::kLeRobotLog;
  const double low = log ? std::log(depth.depth_min + depth.shift) : depth.depth_min;
  const double high = log ? std::log(depth.depth_max + depth.shift) : depth.depth_max;
  const float scale = static_cast<float>((high - low) / depth.code_max);
  float value = static_cast<float>(code) * scale + static_cast<float>(low);
  if (log) value = std::exp(value) - static_cast<float>(depth.shift);
  value =
      std::clamp(value, static_cast<float>(depth.depth_min), static_cast<float>(depth.depth_max));
  if (depth.unit == DepthUnit::kMillimetres) {
    value = std::clamp(std::nearbyint(value * 1000.0f), 0.0f, 65535.0f);
  }
  return value;
}

}  // namespace

Status check_depth_camera(const DepthCamera& depth) {
  if (depth.camera.empty()) {
    return Status(StatusCode::kInvalidArgument, "depth camera: the camera name is empty");
  }
  if (!depth.metric) return Status();
  if (depth.coding == DepthCoding::kAffine) {
    if (!(std::isfinite(depth.scale) && depth.scale > 0 && std::isfinite(depth.offset))) {
      return invalid(depth, "metres need a finite positive scale and a finite offset, got scale " +
                                std::to_string(depth.scale) + ", offset " +
                                std::to_string(depth.offset));
    }
    return Status();
  }
  if (!(std::isfinite(depth.depth_min) && std::isfinite(depth.depth_max) &&
        depth.depth_min < depth.depth_max)) {
    return invalid(depth, "the quantizer needs finite depth_min < depth_max, got " +
                              std::to_string(depth.depth_min) + " and " +
                              std::to_string(depth.depth_max));
  }
  if (depth.coding == DepthCoding::kLeRobotLog &&
      !(std::isfinite(depth.shift) && depth.depth_min + depth.shift > 0)) {
    return invalid(depth, "the logarithmic quantizer needs depth_min + shift > 0, got " +
                              std::to_string(depth.depth_min) + " + " +
                              std::to_string(depth.shift));
  }
  if (depth.code_max < 1 || depth.code_max > 65535) {
    return invalid(depth, "code_max must be in [1, 65535], got " + std::to_string(depth.code_max));
  }
  return Status();
}

std::vector<float> depth_value_table(const DepthCamera& depth) {
  std::vector<float> table(kSamples);
  for (size_t sample = 0; sample < kSamples; ++sample) {
    if (depth.coding == DepthCoding::kAffine) {
      double metres = static_cast<double>(sample) * depth.scale + depth.offset;
      if (depth.unit == DepthUnit::kMillimetres) metres *= 1000.0;
      table[sample] = static_cast<float>(metres);
    } else {
      table[sample] = lerobot_value(depth, static_cast<int>(sample));
    }
  }
  return table;
}

void flip_depth_in_place(uint16_t* frame, int height, int width) {
  for (int y = 0; y < height; ++y) {
    uint16_t* row = frame + static_cast<size_t>(y) * width;
    std::reverse(row, row + width);
  }
}

void depth_to_values(const uint16_t* samples, int height, int width, bool flip, const float* table,
                     float* out) {
  for (int y = 0; y < height; ++y) {
    const uint16_t* row = samples + static_cast<size_t>(y) * width;
    float* out_row = out + static_cast<size_t>(y) * width;
    if (flip) {
      for (int x = 0; x < width; ++x) out_row[x] = table[row[width - 1 - x]];
    } else {
      for (int x = 0; x < width; ++x) out_row[x] = table[row[x]];
    }
  }
}

}  // namespace stoker
