// Depth cameras: what happens to a depth map's 16-bit samples (decoded with
// PixelFormat::kGray16, see video_reader.h) on their way into a batch.
//
// A depth camera takes the same geometry as a colour camera of the same ImageTransform: the
// same resize and crop sizes, the same random crops and flips drawn from (seed, epoch, sample,
// camera); resizing takes the nearest source pixel, so every output value is one the sensor
// stored. The transform's dtype, normalization and interpolation do not apply: a depth camera
// comes out as its stored samples (uint16), or as distances (float32), one channel.
//
// Distances come from the samples through the camera's coding: stoker's affine one (metres =
// sample * scale + offset), or the 12-bit quantizers LeRobot 0.6 records depth with (linear or
// logarithmic between depth_min and depth_max). A sample's distance depends on the sample alone,
// so a loader computes every sample's once (depth_value_table) and each pixel is one lookup.
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "stoker/dtype.h"
#include "stoker/status.h"

namespace stoker {

/// How a depth camera's stored samples map to metres.
enum class DepthCoding {
  /// metres = sample * scale + offset, computed in double and rounded once to float (stoker's
  /// own `video.depth_scale` / `video.depth_offset`).
  kAffine,
  /// LeRobot 0.6's linear quantizer: metres = clamp(depth_min + q * (depth_max - depth_min) /
  /// code_max, depth_min, depth_max).
  kLeRobotLinear,
  /// LeRobot 0.6's logarithmic quantizer (its default): with a = log(depth_min + shift) and
  /// b = log(depth_max + shift), metres = clamp(exp(a + q * (b - a) / code_max) - shift,
  /// depth_min, depth_max).
  kLeRobotLog,
};

/// The unit of a metric depth camera's output.
enum class DepthUnit { kMetres, kMillimetres };

/// One depth camera of a loader, and how its samples come out.
struct DepthCamera {
  /// The camera's name in the index.
  std::string camera;
  /// false (default): uint16, each sample as stored. true: float32 distances in `unit`.
  bool metric = false;
  /// kAffine: metres per stored unit (e.g. 0.001 for millimetres) and metres added. Default: 1
  /// and 0.
  double scale = 1.0;
  double offset = 0.0;
  /// Default: kAffine.
  DepthCoding coding = DepthCoding::kAffine;
  /// The LeRobot quantizers' range and shift, in metres, and their largest code. Defaults:
  /// LeRobot 0.6.1's (0.01, 10, 3.5; 12-bit codes, 4095).
  double depth_min = 0.01;
  double depth_max = 10.0;
  double shift = 3.5;
  int code_max = 4095;
  /// Default: metres. Millimetres from a LeRobot quantizer are rounded to whole millimetres
  /// (half to even) and kept within [0, 65535], as LeRobot 0.6.1 returns them.
  DepthUnit unit = DepthUnit::kMetres;

  /// kUint16, or kFloat32 when metric.
  DType dtype() const { return metric ? DType::kFloat32 : DType::kUint16; }
};

/// Errors (kInvalidArgument, naming the camera): an empty name; a metric output whose affine
/// scale is not finite and positive or whose offset is not finite; a LeRobot quantizer whose
/// range is not finite with depth_min < depth_max, whose log needs depth_min + shift > 0, or
/// whose code_max is not in [1, 65535].
Status check_depth_camera(const DepthCamera& depth);

/// The value of every possible stored sample (65536 entries, float32) of a metric camera, in
/// its unit: what depth_to_values looks up. The LeRobot quantizers are evaluated in float32,
/// step for step as LeRobot 0.6.1 does on a torch tensor (its exp may differ by an ulp).
/// REQUIRES: depth.metric and check_depth_camera(depth) is OK.
std::vector<float> depth_value_table(const DepthCamera& depth);

/// Mirrors a frame of height x width samples left to right, in place.
void flip_depth_in_place(uint16_t* frame, int height, int width);

/// Writes each of height x width `samples` (mirrored left to right when `flip`) as
/// table[sample] at `out`. `table`: depth_value_table's 65536 entries.
void depth_to_values(const uint16_t* samples, int height, int width, bool flip, const float* table,
                     float* out);

}  // namespace stoker
