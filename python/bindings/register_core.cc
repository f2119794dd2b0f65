// Bindings for the core layer's shared facts: the element types (DType), the cores this
// process may use, and how a finished file is made durable.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <string>

#include "core/file.h"
#include "errors.h"
#include "stoker/cores.h"
#include "stoker/dtype.h"

namespace nb = nanobind;

namespace stoker::python {

void register_core(nb::module_& m) {
  nb::enum_<DType>(m, "DType", "The element type of stoker's arrays (numpy/torch names).")
      .value("uint8", DType::kUint8)
      .value("bool", DType::kBool)
      .value("int64", DType::kInt64)
      .value("float16", DType::kFloat16)
      .value("bfloat16", DType::kBFloat16)
      .value("float32", DType::kFloat32)
      .value("float64", DType::kFloat64)
      .value("uint16", DType::kUint16)
      .value("int8", DType::kInt8)
      .value("int16", DType::kInt16)
      .value("int32", DType::kInt32)
      .value("uint32", DType::kUint32)
      .value("uint64", DType::kUint64);

  m.def("usable_cores", &usable_cores,
        "The CPUs this process may run on (its affinity mask: taskset, cgroup cpusets, job "
        "schedulers); what stoker sizes its thread pools by.");

  m.def(
      "commit_file",
      [](const std::string& temporary, const std::string& path) {
        Status status;
        {
          nb::gil_scoped_release release;
          status = core::commit_file(temporary, path);
        }
        raise_if_error(status, Area::kDataset);
      },
      nb::arg("temporary"), nb::arg("path"),
      "Makes the finished file `temporary` durable and renames it to `path` in the same folder "
      "(fsync, rename, fsync of the folder), as stoker's C++ writes its own files.");
}

}  // namespace stoker::python
