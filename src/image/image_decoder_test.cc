#include "stoker/image_decoder.h"

#include <gtest/gtest.h>
#include <spng.h>
#include <turbojpeg.h>
#include <webp/decode.h>
#include <webp/encode.h>

// jpeglib.h needs size_t and FILE declared before it.
// clang-format off
#include <cstddef>
#include <cstdio>
#include <jpeglib.h>
// clang-format on

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <thread>
#include <tuple>

namespace stoker {
namespace {

// A smooth, photo-like RGB8 picture (gradients and a few edges) with seeded noise.
std::vector<uint8_t> picture(int width, int height, uint32_t seed = 1) {
  std::mt19937 random(seed);
  std::vector<uint8_t> pixels(size_t(width) * height * 3);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      const int noise = static_cast<int>(random() % 9) - 4;
      const int values[3] = {255 * x / width, 255 * y / height, ((x / 16 + y / 16) % 2) * 160 + 40};
      for (int c = 0; c < 3; ++c) {
        pixels[(size_t(y) * width + x) * 3 + c] =
            static_cast<uint8_t>(std::clamp(values[c] + noise, 0, 255));
      }
    }
  }
  return pixels;
}

std::vector<uint8_t> encode_jpeg(const std::vector<uint8_t>& rgb, int width, int height,
                                 int quality = 90, int subsampling = TJSAMP_420) {
  tjhandle handle = tjInitCompress();
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  EXPECT_EQ(tjCompress2(handle, rgb.data(), width, 0, height, TJPF_RGB, &buffer, &size, subsampling,
                        quality, 0),
            0);
  std::vector<uint8_t> bytes(buffer, buffer + size);
  tjFree(buffer);
  tjDestroy(handle);
  return bytes;
}

// A PNG of `pixels` (stored samples, host-endian for 16-bit) with the given IHDR fields.
std::vector<uint8_t> encode_png(const std::vector<uint8_t>& pixels, int width, int height,
                                uint8_t color_type, uint8_t bit_depth,
                                const std::vector<spng_plte_entry>& palette = {}) {
  spng_ctx* ctx = spng_ctx_new(SPNG_CTX_ENCODER);
  spng_set_option(ctx, SPNG_ENCODE_TO_BUFFER, 1);
  spng_ihdr ihdr{};
  ihdr.width = width;
  ihdr.height = height;
  ihdr.color_type = color_type;
  ihdr.bit_depth = bit_depth;
  EXPECT_EQ(spng_set_ihdr(ctx, &ihdr), 0);
  if (!palette.empty()) {
    spng_plte plte{};
    plte.n_entries = static_cast<uint32_t>(palette.size());
    std::copy(palette.begin(), palette.end(), plte.entries);
    EXPECT_EQ(spng_set_plte(ctx, &plte), 0);
  }
  EXPECT_EQ(
      spng_encode_image(ctx, pixels.data(), pixels.size(), SPNG_FMT_PNG, SPNG_ENCODE_FINALIZE), 0);
  size_t size = 0;
  int error = 0;
  auto* buffer = static_cast<uint8_t*>(spng_get_png_buffer(ctx, &size, &error));
  EXPECT_EQ(error, 0);
  std::vector<uint8_t> bytes(buffer, buffer + size);
  std::free(buffer);
  spng_ctx_free(ctx);
  return bytes;
}

// A WebP of RGB8 (channels 3) or RGBA8 (channels 4) pixels: lossless, or lossy at `quality`.
std::vector<uint8_t> encode_webp(const std::vector<uint8_t>& pixels, int width, int height,
                                 int channels, bool lossless, float quality = 80) {
  uint8_t* buffer = nullptr;
  const int stride = width * channels;
  size_t size = 0;
  if (channels == 3) {
    size = lossless ? WebPEncodeLosslessRGB(pixels.data(), width, height, stride, &buffer)
                    : WebPEncodeRGB(pixels.data(), width, height, stride, quality, &buffer);
  } else {
    size = lossless ? WebPEncodeLosslessRGBA(pixels.data(), width, height, stride, &buffer)
                    : WebPEncodeRGBA(pixels.data(), width, height, stride, quality, &buffer);
  }
  EXPECT_GT(size, 0u);
  std::vector<uint8_t> bytes(buffer, buffer + size);
  WebPFree(buffer);
  return bytes;
}

// `rgb` with an alpha channel that varies and is never 0 (a lossless encoder may rewrite the
// colour under fully transparent pixels).
std::vector<uint8_t> with_alpha(const std::vector<uint8_t>& rgb) {
  std::vector<uint8_t> rgba;
  for (size_t p = 0; p < rgb.size() / 3; ++p) {
    rgba.insert(rgba.end(), {rgb[3 * p], rgb[3 * p + 1], rgb[3 * p + 2], uint8_t(1 + p % 255)});
  }
  return rgba;
}

std::vector<uint8_t> decode_with_turbojpeg(const std::vector<uint8_t>& jpeg, int width,
                                           int height) {
  tjhandle handle = tjInitDecompress();
  std::vector<uint8_t> rgb(size_t(width) * height * 3);
  EXPECT_EQ(
      tjDecompress2(handle, jpeg.data(), jpeg.size(), rgb.data(), width, 0, height, TJPF_RGB, 0),
      0);
  tjDestroy(handle);
  return rgb;
}

// How a JPEG is laid out, for the libjpeg encoder below: the luma sampling factors (chroma at
// 1x1; 2x2 is 4:2:0, 2x1 4:2:2, 1x2 4:4:0, 1x1 4:4:4), gray, progressive, restart markers.
struct JpegKind {
  const char* name;
  int h_samp = 2, v_samp = 2;
  bool gray = false, progressive = false;
  int restart_rows = 0;
};

const JpegKind kJpegKinds[] = {
    {.name = "4:2:0"},
    {.name = "4:2:2", .v_samp = 1},
    {.name = "4:4:0", .h_samp = 1},
    {.name = "4:4:4", .h_samp = 1, .v_samp = 1},
    {.name = "gray", .gray = true},
    {.name = "4:2:0 progressive", .progressive = true},
    {.name = "4:2:2 progressive", .v_samp = 1, .progressive = true},
    {.name = "4:2:0 restart markers", .restart_rows = 1},
    {.name = "4:4:4 progressive restart",
     .h_samp = 1,
     .v_samp = 1,
     .progressive = true,
     .restart_rows = 2},
};

