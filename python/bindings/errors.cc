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
PyObject* access_denied_type = nullptr;

PyObject* new_type(const char* name, const char* doc, PyObject* bases) {
  PyObject* type = PyErr_NewExceptionWithDoc(name, doc, bases, nullptr);
  if (type == nullptr) throw nb::python_error();
  return type;
}

}  // namespace

void register_errors(nb::module_& m) {
  error_type = new_type("stoker._core.Error", "Base class of every error stoker raises.",
                        PyExc_RuntimeError);
  m.attr("Error") = nb::steal(error_type);
  // Each subclass of stoker.Error, with the builtin exception it also is, if any.
  const struct {
    PyObject** type;
    const char* name;
    const char* doc;
    PyObject* also;
  } subclasses[] = {
      {&decode_error_type, "DecodeError",
       "A video could not be opened or decoded as asked; the message names the file and frame.",
       nullptr},
      {&dataset_error_type, "DatasetError",
       "A dataset is malformed or inconsistent; the message names the episode, camera and file.",
       nullptr},
      {&invalid_argument_type, "InvalidArgumentError",
       "A call asked for something impossible (an index out of range, a bad option); also a "
       "ValueError.",
       PyExc_ValueError},
      {&internal_error_type, "InternalError",
       "A bug in stoker: one of its own invariants did not hold. Please report it with the "
       "message.",
       nullptr},
      {&resource_error_type, "ResourceError",
       "The system refused memory or threads that stoker asked for (a limit, or a configuration "
       "asking for more than the machine has); also a MemoryError.",
       PyExc_MemoryError},
      {&access_denied_type, "AccessDeniedError",
       "An object store refused the credentials (a wrong secret, an expired presigned URL, no "
       "access to the bucket); the message names the URL. Also a PermissionError.",
       PyExc_PermissionError},
  };
  for (const auto& subclass : subclasses) {
    nb::object bases = subclass.also == nullptr
                           ? nb::borrow(error_type)
                           : nb::make_tuple(nb::handle(error_type), nb::handle(subclass.also));
    *subclass.type =
        new_type(("stoker._core." + std::string(subclass.name)).c_str(), subclass.doc, bases.ptr());
    m.attr(subclass.name) = nb::steal(*subclass.type);
  }
  // For the tests of the map above: raises what a failure with this code raises.
  m.def(
      "_raise_status",
      [](int code, bool video, const std::string& message) {
        if (code <= 0 || code > static_cast<int>(StatusCode::kPermissionDenied)) {
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
    case StatusCode::kPermissionDenied:
      type = access_denied_type;
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
