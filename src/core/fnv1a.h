// fnv1a: the 64-bit FNV-1a hash of a string, for cache file names (not for security, not for
// hash tables facing untrusted keys). `seed` varies the start, for a second independent hash.
#pragma once

#include <cstdint>
#include <string_view>

namespace stoker::core {

inline uint64_t fnv1a(std::string_view text, uint64_t seed = 0) {
  uint64_t hash = 0xcbf29ce484222325ull ^ seed;
  for (unsigned char c : text) hash = (hash ^ c) * 0x100000001b3ull;
  return hash;
}

}  // namespace stoker::core