// libjpeg's encoder (the defaults, quality 85) for the layouts TurboJPEG's cannot make.
std::vector<uint8_t> encode_jpeg_kind(const std::vector<uint8_t>& rgb, int width, int height,
                                      const JpegKind& kind) {
  jpeg_compress_struct cinfo;
  jpeg_error_mgr error;
  cinfo.err = jpeg_std_error(&error);
  jpeg_create_compress(&cinfo);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &buffer, &size);
  cinfo.image_width = width;
  cinfo.image_height = height;
  cinfo.input_components = 3;
  cinfo.in_color_space = JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, 85, TRUE);
  if (kind.gray) {
    jpeg_set_colorspace(&cinfo, JCS_GRAYSCALE);
  } else {
    cinfo.comp_info[0].h_samp_factor = kind.h_samp;
    cinfo.comp_info[0].v_samp_factor = kind.v_samp;
  }
  if (kind.progressive) jpeg_simple_progression(&cinfo);
  cinfo.restart_in_rows = kind.restart_rows;
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(&rgb[size_t(cinfo.next_scanline) * width * 3]);
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  std::vector<uint8_t> bytes(buffer, buffer + size);
  std::free(buffer);
  jpeg_destroy_compress(&cinfo);
  return bytes;
}

// The region of a width x height decode that stands for `region` of the stored image: the
// transforms' mapping of a crop (image_decoder.cc, scale_crop).
CropRect scaled_region(const CropRect& region, int stored_width, int stored_height, int width,
                       int height) {
  if (width == stored_width && height == stored_height) return region;
  const double sx = double(width) / stored_width, sy = double(height) / stored_height;
  CropRect out;
  out.width = std::clamp(static_cast<int>(std::lround(region.width * sx)), 1, width);
  out.height = std::clamp(static_cast<int>(std::lround(region.height * sy)), 1, height);
  out.x = std::clamp(static_cast<int>(std::lround(region.x * sx)), 0, width - out.width);
  out.y = std::clamp(static_cast<int>(std::lround(region.y * sy)), 0, height - out.height);
  return out;
}

// A random region of a width x height image, at least 1x1.
CropRect random_region(std::mt19937& random, int width, int height) {
  CropRect region;
  region.x = static_cast<int>(random() % width);
  region.y = static_cast<int>(random() % height);
  region.width = 1 + static_cast<int>(random() % (width - region.x));
  region.height = 1 + static_cast<int>(random() % (height - region.y));
  return region;
}

// `jpeg` with `count` bytes after its EOI marker.
std::vector<uint8_t> with_trailing_bytes(std::vector<uint8_t> jpeg, size_t count) {
  jpeg.insert(jpeg.end(), count, 0x00);
  return jpeg;
}

std::shared_ptr<const ImageTransform> make(const TransformOptions& options) {
  auto transform = ImageTransform::create(options);
  EXPECT_TRUE(transform.ok()) << transform.status().message();
  return *transform;
}

TEST(ProbeImage, ReadsFormatAndSizeFromTheHeader) {
  const auto rgb = picture(50, 30);
  auto jpeg = probe_image(encode_jpeg(rgb, 50, 30));
  ASSERT_TRUE(jpeg.ok()) << jpeg.status().message();
  EXPECT_EQ(jpeg->format, ImageFormat::kJpeg);
  EXPECT_EQ(jpeg->width, 50);
  EXPECT_EQ(jpeg->height, 30);
  EXPECT_EQ(jpeg->channels, 3);
  auto png = probe_image(encode_png(rgb, 50, 30, SPNG_COLOR_TYPE_TRUECOLOR, 8));
  ASSERT_TRUE(png.ok()) << png.status().message();
  EXPECT_EQ(png->format, ImageFormat::kPng);
  EXPECT_EQ(png->width, 50);
  EXPECT_EQ(png->height, 30);
  EXPECT_EQ(png->bit_depth, 8);
  for (const bool lossless : {false, true}) {
    for (const int channels : {3, 4}) {
      const auto webp =
          encode_webp(channels == 3 ? rgb : with_alpha(rgb), 50, 30, channels, lossless);
      auto info = probe_image(webp);
      ASSERT_TRUE(info.ok()) << info.status().message();
      EXPECT_EQ(info->format, ImageFormat::kWebp);
      EXPECT_STREQ(image_format_name(info->format), "webp");
      EXPECT_EQ(info->width, 50);
      EXPECT_EQ(info->height, 30);
      EXPECT_EQ(info->channels, channels) << lossless;
      EXPECT_EQ(info->bit_depth, 8);
      // The header alone is enough: the first chunk's header, not its data.
      auto prefix = probe_image(std::span(webp).first(40));
      ASSERT_TRUE(prefix.ok()) << prefix.status().message();
      EXPECT_EQ(prefix->width, 50);
    }
  }
}

TEST(DecodeImage, JpegAtFullScaleEqualsLibjpegTurbo) {
  const auto rgb = picture(97, 61);
  const auto jpeg = encode_jpeg(rgb, 97, 61);
  auto image = decode_image(jpeg);
  ASSERT_TRUE(image.ok()) << image.status().message();
  EXPECT_EQ(image->width, 97);
  EXPECT_EQ(image->height, 61);
  EXPECT_EQ(image->scale_num, image->scale_denom);
  EXPECT_EQ(image->pixels, decode_with_turbojpeg(jpeg, 97, 61));
}

TEST(DecodeImage, JpegPicksTheSmallestDctScaleCoveringTheTarget) {
  const auto jpeg = encode_jpeg(picture(500, 375), 500, 375);
  // 224 / 375 = 0.597: 5/8 is the smallest eighth that keeps both sides >= 224.
  auto image = decode_image(jpeg, {.min_width = 224, .min_height = 224});
  ASSERT_TRUE(image.ok()) << image.status().message();
  EXPECT_EQ(image->scale_num * 8, 5 * image->scale_denom);
  EXPECT_EQ(image->width, 313);  // ceil(500 * 5 / 8)
  EXPECT_EQ(image->height, 235);
  auto eighth = decode_image(jpeg, {.min_width = 40, .min_height = 40});
  ASSERT_TRUE(eighth.ok());
  EXPECT_EQ(eighth->scale_num * 8, eighth->scale_denom);
  EXPECT_EQ(eighth->width, 63);
  // A target above the stored size decodes at full size, never larger.
  auto full = decode_image(jpeg, {.min_width = 1000, .min_height = 1000});
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(full->width, 500);
}

