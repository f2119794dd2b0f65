#include "stoker/depth_transform.h"

#include <algorithm>
#include <cmath>

namespace stoker {

Status check_depth_camera(const DepthCamera& depth) {
  if (depth.camera.empty()) {
    return Status(StatusCode::kInvalidArgument, "depth camera: the camera name is empty");
  }
  if (depth.metric &&
      !(std::isfinite(depth.scale) && depth.scale > 0 && std::isfinite(depth.offset))) {
    return Status(StatusCode::kInvalidArgument,
                  "depth camera '" + depth.camera + "': metres need a finite positive scale " +
                      "and a finite offset, got scale " + std::to_string(depth.scale) +
                      ", offset " + std::to_string(depth.offset));
  }
  return Status();
}

void flip_depth_in_place(uint16_t* frame, int height, int width) {
  for (int y = 0; y < height; ++y) {
    uint16_t* row = frame + static_cast<size_t>(y) * width;
    std::reverse(row, row + width);
  }
}

void depth_to_metres(const uint16_t* samples, int height, int width, bool flip,
                     const DepthCamera& depth, float* out) {
  for (int y = 0; y < height; ++y) {
    const uint16_t* row = samples + static_cast<size_t>(y) * width;
    float* out_row = out + static_cast<size_t>(y) * width;
    for (int x = 0; x < width; ++x) {
      const uint16_t sample = row[flip ? width - 1 - x : x];
      out_row[x] = static_cast<float>(sample * depth.scale + depth.offset);
    }
  }
}

}  // namespace stoker
