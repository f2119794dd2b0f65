// Image decoding: JPEG (libjpeg-turbo), PNG (libspng) and WebP (libwebp) bytes to pixels, and a
// batch decode that writes each image, transformed, into its slot of a preallocated output.
//
// JPEG decodes "less" when the output is smaller than the image: libjpeg-turbo's IDCT can
// produce the image scaled by n/8 (n = 1..16) for the cost of that size, so the decoder picks the
// smallest such scale whose result is still at least the target size in both dimensions, and
// only the remaining, smaller resize is done by the transform's resampler (the same swscale
// conversion that video frames go through; see stoker/image_transform.h). When only a region is
// needed (a random resized crop, drawn from the header's size before decoding), only that region
// is decoded (libjpeg's jpeg_crop_scanline / jpeg_skip_scanlines, a 2-pixel margin so that the
// edge's chroma upsampling matches), its pixels and the transform's output identical to a full
// decode's; a JPEG that does not end with its EOI marker is decoded in full, so that a truncated
// file fails whatever the crop. A whole image goes through TurboJPEG (the same speed).
//
// PNG: 8- and 16-bit gray, gray+alpha, RGB, RGBA and palette images become RGB8 (alpha dropped,
// as Pillow's convert("RGB") does; 16-bit samples keep their high byte). A single-channel 16-bit
// PNG can instead be kept as 16-bit values (depth maps): see ImageDecodeOptions.
//
// WebP: still images, lossy or lossless, with or without alpha, become RGB8 (alpha dropped, as
// for PNG), always decoded at full size (the transform's resize does the rest). Animated WebPs
// are refused (kUnsupported).
//
// Errors are values, never crashes: bytes that are no image, a truncated image, an image too
// large for `max_pixels`, or a valid image of a kind not handled (CMYK JPEG, animated WebP, ...)
// each give a Status that says which (kCorruptData for damaged or foreign bytes, kUnsupported for
// valid images stoker does not handle, kResourceExhausted for too many pixels).
//
// Thread-safety: every function may run on any number of threads at once; each thread keeps its
// own decompressors (TurboJPEG and libjpeg) and converter (reused across calls).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "stoker/image_transform.h"
#include "stoker/status.h"

namespace stoker {

enum class ImageFormat { kJpeg, kPng, kWebp };

/// "jpeg", "png" or "webp".
const char* image_format_name(ImageFormat format);

/// What the header says, read without decoding the pixels.
struct ImageInfo {
  ImageFormat format = ImageFormat::kJpeg;
  int width = 0;
  int height = 0;
  /// Channels stored: 1 (gray), 2 (gray + alpha), 3 (RGB, YCbCr, palette, WebP), 4 (RGBA, CMYK,
  /// WebP with alpha).
  int channels = 0;
  /// Bits per stored sample: 8 for JPEG and WebP; 1, 2, 4, 8 or 16 for PNG.
  int bit_depth = 0;
};

/// Reads the format and size from the header. Errors: kCorruptData (not a JPEG, PNG or WebP, or
/// a damaged or truncated header), naming what was found; kUnsupported (an animated WebP).
Result<ImageInfo> probe_image(std::span<const uint8_t> bytes);

struct ImageDecodeOptions {
  /// JPEG only: the smallest size the decode must reach in each dimension; the decoder picks the
  /// smallest DCT scale n/8 whose output still has width >= min_width and height >= min_height.
  /// Default 0 x 0: full size. PNG and WebP always decode at full size.
  int min_width = 0;
  int min_height = 0;
  /// Single-channel 16-bit PNGs: keep the 16-bit values (channels 1, bit_depth 16, host-endian
  /// uint16) instead of RGB8. Default: false.
  bool keep_16bit_gray = false;
  /// Refuse images with more pixels than this (kResourceExhausted), before allocating.
  /// Default: 2^27 (e.g. 16384 x 8192).
  int64_t max_pixels = int64_t{1} << 27;
  /// JPEG only: the part of the stored image (in its pixels) the caller will read. When set, only
  /// that part is decoded, at the scale chosen as above: the result keeps the full (scaled) size,
  /// and within the region, mapped to that size as the transforms map a crop, its pixels are
  /// those of a full decode; outside it they are unspecified. A file that does not end with the
  /// EOI marker is decoded in full all the same, so a truncated one fails whatever the region.
  /// REQUIRES: inside the image (a region decode refuses one that is not: kInvalidArgument).
  /// Default: empty (the whole image). PNG and WebP ignore it.
  CropRect region;
};

/// Decoded pixels, rows packed (stride = width * channels * bit_depth / 8).
struct DecodedImage {
  int width = 0;
  int height = 0;
  int channels = 3;   // 3 (RGB), or 1 with keep_16bit_gray
  int bit_depth = 8;  // 8, or 16 with keep_16bit_gray
  int scale_num = 1;  // JPEG: the DCT scale used, scale_num / scale_denom of the stored size
  int scale_denom = 1;
  std::vector<uint8_t> pixels;
};

/// Decodes `bytes` (JPEG, PNG or WebP, told by its signature). Errors as described above;
/// messages say what is wrong ("truncated", "not a JPEG, PNG or WebP", ...), without a name (the
/// caller adds the file, sample or member with Status::with_context).
Result<DecodedImage> decode_image(std::span<const uint8_t> bytes,
                                  const ImageDecodeOptions& options = {});

/// One image of a batch: its encoded bytes (borrowed for the call), where its transformed
/// pixels go, and the key its random transform parameters are drawn from (as video frames
/// are: ImageTransform::geometry with (seed, epoch, id, camera)).
struct ImageInput {
  std::span<const uint8_t> bytes;
  /// REQUIRES: room for transform.output_bytes(height, width) bytes (ImageBatchOptions).
  uint8_t* out = nullptr;
  uint64_t id = 0;
  int camera = 0;
};

struct ImageBatchOptions {
  /// The output size every image must come out at (the slots' size). 0 x 0: each image's own
  /// transform.output_size(), which the caller must then have made room for.
  int height = 0;
  int width = 0;
  /// The random transforms' key: ImageTransform::geometry(..., seed, epoch, id, camera).
  uint64_t seed = 0;
  uint32_t epoch = 0;
  /// Threads decoding at once, this one included. Default 1: the caller's thread only (the
  /// Loader brings its own parallelism). 0: usable_cores().
  int threads = 1;
  /// Passed to each decode (max_pixels); the DCT scale comes from the output size.
  int64_t max_pixels = int64_t{1} << 27;
};

/// Decodes inputs[k].bytes and writes them, through `transform` (crop, resize, flip, dtype,
/// normalize, layout), to inputs[k].out, for every k, each at the smallest JPEG DCT scale that
/// still covers its output, and a JPEG whose crop leaves part of it out decoded in that part only
/// (ImageDecodeOptions::region: the same bytes out as a full decode). When `errors` is given
/// (errors.size() == inputs.size()), each image's outcome goes to errors[k] and the call fails
/// only on bad arguments; otherwise it returns the first failure by input order (each message
/// prefixed "image k"), and the slots of failed images are unspecified.
Status decode_images_into(std::span<const ImageInput> inputs, const ImageTransform& transform,
                          const ImageBatchOptions& options, std::span<Status> errors = {});

}  // namespace stoker