TEST(DecodeImage, JpegRegionHasTheFullDecodesPixelsForEveryLayoutAndScale) {
  std::mt19937 random(11);
  const int sizes[][2] = {{500, 375}, {97, 61}, {333, 217}, {17, 9}};
  for (const JpegKind& kind : kJpegKinds) {
    for (const auto& size : sizes) {
      const int w = size[0], h = size[1];
      const auto jpeg = encode_jpeg_kind(picture(w, h, w + h), w, h, kind);
      for (int eighths = 1; eighths <= 8; ++eighths) {
        const ImageDecodeOptions scaled{.min_width = w * eighths / 8,
                                        .min_height = h * eighths / 8};
        auto full = decode_image(jpeg, scaled);
        ASSERT_TRUE(full.ok()) << full.status().message();
        for (int trial = 0; trial < 12; ++trial) {
          ImageDecodeOptions options = scaled;
          options.region = random_region(random, w, h);
          auto part = decode_image(jpeg, options);
          ASSERT_TRUE(part.ok()) << part.status().message();
          ASSERT_EQ(part->width, full->width);
          ASSERT_EQ(part->height, full->height);
          const CropRect r = scaled_region(options.region, w, h, full->width, full->height);
          for (int y = r.y; y < r.y + r.height; ++y) {
            const size_t row = (size_t(y) * full->width + r.x) * 3;
            ASSERT_TRUE(std::equal(full->pixels.begin() + row,
                                   full->pixels.begin() + row + size_t(r.width) * 3,
                                   part->pixels.begin() + row))
                << kind.name << " " << w << "x" << h << " at " << eighths << "/8, region "
                << options.region.width << "x" << options.region.height << " at ("
                << options.region.x << ", " << options.region.y << "), row " << y;
          }
        }
      }
    }
  }
}

TEST(DecodeImage, JpegRegionDecodesOnlyTheRowsItNeedsUnlessTheEndMarkerIsMissing) {
  const int w = 320, h = 240;
  const auto jpeg = encode_jpeg(picture(w, h), w, h);
  const ImageDecodeOptions top{.region = {.x = 0, .y = 0, .width = 100, .height = 60}};
  auto full = decode_image(jpeg);
  ASSERT_TRUE(full.ok());
  const size_t below = size_t(w) * 3 * 100;  // rows from 100 on: far below the region's margin
  auto part = decode_image(jpeg, top);
  ASSERT_TRUE(part.ok()) << part.status().message();
  EXPECT_TRUE(std::all_of(part->pixels.begin() + below, part->pixels.end(),
                          [](uint8_t v) { return v == 0; }));
  // A few bytes after the end marker still decode the region only; more, and the file is not
  // known to be whole: decoded in full.
  auto padded = decode_image(with_trailing_bytes(jpeg, 8), top);
  ASSERT_TRUE(padded.ok());
  EXPECT_EQ(padded->pixels, part->pixels);
  auto unmarked = decode_image(with_trailing_bytes(jpeg, 64), top);
  ASSERT_TRUE(unmarked.ok());
  EXPECT_EQ(unmarked->pixels, full->pixels);
}

TEST(DecodeImage, TruncatedJpegFailsWhateverTheRegion) {
  const int w = 300, h = 200;
  std::mt19937 random(3);
  for (const JpegKind& kind : {kJpegKinds[0], kJpegKinds[5]}) {
    const auto jpeg = encode_jpeg_kind(picture(w, h, 9), w, h, kind);
    for (const size_t keep : {jpeg.size() / 2, jpeg.size() * 9 / 10, jpeg.size() - 3}) {
      const std::vector<uint8_t> truncated(jpeg.begin(), jpeg.begin() + keep);
      std::vector<CropRect> regions = {{.x = 0, .y = 0, .width = w, .height = 10},
                                       {.x = 0, .y = 0, .width = w, .height = h},
                                       {.x = 50, .y = 190, .width = 20, .height = 10}};
      for (int k = 0; k < 10; ++k) regions.push_back(random_region(random, w, h));
      for (const CropRect& region : regions) {
        auto image =
            decode_image(truncated, {.min_width = 100, .min_height = 60, .region = region});
        ASSERT_FALSE(image.ok()) << kind.name << " " << keep;
        EXPECT_EQ(image.status().code(), StatusCode::kCorruptData);
        EXPECT_NE(image.status().message().find("truncated JPEG"), std::string::npos)
            << image.status().message();
      }
    }
  }
}

