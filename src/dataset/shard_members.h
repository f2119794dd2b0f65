// The small members of a shard's samples, decoded as the batch builder needs them: labels
// (.cls), text (.txt), .npy arrays and token arrays, and json objects' typed keys. Each refusal
// says what is wrong with the member (the caller names the shard, sample and field), in the
// words stoker has always used for it.
//
// Thread-safety: pure functions. Ownership: a MemberBytes is a view of memory the caller owns
// for the call; results own their values, except NpyArray::data, a view into the member.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "stoker/status.h"

namespace stoker {

using MemberBytes = std::span<const uint8_t>;

/// `text` as Python's repr() writes a str (the form error messages quote keys and names in):
/// single quotes unless it holds one and no double quote; backslashes, the quote and control
/// characters escaped.
std::string python_repr(std::string_view text);
/// A shape as Python prints a tuple: (2, 3), (5,), ().
std::string python_shape(const std::vector<int64_t>& shape);

/// A label: an ASCII decimal integer as Python's int() reads it (surrounding whitespace, a
/// sign, underscores between digits), within int64. Errors (kCorruptData): anything else.
Result<int64_t> decode_label(MemberBytes member);

/// OK when `member` is valid UTF-8 (strict: no overlong forms, no surrogates, nothing past
/// U+10FFFF); else kCorruptData naming the first bad byte.
Status check_utf8(MemberBytes member);

/// An array of a .npy member (format versions 1 to 3): its numpy dtype name ("bool", "int8" ..
/// "uint64", "float16" .. "float64"), shape, and values.
struct NpyArray {
  std::string dtype;
  std::vector<int64_t> shape;
  size_t item_bytes = 0;
  bool fortran_order = false;
  bool byte_swapped = false;  // stored big-endian
  MemberBytes data;           // the values as stored

  int64_t elements() const;
  /// Writes the values in C order and native byte order: elements() * item_bytes bytes.
  void copy_to(uint8_t* out) const;
};

/// Errors (kCorruptData): an empty member, an .npz archive, object arrays, or anything that is
/// not a .npy array of one of those dtypes with exactly its values' bytes.
Result<NpyArray> parse_npy(MemberBytes member);

/// A 1-D integer .npy as int64 values, the first `max_length` kept (0: all). Errors: as
/// parse_npy, and not 1-D, not integer, a uint64 value beyond int64.
struct TokenArray {
  std::string dtype;
  std::vector<int64_t> values;
};
Result<TokenArray> decode_tokens(MemberBytes member, int64_t max_length);

/// The integer dtype a batch of token arrays of `dtypes` padded with `pad` is held in: numpy's
/// result_type of the dtypes and of the pad's smallest scalar type, or "int64" where that is no
/// integer type.
std::string token_batch_dtype(std::span<const std::string> dtypes, int64_t pad);

enum class JsonKind { kInt64, kFloat64, kFloat32, kBool, kString };
struct JsonKey {
  std::string name;
  JsonKind kind = JsonKind::kInt64;
};
struct JsonValue {
  int64_t int_value = 0;
  double float_value = 0;
  bool bool_value = false;
  std::string string_value;  // UTF-8
};

/// The json key type named `name` as stoker.Json names them: "int64", "float64", "float32",
/// "bool" or "str". Errors (kInvalidArgument): any other name.
Result<JsonKind> json_kind_named(std::string_view name);

/// The values of `keys` in a json object member (out[k] for keys[k]), as Python's json reads
/// it: NaN and Infinity allowed, the last of duplicate keys wins. Errors (kCorruptData): not
/// json, not an object, a key missing, a value of another type (a bool is no int64), an
/// integer beyond int64 or beyond any float. REQUIRES: out.size() == keys.size().
Status decode_json(MemberBytes member, std::span<const JsonKey> keys, std::span<JsonValue> out);

/// The small members the loader decodes itself, by the decoder of their field (stoker.Label,
/// stoker.Text, stoker.Tokens, stoker.Array, stoker.Json); images and clips are the image and
/// video decoders' work.
enum class MemberDecoder { kLabel, kText, kTokens, kArray, kJson };

/// What a member decoded as its field holds, as far as a check needs: an array's or a token
/// array's dtype and shape (empty for the other decoders).
struct MemberSummary {
  std::string dtype;
  std::vector<int64_t> shape;
};

/// Decodes `member` as the loader decodes a member of a `decoder` field (json: reading `keys`):
/// the calls above, the same refusals in the same words, without naming the member (the caller
/// names the shard, sample and field). An array's dtype is also one a batch holds (parse_npy
/// reads strings too, for its messages). What a check of shards calls, so that it passes
/// exactly the members the loader reads.
Result<MemberSummary> decode_member(MemberDecoder decoder, MemberBytes member,
                                    std::span<const JsonKey> keys = {});

}  // namespace stoker
