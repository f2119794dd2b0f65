#include "core/crc32c.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace stoker::core {
namespace {

std::span<const uint8_t> bytes_of(const std::string& text) {
  return {reinterpret_cast<const uint8_t*>(text.data()), text.size()};
}

TEST(Crc32c, KnownAnswers) {
  EXPECT_EQ(crc32c(bytes_of("")), 0u);
  EXPECT_EQ(crc32c(bytes_of("123456789")), 0xE3069283u);           // the standard check value
  EXPECT_EQ(crc32c(std::vector<uint8_t>(32, 0)), 0x8A9136AAu);     // RFC 3720, 32 zero bytes
  EXPECT_EQ(crc32c(std::vector<uint8_t>(32, 0xFF)), 0x62A8AB43u);  // and 32 0xFF bytes
}

TEST(Crc32c, ContinuesAcrossPiecesAndSeesEveryFlippedBit) {
  std::mt19937 random(3);
  std::vector<uint8_t> data(1000);
  for (uint8_t& b : data) b = static_cast<uint8_t>(random());
  const uint32_t whole = crc32c(data);
  for (size_t cut : {0, 1, 7, 8, 9, 500, 999, 1000}) {
    const std::span<const uint8_t> all(data);
    EXPECT_EQ(crc32c(all.subspan(cut), crc32c(all.first(cut))), whole) << cut;
  }
  for (size_t bit = 0; bit < data.size() * 8; bit += 13) {
    data[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    EXPECT_NE(crc32c(data), whole) << bit;
    data[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
  }
}

}  // namespace
}  // namespace stoker::core
