// Depth cameras: what happens to a depth map's 16-bit samples (decoded with
// PixelFormat::kGray16, see video_reader.h) on their way into a batch.
//
// A depth camera takes the same geometry as a colour camera of the same ImageTransform: the
// same resize and crop sizes, the same random crops and flips drawn from (seed, epoch, sample,
// camera); resizing takes the nearest source pixel, so every output value is one the sensor
// stored. The transform's dtype, normalization and interpolation do not apply: a depth camera
// comes out as its stored samples (uint16), or in metres (float32), one channel.
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <string>

#include "stoker/dtype.h"
#include "stoker/status.h"

namespace stoker {

/// One depth camera of a loader, and how its samples come out.
struct DepthCamera {
  /// The camera's name in the index.
  std::string camera;
  /// false (default): uint16, each sample as stored. true: float32 metres,
  /// sample * scale + offset (computed in double, rounded once to float).
  bool metric = false;
  /// Metres per stored unit (e.g. 0.001 for millimetres) and metres added. Default: 1 and 0.
  double scale = 1.0;
  double offset = 0.0;

  /// kUint16, or kFloat32 when metric.
  DType dtype() const { return metric ? DType::kFloat32 : DType::kUint16; }
};

/// Errors (kInvalidArgument, naming the camera): an empty name, or a metric output whose scale
/// is not finite and positive or whose offset is not finite.
Status check_depth_camera(const DepthCamera& depth);

/// Mirrors a frame of height x width samples left to right, in place.
void flip_depth_in_place(uint16_t* frame, int height, int width);

/// Writes each of height x width `samples` (mirrored left to right when `flip`) as float32
/// sample * depth.scale + depth.offset at `out`. REQUIRES: depth.metric.
void depth_to_metres(const uint16_t* samples, int height, int width, bool flip,
                     const DepthCamera& depth, float* out);

}  // namespace stoker
