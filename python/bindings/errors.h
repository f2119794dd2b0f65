// The one place where a core Status becomes a Python exception, by its StatusCode:
//
//   kInvalidArgument                       stoker.InvalidArgumentError (a ValueError)
//   kInternal                              stoker.InternalError (a bug in stoker)
//   kResourceExhausted                     stoker.ResourceError (a MemoryError)
//   kNotFound, kCorruptData, kUnsupported, stoker.DecodeError for calls on videos,
//   kIoError                               stoker.DatasetError for datasets and loaders
//
// Every exception is a stoker.Error; the message is the status's, naming what failed.
#pragma once

#include <nanobind/nanobind.h>

#include <utility>

#include "stoker/status.h"

namespace stoker::python {

/// What a call works on, which names the exception of its data errors.
enum class Area { kVideo, kDataset };

/// Creates stoker.Error and its subclasses in module `m`.
void register_errors(nanobind::module_& m);

/// Raises the exception of the status's code (see above) when !status.ok().
/// REQUIRES: the GIL is held.
void raise_if_error(const Status& status, Area area);

/// The result's value, or raise_if_error() of its status.
template <typename T>
T value_or_raise(Result<T> result, Area area) {
  raise_if_error(result.status(), area);
  return std::move(result).value();
}

}  // namespace stoker::python
