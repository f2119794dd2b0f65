// The one place where a core Status becomes a Python exception.
#pragma once

#include <nanobind/nanobind.h>

#include <utility>

#include "stoker/status.h"

namespace stoker::python {

/// What a failing call raises: a stoker.Error subclass, or ValueError for calls whose every
/// failure is a bad argument (the Python wrappers check arguments first; this is the backstop).
enum class ErrorKind { kDecode, kDataset, kArgument };

/// Creates stoker.Error and its subclasses in module `m`.
void register_errors(nanobind::module_& m);

/// Raises the ErrorKind's exception with the status's message when !status.ok().
/// REQUIRES: the GIL is held.
void raise_if_error(const Status& status, ErrorKind kind);

/// The result's value, or raise_if_error() of its status.
template <typename T>
T value_or_raise(Result<T> result, ErrorKind kind) {
  raise_if_error(result.status(), kind);
  return std::move(result).value();
}

}  // namespace stoker::python
