#include "core/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace stoker::core {
namespace {

constexpr uint32_t kPolynomial = 0x82F63B78;  // reflected Castagnoli polynomial

constexpr std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t byte = 0; byte < 256; ++byte) {
    uint32_t crc = byte;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (kPolynomial & (0u - (crc & 1)));
    table[byte] = crc;
  }
  return table;
}

constexpr std::array<uint32_t, 256> kTable = make_table();

uint32_t crc32c_table(const uint8_t* data, size_t size, uint32_t crc) {
  for (size_t i = 0; i < size; ++i) crc = (crc >> 8) ^ kTable[(crc ^ data[i]) & 0xFF];
  return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t crc32c_sse42(const uint8_t* data, size_t size,
                                                        uint32_t crc) {
  uint64_t state = crc;
  for (; size >= 8; data += 8, size -= 8) {
    uint64_t word;
    std::memcpy(&word, data, sizeof word);
    state = _mm_crc32_u64(state, word);
  }
  auto narrow = static_cast<uint32_t>(state);
  for (; size > 0; ++data, --size) narrow = _mm_crc32_u8(narrow, *data);
  return narrow;
}

bool has_sse42() {
  static const bool supported = __builtin_cpu_supports("sse4.2");
  return supported;
}
#endif

}  // namespace

uint32_t crc32c(std::span<const uint8_t> bytes, uint32_t crc) {
  crc = ~crc;
#if defined(__x86_64__)
  if (has_sse42()) return ~crc32c_sse42(bytes.data(), bytes.size(), crc);
#endif
  return ~crc32c_table(bytes.data(), bytes.size(), crc);
}

}  // namespace stoker::core
