// Handing C++ arrays to numpy: the one way the bindings return owned 1-D arrays.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <span>
#include <vector>

namespace stoker::python {

/// A 1-D numpy array that takes ownership of `values` (freed when numpy releases it).
template <typename T>
nanobind::ndarray<nanobind::numpy, T> owned_array(std::vector<T> values) {
  auto* data = new std::vector<T>(std::move(values));
  nanobind::capsule owner(data, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nanobind::ndarray<nanobind::numpy, T>(data->data(), {data->size()}, owner);
}

/// A 1-D numpy array holding a copy of `values`.
template <typename T>
nanobind::ndarray<nanobind::numpy, T> copied_array(std::span<const T> values) {
  return owned_array(std::vector<T>(values.begin(), values.end()));
}

}  // namespace stoker::python