TEST(DecodeImage, JpegRegionOutsideTheImageIsRefused) {
  const auto jpeg = encode_jpeg(picture(40, 30), 40, 30);
  for (const CropRect region : {CropRect{.x = 30, .y = 0, .width = 11, .height = 5},
                                CropRect{.x = -1, .y = 0, .width = 5, .height = 5},
                                CropRect{.x = 0, .y = 29, .width = 5, .height = 2}}) {
    auto image = decode_image(jpeg, {.region = region});
    ASSERT_FALSE(image.ok());
    EXPECT_EQ(image.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(image.status().message().find("leaves the 40x30 image"), std::string::npos)
        << image.status().message();
  }
}

TEST(DecodeImage, CmykJpegIsRefusedWithOrWithoutARegion) {
  const int w = 32, h = 24;
  std::vector<uint8_t> cmyk(size_t(w) * h * 4, 0x40);
  tjhandle handle = tjInitCompress();
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  ASSERT_EQ(tjCompress2(handle, cmyk.data(), w, 0, h, TJPF_CMYK, &buffer, &size, TJSAMP_444, 90, 0),
            0);
  const std::vector<uint8_t> jpeg(buffer, buffer + size);
  tjFree(buffer);
  tjDestroy(handle);
  for (const CropRect region : {CropRect{}, CropRect{.x = 4, .y = 4, .width = 8, .height = 8}}) {
    auto image = decode_image(jpeg, {.region = region});
    ASSERT_FALSE(image.ok());
    EXPECT_EQ(image.status().code(), StatusCode::kUnsupported) << image.status().message();
  }
}

TEST(DecodeImage, PngOfEveryColourTypeBecomesRgb8) {
  const int w = 7, h = 5;
  const auto rgb = picture(w, h);
  auto check = [&](const std::vector<uint8_t>& png, const std::vector<uint8_t>& expected) {
    auto image = decode_image(png);
    ASSERT_TRUE(image.ok()) << image.status().message();
    EXPECT_EQ(image->channels, 3);
    EXPECT_EQ(image->bit_depth, 8);
    EXPECT_EQ(image->pixels, expected);
  };
  check(encode_png(rgb, w, h, SPNG_COLOR_TYPE_TRUECOLOR, 8), rgb);
  // RGBA: alpha dropped.
  std::vector<uint8_t> rgba;
  for (size_t p = 0; p < rgb.size() / 3; ++p) {
    rgba.insert(rgba.end(), {rgb[3 * p], rgb[3 * p + 1], rgb[3 * p + 2], uint8_t(p * 7)});
  }
  check(encode_png(rgba, w, h, SPNG_COLOR_TYPE_TRUECOLOR_ALPHA, 8), rgb);
  // Gray: the value in all three channels.
  std::vector<uint8_t> gray(size_t(w) * h), gray_rgb;
  for (size_t p = 0; p < gray.size(); ++p) {
    gray[p] = static_cast<uint8_t>(p * 5);
    gray_rgb.insert(gray_rgb.end(), {gray[p], gray[p], gray[p]});
  }
  check(encode_png(gray, w, h, SPNG_COLOR_TYPE_GRAYSCALE, 8), gray_rgb);
  // 16-bit RGB: the high byte of each sample.
  std::vector<uint8_t> rgb16(rgb.size() * 2);
  for (size_t i = 0; i < rgb.size(); ++i) {
    const uint16_t value = static_cast<uint16_t>(rgb[i] * 257 + (i % 200));
    std::memcpy(&rgb16[2 * i], &value, 2);
  }
  std::vector<uint8_t> high(rgb.size());
  for (size_t i = 0; i < rgb.size(); ++i) {
    uint16_t value;
    std::memcpy(&value, &rgb16[2 * i], 2);
    high[i] = static_cast<uint8_t>(value >> 8);
  }
  check(encode_png(rgb16, w, h, SPNG_COLOR_TYPE_TRUECOLOR, 16), high);
  // Palette.
  std::vector<spng_plte_entry> palette = {{10, 20, 30, 255}, {200, 100, 0, 255}, {1, 2, 3, 255}};
  std::vector<uint8_t> indices(size_t(w) * h), palette_rgb;
  for (size_t p = 0; p < indices.size(); ++p) {
    indices[p] = static_cast<uint8_t>(p % 3);
    const auto& e = palette[indices[p]];
    palette_rgb.insert(palette_rgb.end(), {e.red, e.green, e.blue});
  }
  check(encode_png(indices, w, h, SPNG_COLOR_TYPE_INDEXED, 8, palette), palette_rgb);
}

TEST(DecodeImage, LosslessWebpDecodesToTheEncodedPixels) {
  const int w = 37, h = 23;
  const auto rgb = picture(w, h);
  for (const auto& webp :
       {encode_webp(rgb, w, h, 3, true), encode_webp(with_alpha(rgb), w, h, 4, true)}) {
    auto image = decode_image(webp);
    ASSERT_TRUE(image.ok()) << image.status().message();
    EXPECT_EQ(image->width, w);
    EXPECT_EQ(image->height, h);
    EXPECT_EQ(image->channels, 3);
    EXPECT_EQ(image->scale_num, image->scale_denom);
    EXPECT_EQ(image->pixels, rgb);  // alpha dropped
  }
}

TEST(DecodeImage, LossyWebpEqualsLibwebpsOwnDecodeAndIsCloseToTheSource) {
  const int w = 61, h = 45;
  const auto rgb = picture(w, h, 3);
  for (const int channels : {3, 4}) {
    const auto webp = encode_webp(channels == 3 ? rgb : with_alpha(rgb), w, h, channels, false, 90);
    auto image = decode_image(webp);
    ASSERT_TRUE(image.ok()) << image.status().message();
    int width = 0, height = 0;
    uint8_t* reference = WebPDecodeRGB(webp.data(), webp.size(), &width, &height);
    ASSERT_NE(reference, nullptr);
    EXPECT_EQ(image->pixels, std::vector<uint8_t>(reference, reference + size_t(w) * h * 3));
    WebPFree(reference);
    double total = 0;
    for (size_t i = 0; i < rgb.size(); ++i) total += std::abs(int(image->pixels[i]) - int(rgb[i]));
    EXPECT_LT(total / rgb.size(), 12.0) << channels;  // lossy, but this picture
  }
}

TEST(DecodeImage, Gray16PngKeepsItsValuesWhenAsked) {
  const int w = 9, h = 4;
  std::vector<uint16_t> depth(size_t(w) * h);
  for (size_t p = 0; p < depth.size(); ++p) depth[p] = static_cast<uint16_t>(p * 1777 + 3);
  std::vector<uint8_t> bytes(depth.size() * 2);
  std::memcpy(bytes.data(), depth.data(), bytes.size());
  const auto png = encode_png(bytes, w, h, SPNG_COLOR_TYPE_GRAYSCALE, 16);
  auto image = decode_image(png, {.keep_16bit_gray = true});
  ASSERT_TRUE(image.ok()) << image.status().message();
  EXPECT_EQ(image->channels, 1);
  EXPECT_EQ(image->bit_depth, 16);
  std::vector<uint16_t> values(depth.size());
  ASSERT_EQ(image->pixels.size(), values.size() * 2);
  std::memcpy(values.data(), image->pixels.data(), image->pixels.size());
  EXPECT_EQ(values, depth);
}

TEST(DecodeImage, BadBytesGiveErrorsThatSayWhatIsWrong) {
  const auto rgb = picture(64, 48);
  const auto jpeg = encode_jpeg(rgb, 64, 48);
  const auto png = encode_png(rgb, 64, 48, SPNG_COLOR_TYPE_TRUECOLOR, 8);
  auto expect_error = [](const std::vector<uint8_t>& bytes, const std::string& words) {
    auto image = decode_image(bytes);
    ASSERT_FALSE(image.ok());
    EXPECT_EQ(image.status().code(), StatusCode::kCorruptData);
    EXPECT_NE(image.status().message().find(words), std::string::npos) << image.status().message();
  };
  expect_error({}, "no bytes");
  expect_error({'h', 'e', 'l', 'l', 'o'}, "not a JPEG, PNG or WebP");
  expect_error(std::vector<uint8_t>(jpeg.begin(), jpeg.begin() + jpeg.size() / 2),
               "truncated JPEG");
  expect_error(std::vector<uint8_t>(jpeg.begin(), jpeg.begin() + 20), "JPEG");
  expect_error(std::vector<uint8_t>(png.begin(), png.begin() + png.size() / 2), "PNG");
  expect_error(std::vector<uint8_t>(png.begin(), png.begin() + 12), "PNG");
  std::vector<uint8_t> flipped = png;
  flipped[png.size() / 2] ^= 0x55;  // a damaged IDAT: its CRC no longer matches
  expect_error(flipped, "PNG");
  for (const bool lossless : {false, true}) {
    const auto webp = encode_webp(rgb, 64, 48, 3, lossless);
    expect_error(std::vector<uint8_t>(webp.begin(), webp.begin() + webp.size() / 2),
                 "truncated WebP");
    expect_error(std::vector<uint8_t>(webp.begin(), webp.begin() + 16), "truncated WebP");
    std::vector<uint8_t> foreign_chunk = webp;
    std::memcpy(foreign_chunk.data() + 12, "ABCD", 4);  // the image chunk's name
    expect_error(foreign_chunk, "WebP");
    std::vector<uint8_t> garbled = webp;
    for (size_t i = 30; i < garbled.size(); ++i) garbled[i] ^= 0xA5;
    expect_error(garbled, "damaged WebP");  // every byte there, not truncated
    auto big = decode_image(webp, {.max_pixels = 100});
    ASSERT_FALSE(big.ok());
    EXPECT_EQ(big.status().code(), StatusCode::kResourceExhausted);
  }
  // Over the pixel limit: refused before allocating.
  auto big = decode_image(jpeg, {.max_pixels = 100});
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), StatusCode::kResourceExhausted);
}

