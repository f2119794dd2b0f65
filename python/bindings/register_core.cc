// Bindings for the core layer's shared facts: the element types (DType) and the cores this
// process may use.
#include <nanobind/nanobind.h>

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
      .value("float64", DType::kFloat64);

  m.def("usable_cores", &usable_cores,
        "The CPUs this process may run on (its affinity mask: taskset, cgroup cpusets, job "
        "schedulers); what stoker sizes its thread pools by.");
}

}  // namespace stoker::python
