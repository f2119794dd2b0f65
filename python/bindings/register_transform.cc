// Bindings for the transform layer's options: what happens to a frame between the decoder and
// its batch slot (see stoker/image_transform.h). The defaults are C++'s; the Python
// stoker.Transforms reads them from here.
#include <nanobind/nanobind.h>
#include <nanobind/stl/array.h>
#include <nanobind/stl/string.h>

#include "arrays.h"
#include "errors.h"
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

  nb::enum_<DepthCoding>(m, "DepthCoding")
      .value("affine", DepthCoding::kAffine)
      .value("lerobot_linear", DepthCoding::kLeRobotLinear)
      .value("lerobot_log", DepthCoding::kLeRobotLog);
  nb::enum_<DepthUnit>(m, "DepthUnit")
      .value("metres", DepthUnit::kMetres)
      .value("millimetres", DepthUnit::kMillimetres);

  nb::class_<DepthCamera>(m, "DepthCamera")
      .def(nb::init<>())
      .def(
          "__init__",
          [](DepthCamera* self, std::string camera, bool metric, double scale, double offset,
             DepthCoding coding, double depth_min, double depth_max, double shift, int code_max,
             DepthUnit unit) {
            new (self) DepthCamera{std::move(camera), metric,    scale, offset,   coding,
                                   depth_min,         depth_max, shift, code_max, unit};
          },
          nb::arg("camera"), nb::arg("metric") = false, nb::arg("scale") = 1.0,
          nb::arg("offset") = 0.0, nb::arg("coding") = DepthCoding::kAffine,
          nb::arg("depth_min") = DepthCamera{}.depth_min,
          nb::arg("depth_max") = DepthCamera{}.depth_max, nb::arg("shift") = DepthCamera{}.shift,
          nb::arg("code_max") = DepthCamera{}.code_max, nb::arg("unit") = DepthUnit::kMetres)
      .def_rw("camera", &DepthCamera::camera)
      .def_rw("metric", &DepthCamera::metric, "False: uint16 samples; True: float32 distances")
      .def_rw("scale", &DepthCamera::scale, "affine: metres per stored unit")
      .def_rw("offset", &DepthCamera::offset, "affine: metres added")
      .def_rw("coding", &DepthCamera::coding)
      .def_rw("depth_min", &DepthCamera::depth_min, "LeRobot quantizers: metres at code 0")
      .def_rw("depth_max", &DepthCamera::depth_max, "LeRobot quantizers: metres at code_max")
      .def_rw("shift", &DepthCamera::shift, "LeRobot's log quantizer: metres added before log")
      .def_rw("code_max", &DepthCamera::code_max)
      .def_rw("unit", &DepthCamera::unit)
      .doc() = "A depth camera of a Loader: one channel, uint16 as stored or float32 distances.";

  m.def(
      "depth_value_table",
      [](const DepthCamera& depth) {
        DepthCamera metric = depth;
        metric.metric = true;
        raise_if_error(check_depth_camera(metric), Area::kDataset);
        return owned_array(depth_value_table(metric));
      },
      nb::arg("depth"),
      "float32 [65536]: the distance every stored sample stands for, in the camera's unit (what "
      "the Loader looks each pixel up in).");
}

}  // namespace stoker::python
