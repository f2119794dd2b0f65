// ImageTransform: what happens to a decoded frame on its way into a batch, after frame
// selection: crop and resize (fused into the colour conversion, see VideoReader's
// FrameRequest), horizontal flip, scaling to [0, 1], normalization and the output dtype.
//
// The operations run in one fixed order, as a torchvision pipeline would write them:
//   resize -> center crop            (or: random resized crop of the source)
//   -> horizontal flip -> to float in [0, 1] -> (x - mean) / std -> dtype, in `layout`.
// Crop and resize become one source rectangle and one output size, so the decoder's
// conversion writes the final pixels directly; a uint8 output is then only flipped in place.
// Float outputs go through a 256-entry table per channel (the input is 8-bit), so
// normalization and the dtype conversion are one lookup per value.
//
// Random parameters (the crop, the flip) are drawn from the counter-based RNG keyed by
// (seed, epoch, sample id, camera): the same sample gets the same parameters whatever thread
// transforms it. All frames of one camera in one sample share them, so a clip stays coherent.
//
// Thread-safety: an ImageTransform is immutable after create(); every method may run on any
// number of threads at once.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "stoker/dtype.h"
#include "stoker/status.h"
#include "stoker/video_reader.h"

namespace stoker {

enum class CropMode {
  kNone,
  /// The centre crop_height x crop_width of the resized frame (or of the source frame when
  /// there is no resize), as torchvision's Resize then CenterCrop.
  kCenter,
  /// A random region of the source frame, of area scale x the frame's and aspect ratio in
  /// [ratio_min, ratio_max], resized to crop_height x crop_width, as torchvision's
  /// RandomResizedCrop (10 tries, then a centre crop of the clamped ratio).
  kRandomResized,
};

struct TransformOptions {
  /// Resize target. Default 0 x 0: the source size. Not used with kRandomResized.
  int resize_height = 0;
  int resize_width = 0;
  CropMode crop = CropMode::kNone;
  /// The crop's output size. REQUIRES: > 0 when crop != kNone.
  int crop_height = 0;
  int crop_width = 0;
  /// kRandomResized only: bounds of the area fraction and of the aspect ratio (width / height).
  double scale_min = 0.08;
  double scale_max = 1.0;
  double ratio_min = 3.0 / 4.0;
  double ratio_max = 4.0 / 3.0;
  /// Probability of a horizontal flip, per sample and camera. Default: 0.
  double hflip_probability = 0.0;
  /// Float dtypes only: per channel (R, G, B) of the [0, 1] values. Default: none.
  bool normalize = false;
  std::array<float, 3> mean = {0.f, 0.f, 0.f};
  std::array<float, 3> std = {1.f, 1.f, 1.f};
  /// The element type of the output: kUint8, or kFloat16, kBFloat16, kFloat32 holding values
  /// scaled to [0, 1] (then normalized, when asked). Default: kUint8.
  DType dtype = DType::kUint8;
  /// kNCHW writes [3, H, W] per frame (LeRobot's), kNHWC [H, W, 3]. Default: kNCHW.
  Layout layout = Layout::kNCHW;
  Interpolation interpolation = Interpolation::kBilinear;
};

/// The parameters drawn for one (sample, camera): which source region, flipped or not.
struct FrameGeometry {
  CropRect source;  // empty: the whole frame
  bool flip = false;
};

class ImageTransform {
 public:
  /// Errors (kInvalidArgument): a negative or half-given size, a crop mode without a crop size,
  /// kRandomResized with a resize, bad scale or ratio bounds, a probability outside [0, 1],
  /// a dtype images cannot take, normalize with uint8 output, a non-positive or non-finite std
  /// or non-finite mean.
  static Result<std::shared_ptr<const ImageTransform>> create(const TransformOptions& options);

  const TransformOptions& options() const { return options_; }

  /// The output (height, width) for a source of source_height x source_width.
  std::pair<int, int> output_size(int source_height, int source_width) const;
  /// Bytes of one output frame, and of the frame the decoder converts into (uint8 RGB).
  size_t output_bytes(int height, int width) const;
  static size_t converted_bytes(int height, int width) { return size_t(height) * width * 3; }

  /// The options the decoder converts with: the output size, layout and interpolation.
  OutputOptions conversion(int source_height, int source_width) const;

  /// Draws the parameters of sample `id` for `camera` in `epoch`. Errors (kInvalidArgument): a
  /// centre crop larger than a source without resize.
  Result<FrameGeometry> geometry(int source_height, int source_width, uint64_t seed, uint32_t epoch,
                                 uint64_t id, int camera) const;

  /// Whether the decoder's conversion writes the final bytes (uint8 output): finish() is then
  /// only flip_in_place(), and only when flipped.
  bool writes_in_place() const { return options_.dtype == DType::kUint8; }

  /// Mirrors a converted uint8 frame of height x width left to right, in place.
  void flip_in_place(uint8_t* frame, int height, int width) const;

  /// Turns a converted uint8 frame into the output dtype at `out` (output_bytes(height, width)
  /// bytes), flipping it when `flip`. REQUIRES: !writes_in_place().
  void finish(const uint8_t* converted, int height, int width, bool flip, uint8_t* out) const;

 private:
  explicit ImageTransform(const TransformOptions& options);
  TransformOptions options_;
  // Per channel, the output value of each byte (float outputs): float32 values, or the bits of
  // float16 / bfloat16 ones.
  std::vector<float> table_f32_;
  std::vector<uint16_t> table_u16_;
};

}  // namespace stoker
