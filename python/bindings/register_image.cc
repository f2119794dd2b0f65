// Bindings for the image layer: probing and decoding JPEG / PNG / WebP bytes
// (stoker/image_decoder.h). decode_images writes a batch straight into the numpy array the Python
// wrapper allocated, with the GIL released; the images' bytes objects are kept alive by the
// call's arguments.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <vector>

#include "arrays.h"
#include "errors.h"
#include "index_handle.h"
#include "stoker/episode_index.h"
#include "stoker/image_decoder.h"

namespace nb = nanobind;

namespace stoker::python {
namespace {

using Output = nb::ndarray<nb::c_contig, nb::device::cpu>;
using Ids = nb::ndarray<const int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

std::span<const uint8_t> bytes_of(const nb::bytes& data) {
  return {static_cast<const uint8_t*>(static_cast<const void*>(data.c_str())), data.size()};
}

nb::object decode_one(nb::bytes data, int min_width, int min_height, bool keep_16bit_gray) {
  Result<DecodedImage> image = [&] {
    nb::gil_scoped_release release;
    return decode_image(bytes_of(data), ImageDecodeOptions{.min_width = min_width,
                                                           .min_height = min_height,
                                                           .keep_16bit_gray = keep_16bit_gray});
  }();
  DecodedImage decoded = value_or_raise(std::move(image), Area::kVideo);
  auto* pixels = new std::vector<uint8_t>(std::move(decoded.pixels));
  nb::capsule owner(pixels, [](void* p) noexcept { delete static_cast<std::vector<uint8_t>*>(p); });
  const size_t height = static_cast<size_t>(decoded.height);
  const size_t width = static_cast<size_t>(decoded.width);
  if (decoded.bit_depth == 16) {
    return nb::cast(nb::ndarray<nb::numpy, uint16_t>(reinterpret_cast<uint16_t*>(pixels->data()),
                                                     {height, width}, owner));
  }
  return nb::cast(nb::ndarray<nb::numpy, uint8_t>(pixels->data(), {height, width, 3}, owner));
}

// Decodes `images` into `out` ([N, ...], N * transform.output_bytes(height, width) bytes).
// Returns each image's error message ("" when it decoded) when collect_errors; otherwise
// raises the first failure.
std::vector<std::string> decode_many(const std::vector<nb::bytes>& images,
                                     const TransformOptions& transform_options, Output out,
                                     int height, int width, uint64_t seed, uint32_t epoch,
                                     std::optional<Ids> ids, int camera, int threads,
                                     bool collect_errors) {
  auto transform = value_or_raise(ImageTransform::create(transform_options), Area::kVideo);
  if (height <= 0 || width <= 0) {
    throw nb::value_error("decode_images needs the output size (height and width > 0)");
  }
  const size_t slot = transform->output_bytes(height, width);
  if (out.nbytes() != images.size() * slot) {
    throw nb::value_error(("out holds " + std::to_string(out.nbytes()) + " bytes; " +
                           std::to_string(images.size()) + " images of " + std::to_string(width) +
                           "x" + std::to_string(height) + " need " +
                           std::to_string(images.size() * slot))
                              .c_str());
  }
  if (ids.has_value() && ids->shape(0) != images.size()) {
    throw nb::value_error("ids needs one id per image");
  }
  std::vector<ImageInput> inputs(images.size());
  auto* base = static_cast<uint8_t*>(out.data());
  for (size_t k = 0; k < images.size(); ++k) {
    inputs[k] = ImageInput{.bytes = bytes_of(images[k]),
                           .out = base + k * slot,
                           .id = ids.has_value() ? static_cast<uint64_t>(ids->data()[k]) : k,
                           .camera = camera};
  }
  std::vector<Status> errors(collect_errors ? images.size() : 0);
  Status status;
  {
    nb::gil_scoped_release release;
    status = decode_images_into(
        inputs, *transform,
        ImageBatchOptions{
            .height = height, .width = width, .seed = seed, .epoch = epoch, .threads = threads},
        errors);
  }
  raise_if_error(status, Area::kVideo);
  std::vector<std::string> messages;
  for (const Status& error : errors) messages.push_back(error.ok() ? "" : error.message());
  return messages;
}

// Decodes image camera `camera`'s images at `rows` of the index into out ([N, ...]), the random
// parameters keyed by (seed, epoch, id, camera) as the Loader keys a sample's: what ds[i] reads.
void decode_index_images(const IndexHandle& handle, int64_t camera, Ids rows,
                         const TransformOptions& transform_options, Output out, int height,
                         int width, uint64_t seed, uint32_t epoch, uint64_t id) {
  const EpisodeIndex& index = *handle.index;
  if (camera < 0 || camera >= index.num_cameras() || !index.is_image_camera(camera)) {
    throw nb::value_error(("camera " + std::to_string(camera) + " is not an image camera").c_str());
  }
  auto transform = value_or_raise(ImageTransform::create(transform_options), Area::kDataset);
  const size_t slot = transform->output_bytes(height, width);
  if (height <= 0 || width <= 0 || out.nbytes() != rows.shape(0) * slot) {
    throw nb::value_error("out does not hold one slot of the output size per row");
  }
  std::vector<ImageInput> inputs(rows.shape(0));
  auto* base = static_cast<uint8_t*>(out.data());
  for (size_t k = 0; k < inputs.size(); ++k) {
    const int64_t row = rows.data()[k];
    if (row < 0 || row >= index.num_rows()) {
      throw nb::index_error(("row " + std::to_string(row) + " out of range").c_str());
    }
    inputs[k] = ImageInput{.bytes = index.image_bytes(camera, row),
                           .out = base + k * slot,
                           .id = id,
                           .camera = static_cast<int>(camera)};
  }
  std::vector<Status> errors(inputs.size());
  Status status;
  {
    nb::gil_scoped_release release;
    status = decode_images_into(
        inputs, *transform,
        ImageBatchOptions{.height = height, .width = width, .seed = seed, .epoch = epoch}, errors);
    for (size_t k = 0; k < errors.size() && status.ok(); ++k) {
      status = errors[k].with_context("camera '" + index.cameras()[camera] + "', row " +
                                      std::to_string(rows.data()[k]));
    }
  }
  raise_if_error(status, Area::kDataset);
}

}  // namespace

void register_image(nb::module_& m) {
  m.def(
      "probe_image",
      [](nb::bytes data) {
        Result<ImageInfo> info = probe_image(bytes_of(data));
        raise_if_error(info.status(), Area::kVideo);
        return std::make_tuple(std::string(image_format_name(info->format)), info->width,
                               info->height, info->channels, info->bit_depth);
      },
      nb::arg("data"),
      "(format, width, height, channels, bit_depth) from a JPEG, PNG or WebP header, without "
      "decoding.");
  m.def("decode_image", &decode_one, nb::arg("data"), nb::arg("min_width") = 0,
        nb::arg("min_height") = 0, nb::arg("keep_16bit_gray") = false,
        "One JPEG, PNG or WebP as [H, W, 3] uint8 (or [H, W] uint16 for a 16-bit gray PNG with "
        "keep_16bit_gray); a JPEG at the smallest DCT scale that keeps min_width x min_height.");
  m.def("decode_images", &decode_many, nb::arg("images"), nb::arg("transform"), nb::arg("out"),
        nb::arg("height"), nb::arg("width"), nb::arg("seed") = 0, nb::arg("epoch") = 0,
        nb::arg("ids") = nb::none(), nb::arg("camera") = 0, nb::arg("threads") = 1,
        nb::arg("collect_errors") = false,
        "Decodes and transforms each image into its slot of out; see stoker.decode_images.");
  m.def("decode_index_images", &decode_index_images, nb::arg("index"), nb::arg("camera"),
        nb::arg("rows"), nb::arg("transform"), nb::arg("out"), nb::arg("height"), nb::arg("width"),
        nb::arg("seed") = 0, nb::arg("epoch") = 0, nb::arg("id") = 0,
        "Decodes an image camera's images at `rows` of an EpisodeIndex into out, as the "
        "Loader does for sample `id`.");
}

}  // namespace stoker::python
