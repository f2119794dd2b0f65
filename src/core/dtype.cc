#include "stoker/dtype.h"

namespace stoker {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kUint8:
    case DType::kBool:
    case DType::kInt8:
      return 1;
    case DType::kFloat16:
    case DType::kBFloat16:
    case DType::kUint16:
    case DType::kInt16:
      return 2;
    case DType::kFloat32:
    case DType::kInt32:
    case DType::kUint32:
      return 4;
    case DType::kInt64:
    case DType::kFloat64:
    case DType::kUint64:
      return 8;
  }
  return 1;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kUint8:
      return "uint8";
    case DType::kBool:
      return "bool";
    case DType::kInt64:
      return "int64";
    case DType::kFloat16:
      return "float16";
    case DType::kBFloat16:
      return "bfloat16";
    case DType::kFloat32:
      return "float32";
    case DType::kFloat64:
      return "float64";
    case DType::kUint16:
      return "uint16";
    case DType::kInt8:
      return "int8";
    case DType::kInt16:
      return "int16";
    case DType::kInt32:
      return "int32";
    case DType::kUint32:
      return "uint32";
    case DType::kUint64:
      return "uint64";
  }
  return "uint8";
}

bool dtype_from_name(std::string_view name, DType* dtype) {
  for (int value = 0; value <= static_cast<int>(DType::kUint64); ++value) {
    if (name == dtype_name(static_cast<DType>(value))) {
      *dtype = static_cast<DType>(value);
      return true;
    }
  }
  return false;
}

}  // namespace stoker
