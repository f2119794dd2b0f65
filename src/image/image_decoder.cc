#include "stoker/image_decoder.h"

#include <spng.h>
#include <turbojpeg.h>
#include <webp/decode.h>

// jpeglib.h needs size_t and FILE declared before it.
// clang-format off
#include <cstddef>
#include <cstdio>
#include <jpeglib.h>
#include <jerror.h>
// clang-format on

#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <cstring>
#include <memory>

#include "core/aligned_allocator.h"
#include "core/env.h"
#include "media/frame_converter.h"
#include "stoker/cores.h"

namespace stoker {
namespace {

constexpr uint8_t kPngSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
// A PNG's metadata chunks (text, ICC profiles, ...) are bounded so that bad bytes cannot ask
// for gigabytes before the pixels; image data (IDAT) is bounded by max_pixels instead.
constexpr size_t kPngChunkLimit = size_t{64} << 20;

Status corrupt(const std::string& why) { return Status(StatusCode::kCorruptData, why); }

bool is_png(std::span<const uint8_t> bytes) {
  return bytes.size() >= sizeof(kPngSignature) &&
         std::memcmp(bytes.data(), kPngSignature, sizeof(kPngSignature)) == 0;
}

bool is_jpeg(std::span<const uint8_t> bytes) {
  return bytes.size() >= 3 && bytes[0] == 0xFF && bytes[1] == 0xD8 && bytes[2] == 0xFF;
}

// A RIFF container ("RIFF", its size, "WEBP").
bool is_webp(std::span<const uint8_t> bytes) {
  return bytes.size() >= 12 && std::memcmp(bytes.data(), "RIFF", 4) == 0 &&
         std::memcmp(bytes.data() + 8, "WEBP", 4) == 0;
}

Status not_an_image(std::span<const uint8_t> bytes) {
  if (bytes.empty()) return corrupt("not an image: no bytes");
  static const char kHex[] = "0123456789abcdef";
  std::string head;
  for (size_t i = 0; i < std::min<size_t>(bytes.size(), 8); ++i) {
    head += kHex[bytes[i] >> 4];
    head += kHex[bytes[i] & 15];
  }
  return corrupt("not a JPEG, PNG or WebP image (" + std::to_string(bytes.size()) +
                 " bytes starting with " + head + ")");
}

Status check_pixels(const char* format, int64_t width, int64_t height, int64_t max_pixels) {
  if (width <= 0 || height <= 0) {
    return corrupt(std::string("damaged ") + format + " header: it states a " +
                   std::to_string(width) + "x" + std::to_string(height) + " image");
  }
  if (width * height > max_pixels) {
    return Status(StatusCode::kResourceExhausted,
                  "image of " + std::to_string(width) + "x" + std::to_string(height) +
                      " pixels is over the limit of " + std::to_string(max_pixels) + " pixels");
  }
  return Status();
}

// ---- JPEG (TurboJPEG) ----

struct TjDeleter {
  void operator()(void* handle) const { tjDestroy(handle); }
};
using UniqueTjHandle = std::unique_ptr<void, TjDeleter>;

struct JpegHeader {
  int width = 0, height = 0, subsampling = 0, colorspace = 0;
};

// Whether the marker segments of a JPEG's header, up to its first scan (SOS), all lie inside
// `bytes`: when not, a failing header is a truncated file rather than a damaged one.
bool jpeg_header_complete(std::span<const uint8_t> bytes) {
  size_t at = 2;
  while (at + 4 <= bytes.size()) {
    if (bytes[at] != 0xFF) return true;  // damaged, not short
    if (bytes[at + 1] == 0xFF) {
      ++at;
      continue;
    }
    const size_t end = at + 2 + (size_t(bytes[at + 2]) << 8 | bytes[at + 3]);
    if (end > bytes.size()) return false;
    if (bytes[at + 1] == 0xDA) return true;
    at = end;
  }
  return false;
}

Result<JpegHeader> read_jpeg_header(tjhandle handle, std::span<const uint8_t> bytes) {
  JpegHeader header;
  if (tjDecompressHeader3(handle, bytes.data(), static_cast<unsigned long>(bytes.size()),
                          &header.width, &header.height, &header.subsampling,
                          &header.colorspace) != 0) {
    if (!jpeg_header_complete(bytes)) {
      return corrupt(std::string("truncated JPEG: the bytes end inside its header (") +
                     tjGetErrorStr2(handle) + ")");
    }
    return corrupt(std::string("damaged JPEG header: ") + tjGetErrorStr2(handle));
  }
  // libjpeg suspends, without an error, when the bytes end inside the header.
  if (header.width == 0 || header.height == 0) {
    return corrupt("truncated JPEG: the bytes end inside its header");
  }
  return header;
}

// The frame header (SOFn) of a JPEG, found by walking its marker segments: a prefix of the
// file that reaches it is enough (a shard reader's first ranged read, say).
Result<ImageInfo> probe_jpeg(std::span<const uint8_t> bytes) {
  size_t at = 2;  // after SOI
  while (at + 4 <= bytes.size()) {
    if (bytes[at] != 0xFF)
      return corrupt("damaged JPEG header: no marker at byte " + std::to_string(at));
    const uint8_t marker = bytes[at + 1];
    if (marker == 0xFF) {  // fill byte
      ++at;
      continue;
    }
    const size_t length = size_t(bytes[at + 2]) << 8 | bytes[at + 3];
    if (length < 2)
      return corrupt("damaged JPEG header: a segment of length " + std::to_string(length));
    // SOF0..SOF15, except DHT (C4), JPG (C8) and DAC (CC), which share the range.
    const bool frame =
        marker >= 0xC0 && marker <= 0xCF && marker != 0xC4 && marker != 0xC8 && marker != 0xCC;
    if (frame) {
      if (at + 10 > bytes.size()) break;
      const int height = bytes[at + 5] << 8 | bytes[at + 6];
      const int width = bytes[at + 7] << 8 | bytes[at + 8];
      const int components = bytes[at + 9];
      if (width == 0 || height == 0 || (components != 1 && components != 3 && components != 4)) {
        return corrupt("damaged JPEG header: a " + std::to_string(width) + "x" +
                       std::to_string(height) + " frame of " + std::to_string(components) +
                       " components");
      }
      return ImageInfo{.format = ImageFormat::kJpeg,
                       .width = width,
                       .height = height,
                       .channels = components,
                       .bit_depth = bytes[at + 4]};
    }
    if (marker == 0xDA || marker == 0xD9) break;  // scan data or the end, before any frame
    at += 2 + length;
  }
  return corrupt("truncated JPEG: the bytes end before its frame header");
}

// The smallest n/8 scale (n/8 <= 1) whose output is at least min_width x min_height.
tjscalingfactor choose_scale(int width, int height, int min_width, int min_height) {
  tjscalingfactor best{1, 1};
  if (min_width <= 0 && min_height <= 0) return best;
  int count = 0;
  const tjscalingfactor* factors = tjGetScalingFactors(&count);
  for (int i = 0; factors != nullptr && i < count; ++i) {
    const tjscalingfactor f = factors[i];
    if (f.num > f.denom) continue;
    if (TJSCALED(width, f) < min_width || TJSCALED(height, f) < min_height) continue;
    if (TJSCALED(width, f) < TJSCALED(width, best) ||
        (TJSCALED(width, f) == TJSCALED(width, best) &&
         TJSCALED(height, f) < TJSCALED(height, best))) {
      best = f;
    }
  }
  return best;
}

// ---- JPEG regions (libjpeg API) ----
//
// When the caller reads only a region of the image (a random resized crop), the libjpeg API
// decodes only that: jpeg_crop_scanline limits the IDCT, upsampling and colour conversion to the
// region's iMCU columns, jpeg_skip_scanlines entropy-decodes the rows above without the rest, and
// the rows below are never read. The same library, IDCT (accurate integer) and smooth upsampling
// as TurboJPEG's tjDecompress2, so the region's pixels are the full decode's (tested), given a
// margin: smooth upsampling at the region's own edges replicates the edge chroma sample instead of
// reading its neighbour (measured: the outermost column or row differs, for 4:2:0, 4:2:2 and
// 4:4:0, at every scale), so the region decoded reaches this many pixels beyond the one read
// where the image has them.
constexpr int kRegionMargin = 2;
// TJFLAG_LIMITSCANS' bound: bad bytes cannot make a progressive decode run for minutes.
constexpr int kMaxProgressiveScans = 500;
// Bytes allowed after the EOI marker for the region path (padding some writers add).
constexpr size_t kTrailingBytes = 32;

// libjpeg reports a fatal error by calling error_exit, which must not return: it longjmps to the
// setjmp of the libjpeg_* function below that made the call.
struct JpegErrorManager {
  jpeg_error_mgr base;  // first: libjpeg holds a jpeg_error_mgr*
  std::jmp_buf jump;
  bool truncated;  // a JWRN_JPEG_EOF warning: the data ended before the image did
  char message[JMSG_LENGTH_MAX];
};

// A libjpeg decompressor and its error manager, which it points at: never moved once created.
struct LibjpegDecoder {
  jpeg_decompress_struct cinfo{};
  JpegErrorManager error{};
  jpeg_progress_mgr progress{};
  bool created = false;
  ~LibjpegDecoder() {
    if (created) jpeg_destroy_decompress(&cinfo);
  }
};

JpegErrorManager& error_manager(j_common_ptr cinfo) {
  return *reinterpret_cast<JpegErrorManager*>(cinfo->err);
}

[[noreturn]] void libjpeg_error_exit(j_common_ptr cinfo) {
  (*cinfo->err->format_message)(cinfo, error_manager(cinfo).message);
  std::longjmp(error_manager(cinfo).jump, 1);
}

// Warnings (level < 0) decode on, as libjpeg and Pillow decode them, except data ending early;
// trace messages (level >= 0) are dropped.
void libjpeg_emit_message(j_common_ptr cinfo, int level) {
  if (level >= 0) return;
  JpegErrorManager& error = error_manager(cinfo);
  if (cinfo->err->msg_code == JWRN_JPEG_EOF && !error.truncated) {
    error.truncated = true;
    (*cinfo->err->format_message)(cinfo, error.message);
  }
  ++cinfo->err->num_warnings;
}

void libjpeg_limit_scans(j_common_ptr cinfo) {
  if (cinfo->is_decompressor &&
      reinterpret_cast<j_decompress_ptr>(cinfo)->input_scan_number > kMaxProgressiveScans) {
    std::snprintf(error_manager(cinfo).message, JMSG_LENGTH_MAX,
                  "Progressive JPEG image has more than %d scans", kMaxProgressiveScans);
    std::longjmp(error_manager(cinfo).jump, 1);
  }
}

// The libjpeg_* functions return false on an error, described in decoder->error.message. libjpeg
// longjmps into them, so no object with a destructor lives in their frames.
bool libjpeg_create(LibjpegDecoder* decoder) {
  decoder->cinfo.err = jpeg_std_error(&decoder->error.base);
  decoder->error.base.error_exit = libjpeg_error_exit;
  decoder->error.base.emit_message = libjpeg_emit_message;
  if (setjmp(decoder->error.jump)) return false;
  jpeg_create_decompress(&decoder->cinfo);
  decoder->created = true;
  decoder->progress.progress_monitor = libjpeg_limit_scans;
  decoder->cinfo.progress = &decoder->progress;
  return true;
}

bool libjpeg_read_header(LibjpegDecoder* decoder, const uint8_t* data, size_t size) {
  j_decompress_ptr cinfo = &decoder->cinfo;
  decoder->error.truncated = false;
  if (setjmp(decoder->error.jump)) {
    jpeg_abort_decompress(cinfo);
    return false;
  }
  jpeg_mem_src(cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(cinfo, TRUE);
  return true;
}

// Rows and columns of the image decoded at scale_num / scale_denom (output pixels), and where
// they go: pixel (x, y) at pixels + y * stride + x * 3, as in a full decode of width * height.
struct JpegRegion {
  int scale_num = 1, scale_denom = 1;
  int width = 0, height = 0;  // the whole decoded image, to check libjpeg's
  int x = 0, y = 0, region_width = 0, region_height = 0;
  uint8_t* pixels = nullptr;
  size_t stride = 0;
};

// REQUIRES: libjpeg_read_header succeeded. Decodes the region (at least: libjpeg widens it to
// iMCU columns) and leaves the decompressor ready for the next image.
bool libjpeg_decode_region(LibjpegDecoder* decoder, const JpegRegion& region) {
  j_decompress_ptr cinfo = &decoder->cinfo;
  if (setjmp(decoder->error.jump)) {
    jpeg_abort_decompress(cinfo);
    return false;
  }
  cinfo->out_color_space = JCS_RGB;
  cinfo->scale_num = static_cast<unsigned int>(region.scale_num);
  cinfo->scale_denom = static_cast<unsigned int>(region.scale_denom);
  jpeg_start_decompress(cinfo);
  if (cinfo->output_width != JDIMENSION(region.width) ||
      cinfo->output_height != JDIMENSION(region.height) || cinfo->output_components != 3) {
    std::snprintf(decoder->error.message, JMSG_LENGTH_MAX,
                  "libjpeg decodes it at %ux%u, not the %dx%d expected", cinfo->output_width,
                  cinfo->output_height, region.width, region.height);
    jpeg_abort_decompress(cinfo);
    return false;
  }
  JDIMENSION x = JDIMENSION(region.x), width = JDIMENSION(region.region_width);
  jpeg_crop_scanline(cinfo, &x, &width);
  if (region.y > 0) jpeg_skip_scanlines(cinfo, JDIMENSION(region.y));
  const JDIMENSION end = JDIMENSION(region.y + region.region_height);
  while (cinfo->output_scanline < end) {
    JSAMPROW row = region.pixels + cinfo->output_scanline * region.stride + size_t(x) * 3;
    jpeg_read_scanlines(cinfo, &row, 1);
  }
  jpeg_abort_decompress(cinfo);  // the rows below are not needed
  return true;
}

// Whether the bytes end with the EOI marker (FF D9), give or take kTrailingBytes. A region decode
// stops above the bottom of the image and would not see a truncated file's missing end; those
// take the full decode, so that an image fails or decodes whatever its crop.
bool jpeg_ends_with_eoi(std::span<const uint8_t> bytes) {
  const size_t from = bytes.size() > kTrailingBytes + 2 ? bytes.size() - kTrailingBytes - 2 : 0;
  for (size_t at = from; at + 1 < bytes.size(); ++at) {
    if (bytes[at] == 0xFF && bytes[at + 1] == 0xD9) return true;
  }
  return false;
}

// One thread's decoding state, reused by every call on that thread.
struct ThreadImageState {
  UniqueTjHandle jpeg;
  std::unique_ptr<LibjpegDecoder> libjpeg;
  media::FrameConverter converter;
  core::AlignedBytes decoded;  // swscale reads it: aligned, see core/aligned_allocator.h
  std::vector<uint8_t> converted;

  Result<tjhandle> jpeg_handle() {
    if (!jpeg) jpeg.reset(tjInitDecompress());
    if (!jpeg) {
      return Status(StatusCode::kResourceExhausted, "cannot create a JPEG decompressor");
    }
    return jpeg.get();
  }

  // TurboJPEG (2.1) does not reset its decompressor when a header fails to parse: the next
  // image's header read went on from the failed one's state ("truncated JPEG: the bytes end
  // inside its header", "Unsupported marker type") and an intact image was refused. After any
  // failure the handle is dropped, so that the next image starts from a fresh one (a failure
  // is rare, and a new handle costs microseconds).
  void discard_jpeg_handle() { jpeg.reset(); }

  Result<LibjpegDecoder*> libjpeg_decoder() {
    if (!libjpeg) {
      auto decoder = std::make_unique<LibjpegDecoder>();
      if (!libjpeg_create(decoder.get())) {
        return Status(StatusCode::kResourceExhausted,
                      std::string("cannot create a JPEG decompressor: ") + decoder->error.message);
      }
      libjpeg = std::move(decoder);
    }
    return libjpeg.get();
  }
};

ThreadImageState& thread_state() {
  thread_local ThreadImageState state;
  return state;
}

struct Shape {
  int width = 0, height = 0, channels = 3, bit_depth = 8, scale_num = 1, scale_denom = 1;
};

// The crop `source` (in the stored image's pixels) on the image decoded at `width` x `height`.
CropRect scale_crop(const CropRect& source, int stored_width, int stored_height, int width,
                    int height) {
  if (source.empty() || (width == stored_width && height == stored_height)) return source;
  const double sx = double(width) / stored_width;
  const double sy = double(height) / stored_height;
  CropRect crop;
  crop.width = std::clamp(static_cast<int>(std::lround(source.width * sx)), 1, width);
  crop.height = std::clamp(static_cast<int>(std::lround(source.height * sy)), 1, height);
  crop.x = std::clamp(static_cast<int>(std::lround(source.x * sx)), 0, width - crop.width);
  crop.y = std::clamp(static_cast<int>(std::lround(source.y * sy)), 0, height - crop.height);
  return crop;
}

// Whether `region` (stored pixels) leaves out part of a width x height image.
bool is_part_of(const CropRect& region, int width, int height) {
  return !region.empty() && (region.x > 0 || region.y > 0 || region.x + region.width < width ||
                             region.y + region.height < height);
}

// A JPEG of which only options.region is needed, decoded through the libjpeg API: the region's
// rows and columns (plus kRegionMargin), at their place in a full-size buffer, so that whoever
// reads the region reads the same pixels, at the same addresses, as after a full decode.
template <typename Pixels>
Result<Shape> decode_jpeg_region(std::span<const uint8_t> bytes, const ImageDecodeOptions& options,
                                 Pixels& pixels) {
  STOKER_ASSIGN_OR_RETURN(LibjpegDecoder * decoder, thread_state().libjpeg_decoder());
  if (!libjpeg_read_header(decoder, bytes.data(), bytes.size())) {
    return corrupt(std::string("damaged JPEG header: ") + decoder->error.message);
  }
  const jpeg_decompress_struct& header = decoder->cinfo;
  const int stored_width = static_cast<int>(header.image_width);
  const int stored_height = static_cast<int>(header.image_height);
  Status status = check_pixels("JPEG", stored_width, stored_height, options.max_pixels);
  const CropRect& wanted = options.region;
  if (status.ok() &&
      (wanted.x < 0 || wanted.y < 0 || wanted.x + int64_t{wanted.width} > stored_width ||
       wanted.y + int64_t{wanted.height} > stored_height)) {
    status = Status(StatusCode::kInvalidArgument,
                    "region " + std::to_string(wanted.width) + "x" + std::to_string(wanted.height) +
                        " at (" + std::to_string(wanted.x) + ", " + std::to_string(wanted.y) +
                        ") leaves the " + std::to_string(stored_width) + "x" +
                        std::to_string(stored_height) + " image");
  }
  if (status.ok() && (header.jpeg_color_space == JCS_CMYK || header.jpeg_color_space == JCS_YCCK)) {
    status = Status(StatusCode::kUnsupported, "CMYK JPEG images are not supported");
  }
  if (!status.ok()) {
    jpeg_abort_decompress(&decoder->cinfo);
    return status;
  }
  const tjscalingfactor scale =
      choose_scale(stored_width, stored_height, options.min_width, options.min_height);
  Shape shape{.width = TJSCALED(stored_width, scale),
              .height = TJSCALED(stored_height, scale),
              .scale_num = scale.num,
              .scale_denom = scale.denom};
  const CropRect crop = scale_crop(wanted, stored_width, stored_height, shape.width, shape.height);
  const int x = std::max(0, crop.x - kRegionMargin);
  const int y = std::max(0, crop.y - kRegionMargin);
  const int right = std::min(shape.width, crop.x + crop.width + kRegionMargin);
  const int bottom = std::min(shape.height, crop.y + crop.height + kRegionMargin);
  pixels.resize(size_t(shape.width) * shape.height * 3);
  const JpegRegion region{.scale_num = scale.num,
                          .scale_denom = scale.denom,
                          .width = shape.width,
                          .height = shape.height,
                          .x = x,
                          .y = y,
                          .region_width = right - x,
                          .region_height = bottom - y,
                          .pixels = pixels.data(),
                          .stride = size_t(shape.width) * 3};
  if (!libjpeg_decode_region(decoder, region)) {
    return corrupt(std::string("damaged JPEG: ") + decoder->error.message);
  }
  if (decoder->error.truncated) {
    return corrupt(std::string("truncated JPEG (") + decoder->error.message + ")");
  }
  return shape;
}

template <typename Pixels>
Result<Shape> decode_jpeg_whole(tjhandle handle, std::span<const uint8_t> bytes,
                                const ImageDecodeOptions& options, Pixels& pixels) {
  STOKER_ASSIGN_OR_RETURN(const JpegHeader header, read_jpeg_header(handle, bytes));
  STOKER_RETURN_IF_ERROR(check_pixels("JPEG", header.width, header.height, options.max_pixels));
  if (header.colorspace == TJCS_CMYK || header.colorspace == TJCS_YCCK) {
    return Status(StatusCode::kUnsupported, "CMYK JPEG images are not supported");
  }
  const tjscalingfactor scale =
      choose_scale(header.width, header.height, options.min_width, options.min_height);
  Shape shape{.width = TJSCALED(header.width, scale),
              .height = TJSCALED(header.height, scale),
              .scale_num = scale.num,
              .scale_denom = scale.denom};
  pixels.resize(size_t(shape.width) * shape.height * 3);
  // The default IDCT (accurate integer) and smooth upsampling, as Pillow decodes; at most 500
  // progressive scans, so that bad bytes cannot make a decode run for minutes.
  if (tjDecompress2(handle, bytes.data(), static_cast<unsigned long>(bytes.size()), pixels.data(),
                    shape.width, 0, shape.height, TJPF_RGB, TJFLAG_LIMITSCANS) != 0) {
    const std::string why = tjGetErrorStr2(handle);
    if (tjGetErrorCode(handle) == TJERR_FATAL) return corrupt("damaged JPEG: " + why);
    // Warnings: data missing at the end is an error; a recoverable oddity (extra bytes
    // before a marker) is decoded as libjpeg and Pillow decode it.
    if (why.find("Premature end") != std::string::npos) {
      return corrupt("truncated JPEG (" + why + ")");
    }
  }
  return shape;
}

template <typename Pixels>
Result<Shape> decode_jpeg(std::span<const uint8_t> bytes, const ImageDecodeOptions& options,
                          Pixels& pixels) {
  if (!options.region.empty() && jpeg_ends_with_eoi(bytes)) {
    return decode_jpeg_region(bytes, options, pixels);
  }
  ThreadImageState& state = thread_state();
  STOKER_ASSIGN_OR_RETURN(tjhandle handle, state.jpeg_handle());
  Result<Shape> shape = decode_jpeg_whole(handle, bytes, options, pixels);
  if (!shape.ok()) state.discard_jpeg_handle();
  return shape;
}

// ---- PNG (libspng) ----

struct SpngDeleter {
  void operator()(spng_ctx* ctx) const { spng_ctx_free(ctx); }
};
using UniqueSpng = std::unique_ptr<spng_ctx, SpngDeleter>;

Status spng_error(int error, const char* what) {
  if (error == SPNG_IO_EOF) return corrupt(std::string("truncated PNG (") + what + ")");
  return corrupt(std::string("damaged PNG (") + what + "): " + spng_strerror(error));
}

Result<UniqueSpng> open_png(std::span<const uint8_t> bytes, spng_ihdr* ihdr) {
  UniqueSpng ctx(spng_ctx_new(0));
  if (!ctx) return Status(StatusCode::kResourceExhausted, "cannot create a PNG decoder");
  int error = spng_set_chunk_limits(ctx.get(), kPngChunkLimit, kPngChunkLimit);
  if (error == 0) error = spng_set_png_buffer(ctx.get(), bytes.data(), bytes.size());
  if (error != 0) return spng_error(error, "setup");
  error = spng_get_ihdr(ctx.get(), ihdr);
  if (error != 0) return spng_error(error, "header");
  return ctx;
}

int png_channels(uint8_t color_type) {
  switch (color_type) {
    case SPNG_COLOR_TYPE_GRAYSCALE:
      return 1;
    case SPNG_COLOR_TYPE_GRAYSCALE_ALPHA:
      return 2;
    case SPNG_COLOR_TYPE_TRUECOLOR_ALPHA:
      return 4;
    default:
      return 3;  // truecolour, palette
  }
}

template <typename Pixels>
Result<Shape> decode_png(std::span<const uint8_t> bytes, const ImageDecodeOptions& options,
                         Pixels& pixels) {
  spng_ihdr ihdr{};
  STOKER_ASSIGN_OR_RETURN(UniqueSpng ctx, open_png(bytes, &ihdr));
  STOKER_RETURN_IF_ERROR(check_pixels("PNG", ihdr.width, ihdr.height, options.max_pixels));
  Shape shape{.width = static_cast<int>(ihdr.width), .height = static_cast<int>(ihdr.height)};
  int format = SPNG_FMT_RGB8;
  if (options.keep_16bit_gray && ihdr.color_type == SPNG_COLOR_TYPE_GRAYSCALE &&
      ihdr.bit_depth == 16) {
    format = SPNG_FMT_PNG;  // the stored samples, host-endian
    shape.channels = 1;
    shape.bit_depth = 16;
  }
  size_t size = 0;
  int error = spng_decoded_image_size(ctx.get(), format, &size);
  if (error != 0) return spng_error(error, "size");
  pixels.resize(size);
  error = spng_decode_image(ctx.get(), pixels.data(), size, format, 0);
  if (error != 0) return spng_error(error, "pixels");
  return shape;
}

// ---- WebP (libwebp) ----

Status webp_error(VP8StatusCode status, const char* what) {
  switch (status) {
    case VP8_STATUS_NOT_ENOUGH_DATA:
      return corrupt(std::string("truncated WebP: the bytes end inside its ") + what);
    case VP8_STATUS_OUT_OF_MEMORY:
      return Status(StatusCode::kResourceExhausted, "out of memory decoding a WebP image");
    case VP8_STATUS_UNSUPPORTED_FEATURE:
      return corrupt(std::string("damaged WebP ") + what + ": a feature libwebp does not know");
    case VP8_STATUS_BITSTREAM_ERROR:
      return corrupt(std::string("damaged WebP ") + what + ": invalid bitstream");
    default:
      return corrupt(std::string("damaged WebP ") + what + " (libwebp status " +
                     std::to_string(static_cast<int>(status)) + ")");
  }
}

// Whether the bytes end before the size the RIFF header states: libwebp reports a damaged size
// inside the bitstream as missing data too, and only this tells the two apart.
bool webp_truncated(std::span<const uint8_t> bytes) {
  const uint64_t riff_size = uint64_t(bytes[4]) | uint64_t(bytes[5]) << 8 |
                             uint64_t(bytes[6]) << 16 | uint64_t(bytes[7]) << 24;
  return bytes.size() < riff_size + 8;
}

// The header's features (size, alpha, animation), read from a prefix that reaches the first
// image chunk's header. Animated WebPs are refused: a sample's image is one picture.
Result<WebPBitstreamFeatures> read_webp_features(std::span<const uint8_t> bytes) {
  WebPBitstreamFeatures features{};
  const VP8StatusCode status = WebPGetFeatures(bytes.data(), bytes.size(), &features);
  if (status != VP8_STATUS_OK) return webp_error(status, "header");
  if (features.width <= 0 || features.height <= 0) {
    return corrupt("damaged WebP header: it states a " + std::to_string(features.width) + "x" +
                   std::to_string(features.height) + " image");
  }
  if (features.has_animation) {
    return Status(StatusCode::kUnsupported, "animated WebP images are not supported");
  }
  return features;
}

// Always at full size. libwebp's own scaling (WebPDecoderConfig::options.use_scaling) still
// decodes every macroblock and only resamples the output rows, so it saved under 2% (500x375
// lossy to 224x224: 375 against 369 images/s) while its resampling before swscale's raised the
// difference from Pillow's full decode + bilinear resize from mean 0.28 / max 8 to 1.26 / 65.
template <typename Pixels>
Result<Shape> decode_webp(std::span<const uint8_t> bytes, const ImageDecodeOptions& options,
                          Pixels& pixels) {
  STOKER_ASSIGN_OR_RETURN(const WebPBitstreamFeatures features, read_webp_features(bytes));
  STOKER_RETURN_IF_ERROR(check_pixels("WebP", features.width, features.height, options.max_pixels));
  Shape shape{.width = features.width, .height = features.height};
  const size_t stride = size_t(shape.width) * 3;
  pixels.resize(stride * shape.height);
  WebPDecoderConfig config;
  if (!WebPInitDecoderConfig(&config)) {
    return Status(StatusCode::kInternal, "libwebp's decoder does not match its header");
  }
  // RGB output: alpha, when stored, is not decoded (dropped, as for PNG).
  config.output.colorspace = MODE_RGB;
  config.output.is_external_memory = 1;
  config.output.u.RGBA.rgba = pixels.data();
  config.output.u.RGBA.stride = static_cast<int>(stride);
  config.output.u.RGBA.size = pixels.size();
  const VP8StatusCode status = WebPDecode(bytes.data(), bytes.size(), &config);
  WebPFreeDecBuffer(&config.output);  // as libwebp asks; the pixels are ours and stay
  if (status == VP8_STATUS_NOT_ENOUGH_DATA && !webp_truncated(bytes)) {
    return corrupt("damaged WebP image data: it needs more bytes than the file holds");
  }
  if (status != VP8_STATUS_OK) return webp_error(status, "image data");
  return shape;
}

template <typename Pixels>
Result<Shape> decode_to(std::span<const uint8_t> bytes, const ImageDecodeOptions& options,
                        Pixels& pixels) {
  if (is_jpeg(bytes)) return decode_jpeg(bytes, options, pixels);
  if (is_png(bytes)) return decode_png(bytes, options, pixels);
  if (is_webp(bytes)) return decode_webp(bytes, options, pixels);
  return not_an_image(bytes);
}

Status decode_one(const ImageInput& input, const ImageTransform& transform,
                  const ImageBatchOptions& options) {
  if (input.out == nullptr) return Status(StatusCode::kInvalidArgument, "no output slot");
  STOKER_ASSIGN_OR_RETURN(const ImageInfo info, probe_image(input.bytes));
  STOKER_ASSIGN_OR_RETURN(const FrameGeometry geometry,
                          transform.geometry(info.height, info.width, options.seed, options.epoch,
                                             input.id, input.camera));
  const OutputOptions conversion = transform.conversion(info.height, info.width);
  const int out_height = conversion.height;
  const int out_width = conversion.width;
  if (options.height > 0 && (out_height != options.height || out_width != options.width)) {
    return Status(StatusCode::kInvalidArgument,
                  "a " + std::to_string(info.width) + "x" + std::to_string(info.height) +
                      " image comes out " + std::to_string(out_width) + "x" +
                      std::to_string(out_height) + " while its slot holds " +
                      std::to_string(options.width) + "x" + std::to_string(options.height) +
                      "; give the transform a size");
  }
  // Decode no smaller than the output needs: the region shown, scaled to the output size.
  const int region_width = geometry.source.empty() ? info.width : geometry.source.width;
  const int region_height = geometry.source.empty() ? info.height : geometry.source.height;
  // A crop that leaves part of the image out is all that is decoded of a JPEG (see
  // ImageDecodeOptions::region); a whole image goes through TurboJPEG, as fast.
  // (At most the stored size, which the full scale reaches: a small region under a large
  // output would ask for more than an int holds.)
  const ImageDecodeOptions decode{
      .min_width = static_cast<int>(
          std::min(std::ceil(double(out_width) * info.width / region_width), double(info.width))),
      .min_height = static_cast<int>(std::min(
          std::ceil(double(out_height) * info.height / region_height), double(info.height))),
      .max_pixels = options.max_pixels,
      .region =
          is_part_of(geometry.source, info.width, info.height) ? geometry.source : CropRect{}};
  ThreadImageState& state = thread_state();
  STOKER_ASSIGN_OR_RETURN(const Shape shape, decode_to(input.bytes, decode, state.decoded));
  const CropRect crop =
      scale_crop(geometry.source, info.width, info.height, shape.width, shape.height);
  const bool in_place = transform.writes_in_place();
  uint8_t* target = input.out;
  if (!in_place) {
    state.converted.resize(ImageTransform::converted_bytes(out_height, out_width));
    target = state.converted.data();
  }
  STOKER_RETURN_IF_ERROR(state.converter.convert_rgb(state.decoded.data(), shape.width,
                                                     shape.height, shape.width * 3, conversion,
                                                     out_height, out_width, target, crop));
  if (in_place) {
    if (geometry.flip) transform.flip_in_place(input.out, out_height, out_width);
  } else {
    transform.finish(target, out_height, out_width, geometry.flip, input.out);
  }
  return Status();
}

}  // namespace

const char* image_format_name(ImageFormat format) {
  switch (format) {
    case ImageFormat::kJpeg:
      return "jpeg";
    case ImageFormat::kPng:
      return "png";
    case ImageFormat::kWebp:
      return "webp";
  }
  return "unknown";
}

Result<ImageInfo> probe_image(std::span<const uint8_t> bytes) {
  if (is_jpeg(bytes)) return probe_jpeg(bytes);
  if (is_png(bytes)) {
    spng_ihdr ihdr{};
    STOKER_ASSIGN_OR_RETURN(UniqueSpng ctx, open_png(bytes, &ihdr));
    if (ihdr.width == 0 || ihdr.height == 0 || ihdr.width > INT32_MAX || ihdr.height > INT32_MAX) {
      return corrupt("damaged PNG header: " + std::to_string(ihdr.width) + "x" +
                     std::to_string(ihdr.height));
    }
    return ImageInfo{.format = ImageFormat::kPng,
                     .width = static_cast<int>(ihdr.width),
                     .height = static_cast<int>(ihdr.height),
                     .channels = png_channels(ihdr.color_type),
                     .bit_depth = ihdr.bit_depth};
  }
  if (is_webp(bytes)) {
    STOKER_ASSIGN_OR_RETURN(const WebPBitstreamFeatures features, read_webp_features(bytes));
    return ImageInfo{.format = ImageFormat::kWebp,
                     .width = features.width,
                     .height = features.height,
                     .channels = features.has_alpha ? 4 : 3,
                     .bit_depth = 8};
  }
  return not_an_image(bytes);
}

Result<DecodedImage> decode_image(std::span<const uint8_t> bytes,
                                  const ImageDecodeOptions& options) {
  DecodedImage image;
  STOKER_ASSIGN_OR_RETURN(const Shape shape, decode_to(bytes, options, image.pixels));
  image.width = shape.width;
  image.height = shape.height;
  image.channels = shape.channels;
  image.bit_depth = shape.bit_depth;
  image.scale_num = shape.scale_num;
  image.scale_denom = shape.scale_denom;
  return image;
}

Status decode_images_into(std::span<const ImageInput> inputs, const ImageTransform& transform,
                          const ImageBatchOptions& options, std::span<Status> errors) {
  if (!errors.empty() && errors.size() != inputs.size()) {
    return Status(StatusCode::kInvalidArgument, "errors holds " + std::to_string(errors.size()) +
                                                    " statuses for " +
                                                    std::to_string(inputs.size()) + " images");
  }
  if (options.height < 0 || options.width < 0 || (options.height > 0) != (options.width > 0)) {
    return Status(StatusCode::kInvalidArgument, "the slot size must have both sides, or neither");
  }
  std::vector<Status> own(errors.empty() ? inputs.size() : 0);
  std::span<Status> outcome = errors.empty() ? std::span<Status>(own) : errors;
  const int threads = options.threads > 0 ? options.threads : usable_cores();
  core::parallel_for(inputs.size(), threads,
                     [&](size_t k) { outcome[k] = decode_one(inputs[k], transform, options); });
  if (errors.empty()) {
    for (size_t k = 0; k < inputs.size(); ++k) {
      if (!outcome[k].ok()) return outcome[k].with_context("image " + std::to_string(k));
    }
  }
  return Status();
}

}  // namespace stoker
