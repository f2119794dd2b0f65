#include "errors.h"

namespace nb = nanobind;

namespace stoker::python {
namespace {

// Owned by the module (added as attributes); these are borrowed references for raising.
PyObject* error_type = nullptr;
PyObject* decode_error_type = nullptr;
PyObject* dataset_error_type = nullptr;

}  // namespace

void register_errors(nb::module_& m) {
  error_type =
      PyErr_NewExceptionWithDoc("stoker._core.Error", "Base class of every error stoker raises.",
                                PyExc_RuntimeError, nullptr);
  decode_error_type = PyErr_NewExceptionWithDoc(
      "stoker._core.DecodeError",
      "A video could not be opened or decoded as asked; the message names the file and frame.",
      error_type, nullptr);
  dataset_error_type = PyErr_NewExceptionWithDoc(
      "stoker._core.DatasetError",
      "A dataset is malformed or inconsistent; the message names the episode, camera and file.",
      error_type, nullptr);
  m.attr("Error") = nb::steal(error_type);
  m.attr("DecodeError") = nb::steal(decode_error_type);
  m.attr("DatasetError") = nb::steal(dataset_error_type);
}

void raise_if_error(const Status& status, ErrorKind kind) {
  if (status.ok()) return;
  PyObject* type = error_type;
  switch (kind) {
    case ErrorKind::kDecode:
      type = decode_error_type;
      break;
    case ErrorKind::kDataset:
      type = dataset_error_type;
      break;
    case ErrorKind::kArgument:
      type = PyExc_ValueError;
      break;
  }
  PyErr_SetString(type, status.message().c_str());
  throw nb::python_error();
}

}  // namespace stoker::python
