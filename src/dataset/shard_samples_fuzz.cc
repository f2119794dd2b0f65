// libFuzzer target: a saved table of shard samples (ShardSamples::from_bytes) from arbitrary
// bytes; when accepted, every accessor is walked, as a loader and the front use them. Built by
// `make fuzz` / `make test-fuzz`; the fuzzing build skips the table's checksum, so that
// mutations reach the parser behind it.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "stoker/shard_samples.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto samples = stoker::ShardSamples::from_bytes(std::vector<uint8_t>(data, data + size), "fuzz");
  if (!samples.ok()) return 0;
  const stoker::ShardSamples& s = **samples;
  std::vector<int32_t> every;
  for (size_t f = 0; f < s.fields().size(); ++f) every.push_back(static_cast<int32_t>(f));
  size_t total = 0;
  for (int64_t i = 0; i < s.size(); ++i) {
    total += s.key(i).size();
    const auto [member, field] = s.member_of(i, every);
    if (member >= s.shards()[s.sample_shard()[i]].members) __builtin_trap();
    total += static_cast<size_t>(field + 1);
  }
  total += s.bad_samples(every).size();
  return total == SIZE_MAX ? 1 : 0;
}