TEST(DecodeImagesInto, Uint8WithoutResizeIsTheDecodedImage) {
  const auto rgb = picture(40, 24);
  const auto png = encode_png(rgb, 40, 24, SPNG_COLOR_TYPE_TRUECOLOR, 8);
  for (Layout layout : {Layout::kNHWC, Layout::kNCHW}) {
    auto transform = make({.layout = layout});
    std::vector<uint8_t> out(rgb.size());
    const ImageInput input{.bytes = png, .out = out.data()};
    Status status = decode_images_into({&input, 1}, *transform, {});
    ASSERT_TRUE(status.ok()) << status.message();
    for (int y = 0; y < 24; ++y) {
      for (int x = 0; x < 40; ++x) {
        for (int c = 0; c < 3; ++c) {
          const size_t at = layout == Layout::kNHWC ? (size_t(y) * 40 + x) * 3 + c
                                                    : (size_t(c) * 24 + y) * 40 + x;
          ASSERT_EQ(out[at], rgb[(size_t(y) * 40 + x) * 3 + c]) << y << " " << x << " " << c;
        }
      }
    }
  }
}

TEST(DecodeImagesInto, ReducedDctScaleThenResizeStaysCloseToAFullDecodeThenResize) {
  const int w = 500, h = 375;
  const auto jpeg = encode_jpeg(picture(w, h), w, h);
  auto transform = make({.resize_height = 224, .resize_width = 224, .layout = Layout::kNHWC});
  std::vector<uint8_t> fast(224 * 224 * 3);
  const ImageInput input{.bytes = jpeg, .out = fast.data()};
  ASSERT_TRUE(decode_images_into({&input, 1}, *transform, {.height = 224, .width = 224}).ok());
  // The reference: a full-size decode, resized by the same transform from a PNG of it.
  auto full = decode_image(jpeg);
  ASSERT_TRUE(full.ok());
  const auto png = encode_png(full->pixels, w, h, SPNG_COLOR_TYPE_TRUECOLOR, 8);
  std::vector<uint8_t> reference(fast.size());
  const ImageInput reference_input{.bytes = png, .out = reference.data()};
  ASSERT_TRUE(decode_images_into({&reference_input, 1}, *transform, {}).ok());
  double total = 0;
  for (size_t i = 0; i < fast.size(); ++i) total += std::abs(int(fast[i]) - int(reference[i]));
  // Measured 3.9 on this picture, whose 16-pixel checkerboard of 160-level steps and per-pixel
  // noise are the worst case for a reduced-scale IDCT; photos come out near 2 (see
  // tests/python/test_image_decoder.py).
  EXPECT_LT(total / fast.size(), 5.0);
}

TEST(DecodeImagesInto, RandomResizedCropDecodesTheCropOnlyAndWritesTheFullDecodesBytes) {
  // The reference: the same bytes with more trailing bytes than the region path allows after
  // the end marker, which TurboJPEG decodes in full (see ImageDecodeOptions::region).
  const int w = 500, h = 375;
  for (const JpegKind& kind : kJpegKinds) {
    const auto jpeg = encode_jpeg_kind(picture(w, h, 21), w, h, kind);
    const auto whole = with_trailing_bytes(jpeg, 64);
    for (const int side : {224, 64}) {
      for (const DType dtype : {DType::kUint8, DType::kFloat32}) {
        auto transform = make({.crop = CropMode::kRandomResized,
                               .crop_height = side,
                               .crop_width = side,
                               .hflip_probability = 0.5,
                               .dtype = dtype});
        const size_t bytes = transform->output_bytes(side, side);
        std::vector<uint8_t> out(24 * bytes), reference(out.size());
        std::vector<ImageInput> inputs, reference_inputs;
        for (uint64_t id = 0; id < 24; ++id) {
          inputs.push_back({.bytes = jpeg, .out = out.data() + id * bytes, .id = id});
          reference_inputs.push_back(
              {.bytes = whole, .out = reference.data() + id * bytes, .id = id});
        }
        const ImageBatchOptions options{.height = side, .width = side, .seed = 5, .epoch = 2};
        ASSERT_TRUE(decode_images_into(inputs, *transform, options).ok());
        ASSERT_TRUE(decode_images_into(reference_inputs, *transform, options).ok());
        EXPECT_EQ(out, reference) << kind.name << " " << side;
      }
    }
  }
}

TEST(DecodeImagesInto, WebpDecodesWholeAndTheTransformResizesIt) {
  const int w = 150, h = 110;
  const auto webp = encode_webp(picture(w, h, 5), w, h, 3, false, 85);
  auto transform = make({.resize_height = 56, .resize_width = 64, .layout = Layout::kNHWC});
  std::vector<uint8_t> out(56 * 64 * 3);
  const ImageInput input{.bytes = webp, .out = out.data()};
  ASSERT_TRUE(decode_images_into({&input, 1}, *transform, {.height = 56, .width = 64}).ok());
  // The same transform over a PNG of the full decode: the same bytes, no scaled decode between.
  auto full = decode_image(webp);
  ASSERT_TRUE(full.ok());
  const auto png = encode_png(full->pixels, w, h, SPNG_COLOR_TYPE_TRUECOLOR, 8);
  std::vector<uint8_t> reference(out.size());
  const ImageInput reference_input{.bytes = png, .out = reference.data()};
  ASSERT_TRUE(decode_images_into({&reference_input, 1}, *transform, {}).ok());
  EXPECT_EQ(out, reference);
}

TEST(DecodeImagesInto, TransformsMatchTheVideoPathAndThreadsDoNotChangeBytes) {
  std::vector<std::vector<uint8_t>> encoded;
  for (uint32_t k = 0; k < 12; ++k) {
    const int w = 120 + 8 * int(k), h = 90 + 4 * int(k);
    encoded.push_back(k % 2 ? encode_jpeg(picture(w, h, k), w, h)
                            : encode_png(picture(w, h, k), w, h, SPNG_COLOR_TYPE_TRUECOLOR, 8));
  }
  auto transform = make({.crop = CropMode::kRandomResized,
                         .crop_height = 64,
                         .crop_width = 64,
                         .hflip_probability = 0.5,
                         .normalize = true,
                         .mean = {0.5f, 0.5f, 0.5f},
                         .std = {0.25f, 0.25f, 0.25f},
                         .dtype = DType::kFloat32});
  const size_t bytes = transform->output_bytes(64, 64);
  auto run = [&](int threads) {
    std::vector<uint8_t> out(encoded.size() * bytes);
    std::vector<ImageInput> inputs;
    for (size_t k = 0; k < encoded.size(); ++k) {
      inputs.push_back({.bytes = encoded[k], .out = out.data() + k * bytes, .id = k});
    }
    Status status = decode_images_into(inputs, *transform,
                                       {.height = 64, .width = 64, .seed = 7, .threads = threads});
    EXPECT_TRUE(status.ok()) << status.message();
    return out;
  };
  const auto one = run(1);
  EXPECT_EQ(one, run(4));
  // Normalized values lie in [(0 - 0.5) / 0.25, (1 - 0.5) / 0.25].
  const float* values = reinterpret_cast<const float*>(one.data());
  for (size_t i = 0; i < one.size() / 4; ++i) {
    ASSERT_GE(values[i], -2.f);
    ASSERT_LE(values[i], 2.f);
  }
}

