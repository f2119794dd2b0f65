// libFuzzer target: a shard member's bytes through every decoder of shard_members.h (label,
// text, .npy, tokens, json with keys of every kind): a value or an error, never a crash, a read
// out of bounds or a hang. Built by `make fuzz` / `make test-fuzz`.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "dataset/shard_members.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const stoker::MemberBytes member(data, size);
  (void)stoker::decode_label(member);
  (void)stoker::check_utf8(member);
  auto array = stoker::parse_npy(member);
  if (array.ok() && array->elements() <= (int64_t{1} << 20)) {
    std::vector<uint8_t> values(static_cast<size_t>(array->elements()) * array->item_bytes);
    array->copy_to(values.data());
  }
  (void)stoker::decode_tokens(member, 4);
  const std::vector<stoker::JsonKey> keys = {{"a", stoker::JsonKind::kInt64},
                                             {"b", stoker::JsonKind::kFloat64},
                                             {"c", stoker::JsonKind::kFloat32},
                                             {"d", stoker::JsonKind::kBool},
                                             {"e", stoker::JsonKind::kString}};
  std::vector<stoker::JsonValue> values(keys.size());
  (void)stoker::decode_json(member, keys, values);
  return 0;
}
