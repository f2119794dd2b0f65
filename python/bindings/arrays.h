// Arrays between C++ and Python: the one mapping of stoker's DType to DLPack's (numpy and
// torch), and the one way the bindings return owned 1-D arrays.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <optional>
#include <span>
#include <vector>

#include "stoker/dtype.h"

namespace stoker::python {

/// A 1-D int64 array argument (numpy or torch, C-contiguous, on the CPU), read in place.
using Int64s =
    nanobind::ndarray<const int64_t, nanobind::ndim<1>, nanobind::c_contig, nanobind::device::cpu>;

/// The DLPack element type of `dtype`.
inline nanobind::dlpack::dtype dlpack_dtype(DType dtype) {
  using nanobind::dlpack::dtype_code;
  auto make = [](dtype_code code, size_t bytes) {
    return nanobind::dlpack::dtype{static_cast<uint8_t>(code), static_cast<uint8_t>(bytes * 8), 1};
  };
  const size_t bytes = dtype_size(dtype);
  switch (dtype) {
    case DType::kUint8:
    case DType::kUint16:
    case DType::kUint32:
    case DType::kUint64:
      return make(dtype_code::UInt, bytes);
    case DType::kBool:
      return make(dtype_code::Bool, bytes);
    case DType::kInt8:
    case DType::kInt16:
    case DType::kInt32:
    case DType::kInt64:
      return make(dtype_code::Int, bytes);
    case DType::kBFloat16:
      return make(dtype_code::Bfloat, bytes);
    case DType::kFloat16:
    case DType::kFloat32:
    case DType::kFloat64:
      return make(dtype_code::Float, bytes);
  }
  return make(dtype_code::UInt, 1);
}

/// The DType of a DLPack element type, when stoker has one.
inline std::optional<DType> dtype_of(const nanobind::dlpack::dtype& dlpack) {
  for (DType dtype : {DType::kUint8, DType::kBool, DType::kInt64, DType::kFloat16, DType::kBFloat16,
                      DType::kFloat32, DType::kFloat64, DType::kUint16, DType::kInt8, DType::kInt16,
                      DType::kInt32, DType::kUint32, DType::kUint64}) {
    if (dlpack_dtype(dtype) == dlpack) return dtype;
  }
  return std::nullopt;
}

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
