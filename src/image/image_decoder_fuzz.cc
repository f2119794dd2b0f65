// libFuzzer target: bytes as an image: probed, decoded at full size and at a reduced JPEG DCT
// scale, and decoded through a transform into a 32x32 slot. Any input must give a result or an
// error: no crash, no hang, no out-of-bounds access. Built by `make fuzz` / `make test-fuzz`.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "stoker/image_decoder.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> bytes(data, size);
  // A small pixel limit keeps each run fast; headers claiming more are refused early.
  constexpr int64_t kMaxPixels = 1 << 22;
  if (!stoker::probe_image(bytes).ok()) return 0;
  (void)stoker::decode_image(bytes, {.max_pixels = kMaxPixels});
  (void)stoker::decode_image(
      bytes,
      {.min_width = 16, .min_height = 16, .keep_16bit_gray = true, .max_pixels = kMaxPixels});
  static const auto transform = *stoker::ImageTransform::create(
      {.resize_height = 32, .resize_width = 32, .dtype = stoker::DType::kFloat32});
  std::vector<uint8_t> out(transform->output_bytes(32, 32));
  const stoker::ImageInput input{.bytes = bytes, .out = out.data()};
  (void)stoker::decode_images_into({&input, 1}, *transform,
                                   {.height = 32, .width = 32, .max_pixels = kMaxPixels});
  return 0;
}
