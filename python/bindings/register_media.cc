// Bindings for VideoReader. Arrays cross zero-copy: frames are written straight into the numpy
// array the Python wrapper allocated (or the caller passed as out=).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>

#include "arrays.h"
#include "errors.h"
#include "stoker/video_reader.h"

namespace nb = nanobind;

namespace stoker::python {
namespace {

using Frames = nb::ndarray<uint8_t, nb::c_contig, nb::device::cpu>;
using Indices = nb::ndarray<const int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using Seconds = nb::ndarray<const double, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

std::unique_ptr<VideoReader> open_reader(const std::string& path, int threads,
                                         std::optional<nb::bytes> frame_table) {
  VideoReaderOptions options{.threads = threads};
  if (frame_table.has_value()) {
    auto table = FrameTable::deserialize(
        std::span(static_cast<const uint8_t*>(static_cast<const void*>(frame_table->c_str())),
                  frame_table->size()));
    raise_if_error(table.status().with_context("video '" + path + "'"), ErrorKind::kDecode);
    options.frame_table = std::move(table).value();
  }
  Result<std::unique_ptr<VideoReader>> reader = [&] {
    nb::gil_scoped_release release;
    return VideoReader::open(path, std::move(options));
  }();
  raise_if_error(reader.status(), ErrorKind::kDecode);
  return std::move(reader).value();
}

OutputOptions output_options(int height, int width, bool channels_first, bool area) {
  return OutputOptions{.height = height,
                       .width = width,
                       .layout = channels_first ? Layout::kNCHW : Layout::kNHWC,
                       .interpolation = area ? Interpolation::kArea : Interpolation::kBilinear};
}

}  // namespace

void register_media(nb::module_& m) {
  nb::class_<VideoReader>(m, "VideoReader")
      .def(nb::new_(&open_reader), nb::arg("path"), nb::arg("threads") = 1,
           nb::arg("frame_table") = nb::none())
      .def_prop_ro("path", &VideoReader::name)
      .def_prop_ro("codec", [](const VideoReader& r) { return r.frame_table().stream().codec; })
      .def_prop_ro("width", [](const VideoReader& r) { return r.frame_table().stream().width; })
      .def_prop_ro("height", [](const VideoReader& r) { return r.frame_table().stream().height; })
      .def_prop_ro("fps", [](const VideoReader& r) { return r.frame_table().fps(); })
      .def_prop_ro("num_frames", &VideoReader::num_frames)
      .def_prop_ro("duration", [](const VideoReader& r) { return r.frame_table().duration(); })
      .def("pts", [](const VideoReader& r) { return copied_array(r.frame_table().pts_seconds()); })
      .def("is_key", [](const VideoReader& r) { return copied_array(r.frame_table().is_key()); })
      .def("frame_table",
           [](const VideoReader& r) {
             std::vector<uint8_t> bytes = r.frame_table().serialize();
             return nb::bytes(reinterpret_cast<const char*>(bytes.data()), bytes.size());
           })
      .def("frame_at",
           [](const VideoReader& r, double seconds, std::optional<double> tolerance) {
             Result<int64_t> frame = r.frame_at(seconds, tolerance);
             raise_if_error(frame.status(), ErrorKind::kDecode);
             return *frame;
           })
      .def(
          "get_frames",
          [](const VideoReader& r, Indices indices, Frames out, int height, int width,
             bool channels_first, bool area) {
            Status status;
            {
              nb::gil_scoped_release release;
              status = r.get_frames(std::span(indices.data(), indices.shape(0)),
                                    output_options(height, width, channels_first, area),
                                    std::span(out.data(), out.size()));
            }
            raise_if_error(status, ErrorKind::kDecode);
          },
          nb::arg("indices"), nb::arg("out"), nb::arg("height"), nb::arg("width"),
          nb::arg("channels_first"), nb::arg("area"))
      .def(
          "get_frames_at",
          [](const VideoReader& r, Seconds seconds, std::optional<double> tolerance, Frames out,
             int height, int width, bool channels_first, bool area) {
            Status status;
            {
              nb::gil_scoped_release release;
              status = r.get_frames_at(std::span(seconds.data(), seconds.shape(0)), tolerance,
                                       output_options(height, width, channels_first, area),
                                       std::span(out.data(), out.size()));
            }
            raise_if_error(status, ErrorKind::kDecode);
          },
          nb::arg("seconds"), nb::arg("tolerance").none(), nb::arg("out"), nb::arg("height"),
          nb::arg("width"), nb::arg("channels_first"), nb::arg("area"));
}

}  // namespace stoker::python
