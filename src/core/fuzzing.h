// Whether this is a fuzzing build (`make test-fuzz`, FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION):
// the parsers of saved structures then read past a wrong checksum, so that the fuzzer's
// mutations reach the parsing behind it. Never set in a build that reads real data.
#pragma once

namespace stoker::core {

#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
inline constexpr bool kFuzzing = true;
#else
inline constexpr bool kFuzzing = false;
#endif

}  // namespace stoker::core