TEST(DecodeImagesInto, FailuresGoToTheirOwnImage) {
  const auto good = encode_png(picture(16, 16), 16, 16, SPNG_COLOR_TYPE_TRUECOLOR, 8);
  const std::vector<uint8_t> bad = {1, 2, 3};
  const auto other_size = encode_png(picture(8, 16), 8, 16, SPNG_COLOR_TYPE_TRUECOLOR, 8);
  auto transform = make({});
  std::vector<uint8_t> out(3 * 16 * 16 * 3);
  std::vector<ImageInput> inputs = {{.bytes = good, .out = out.data()},
                                    {.bytes = bad, .out = out.data() + 768},
                                    {.bytes = other_size, .out = out.data() + 1536}};
  std::vector<Status> errors(3);
  ASSERT_TRUE(decode_images_into(inputs, *transform, {.height = 16, .width = 16}, errors).ok());
  EXPECT_TRUE(errors[0].ok());
  EXPECT_EQ(errors[1].code(), StatusCode::kCorruptData);
  EXPECT_EQ(errors[2].code(), StatusCode::kInvalidArgument);
  EXPECT_NE(errors[2].message().find("8x16 image"), std::string::npos) << errors[2].message();
  Status first = decode_images_into(inputs, *transform, {.height = 16, .width = 16});
  EXPECT_NE(first.message().find("image 1:"), std::string::npos) << first.message();
}

// Found in a shard whose member had its last 40 bytes zeroed (which reached into the header of
// a small JPEG): TurboJPEG's header reader leaves its decompressor mid-header when it fails, so
// the next image on that thread read as "truncated JPEG: the bytes end inside its header" and a
// loader under on_error="skip" lost the intact neighbour too. Every damage, then intact images
// of every format and path (whole, reduced DCT scale, region), on one thread: each intact
// image decodes to the bytes it decodes to alone.
TEST(DecodeImagesInto, AnImageAfterADamagedOneOnTheSameThreadDecodesAsAlone) {
  const auto small_jpeg = encode_jpeg(picture(33, 17, 4), 33, 17);
  const auto jpeg = encode_jpeg_kind(picture(120, 90, 5), 120, 90, kJpegKinds[0]);
  const auto progressive = encode_jpeg_kind(picture(120, 90, 6), 120, 90, kJpegKinds[5]);
  const auto png = encode_png(picture(40, 30, 7), 40, 30, SPNG_COLOR_TYPE_TRUECOLOR, 8);
  const auto webp = encode_webp(picture(40, 30, 8), 40, 30, 3, false);
  const auto zero_tail = [](std::vector<uint8_t> bytes, size_t count) {
    std::fill(bytes.end() - static_cast<std::ptrdiff_t>(std::min(count, bytes.size())), bytes.end(),
              0);
    return bytes;
  };
  const auto cut = [](const std::vector<uint8_t>& bytes, size_t keep) {
    return std::vector<uint8_t>(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(keep));
  };
  const auto garble = [](std::vector<uint8_t> bytes, size_t from, size_t to) {
    for (size_t i = from; i < std::min(to, bytes.size()); ++i) bytes[i] ^= 0xA5;
    return bytes;
  };
  const auto unknown_marker = [](std::vector<uint8_t> bytes) {  // its first DHT's marker
    const uint8_t dht[] = {0xFF, 0xC4};
    auto at = std::search(bytes.begin(), bytes.end(), std::begin(dht), std::end(dht));
    EXPECT_NE(at, bytes.end());
    if (at != bytes.end()) at[1] = 0xA5;
    return bytes;
  };
  const std::vector<std::pair<std::string, std::vector<uint8_t>>> damaged = {
      {"small JPEG, last 40 bytes zeroed (into its header)", zero_tail(small_jpeg, 40)},
      {"small JPEG, all but SOI zeroed", zero_tail(small_jpeg, small_jpeg.size() - 2)},
      {"JPEG, last 40 bytes zeroed", zero_tail(jpeg, 40)},
      {"JPEG cut inside its header", cut(jpeg, 20)},
      {"JPEG cut in half", cut(jpeg, jpeg.size() / 2)},
      {"JPEG garbled from inside its header", garble(jpeg, 30, jpeg.size())},
      {"JPEG with an unknown marker in its header, its end marker kept", unknown_marker(jpeg)},
      {"progressive JPEG cut in half", cut(progressive, progressive.size() / 2)},
      {"progressive JPEG, last 40 bytes zeroed", zero_tail(progressive, 40)},
      {"PNG cut in half", cut(png, png.size() / 2)},
      {"WebP cut in half", cut(webp, webp.size() / 2)},
      {"no bytes", {}},
      {"text named .jpg", {'h', 'e', 'l', 'l', 'o', '\n'}},
  };
  struct Way {
    std::string name;
    ImageDecodeOptions options;
  };
  const std::vector<Way> ways = {
      {"whole", {}},
      {"scaled", {.min_width = 30, .min_height = 20}},
      {"region", {.region = {.x = 10, .y = 5, .width = 20, .height = 12}}},
  };
  const std::vector<std::pair<std::string, const std::vector<uint8_t>*>> intact = {
      {"small JPEG", &small_jpeg},
      {"JPEG", &jpeg},
      {"progressive JPEG", &progressive},
      {"PNG", &png},
      {"WebP", &webp}};
  // What each intact image decodes to alone: on a thread of its own, with fresh decoders.
  std::map<std::pair<std::string, std::string>, std::vector<uint8_t>> alone;
  for (const auto& [name, bytes] : intact) {
    for (const Way& way : ways) {
      std::thread([&, name = name, bytes = bytes] {
        auto image = decode_image(*bytes, way.options);
        ASSERT_TRUE(image.ok()) << name << " " << way.name << ": " << image.status().message();
        alone[std::make_pair(name, way.name)] = image->pixels;
      }).join();
    }
  }
  auto transform = make({.crop = CropMode::kRandomResized, .crop_height = 16, .crop_width = 16});
  for (const auto& [what, bad] : damaged) {
    std::thread([&, what = what, bad = bad] {
      for (const auto& [name, bytes] : intact) {
        for (const Way& way : ways) {
          ASSERT_FALSE(decode_image(bad, way.options).ok()) << what;
          auto image = decode_image(*bytes, way.options);
          ASSERT_TRUE(image.ok()) << name << " " << way.name << " after " << what << ": "
                                  << image.status().message();
          EXPECT_EQ(image->pixels, (alone[std::make_pair(name, way.name)]))
              << name << " " << way.name << " after " << what;
        }
        // A batch of one thread: the damaged image, then the intact one twice.
        std::vector<uint8_t> out(3 * 16 * 16 * 3);
        const std::vector<ImageInput> inputs = {
            {.bytes = bad, .out = out.data(), .id = 0},
            {.bytes = *bytes, .out = out.data() + 768, .id = 1},
            {.bytes = *bytes, .out = out.data() + 1536, .id = 1}};
        std::vector<Status> errors(3);
        ASSERT_TRUE(
            decode_images_into(inputs, *transform, {.height = 16, .width = 16}, errors).ok());
        EXPECT_FALSE(errors[0].ok()) << what;
        EXPECT_TRUE(errors[1].ok()) << name << " after " << what << ": " << errors[1].message();
        EXPECT_TRUE(std::equal(out.begin() + 768, out.begin() + 1536, out.begin() + 1536))
            << name << " after " << what;
      }
    }).join();
  }
}

