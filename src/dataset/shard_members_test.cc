#include "dataset/shard_members.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace stoker {
namespace {

MemberBytes bytes_of(const std::string& text) {
  return MemberBytes(reinterpret_cast<const uint8_t*>(text.data()), text.size());
}

// A .npy of `version` with header dict `dict` and `values` after it, padded as numpy pads.
std::string npy(const std::string& dict, const std::string& values, int version = 1) {
  const size_t prefix = version == 1 ? 10 : 12;
  std::string header = dict;
  while ((prefix + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(version);
  out += '\0';
  const size_t length = header.size();
  out += static_cast<char>(length & 0xff);
  out += static_cast<char>((length >> 8) & 0xff);
  if (version != 1) out += std::string(2, '\0');
  return out + header + values;
}

template <typename T>
std::string raw(std::vector<T> values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

std::string message_of(const Status& status) { return status.message(); }

TEST(ShardMembers, LabelsAreIntegersWithinInt64AsPythonReadsThem) {
  EXPECT_EQ(*decode_label(bytes_of("7\n")), 7);
  EXPECT_EQ(*decode_label(bytes_of("  -12 ")), -12);
  EXPECT_EQ(*decode_label(bytes_of("+1_000")), 1000);
  EXPECT_EQ(*decode_label(bytes_of("007")), 7);
  EXPECT_EQ(*decode_label(bytes_of("-9223372036854775808")), INT64_MIN);
  for (const char* bad : {"seven", "", " ", "1_", "_1", "1__0", "1.5", "0x10", "\xc3\xa9"}) {
    const auto label = decode_label(bytes_of(bad));
    ASSERT_FALSE(label.ok()) << bad;
    EXPECT_NE(message_of(label.status()).find("a cls member holds an integer, not"),
              std::string::npos);
  }
  const auto big = decode_label(bytes_of("9223372036854775808"));
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(message_of(big.status()),
            "the cls label 9223372036854775808 lies outside int64 [-9223372036854775808, "
            "9223372036854775807]");
  const auto long_one = decode_label(bytes_of(std::string(50, '9')));
  EXPECT_NE(message_of(long_one.status()).find("(50 digits)"), std::string::npos);
}

TEST(ShardMembers, TextIsStrictUtf8) {
  EXPECT_TRUE(check_utf8(bytes_of("caption \xc3\xa9 \xf0\x9f\x98\x80")).ok());
  EXPECT_EQ(message_of(check_utf8(bytes_of("ab\xff"))),
            "'utf-8' codec can't decode byte 0xff in position 2: invalid start byte");
  EXPECT_FALSE(check_utf8(bytes_of("\xc0\xaf")).ok());          // overlong
  EXPECT_FALSE(check_utf8(bytes_of("\xed\xa0\x80")).ok());      // a surrogate
  EXPECT_FALSE(check_utf8(bytes_of("\xf4\x90\x80\x80")).ok());  // past U+10FFFF
  EXPECT_NE(message_of(check_utf8(bytes_of("\xe2\x82"))).find("unexpected end of data"),
            std::string::npos);
}

TEST(ShardMembers, NpyArraysOfEveryVersionOrderAndByteOrder) {
  const std::string c_order = npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
                                  raw<float>({0, 1, 2, 3, 4, 5}));
  for (int version : {1, 2, 3}) {
    const std::string member = npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
                                   raw<float>({0, 1, 2, 3, 4, 5}), version);
    auto array = parse_npy(bytes_of(member));
    ASSERT_TRUE(array.ok()) << array.status().message();
    EXPECT_EQ(array->dtype, "float32");
    EXPECT_EQ(array->shape, (std::vector<int64_t>{2, 3}));
  }
  // Fortran order and big-endian come out in C order, native bytes.
  // The member outlives the array, which views its bytes.
  const std::string fortran_member =
      npy("{'descr': '>i2', 'fortran_order': True, 'shape': (2, 3), }",
          std::string("\0\0\0\3\0\1\0\4\0\2\0\5", 12));
  auto fortran = parse_npy(bytes_of(fortran_member));
  ASSERT_TRUE(fortran.ok()) << fortran.status().message();
  std::vector<int16_t> values(6);
  fortran->copy_to(reinterpret_cast<uint8_t*>(values.data()));
  EXPECT_EQ(values, (std::vector<int16_t>{0, 1, 2, 3, 4, 5}));
  // A 0-d array and an empty one.
  auto scalar = parse_npy(
      bytes_of(npy("{'descr': '<i8', 'fortran_order': False, 'shape': (), }", raw<int64_t>({42}))));
  ASSERT_TRUE(scalar.ok());
  EXPECT_TRUE(scalar->shape.empty());
  EXPECT_EQ(scalar->elements(), 1);
  auto empty =
      parse_npy(bytes_of(npy("{'descr': '|u1', 'fortran_order': False, 'shape': (0,), }", "")));
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->elements(), 0);
}

TEST(ShardMembers, WhatIsNoNpyArrayIsRefusedByName) {
  EXPECT_EQ(message_of(parse_npy(bytes_of("")).status()),
            "the member is empty (zero bytes), not a .npy array");
  const std::string zip = std::string("PK\x03\x04", 4) + std::string(40, '\0');
  EXPECT_NE(message_of(parse_npy(bytes_of(zip)).status()).find("an .npz archive"),
            std::string::npos);
  const std::string objects =
      npy("{'descr': '|O', 'fortran_order': False, 'shape': (1,), }", std::string(8, '\0'));
  EXPECT_NE(message_of(parse_npy(bytes_of(objects)).status()).find("allow_pickle=False"),
            std::string::npos);
  const std::string short_values =
      npy("{'descr': '<f8', 'fortran_order': False, 'shape': (4,), }", raw<double>({1, 2}));
  EXPECT_NE(message_of(parse_npy(bytes_of(short_values)).status()).find("not a .npy array"),
            std::string::npos);
  EXPECT_FALSE(parse_npy(bytes_of("not an array at all")).ok());
  // A string dtype whose size is no number, or one whose bytes per item overflow (the fuzzer's
  // find: '>U27PK...' read as 3042229962676667071 characters).
  for (const char* descr : {">U27PK\x05\x06", "<U3042229962676667071", "|S0", "<U"}) {
    const std::string bad =
        npy("{'descr': '" + std::string(descr) + "', 'fortran_order': False, 'shape': (1,), }",
            std::string(8, '\0'));
    EXPECT_FALSE(parse_npy(bytes_of(bad)).ok()) << descr;
  }
}

TEST(ShardMembers, TokensAreOneDimensionalIntegersWithinInt64) {
  auto tokens =
      decode_tokens(bytes_of(npy("{'descr': '<u2', 'fortran_order': False, 'shape': (4,), }",
                                 raw<uint16_t>({1, 2, 65535, 4}))),
                    3);
  ASSERT_TRUE(tokens.ok());
  EXPECT_EQ(tokens->dtype, "uint16");
  EXPECT_EQ(tokens->values, (std::vector<int64_t>{1, 2, 65535}));
  EXPECT_EQ(message_of(decode_tokens(bytes_of(npy("{'descr': '<f8', 'fortran_order': False, "
                                                  "'shape': (2,), }",
                                                  raw<double>({0.5, 1.5}))),
                                     0)
                           .status()),
            "token ids are an integer array, this one is float64 (<f8)");
  EXPECT_EQ(message_of(decode_tokens(bytes_of(npy("{'descr': '<i4', 'fortran_order': False, "
                                                  "'shape': (2, 3), }",
                                                  raw<int32_t>({1, 2, 3, 4, 5, 6}))),
                                     0)
                           .status()),
            "a token array is 1-D, this one has shape (2, 3)");
  EXPECT_NE(message_of(decode_tokens(bytes_of(npy("{'descr': '<u8', 'fortran_order': False, "
                                                  "'shape': (1,), }",
                                                  raw<uint64_t>({uint64_t{1} << 63}))),
                                     0)
                           .status())
                .find("the token id 9223372036854775808 lies outside int64"),
            std::string::npos);
}

TEST(ShardMembers, TheTokenBatchDtypeIsNumpysPromotion) {
  // Expected values from numpy 2: np.result_type(*dtypes, np.min_scalar_type(pad)), int64
  // where that is no integer type.
  struct Case {
    std::vector<std::string> dtypes;
    int64_t pad;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {{"int8"}, -1, "int8"},
      {{"int8"}, 0, "int16"},
      {{"int8"}, 256, "int32"},
      {{"int8"}, 70000, "int64"},
      {{"int8"}, int64_t{1} << 40, "int64"},
      {{"uint8"}, -1, "int16"},
      {{"uint8"}, 255, "uint8"},
      {{"uint8"}, 256, "uint16"},
      {{"uint8"}, 70000, "uint32"},
      {{"uint8"}, int64_t{1} << 40, "uint64"},
      {{"int8", "uint8"}, 0, "int16"},
      {{"int32"}, 255, "int32"},
      {{"uint64"}, -1, "int64"},
      {{"uint64"}, 0, "uint64"},
      {{"int64", "uint64"}, 0, "int64"},
      {{"uint16", "int8"}, -1, "int32"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(token_batch_dtype(c.dtypes, c.pad), c.expected) << c.dtypes[0] << " " << c.pad;
  }
}

TEST(ShardMembers, JsonKeysAreTakenTypedAsPythonsJsonReadsThem) {
  const std::vector<JsonKey> keys = {{"w", JsonKind::kInt64},
                                     {"score", JsonKind::kFloat32},
                                     {"url", JsonKind::kString},
                                     {"ok", JsonKind::kBool},
                                     {"n", JsonKind::kFloat64}};
  std::vector<JsonValue> values(keys.size());
  const std::string object =
      "\xef\xbb\xbf { \"w\": 1, \"nested\": {\"a\": [1, 2, {\"b\": null}]}, \"w\": 7,"
      " \"score\": 0.25, \"url\": \"a\\u00e9\\ud83d\\ude00\\n\", \"ok\": true, \"n\": NaN }";
  ASSERT_TRUE(decode_json(bytes_of(object), keys, values).ok());
  EXPECT_EQ(values[0].int_value, 7);  // the last of duplicates
  EXPECT_EQ(values[1].float_value, 0.25);
  EXPECT_EQ(values[2].string_value, "a\xc3\xa9\xf0\x9f\x98\x80\n");
  EXPECT_TRUE(values[3].bool_value);
  EXPECT_TRUE(std::isnan(values[4].float_value));

  auto error = [&](const std::string& text, std::vector<JsonKey> wanted) {
    std::vector<JsonValue> out(wanted.size());
    return message_of(decode_json(bytes_of(text), wanted, out));
  };
  const std::vector<JsonKey> w = {{"w", JsonKind::kInt64}};
  EXPECT_NE(error("{not json", w).find("line 1 column 2 (char 1)"), std::string::npos);
  EXPECT_EQ(error("[1, 2]", w), "the json holds a list, not an object");
  EXPECT_EQ(error("{}", w), "\"the json has no key 'w'\"");
  EXPECT_EQ(error("{\"w\": true}", w), "the json's 'w' is True, not a int64");
  EXPECT_EQ(error("{\"w\": \"x\"}", w), "the json's 'w' is 'x', not a int64");
  EXPECT_EQ(error("{\"w\": 1.5}", w), "the json's 'w' is 1.5, not a int64");
  EXPECT_EQ(error("{\"w\": 9223372036854775808}", w),
            "the json's 'w' 9223372036854775808 lies outside int64 [-9223372036854775808, "
            "9223372036854775807]");
  EXPECT_EQ(error("{\"w\": 1" + std::string(400, '0') + "}", {{"w", JsonKind::kFloat64}}),
            "the json's 'w' is an integer beyond any float64");
  EXPECT_NE(error("{\"w\": 1} x", w).find("Extra data"), std::string::npos);
  EXPECT_NE(error(std::string(2000, '['), w).find("Nested too deeply"), std::string::npos);
  EXPECT_NE(error("{\"w\": \"a\x01\"}", w).find("Invalid control character"), std::string::npos);
}

TEST(ShardMembers, AMemberIsDecodedAsItsFieldsDecoderDecodesIt) {
  const std::string floats = npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
                                 raw<float>({0, 1, 2, 3, 4, 5}));
  auto array = decode_member(MemberDecoder::kArray, bytes_of(floats));
  ASSERT_TRUE(array.ok()) << array.status().message();
  EXPECT_EQ(array->dtype, "float32");
  EXPECT_EQ(array->shape, (std::vector<int64_t>{2, 3}));
  // As tokens the same array is refused: 2-D floats.
  EXPECT_NE(message_of(decode_member(MemberDecoder::kTokens, bytes_of(floats)).status())
                .find("token ids are an integer array"),
            std::string::npos);
  auto tokens =
      decode_member(MemberDecoder::kTokens,
                    bytes_of(npy("{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }",
                                 raw<int32_t>({5, 6, 7}))));
  ASSERT_TRUE(tokens.ok());
  EXPECT_EQ(tokens->dtype, "int32");
  EXPECT_EQ(tokens->shape, std::vector<int64_t>{3});
  // A header numpy reads whose values are cut short; strings, which no batch holds.
  const std::string cut =
      npy("{'descr': '<f8', 'fortran_order': False, 'shape': (100,), }", raw<double>({1, 2}));
  EXPECT_EQ(message_of(decode_member(MemberDecoder::kArray, bytes_of(cut)).status()),
            "not a .npy array: its shape needs 800 bytes of values, the member holds 16");
  const std::string strings =
      npy("{'descr': '<U2', 'fortran_order': False, 'shape': (1,), }", std::string(8, 'a'));
  EXPECT_EQ(message_of(decode_member(MemberDecoder::kArray, bytes_of(strings)).status()),
            "an array of dtype U2, which batches cannot hold");
  // Labels, texts and json by their own decoders.
  EXPECT_TRUE(decode_member(MemberDecoder::kLabel, bytes_of("1_000\n")).ok());
  EXPECT_FALSE(decode_member(MemberDecoder::kLabel, bytes_of("cat")).ok());
  EXPECT_FALSE(decode_member(MemberDecoder::kText, bytes_of("\xff")).ok());
  const std::vector<JsonKey> keys = {{"n", *json_kind_named("int64")}};
  EXPECT_TRUE(decode_member(MemberDecoder::kJson, bytes_of("{\"n\": 3}"), keys).ok());
  EXPECT_EQ(
      message_of(decode_member(MemberDecoder::kJson, bytes_of("{\"n\": 1e3}"), keys).status()),
      "the json's 'n' is 1e3, not a int64");
  EXPECT_EQ(json_kind_named("float16").status().code(), StatusCode::kInvalidArgument);
}

// Seeds for shard_members_fuzz (make test-fuzz): a label, a text, npy arrays and a json object.
TEST(FuzzSeeds, ShardMembers) {
  const char* corpus = std::getenv("STOKER_FUZZ_CORPUS");
  if (corpus == nullptr) GTEST_SKIP() << "STOKER_FUZZ_CORPUS is not set";
  const std::filesystem::path folder = std::filesystem::path(corpus) / "shard_members_fuzz";
  std::filesystem::create_directories(folder);
  const std::vector<std::pair<std::string, std::string>> seeds = {
      {"label", "42\n"},
      {"text", "a caption \xc3\xa9"},
      {"npy-f4", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
                     raw<float>({0, 1, 2, 3, 4, 5}))},
      {"npy-fortran",
       npy("{'descr': '>i2', 'fortran_order': True, 'shape': (2, 2), }", std::string(8, '\1'), 2)},
      {"json",
       "{\"a\": 1, \"b\": 2.5, \"c\": NaN, \"d\": true, \"e\": \"\\u00e9\", "
       "\"f\": [1, {\"g\": null}]}"},
  };
  for (const auto& [name, bytes] : seeds) {
    std::ofstream(folder / name, std::ios::binary) << bytes;
  }
}

}  // namespace
}  // namespace stoker
