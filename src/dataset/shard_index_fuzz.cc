// libFuzzer target: a tar shard's index from arbitrary bytes, both ways: ShardIndex::scan of
// the bytes as a shard, then every member read back through read_members; and the bytes as a
// saved index (decode), checked against themselves as a shard and read. Built by `make fuzz` /
// `make test-fuzz`; the fuzzing build skips the saved form's checksum, so that mutations reach
// the parser behind it.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "stoker/byte_source.h"
#include "stoker/shard_index.h"

namespace {

void read_every_member(const stoker::ShardIndex& index, const stoker::ByteSource& source) {
  std::vector<int64_t> members;
  for (size_t m = 0; m < index.members().size() && m < 64; ++m) members.push_back(m);
  const int64_t bytes = index.bytes_to_read(members);
  if (bytes < 0 || bytes > (int64_t{64} << 20)) return;
  std::vector<uint8_t> out(static_cast<size_t>(bytes));
  std::vector<int64_t> starts(members.size());
  (void)index.read_members(source, members, out, starts);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::unique_ptr<stoker::ByteSource> source =
      stoker::memory_source("fuzz.tar", std::span(data, size), nullptr);
  auto scanned = stoker::ShardIndex::scan(*source);
  if (scanned.ok()) {
    read_every_member(*scanned, *source);
    auto again = stoker::ShardIndex::decode(scanned->encode(), "fuzz.index");
    if (!again.ok() || again->members().size() != scanned->members().size()) __builtin_trap();
  }
  auto decoded = stoker::ShardIndex::decode(std::span(data, size), "fuzz.index");
  if (decoded.ok()) {
    (void)decoded->check_headers(*source);
    read_every_member(*decoded, *source);
  }
  return 0;
}