// Found by image_decoder_fuzz: a header claiming a 4 x 889192480 PNG under a random resized crop
// to 32x32 asked the JPEG scale choice for more rows than an int holds (undefined behaviour,
// seen by UBSan); the image is now refused for its size.
TEST(DecodeImagesInto, HugeHeaderUnderARandomCropIsRefusedForItsSize) {
  const std::vector<uint8_t> header = {0x89, 'P',  'N', 'G',  0x0d, 0x0a, 0x1a, 0x0a, 0, 0,
                                       0,    0x0d, 'I', 'H',  'D',  'R',  0,    0,    0, 4,
                                       0x35, 0,    0,   0x20, 0x10, 0,    0,    0,    0};
  auto crop = make({.crop = CropMode::kRandomResized, .crop_height = 32, .crop_width = 32});
  std::vector<uint8_t> out(crop->output_bytes(32, 32));
  for (uint64_t id = 0; id < 64; ++id) {
    const ImageInput input{.bytes = header, .out = out.data(), .id = id};
    const Status status = decode_images_into({&input, 1}, *crop, {.height = 32, .width = 32});
    EXPECT_FALSE(status.ok());
  }
}

// ---- Poison: every output byte comes from the image alone ----
//
// A batch slot is a pooled buffer that held another batch, and a decoding thread's buffers held
// the images it decoded before. decode_poisoned() fills both first: the slot with a poison
// byte, and the thread's decode buffers by decoding, just before each image, a larger PNG of a
// colour made from it. Two runs with different poisons give the same output only if every
// output byte was written and computed from the image's own pixels.

// A PNG of width x height pixels of one colour, (value, 255 - value, value / 2): coloured, so
// that it changes the chroma (black and white have the same) of any pixel it is mixed into.
// Cached: the tests ask for few sizes, many times.
const std::vector<uint8_t>& poison_png(uint8_t value, int width, int height) {
  static std::map<std::tuple<uint8_t, int, int>, std::vector<uint8_t>> cache;
  std::vector<uint8_t>& png = cache[{value, width, height}];
  if (png.empty()) {
    std::vector<uint8_t> pixels(size_t(width) * height * 3);
    for (size_t i = 0; i < pixels.size(); i += 3) {
      pixels[i] = value;
      pixels[i + 1] = static_cast<uint8_t>(255 - value);
      pixels[i + 2] = static_cast<uint8_t>(value / 2);
    }
    png = encode_png(pixels, width, height, SPNG_COLOR_TYPE_TRUECOLOR, 8);
  }
  return png;
}

// `images`, all of width x height stored pixels, decoded with ids 0, 1, ... through `transform`
// into slots filled with `poison`, on this thread, each right after a poison PNG one row
// taller (so that it covers their decode buffer at any DCT scale, and the bytes past it).
std::vector<uint8_t> decode_poisoned(const std::vector<std::vector<uint8_t>>& images, int width,
                                     int height, const ImageTransform& transform, int out_height,
                                     int out_width, uint8_t poison) {
  const size_t bytes = transform.output_bytes(out_height, out_width);
  std::vector<uint8_t> out(images.size() * bytes, poison), scratch(bytes);
  std::vector<ImageInput> inputs;
  for (size_t k = 0; k < images.size(); ++k) {
    inputs.push_back({.bytes = poison_png(poison, width, height + 1), .out = scratch.data()});
    inputs.push_back({.bytes = images[k], .out = out.data() + k * bytes, .id = k});
  }
  const Status status = decode_images_into(
      inputs, transform, {.height = out_height, .width = out_width, .seed = 3, .threads = 1});
  EXPECT_TRUE(status.ok()) << status.message();
  return out;
}

// Whether two runs wrote the same bytes; if not, how many differ and the first one's place.
::testing::AssertionResult same_bytes(const std::vector<uint8_t>& a,
                                      const std::vector<uint8_t>& b) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << "sizes differ";
  size_t count = 0, first = 0;
  for (size_t i = a.size(); i-- > 0;) {
    if (a[i] != b[i]) {
      ++count;
      first = i;
    }
  }
  if (count == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << count << " of " << a.size() << " bytes differ, the first " << first << " ("
         << int(a[first]) << " against " << int(b[first]) << ")";
}

