// 16-bit floats: IEEE binary16 ("float16") and bfloat16, from float32, rounding to the nearest
// value (ties to even), as hardware conversions and PyTorch's .to() do. Written out in integer
// arithmetic so that every compiler stoker builds with gives the same bits.
//
// Thread-safety: pure functions.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace stoker::core {

/// The bfloat16 bits of a finite `value`.
inline uint16_t to_bfloat16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  bits += 0x7FFF + ((bits >> 16) & 1);
  return static_cast<uint16_t>(bits >> 16);
}

/// The float16 bits of `value`: infinity beyond float16's range, NaN for NaN.
inline uint16_t to_float16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  const uint32_t magnitude = bits & 0x7FFFFFFF;
  if (magnitude > 0x7F800000) return sign | 0x7E00;   // NaN
  if (magnitude >= 0x477FF000) return sign | 0x7C00;  // rounds to infinity (>= 65520)
  if (magnitude < 0x38800000) {
    // Below float16's smallest normal, 2^-14: a subnormal m * 2^-24. Scaling by 2^24 is exact,
    // and rounding it to an integer rounds ties to even; m == 1024 is the smallest normal.
    const float scaled = std::fabs(value) * 16777216.0f;
    return sign | static_cast<uint16_t>(std::nearbyint(scaled));
  }
  // A normal: round the mantissa to 10 bits (a carry moves into the exponent), then rebias
  // the exponent from 127 to 15.
  const uint32_t rounded = magnitude + 0xFFF + ((magnitude >> 13) & 1);
  return sign | static_cast<uint16_t>((rounded >> 13) - ((127 - 15) << 10));
}

}  // namespace stoker::core
