// DType: the element type of every array stoker stores or hands out — the index's columns,
// decoded images, the fields of a batch. One enum for all of them, so a type means the same
// thing in every layer and crosses to Python (numpy, DLPack) through one mapping.
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstddef>
#include <string_view>

namespace stoker {

// New types go at the end: saved indexes store these values.
enum class DType {
  kUint8,
  kBool,
  kInt64,
  kFloat16,
  kBFloat16,
  kFloat32,
  kFloat64,
  kUint16,
  kInt8,
  kInt16,
  kInt32,
  kUint32,
  kUint64,
};

/// Bytes per element: 1, 1, 8, 2, 2, 4, 8, 2, 1, 2, 4, 4, 8.
size_t dtype_size(DType dtype);

/// The name numpy and PyTorch use: "uint8", "bool", "int64", "float16", "bfloat16", "float32",
/// "float64", "uint16", "int8", "int16", "int32", "uint32", "uint64".
const char* dtype_name(DType dtype);

/// The DType of a name dtype_name() gives; false when `name` is none of them.
bool dtype_from_name(std::string_view name, DType* dtype);

}  // namespace stoker
