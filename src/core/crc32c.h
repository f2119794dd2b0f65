// CRC-32C (Castagnoli): the checksum of stoker's saved structures (the episode index, frame
// tables), so that damaged bytes are detected when read instead of giving wrong results.
// Uses the SSE4.2 instruction where the CPU has it (several GB/s), a table elsewhere.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>

namespace stoker::core {

/// The CRC-32C of `bytes`, continuing from `crc` (the CRC of the bytes before them; 0 to
/// start). crc32c("123456789") == 0xE3069283.
uint32_t crc32c(std::span<const uint8_t> bytes, uint32_t crc = 0);

}  // namespace stoker::core
