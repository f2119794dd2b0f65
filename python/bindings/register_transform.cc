// Bindings for the transform layer's options: what happens to a frame between the decoder and
// its batch slot (see stoker/image_transform.h). The defaults are C++'s; the Python
// stoker.Transforms reads them from here.
#include <nanobind/nanobind.h>
#include <nanobind/stl/array.h>
#include <nanobind/stl/string.h>

#include "stoker/depth_transform.h"
#include "stoker/image_transform.h"

namespace nb = nanobind;

namespace stoker::python {

void register_transform(nb::module_& m) {
  nb::enum_<CropMode>(m, "CropMode")
      .value("none", CropMode::kNone)
      .value("center", CropMode::kCenter)
      .value("random_resized", CropMode::kRandomResized);

  nb::class_<TransformOptions>(m, "TransformOptions")
      .def(nb::init<>())
      .def_rw("resize_height", &TransformOptions::resize_height)
      .def_rw("resize_width", &TransformOptions::resize_width)
      .def_rw("crop", &TransformOptions::crop)
      .def_rw("crop_height", &TransformOptions::crop_height)
      .def_rw("crop_width", &TransformOptions::crop_width)
      .def_rw("scale_min", &TransformOptions::scale_min)
      .def_rw("scale_max", &TransformOptions::scale_max)
      .def_rw("ratio_min", &TransformOptions::ratio_min)
      .def_rw("ratio_max", &TransformOptions::ratio_max)
      .def_rw("hflip_probability", &TransformOptions::hflip_probability)
      .def_rw("normalize", &TransformOptions::normalize)
      .def_rw("mean", &TransformOptions::mean)
      .def_rw("std", &TransformOptions::std)
      .def_rw("dtype", &TransformOptions::dtype)
      .def_rw("layout", &TransformOptions::layout)
      .def_rw("interpolation", &TransformOptions::interpolation)
      .doc() = "Resize, crop, flip, normalization, dtype and layout of a camera's frames.";

  nb::class_<DepthCamera>(m, "DepthCamera")
      .def(nb::init<>())
      .def(
          "__init__",
          [](DepthCamera* self, std::string camera, bool metric, double scale, double offset) {
            new (self) DepthCamera{std::move(camera), metric, scale, offset};
          },
          nb::arg("camera"), nb::arg("metric") = false, nb::arg("scale") = 1.0,
          nb::arg("offset") = 0.0)
      .def_rw("camera", &DepthCamera::camera)
      .def_rw("metric", &DepthCamera::metric, "False: uint16 samples; True: float32 metres")
      .def_rw("scale", &DepthCamera::scale, "metres per stored unit (metric)")
      .def_rw("offset", &DepthCamera::offset, "metres added (metric)")
      .doc() = "A depth camera of a Loader: one channel, uint16 as stored or float32 metres.";
}

}  // namespace stoker::python
