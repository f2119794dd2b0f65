#include "stoker/dtype.h"

namespace stoker {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kUint8:
    case DType::kBool:
      return 1;
    case DType::kFloat16:
    case DType::kBFloat16:
    case DType::kUint16:
      return 2;
    case DType::kFloat32:
      return 4;
    case DType::kInt64:
    case DType::kFloat64:
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
  }
  return "uint8";
}

}  // namespace stoker