// Issue 21 item 4: pixel (223, 223) of 479x252 and 567x240 JPEGs resized to 224x224 differed
// between runs. swscale computed the chroma of packed RGB input from pixel pairs when shrinking
// by 2 or more, and for an odd width the last pair reads one pixel past the row's end: the next
// row's first pixel, and after the last row the 3 bytes past the decode buffer (the heap).
TEST(DecodeImagesInto, OddWidthsShrunkByTwoOrMoreDependOnTheImageAloneAtEveryDctScale) {
  struct Case {
    int width, height, out_height, out_width;
  };
  std::vector<Case> cases = {{479, 252, 224, 224}, {567, 240, 224, 224}};
  // For every DCT scale n/8 and two outputs: a stored size that decodes at n/8 to an odd width
  // over twice the output's (the case above, at that scale).
  for (const auto& [out_height, out_width] : {std::pair{40, 48}, {23, 37}}) {
    for (int n = 1; n <= 8; ++n) {
      const int height = (out_height * 8 + n - 1) / n;
      int width = (2 * out_width + 1) * 8 / n - 8;
      while ((width * n + 7) / 8 < 2 * out_width + 1 || (width * n + 7) / 8 % 2 == 0) ++width;
      cases.push_back({width, height, out_height, out_width});
    }
  }
  std::mt19937 random(21);
  for (int k = 0; k < 8; ++k) {  // and odd sizes at random
    cases.push_back({101 + 2 * int(random() % 400), 31 + int(random() % 300),
                     17 + int(random() % 60), 19 + int(random() % 80)});
  }
  const auto transforms = [](int height, int width) {
    return std::vector<std::shared_ptr<const ImageTransform>>{
        make({.resize_height = height, .resize_width = width}),
        make({.resize_height = height,
              .resize_width = width,
              .hflip_probability = 1.0,
              .normalize = true,
              .mean = {0.5f, 0.4f, 0.3f},
              .std = {0.2f, 0.3f, 0.4f},
              .dtype = DType::kFloat32,
              .layout = Layout::kNHWC}),
        make({.resize_height = height,
              .resize_width = width,
              .layout = Layout::kNHWC,
              .interpolation = Interpolation::kArea}),
    };
  };
  bool scales[9] = {};
  for (const Case& c : cases) {
    const int w = c.width, h = c.height;
    const std::vector<uint8_t> rgb = picture(w, h, w * 7 + h);
    const std::vector<std::vector<uint8_t>> images = {
        encode_jpeg(rgb, w, h), encode_jpeg(rgb, w, h, 90, TJSAMP_444),
        encode_png(rgb, w, h, SPNG_COLOR_TYPE_TRUECOLOR, 8)};
    auto scaled = decode_image(images[0], {.min_width = c.out_width, .min_height = c.out_height});
    ASSERT_TRUE(scaled.ok()) << scaled.status().message();
    scales[8 * scaled->scale_num / scaled->scale_denom] = true;
    for (const auto& transform : transforms(c.out_height, c.out_width)) {
      EXPECT_TRUE(
          same_bytes(decode_poisoned(images, w, h, *transform, c.out_height, c.out_width, 0x00),
                     decode_poisoned(images, w, h, *transform, c.out_height, c.out_width, 0xFF)))
          << w << "x" << h << " to " << c.out_width << "x" << c.out_height << " (decoded at "
          << scaled->width << "x" << scaled->height << "), "
          << (transform->options().dtype == DType::kUint8 ? "uint8" : "float32")
          << (transform->options().layout == Layout::kNHWC ? " HWC" : " CHW")
          << (transform->options().interpolation == Interpolation::kArea ? " area" : "");
    }
  }
  for (int n = 1; n <= 8; ++n) EXPECT_TRUE(scales[n]) << "no case decodes at " << n << "/8";
}

TEST(DecodeImagesInto, CropsDependOnTheImageAloneWhateverTheRegionAndScale) {
  const int sizes[][2] = {{479, 252}, {567, 240}, {1001, 333}, {97, 61}};
  for (const auto& size : sizes) {
    const int w = size[0], h = size[1];
    const std::vector<TransformOptions> crops = {
        {.crop = CropMode::kRandomResized, .crop_height = 224, .crop_width = 224},
        {.crop = CropMode::kRandomResized,
         .crop_height = 32,
         .crop_width = 32,
         .hflip_probability = 0.5,
         .layout = Layout::kNHWC},
        {.crop = CropMode::kRandomResized,
         .crop_height = 24,
         .crop_width = 40,
         .scale_min = 0.5,
         .ratio_min = 1.5,
         .ratio_max = 3.0,
         .dtype = DType::kFloat32},
        // 98% of the image at its own aspect ratio: some crops end at the right edge without
        // starting at the left, and their last column then reads past it into the first pixel
        // of the next row, which a JPEG region decode (margin 2) leaves undecoded.
        {.crop = CropMode::kRandomResized,
         .crop_height = 32,
         .crop_width = 32,
         .scale_min = 0.98,
         .scale_max = 0.98,
         .ratio_min = double(w) / h,
         .ratio_max = double(w) / h},
        {.resize_height = 40,
         .resize_width = 90,
         .crop = CropMode::kCenter,
         .crop_height = 40,
         .crop_width = 40},
        {.resize_height = 37,
         .resize_width = 71,
         .crop = CropMode::kCenter,
         .crop_height = 21,
         .crop_width = 33,
         .layout = Layout::kNHWC},
    };
    const std::vector<uint8_t> rgb = picture(w, h, w + h);
    // The same images 16 times over: 16 crops of each (ids 0..15).
    const std::vector<uint8_t> kinds[] = {encode_jpeg(rgb, w, h),
                                          encode_jpeg_kind(rgb, w, h, kJpegKinds[3]),
                                          encode_png(rgb, w, h, SPNG_COLOR_TYPE_TRUECOLOR, 8)};
    std::vector<std::vector<uint8_t>> images;
    for (int k = 0; k < 16; ++k) images.push_back(kinds[k % 3]);
    for (const TransformOptions& options : crops) {
      auto transform = make(options);
      const int oh = options.crop_height, ow = options.crop_width;
      EXPECT_TRUE(same_bytes(decode_poisoned(images, w, h, *transform, oh, ow, 0x00),
                             decode_poisoned(images, w, h, *transform, oh, ow, 0xFF)))
          << w << "x" << h << " cropped to " << ow << "x" << oh << " from "
          << (options.crop == CropMode::kCenter ? "the centre" : "random regions");
    }
  }
}

// Seeds for image_decoder_fuzz (make test-fuzz): small JPEGs, PNGs and WebPs of several kinds.
TEST(FuzzSeeds, Images) {
  const char* corpus = std::getenv("STOKER_FUZZ_CORPUS");
  if (corpus == nullptr) GTEST_SKIP() << "STOKER_FUZZ_CORPUS is not set";
  const std::filesystem::path root = std::filesystem::path(corpus) / "image_decoder_fuzz";
  std::filesystem::create_directories(root);
  auto write = [&](const std::string& name, const std::vector<uint8_t>& bytes) {
    std::ofstream(root / name, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  };
  const auto rgb = picture(48, 32);
  write("baseline_420.jpg", encode_jpeg(rgb, 48, 32));
  write("baseline_444.jpg", encode_jpeg(rgb, 48, 32, 75, TJSAMP_444));
  write("gray.jpg", encode_jpeg(rgb, 48, 32, 75, TJSAMP_GRAY));
  write("progressive_restart.jpg", encode_jpeg_kind(rgb, 48, 32, kJpegKinds[8]));
  write("rgb.png", encode_png(rgb, 48, 32, SPNG_COLOR_TYPE_TRUECOLOR, 8));
  std::vector<uint8_t> gray16(48 * 32 * 2, 0x35);
  write("gray16.png", encode_png(gray16, 48, 32, SPNG_COLOR_TYPE_GRAYSCALE, 16));
  write("lossy.webp", encode_webp(rgb, 48, 32, 3, false));
  write("lossy_alpha.webp", encode_webp(with_alpha(rgb), 48, 32, 4, false));
  write("lossless.webp", encode_webp(rgb, 48, 32, 3, true));
  write("lossless_alpha.webp", encode_webp(with_alpha(rgb), 48, 32, 4, true));
}

}  // namespace
}  // namespace stoker
