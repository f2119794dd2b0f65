#include "stoker/shard_samples.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/crc32c.h"
#include "media/testing/test_videos.h"
#include "stoker/remote_source.h"

namespace stoker {
namespace {

using testing::read_file;
using testing::run_command;
using testing::scratch_path;
using testing::write_file;

namespace fs = std::filesystem;

// A tar of `members` (in this order: tar -T keeps the list's order), each holding its name.
std::string make_tar(const std::string& name, const std::vector<std::string>& members) {
  const std::string folder = scratch_path(name + "-members");
  fs::remove_all(folder);
  std::string list;
  for (const std::string& member : members) {
    write_file(folder + "/" + member, member.ends_with(".cls") ? "7" : "bytes of " + member);
    list += member + "\n";
  }
  write_file(folder + ".list", list);
  const std::string tar = scratch_path(name + ".tar");
  const Status made = run_command("tar --format=gnu --mtime=@0 -C " + folder + " -cf " + tar +
                                  " --no-recursion -T " + folder + ".list");
  EXPECT_TRUE(made.ok()) << made.message();
  return tar;
}

std::string cache_dir(const std::string& name) {
  const std::string dir = scratch_path(name + "-cache");
  fs::remove_all(dir);
  return dir;
}

std::vector<std::string> keys(const ShardSamples& samples) {
  std::vector<std::string> out;
  for (int64_t i = 0; i < samples.size(); ++i) out.emplace_back(samples.key(i));
  return out;
}

TEST(ShardMemberField, SplitsAtTheFirstDotOfTheFileNameAndLowersTheField) {
  EXPECT_EQ(shard_member_field("dir/x.seg.PNG"),
            std::make_pair(std::string_view("dir/x"), std::string("seg.png")));
  EXPECT_EQ(shard_member_field("a.b/c.jpg"),
            std::make_pair(std::string_view("a.b/c"), std::string("jpg")));
  EXPECT_EQ(shard_member_field("plain"), std::make_pair(std::string_view("plain"), std::string()));
}

TEST(ShardSamples, GroupsConsecutiveMembersOfOneKeyPerShard) {
  const std::string a = make_tar(
      "samples-group-a", {"x.jpg", "x.cls", "x.txt", "y.JPG", "y.txt", "y.jpg", "d/z.seg.png"});
  const std::string b = make_tar("samples-group-b", {"x.txt", "w.cls"});
  auto samples = ShardSamples::open(std::vector<std::string>{a, b}, "", 2);
  ASSERT_TRUE(samples.ok()) << samples.status().message();
  const ShardSamples& s = **samples;
  // A key met again in another shard is another sample.
  EXPECT_EQ(keys(s), (std::vector<std::string>{"x", "y", "d/z", "x", "w"}));
  EXPECT_EQ(std::vector<int32_t>(s.sample_shard().begin(), s.sample_shard().end()),
            (std::vector<int32_t>{0, 0, 0, 1, 1}));
  EXPECT_EQ(std::vector<int32_t>(s.first_member().begin(), s.first_member().end()),
            (std::vector<int32_t>{0, 3, 6, 0, 1}));
  EXPECT_EQ(std::vector<int64_t>(s.shard_first().begin(), s.shard_first().end()),
            (std::vector<int64_t>{0, 3, 5}));
  EXPECT_EQ(std::vector<int64_t>(s.labels().begin(), s.labels().end()),
            (std::vector<int64_t>{7, -1, -1, -1, 7}));
  EXPECT_EQ(s.fields(), (std::vector<std::string>{"cls", "jpg", "seg.png", "txt"}));
  const int32_t jpg = s.field_number("jpg");
  EXPECT_EQ(std::vector<int32_t>(s.field_members(jpg).begin(), s.field_members(jpg).end()),
            (std::vector<int32_t>{0, 3, -1, -1, -1}));
  EXPECT_EQ(s.field_number("png"), -1);
  // y has jpg twice (y.JPG, y.jpg): the first is its member, the second is recorded.
  ASSERT_EQ(s.duplicates().size(), 1u);
  EXPECT_EQ(s.duplicates()[0].sample, 1);
  EXPECT_EQ(s.duplicates()[0].field, jpg);
  EXPECT_EQ(s.duplicates()[0].second, "y.jpg");
  const int32_t alternatives[] = {s.field_number("png"), s.field_number("txt")};
  EXPECT_EQ(s.member_of(0, alternatives), std::make_pair(2, s.field_number("txt")));
  EXPECT_EQ(s.member_of(2, alternatives), std::make_pair(-1, -1));
  EXPECT_TRUE(s.table_path().empty());  // no cache folder: nothing saved
}

TEST(ShardSamples, ASecondOpenMapsTheSavedTableAndOpensIndexesAsUsed) {
  const std::string tar = make_tar("samples-table", {"a.txt", "a.cls", "b.txt", "c.txt"});
  const std::string cache = cache_dir("samples-table");
  const std::vector<std::string> urls{tar};
  auto first = ShardSamples::open(urls, cache, 1);
  ASSERT_TRUE(first.ok()) << first.status().message();
  ASSERT_FALSE((*first)->table_path().empty());
  EXPECT_TRUE(fs::exists((*first)->table_path()));

  auto again = ShardSamples::open(urls, cache, 1);
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ((*again)->table_path(), (*first)->table_path());
  EXPECT_EQ(keys(**again), keys(**first));
  auto index = (*again)->index(0);
  ASSERT_TRUE(index.ok()) << index.status().message();
  EXPECT_EQ((*index)->members().size(), 4u);

  auto reopened = ShardSamples::reopen((*first)->table_path(), (*first)->table_version(), cache);
  ASSERT_TRUE(reopened.ok()) << reopened.status().message();
  EXPECT_EQ(keys(**reopened), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ((*reopened)->fields(), (*first)->fields());
}

TEST(ShardSamples, ADamagedTableIsRebuiltNotTrusted) {
  const std::string tar = make_tar("samples-damaged", {"a.txt", "b.txt", "c.txt"});
  const std::string cache = cache_dir("samples-damaged");
  const std::vector<std::string> urls{tar};
  auto first = ShardSamples::open(urls, cache, 1);
  ASSERT_TRUE(first.ok());
  const std::string table = (*first)->table_path();
  const std::string good = read_file(table);
  {
    std::fstream file(table, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(static_cast<std::streamoff>(good.size() / 2));
    file.put(static_cast<char>(good[good.size() / 2] ^ 0x5a));
  }
  ASSERT_NE(read_file(table), good);
  auto again = ShardSamples::open(urls, cache, 1);
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(keys(**again), (std::vector<std::string>{"a", "b", "c"}));
  // The damaged file was replaced by a good one, which a third open maps.
  EXPECT_EQ(read_file(table), good);
  auto third = ShardSamples::open(urls, cache, 1);
  ASSERT_TRUE(third.ok());
  EXPECT_EQ(keys(**third), keys(**again));
}

TEST(ShardSamples, ReopenRefusesATableThatChangedAndAShardThatChanged) {
  const std::string tar = make_tar("samples-changed", {"a.txt", "b.txt"});
  const std::string cache = cache_dir("samples-changed");
  auto first = ShardSamples::open(std::vector<std::string>{tar}, cache, 1);
  ASSERT_TRUE(first.ok());
  const std::string table = (*first)->table_path();
  const std::string version = (*first)->table_version();

  // The shard rewritten (same names, another order of bytes): the reopened samples refuse it
  // when its index is opened, naming it.
  make_tar("samples-changed", {"a.txt", "b.txt", "c.txt"});
  auto reopened = ShardSamples::reopen(table, version, cache);
  ASSERT_TRUE(reopened.ok()) << reopened.status().message();
  auto index = (*reopened)->index(0);
  ASSERT_FALSE(index.ok());
  EXPECT_EQ(index.status().code(), StatusCode::kCorruptData);
  EXPECT_NE(index.status().message().find("changed since the dataset was opened"),
            std::string::npos)
      << index.status().message();
  EXPECT_NE(index.status().message().find(tar), std::string::npos);

  // The table rewritten: refused before anything of it is read.
  write_file(table, "not a table");
  auto gone = ShardSamples::reopen(table, version, cache);
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.status().code(), StatusCode::kCorruptData);
  EXPECT_NE(gone.status().message().find(table), std::string::npos);
}

TEST(ShardSamples, ATableCutShortOrOfAnotherFormatIsRefusedByName) {
  const std::string tar = make_tar("samples-cut", {"a.txt", "b.txt"});
  const std::string cache = cache_dir("samples-cut");
  auto first = ShardSamples::open(std::vector<std::string>{tar}, cache, 1);
  ASSERT_TRUE(first.ok());
  const std::string table = (*first)->table_path();
  const std::string bytes = read_file(table);
  for (size_t cut : {size_t{0}, size_t{8}, size_t{40}, bytes.size() / 2, bytes.size() - 1}) {
    write_file(table, bytes.substr(0, cut));
    Result<std::unique_ptr<ByteSource>> file = open_file_source(table);
    ASSERT_TRUE(file.ok());
    auto cut_short = ShardSamples::reopen(table, (*file)->version_tag(), cache);
    ASSERT_FALSE(cut_short.ok()) << "cut at " << cut;
    EXPECT_EQ(cut_short.status().code(), StatusCode::kCorruptData) << "cut at " << cut;
  }
}

TEST(ShardSamples, TableBytesWithAWrongChecksumAreRefused) {
  const std::string tar = make_tar("samples-bytes", {"a.txt", "b.txt"});
  auto samples = ShardSamples::open(std::vector<std::string>{tar}, "", 1);
  ASSERT_TRUE(samples.ok());
  const std::span<const uint8_t> table = (*samples)->table_bytes();
  std::vector<uint8_t> bytes(table.begin(), table.end());
  ASSERT_TRUE(ShardSamples::from_bytes(bytes, "good").ok());
  bytes[bytes.size() / 2] ^= 0x20;
  auto damaged = ShardSamples::from_bytes(bytes, "the-table");
  ASSERT_FALSE(damaged.ok());
  EXPECT_EQ(damaged.status().code(), StatusCode::kCorruptData);
  EXPECT_NE(damaged.status().message().find("the-table"), std::string::npos);
}

// A table whose checksum holds but whose counts ask for more than its bytes hold (the first
// input shard_samples_fuzz found: 2^31 - 1 shards in a few hundred bytes) is refused, not
// allocated.
TEST(ShardSamples, CountsBeyondWhatTheBytesHoldAreRefused) {
  const std::string tar = make_tar("samples-counts", {"a.txt"});
  auto samples = ShardSamples::open(std::vector<std::string>{tar}, "", 1);
  ASSERT_TRUE(samples.ok());
  const std::span<const uint8_t> table = (*samples)->table_bytes();
  for (size_t at : {size_t{16}, size_t{24}, size_t{32}, size_t{48}}) {  // shards .. duplicates
    std::vector<uint8_t> bytes(table.begin(), table.end());
    const int64_t huge = (int64_t{1} << 31) - 1;
    std::memcpy(bytes.data() + at, &huge, sizeof(huge));
    const uint32_t crc = core::crc32c(std::span(bytes).first(bytes.size() - 4));
    std::memcpy(bytes.data() + bytes.size() - 4, &crc, sizeof(crc));
    auto refused = ShardSamples::from_bytes(bytes, "crafted");
    ASSERT_FALSE(refused.ok()) << "count at byte " << at;
    EXPECT_EQ(refused.status().code(), StatusCode::kCorruptData);
  }
}

// shard_samples_fuzz's second find: a table of 3 shards whose first-sample numbers run past its
// samples (and back); with its checksum made right, it is refused, not read past its arrays.
TEST(ShardSamples, ShardRangesPastTheSamplesAreRefused) {
  const std::string encoded =
      "U1RLU01QTFMBAAAAAAAAAAMAAAAAAAAAAAAAAAAAAAABAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
      "AAAAAQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
      "AAAAAACxAAAAAAAAAABAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAEsAUw==";
  std::vector<uint8_t> bytes;
  // Base64, decoded here: the fuzzer's input as it wrote it.
  const std::string alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  uint32_t bits = 0;
  int count = 0;
  for (char c : encoded) {
    if (c == '=') break;
    bits = bits << 6 | static_cast<uint32_t>(alphabet.find(c));
    count += 6;
    if (count >= 8) {
      count -= 8;
      bytes.push_back(static_cast<uint8_t>(bits >> count & 0xff));
    }
  }
  ASSERT_EQ(bytes.size(), 196u);
  const uint32_t crc = core::crc32c(std::span(bytes).first(bytes.size() - 4));
  std::memcpy(bytes.data() + bytes.size() - 4, &crc, sizeof(crc));
  auto refused = ShardSamples::from_bytes(bytes, "found");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kCorruptData);
}

// Seeds for shard_samples_fuzz (make test-fuzz): tables of two shards with keys in folders,
// labels and a duplicated field.
TEST(FuzzSeeds, ShardSampleTables) {
  const char* corpus = std::getenv("STOKER_FUZZ_CORPUS");
  if (corpus == nullptr) GTEST_SKIP() << "STOKER_FUZZ_CORPUS is not set";
  const fs::path folder = fs::path(corpus) / "shard_samples_fuzz";
  fs::create_directories(folder);
  const std::string a = make_tar("seed-samples-a", {"x.jpg", "x.cls", "y.JPG", "y.jpg", "d/z.txt"});
  const std::string b = make_tar("seed-samples-b", {"w.txt"});
  auto samples = ShardSamples::open(std::vector<std::string>{a, b}, "", 1);
  ASSERT_TRUE(samples.ok()) << samples.status().message();
  const std::span<const uint8_t> bytes = (*samples)->table_bytes();
  write_file((folder / "table").string(), std::string(bytes.begin(), bytes.end()));
  auto again = ShardSamples::from_bytes({bytes.begin(), bytes.end()}, "seed");
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(keys(**again), keys(**samples));
}

}  // namespace
}  // namespace stoker
