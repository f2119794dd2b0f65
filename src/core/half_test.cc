#include "core/half.h"

#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace stoker::core {
namespace {

float from_bits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

TEST(Half, KnownValues) {
  EXPECT_EQ(to_float16(0.0f), 0x0000);
  EXPECT_EQ(to_float16(-0.0f), 0x8000);
  EXPECT_EQ(to_float16(1.0f), 0x3C00);
  EXPECT_EQ(to_float16(-2.0f), 0xC000);
  EXPECT_EQ(to_float16(65504.0f), 0x7BFF);  // the largest float16
  EXPECT_EQ(to_float16(65520.0f), 0x7C00);  // halfway to the next: rounds to infinity
  EXPECT_EQ(to_float16(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(to_float16(from_bits(0x38800000)), 0x0400);  // 2^-14, the smallest normal
  EXPECT_EQ(to_float16(from_bits(0x33800000)), 0x0001);  // 2^-24, the smallest subnormal
  EXPECT_EQ(to_float16(from_bits(0x33000000)), 0x0000);  // 2^-25: a tie, to even (zero)
  EXPECT_EQ(to_float16(1.0f / 3), 0x3555);
  EXPECT_EQ(to_bfloat16(1.0f), 0x3F80);
  EXPECT_EQ(to_bfloat16(1.0f / 3), 0x3EAB);
}

#if defined(__FLT16_MAX__) && !defined(__clang__)
// Where the compiler has a float16 type, its conversion (hardware rounding) is the reference,
// over every special class of input and a few million others.
TEST(Half, AgreesWithTheCompilersFloat16) {
  std::vector<uint32_t> inputs;
  for (uint32_t exponent = 0; exponent < 256; ++exponent) {
    for (uint32_t mantissa : {0u, 1u, 0xFFFu, 0x1000u, 0x1FFFu, 0x2000u, 0x3000u, 0x7FFFFFu}) {
      inputs.push_back(exponent << 23 | mantissa);
    }
  }
  std::mt19937 random(7);
  for (int k = 0; k < 4000000; ++k) inputs.push_back(random());
  for (uint32_t bits : inputs) {
    const float value = from_bits(bits & 0x7FFFFFFF);
    if (std::isnan(value)) continue;
    for (float signed_value : {value, -value}) {
      const _Float16 half = static_cast<_Float16>(signed_value);
      uint16_t expected;
      std::memcpy(&expected, &half, sizeof expected);
      ASSERT_EQ(to_float16(signed_value), expected) << "bits " << std::hex << bits;
    }
  }
}
#endif

}  // namespace
}  // namespace stoker::core
