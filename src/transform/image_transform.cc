#include "stoker/image_transform.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/half.h"
#include "core/random.h"

namespace stoker {
namespace {

using core::kTransformStream;

// Draws of one (sample, camera): the random resized crop's tries, its position, the flip.
constexpr uint32_t kCropTries = 10;
constexpr uint32_t kPositionDraw = kCropTries;
constexpr uint32_t kFlipDraw = kCropTries + 1;

std::array<uint32_t, 4> draw(uint64_t seed, uint32_t epoch, uint64_t id, int camera,
                             uint32_t which) {
  const uint32_t stream = kTransformStream | (static_cast<uint32_t>(camera) << 4) | which;
  return core::random_words(seed, epoch, id, stream);
}

int uniform_int(uint32_t hi, uint32_t lo, int n) {  // in [0, n)
  return static_cast<int>(core::uniform_below(hi, lo, n));
}

Status invalid(const std::string& why) {
  return Status(StatusCode::kInvalidArgument, "transform: " + why);
}

template <typename T>
void map_frame(const uint8_t* in, int height, int width, Layout layout, bool flip, const T* table,
               T* out) {
  const auto source_x = [&](int x) { return flip ? width - 1 - x : x; };
  if (layout == Layout::kNCHW) {
    for (int c = 0; c < 3; ++c) {
      const T* lut = table + c * 256;
      for (int y = 0; y < height; ++y) {
        const uint8_t* row = in + (size_t(c) * height + y) * width;
        T* out_row = out + (size_t(c) * height + y) * width;
        for (int x = 0; x < width; ++x) out_row[x] = lut[row[source_x(x)]];
      }
    }
    return;
  }
  for (int y = 0; y < height; ++y) {
    const uint8_t* row = in + size_t(y) * width * 3;
    T* out_row = out + size_t(y) * width * 3;
    for (int x = 0; x < width; ++x) {
      const uint8_t* pixel = row + size_t(source_x(x)) * 3;
      for (int c = 0; c < 3; ++c) out_row[x * 3 + c] = table[c * 256 + pixel[c]];
    }
  }
}

}  // namespace

Result<std::shared_ptr<const ImageTransform>> ImageTransform::create(
    const TransformOptions& options) {
  const TransformOptions& o = options;
  if (o.resize_height < 0 || o.resize_width < 0 || (o.resize_height > 0) != (o.resize_width > 0)) {
    return invalid("resize " + std::to_string(o.resize_height) + "x" +
                   std::to_string(o.resize_width) + " is invalid (give both sides, or neither)");
  }
  if (o.crop != CropMode::kNone && (o.crop_height <= 0 || o.crop_width <= 0)) {
    return invalid("a crop needs a positive size, got " + std::to_string(o.crop_height) + "x" +
                   std::to_string(o.crop_width));
  }
  if (o.crop == CropMode::kCenter && o.resize_height > 0 &&
      (o.crop_height > o.resize_height || o.crop_width > o.resize_width)) {
    return invalid("the centre crop " + std::to_string(o.crop_height) + "x" +
                   std::to_string(o.crop_width) + " is larger than the resize " +
                   std::to_string(o.resize_height) + "x" + std::to_string(o.resize_width));
  }
  if (o.crop == CropMode::kRandomResized) {
    if (o.resize_height > 0) {
      return invalid("a random resized crop resizes to its own size; give no resize with it");
    }
    if (!(0 < o.scale_min && o.scale_min <= o.scale_max && o.scale_max <= 1)) {
      return invalid("scale bounds must satisfy 0 < min <= max <= 1");
    }
    if (!(0 < o.ratio_min && o.ratio_min <= o.ratio_max && std::isfinite(o.ratio_max))) {
      return invalid("ratio bounds must satisfy 0 < min <= max, finite");
    }
  }
  if (!(o.hflip_probability >= 0 && o.hflip_probability <= 1)) {
    return invalid("the flip probability must lie in [0, 1]");
  }
  if (o.dtype != DType::kUint8 && o.dtype != DType::kFloat16 && o.dtype != DType::kBFloat16 &&
      o.dtype != DType::kFloat32) {
    return invalid(std::string("images come out as uint8, float16, bfloat16 or float32, not ") +
                   dtype_name(o.dtype));
  }
  if (o.normalize) {
    if (o.dtype == DType::kUint8) return invalid("normalize needs a float output dtype");
    for (int c = 0; c < 3; ++c) {
      if (!std::isfinite(o.mean[c]) || !std::isfinite(o.std[c]) || !(o.std[c] > 0)) {
        return invalid("mean must be finite and std positive and finite, per channel");
      }
    }
  }
  return std::shared_ptr<const ImageTransform>(new ImageTransform(options));
}

ImageTransform::ImageTransform(const TransformOptions& options) : options_(options) {
  if (options_.dtype == DType::kUint8) return;
  if (options_.dtype == DType::kFloat32) {
    table_f32_.resize(3 * 256);
  } else {
    table_u16_.resize(3 * 256);
  }
  for (int c = 0; c < 3; ++c) {
    for (int v = 0; v < 256; ++v) {
      float value = static_cast<float>(v) / 255.0f;
      if (options_.normalize) value = (value - options_.mean[c]) / options_.std[c];
      if (options_.dtype == DType::kFloat32) {
        table_f32_[c * 256 + v] = value;
      } else {
        table_u16_[c * 256 + v] =
            options_.dtype == DType::kFloat16 ? core::to_float16(value) : core::to_bfloat16(value);
      }
    }
  }
}

std::pair<int, int> ImageTransform::output_size(int source_height, int source_width) const {
  if (options_.crop != CropMode::kNone) return {options_.crop_height, options_.crop_width};
  if (options_.resize_height > 0) return {options_.resize_height, options_.resize_width};
  return {source_height, source_width};
}

size_t ImageTransform::output_bytes(int height, int width) const {
  return converted_bytes(height, width) * dtype_size(options_.dtype);
}

OutputOptions ImageTransform::conversion(int source_height, int source_width) const {
  auto [height, width] = output_size(source_height, source_width);
  return OutputOptions{.height = height,
                       .width = width,
                       .layout = options_.layout,
                       .interpolation = options_.interpolation};
}

Result<FrameGeometry> ImageTransform::geometry(int source_height, int source_width, uint64_t seed,
                                               uint32_t epoch, uint64_t id, int camera) const {
  FrameGeometry geometry;
  const TransformOptions& o = options_;
  if (o.hflip_probability > 0) {
    const auto words = draw(seed, epoch, id, camera, kFlipDraw);
    geometry.flip = core::unit_double(words[0], words[1]) < o.hflip_probability;
  }
  const int H = source_height;
  const int W = source_width;
  if (o.crop == CropMode::kCenter) {
    // The region of the source that the centre crop of the resized frame shows.
    int h = o.crop_height;
    int w = o.crop_width;
    if (o.resize_height > 0) {
      h = static_cast<int>(std::lround(double(o.crop_height) * H / o.resize_height));
      w = static_cast<int>(std::lround(double(o.crop_width) * W / o.resize_width));
      h = std::clamp(h, 1, H);
      w = std::clamp(w, 1, W);
    } else if (h > H || w > W) {
      return invalid("the centre crop " + std::to_string(h) + "x" + std::to_string(w) +
                     " is larger than the " + std::to_string(H) + "x" + std::to_string(W) +
                     " frame; give a resize or a smaller crop");
    }
    geometry.source = CropRect{.x = (W - w) / 2, .y = (H - h) / 2, .width = w, .height = h};
  } else if (o.crop == CropMode::kRandomResized) {
    const double area = double(H) * W;
    const double log_min = std::log(o.ratio_min);
    const double log_max = std::log(o.ratio_max);
    for (uint32_t attempt = 0; attempt < kCropTries; ++attempt) {
      const auto words = draw(seed, epoch, id, camera, attempt);
      const double scale =
          o.scale_min + (o.scale_max - o.scale_min) * core::unit_double(words[0], words[1]);
      const double ratio =
          std::exp(log_min + (log_max - log_min) * core::unit_double(words[2], words[3]));
      const int w = static_cast<int>(std::lround(std::sqrt(area * scale * ratio)));
      const int h = static_cast<int>(std::lround(std::sqrt(area * scale / ratio)));
      if (w > 0 && w <= W && h > 0 && h <= H) {
        const auto where = draw(seed, epoch, id, camera, kPositionDraw);
        geometry.source = CropRect{.x = uniform_int(where[0], where[1], W - w + 1),
                                   .y = uniform_int(where[2], where[3], H - h + 1),
                                   .width = w,
                                   .height = h};
        return geometry;
      }
    }
    // No try fitted: the whole frame, cut to the nearest allowed aspect ratio.
    int w = W;
    int h = H;
    const double frame_ratio = double(W) / H;
    if (frame_ratio < o.ratio_min) {
      h = std::clamp(static_cast<int>(std::lround(W / o.ratio_min)), 1, H);
    } else if (frame_ratio > o.ratio_max) {
      w = std::clamp(static_cast<int>(std::lround(H * o.ratio_max)), 1, W);
    }
    geometry.source = CropRect{.x = (W - w) / 2, .y = (H - h) / 2, .width = w, .height = h};
  }
  return geometry;
}

void ImageTransform::flip_in_place(uint8_t* frame, int height, int width) const {
  if (options_.layout == Layout::kNCHW) {
    for (int row = 0; row < 3 * height; ++row) {
      uint8_t* begin = frame + size_t(row) * width;
      std::reverse(begin, begin + width);
    }
    return;
  }
  for (int y = 0; y < height; ++y) {
    uint8_t* row = frame + size_t(y) * width * 3;
    for (int left = 0, right = width - 1; left < right; ++left, --right) {
      std::swap_ranges(row + size_t(left) * 3, row + size_t(left) * 3 + 3, row + size_t(right) * 3);
    }
  }
}

void ImageTransform::finish(const uint8_t* converted, int height, int width, bool flip,
                            uint8_t* out) const {
  const Layout layout = options_.layout;
  if (options_.dtype == DType::kFloat32) {
    map_frame(converted, height, width, layout, flip, table_f32_.data(),
              reinterpret_cast<float*>(out));
  } else {
    map_frame(converted, height, width, layout, flip, table_u16_.data(),
              reinterpret_cast<uint16_t*>(out));
  }
}

}  // namespace stoker
