#include "errors.h"

#include <nanobind/stl/string.h>

#include <string>

namespace nb = nanobind;

namespace stoker::python {
namespace {

// Owned by the module (added as attributes); these are borrowed references for raising.
PyObject* error_type = nullptr;
PyObject* decode_error_type = nullptr;
PyObject* dataset_error_type = nullptr;
PyObject* invalid_argument_type = nullptr;
PyObject* internal_error_type = nullptr;
PyObject* resource_error_type = nullptr;

PyObject* new_type(const char* name, const char* doc, PyObject* bases) {
  PyObject* type = PyErr_NewExceptionWithDoc(name, doc, bases, nullptr);
  if (type == nullptr) throw nb::python_error();
  return type;
}

}  // namespace

void register_errors(nb::module_& m) {
  error_type = new_type("stoker._core.Error", "Base class of every error stoker raises.",
                        PyExc_RuntimeError);
  decode_error_type = new_type(
      "stoker._core.DecodeError",
      "A video could not be opened or decoded as asked; the message names the file and frame.",
      error_type);
  dataset_error_type = new_type(
      "stoker._core.DatasetError",
      "A dataset is malformed or inconsistent; the message names the episode, camera and file.",
      error_type);
  nb::object bases = nb::make_tuple(nb::handle(error_type), nb::handle(PyExc_ValueError));
  invalid_argument_type = new_type(
      "stoker._core.InvalidArgumentError",
      "A call asked for something impossible (an index out of range, a bad option); also a "
      "ValueError.",
      bases.ptr());
  internal_error_type = new_type(
      "stoker._core.InternalError",
      "A bug in stoker: one of its own invariants did not hold. Please report it with the message.",
      error_type);
  nb::object memory_bases = nb::make_tuple(nb::handle(error_type), nb::handle(PyExc_MemoryError));
  resource_error_type = new_type(
      "stoker._core.ResourceError",
      "The system refused memory or threads that stoker asked for (a limit, or a configuration "
      "asking for more than the machine has); also a MemoryError.",
      memory_bases.ptr());
  m.attr("Error") = nb::steal(error_type);
  m.attr("DecodeError") = nb::steal(decode_error_type);
  m.attr("DatasetError") = nb::steal(dataset_error_type);
  m.attr("InvalidArgumentError") = nb::steal(invalid_argument_type);
  m.attr("InternalError") = nb::steal(internal_error_type);
  m.attr("ResourceError") = nb::steal(resource_error_type);
  // For the tests of the map above: raises what a failure with this code raises.
  m.def(
      "_raise_status",
      [](int code, bool video, const std::string& message) {
        if (code <= 0 || code > static_cast<int>(StatusCode::kResourceExhausted)) {
          throw nb::value_error("not a failing StatusCode");
        }
        raise_if_error(Status(static_cast<StatusCode>(code), message),
                       video ? Area::kVideo : Area::kDataset);
      },
      nb::arg("code"), nb::arg("video"), nb::arg("message"));
}

void raise_if_error(const Status& status, Area area) {
  if (status.ok()) return;
  PyObject* type = area == Area::kVideo ? decode_error_type : dataset_error_type;
  switch (status.code()) {
    case StatusCode::kInvalidArgument:
      type = invalid_argument_type;
      break;
    case StatusCode::kInternal:
      type = internal_error_type;
      break;
    case StatusCode::kResourceExhausted:
      type = resource_error_type;
      break;
    case StatusCode::kOk:
    case StatusCode::kNotFound:
    case StatusCode::kCorruptData:
    case StatusCode::kUnsupported:
    case StatusCode::kIoError:
      break;
  }
  PyErr_SetString(type, status.message().c_str());
  throw nb::python_error();
}

}  // namespace stoker::python
