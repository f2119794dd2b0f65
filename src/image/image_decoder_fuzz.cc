// libFuzzer target: bytes as an image: probed, decoded at full size, at a reduced JPEG DCT scale
// and (JPEG) in part, and decoded through a resize and a random resized crop into a 32x32 slot.
// Any input must give a result or an error: no crash, no hang, no out-of-bounds access. Built by
// `make fuzz` / `make test-fuzz`.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "stoker/image_decoder.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  // A small pixel limit keeps each run fast; headers claiming more are refused early.
  constexpr int64_t kMaxPixels = 1 << 22;
  const auto info = stoker::probe_image(bytes);
  if (!info.ok()) return 0;
  (void)stoker::decode_image(bytes, {.max_pixels = kMaxPixels});
  (void)stoker::decode_image(
      bytes,
      {.min_width = 16, .min_height = 16, .keep_16bit_gray = true, .max_pixels = kMaxPixels});
  // A JPEG's middle region only (a random crop's decode).
  const stoker::CropRect middle{.x = info->width / 4,
                                .y = info->height / 3,
                                .width = std::max(1, info->width / 2),
                                .height = std::max(1, info->height / 3)};
  (void)stoker::decode_image(
      bytes, {.min_width = 8, .min_height = 8, .max_pixels = kMaxPixels, .region = middle});
  static const auto resize = *stoker::ImageTransform::create(
      {.resize_height = 32, .resize_width = 32, .dtype = stoker::DType::kFloat32});
  static const auto crop = *stoker::ImageTransform::create(
      {.crop = stoker::CropMode::kRandomResized, .crop_height = 32, .crop_width = 32});
  for (const auto* transform : {resize.get(), crop.get()}) {
    std::vector<uint8_t> out(transform->output_bytes(32, 32));
    const stoker::ImageInput input{.bytes = bytes, .out = out.data(), .id = size};
    (void)stoker::decode_images_into({&input, 1}, *transform,
                                     {.height = 32, .width = 32, .max_pixels = kMaxPixels});
  }
  return 0;
}
