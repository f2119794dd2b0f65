#include "stoker/shard_index.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "media/testing/test_videos.h"
#include "stoker/remote_source.h"

namespace stoker {
namespace {

using testing::read_file;
using testing::run_command;
using testing::scratch_path;
using testing::write_file;

namespace fs = std::filesystem;

// A tar written by GNU tar in `format` (gnu, posix, ustar) of samples k0..k{n-1}, each a .txt
// and a .cls member, plus one member with a name too long for a plain header.
std::string make_tar(const std::string& name, const std::string& format, int samples,
                     const std::string& text = "caption") {
  const std::string folder = scratch_path(name + "-members");
  fs::remove_all(folder);
  std::string list;
  for (int k = 0; k < samples; ++k) {
    write_file(folder + "/k" + std::to_string(k) + ".txt", text + " " + std::to_string(k));
    write_file(folder + "/k" + std::to_string(k) + ".cls", std::to_string(k * 7) + "\n");
    list += " k" + std::to_string(k) + ".txt k" + std::to_string(k) + ".cls";
  }
  const std::string deep = std::string(60, 'd') + "/" + std::string(70, 'e');
  write_file(folder + "/" + deep + "/long.txt", "far");
  list += " " + deep + "/long.txt";
  const std::string tar = scratch_path(name + ".tar");
  const Status made = run_command("tar --format=" + format + " --sort=name --mtime=@0 -C " +
                                  folder + " -cf " + tar + list);
  EXPECT_TRUE(made.ok()) << made.message();
  return tar;
}

ShardIndex scan(const std::string& path) {
  auto source = open_file_source(path);
  EXPECT_TRUE(source.ok()) << source.status().message();
  auto index = ShardIndex::scan(**source);
  EXPECT_TRUE(index.ok()) << index.status().message();
  return std::move(index).value();
}

std::string member_data(const std::string& path, const ShardIndex& index, int64_t member) {
  auto source = open_file_source(path);
  std::vector<uint8_t> out(static_cast<size_t>(index.bytes_to_read(std::span(&member, 1))));
  int64_t start = 0;
  const Status read =
      index.read_members(**source, std::span(&member, 1), out, std::span(&start, 1));
  EXPECT_TRUE(read.ok()) << read.message();
  return std::string(out.begin() + start, out.end());
}

TEST(ShardIndex, ScansEveryTarFormatGnuTarWrites) {
  for (const std::string format : {"gnu", "posix", "ustar"}) {
    SCOPED_TRACE(format);
    const std::string tar = make_tar("formats-" + format, format, 5);
    const ShardIndex index = scan(tar);
    EXPECT_EQ(index.damage(), "");
    ASSERT_EQ(index.members().size(), 11u);
    // tar's own listing, in order: every name resolved (prefix, long-name and pax forms).
    EXPECT_EQ(index.members()[10].name,
              std::string(60, 'd') + "/" + std::string(70, 'e') + "/long.txt");
    EXPECT_EQ(member_data(tar, index, 10), "far");
    for (int k = 0; k < 5; ++k) {  // in the order given to tar: k.txt, k.cls
      const ShardIndex::Member& cls = index.members()[2 * k + 1];
      EXPECT_EQ(cls.name, std::string("k").append(std::to_string(k)).append(".cls"));
      EXPECT_EQ(cls.label, k * 7);
      EXPECT_EQ(member_data(tar, index, 2 * k), "caption " + std::to_string(k));
      EXPECT_EQ(index.members()[2 * k].label, ShardIndex::kNoLabel);
    }
  }
}

TEST(ShardIndex, LabelsThatAreNotSmallIntegersAreLeftToReadTime) {
  const std::string folder = scratch_path("labels-members");
  fs::remove_all(folder);
  write_file(folder + "/a.cls", "99999999999999999999999");  // beyond int64
  write_file(folder + "/b.cls", "cat");
  write_file(folder + "/c.cls", " -3 ");
  const std::string tar = scratch_path("labels.tar");
  ASSERT_TRUE(
      run_command("tar --sort=name -C " + folder + " -cf " + tar + " a.cls b.cls c.cls").ok());
  const ShardIndex index = scan(tar);
  ASSERT_EQ(index.members().size(), 3u);
  EXPECT_EQ(index.members()[0].label, ShardIndex::kNoLabel);
  EXPECT_EQ(index.members()[1].label, ShardIndex::kNoLabel);
  EXPECT_EQ(index.members()[2].label, -3);
}

TEST(ShardIndex, EncodesAndDecodesAndRefusesDamagedBytes) {
  const ShardIndex index = scan(make_tar("codec", "gnu", 4));
  const std::vector<uint8_t> bytes = index.encode();
  auto decoded = ShardIndex::decode(bytes, "x.index");
  ASSERT_TRUE(decoded.ok()) << decoded.status().message();
  EXPECT_EQ(decoded->encode(), bytes);
  for (size_t at : {size_t{0}, size_t{9}, bytes.size() / 2, bytes.size() - 1}) {
    std::vector<uint8_t> damaged = bytes;
    damaged[at] ^= 0x40;
    auto refused = ShardIndex::decode(damaged, "x.index");
    ASSERT_FALSE(refused.ok()) << "byte " << at;
    EXPECT_EQ(refused.status().code(), StatusCode::kCorruptData);
    EXPECT_NE(refused.status().message().find("x.index"), std::string::npos);
  }
  EXPECT_FALSE(ShardIndex::decode(std::span(bytes).first(bytes.size() - 7), "x.index").ok());
  const std::string json = R"({"format": "stoker-shard-index", "members": []})";
  EXPECT_FALSE(
      ShardIndex::decode(std::span(reinterpret_cast<const uint8_t*>(json.data()), json.size()),
                         "old.index")
          .ok());
}

// Issue 21, item 1: tar pads to 10,240-byte records, so shards of similar content have equal
// sizes; an index is bound to its shard by the members' headers, not by the size.
TEST(ShardIndex, AnIndexOfAnotherShardOfTheSameSizeIsRefused) {
  const std::string a = make_tar("same-size-a", "gnu", 6, "alpha");
  const std::string b = make_tar("same-size-b", "gnu", 6, "gamma");
  ASSERT_EQ(fs::file_size(a), fs::file_size(b));
  // Same names, sizes and mtime: equal headers, so b's index passes for a, and what it reads
  // of a is a's own members, at the places b's index says (the layouts are equal).
  const ShardIndex index_b = scan(b);
  auto shard_a = open_file_source(a);
  ASSERT_TRUE(shard_a.ok());
  EXPECT_TRUE(index_b.check_headers(**shard_a).ok());
  EXPECT_EQ(member_data(a, index_b, 0), "alpha 0");
  const ShardIndex index_a = scan(a);

  // A shard of other keys (and so other headers) at the same size: refused at open and at
  // every read.
  const std::string c = make_tar("same-size-c", "gnu", 6, "alpha");
  {
    const std::string folder = scratch_path("same-size-c-members");
    std::string list;
    for (int k = 0; k < 6; ++k) {
      fs::rename(folder + "/k" + std::to_string(k) + ".txt",
                 folder + "/z" + std::to_string(k) + ".txt");
      fs::rename(folder + "/k" + std::to_string(k) + ".cls",
                 folder + "/z" + std::to_string(k) + ".cls");
      list += " z" + std::to_string(k) + ".txt z" + std::to_string(k) + ".cls";
    }
    ASSERT_TRUE(run_command("tar --format=gnu --mtime=@0 -C " + folder + " -cf " + c + list).ok());
  }
  ASSERT_EQ(fs::file_size(a), fs::file_size(c));
  auto shard_c = open_file_source(c);
  const Status refused = index_a.check_headers(**shard_c);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.code(), StatusCode::kCorruptData);
  EXPECT_NE(refused.message().find(c), std::string::npos) << refused.message();
  int64_t member = 3;
  std::vector<uint8_t> out(static_cast<size_t>(index_a.bytes_to_read(std::span(&member, 1))));
  int64_t start = 0;
  const Status read =
      index_a.read_members(**shard_c, std::span(&member, 1), out, std::span(&start, 1));
  ASSERT_FALSE(read.ok());
  EXPECT_NE(read.message().find("changed since its index was made"), std::string::npos);
  EXPECT_NE(read.message().find("k1.cls"), std::string::npos) << read.message();
}

// Issue 21, item 6: a truncated tar, or one with an enlarged size field, is damage the scan
// reports; the members before it are kept.
TEST(ShardIndex, TruncatedAndDamagedTarsAreReportedWithTheirByte) {
  const std::string tar = make_tar("truncated", "gnu", 10);
  const std::string bytes = read_file(tar);
  const ShardIndex whole = scan(tar);
  ASSERT_EQ(whole.damage(), "");
  // At a member boundary: no end-of-archive blocks.
  const int64_t boundary = whole.members()[11].offset - ShardIndex::kHeaderBytes;
  write_file(scratch_path("cut-boundary.tar"), bytes.substr(0, static_cast<size_t>(boundary)));
  const ShardIndex at_boundary = scan(scratch_path("cut-boundary.tar"));
  EXPECT_EQ(at_boundary.members().size(), 11u);
  EXPECT_NE(at_boundary.damage().find("truncated"), std::string::npos) << at_boundary.damage();
  // Mid-header and mid-data.
  write_file(scratch_path("cut-header.tar"), bytes.substr(0, static_cast<size_t>(boundary + 100)));
  EXPECT_NE(scan(scratch_path("cut-header.tar")).damage().find("mid-header"), std::string::npos);
  write_file(scratch_path("cut-data.tar"),
             bytes.substr(0, static_cast<size_t>(whole.members()[4].offset + 3)));  // 9 bytes
  const ShardIndex mid_data = scan(scratch_path("cut-data.tar"));
  EXPECT_EQ(mid_data.members().size(), 4u);
  EXPECT_NE(mid_data.damage().find("past the shard's end"), std::string::npos);
  // An enlarged size without its checksum fixed: a corrupt header.
  std::string enlarged = bytes;
  const size_t header = static_cast<size_t>(whole.members()[4].offset - ShardIndex::kHeaderBytes);
  enlarged[header + 124 + 9] = '7';
  write_file(scratch_path("enlarged.tar"), enlarged);
  const ShardIndex corrupt = scan(scratch_path("enlarged.tar"));
  EXPECT_EQ(corrupt.members().size(), 4u);
  EXPECT_NE(corrupt.damage().find("checksum"), std::string::npos) << corrupt.damage();
}

// Issue 21, item 2: a shard rewritten in place (same size) is read against its old index: every
// member's header is checked as it is read.
TEST(ShardIndex, AShardRewrittenAfterItsIndexIsRefusedAtRead) {
  const std::string tar = make_tar("rewritten", "gnu", 6);
  const ShardIndex index = scan(tar);
  std::string bytes = read_file(tar);
  // Rename a member in place (name and checksum rewritten, as a rewrite with other keys does).
  const size_t header = static_cast<size_t>(index.members()[7].offset - ShardIndex::kHeaderBytes);
  bytes[header] = 'q';
  unsigned sum = 0;
  for (size_t i = 0; i < 512; ++i) {
    sum += (i >= 148 && i < 156) ? ' ' : static_cast<uint8_t>(bytes[header + i]);
  }
  for (size_t digit = 0; digit < 6; ++digit) {  // six octal digits, then NUL and space
    bytes[header + 148 + digit] = static_cast<char>('0' + ((sum >> (3 * (5 - digit))) & 7));
  }
  bytes[header + 154] = '\0';
  write_file(tar, bytes);
  EXPECT_EQ(scan(tar).members()[7].name[0], 'q');  // a valid tar still
  auto source = open_file_source(tar);
  int64_t members[2] = {6, 7};
  std::vector<uint8_t> out(static_cast<size_t>(index.bytes_to_read(members)));
  int64_t starts[2];
  const Status read_status = index.read_members(**source, members, out, starts);
  ASSERT_FALSE(read_status.ok());
  EXPECT_NE(read_status.message().find("k3.cls"), std::string::npos) << read_status.message();
}

// Issue 33, item 2: a shard rewritten with the same names and sizes (tar headers of mtime 0)
// has the headers of the one indexed, so the header checks alone delivered sample 1's caption
// as sample 2's. An opened index is bound to the file's version: refused whether the shard is
// rewritten in place or renamed over.
TEST(ShardIndex, AShardRewrittenWithTheSameHeadersAfterItWasOpenedIsRefusedAtRead) {
  for (const bool in_place : {true, false}) {
    const std::string tar = make_tar(in_place ? "same-headers" : "renamed-over", "gnu", 4);
    const std::string cache = scratch_path("same-headers-cache");
    fs::remove_all(cache);
    auto opened = open_shard_indexes(std::span(&tar, 1), cache, 1);
    ASSERT_TRUE(opened.ok()) << opened.status().message();
    const ShardIndex& index = *(*opened)[0];
    EXPECT_FALSE(index.opened_version().empty());
    int64_t member = -1;
    for (size_t m = 0; m < index.members().size(); ++m) {
      if (index.members()[m].name == "k1.txt") member = static_cast<int64_t>(m);
    }
    ASSERT_GE(member, 0);
    EXPECT_EQ(member_data(tar, index, member), "caption 1");
    // The same bytes with k1.txt and k2.txt's data swapped: every header as it was.
    std::string bytes = read_file(tar);
    const size_t one = bytes.find("caption 1"), two = bytes.find("caption 2");
    std::swap_ranges(bytes.begin() + one, bytes.begin() + one + 9, bytes.begin() + two);
    if (in_place) {
      // Past the file system's timestamp granularity (a few ms) since make_tar wrote it.
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      std::fstream(tar, std::ios::binary | std::ios::in | std::ios::out) << bytes;
    } else {
      write_file(tar + ".new", bytes);
      fs::rename(tar + ".new", tar);
    }
    EXPECT_EQ(scan(tar).members()[static_cast<size_t>(member)].header_crc,
              index.members()[static_cast<size_t>(member)].header_crc);
    auto source = open_file_source(tar);
    std::vector<uint8_t> out(static_cast<size_t>(index.bytes_to_read(std::span(&member, 1))));
    int64_t start = 0;
    const Status read_status =
        index.read_members(**source, std::span(&member, 1), out, std::span(&start, 1));
    ASSERT_FALSE(read_status.ok()) << (in_place ? "in place" : "renamed over");
    EXPECT_EQ(read_status.code(), StatusCode::kCorruptData);
    EXPECT_NE(read_status.message().find("replaced or rewritten since it was opened"),
              std::string::npos)
        << read_status.message();
    // Opened again, the shard is indexed for what it is now.
    auto again = open_shard_indexes(std::span(&tar, 1), cache, 1);
    ASSERT_TRUE(again.ok()) << again.status().message();
    EXPECT_EQ(member_data(tar, *(*again)[0], member), "caption 2");
  }
}

TEST(ShardIndex, OpensFromTheSidecarOrAScanAndCachesIt) {
  const std::string tar = make_tar("opened", "gnu", 3);
  const std::string cache = scratch_path("opened-cache");
  fs::remove_all(cache);
  fs::remove(tar + ".index");
  std::vector<std::string> notes;
  auto first = open_shard_indexes(std::span(&tar, 1), cache, 2, &notes);
  ASSERT_TRUE(first.ok()) << first.status().message();
  EXPECT_EQ((*first)[0]->members().size(), 7u);
  EXPECT_EQ(notes[0], "");
  int cached = 0;
  for (const auto& entry : fs::directory_iterator(cache + "/shards")) {
    cached += entry.path().extension() == ".sidx";
  }
  EXPECT_EQ(cached, 1);
  // A sidecar of another shard beside it is refused, with a note, and the shard scanned.
  const std::string other = make_tar("opened-other", "gnu", 3, "other");
  const std::vector<uint8_t> foreign = scan(make_tar("opened-foreign", "posix", 3)).encode();
  write_file(other + ".index", std::string(foreign.begin(), foreign.end()));
  auto second = open_shard_indexes(std::span(&other, 1), cache, 1, &notes);
  ASSERT_TRUE(second.ok()) << second.status().message();
  EXPECT_NE(notes[0].find("refused"), std::string::npos) << notes[0];
  EXPECT_EQ(member_data(other, *(*second)[0], 0), "other 0");
  // A damaged cache file is rebuilt.
  for (const auto& entry : fs::directory_iterator(cache + "/shards")) {
    write_file(entry.path().string(), "garbage");
  }
  auto third = open_shard_indexes(std::span(&tar, 1), cache, 1);
  ASSERT_TRUE(third.ok());
  EXPECT_EQ((*third)[0]->members().size(), 7u);
  // A missing shard is named.
  const std::string missing = scratch_path("no-such-shard.tar");
  auto none = open_shard_indexes(std::span(&missing, 1), cache, 1);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("no-such-shard.tar"), std::string::npos);
}

// Seeds for shard_index_fuzz (make test-fuzz): tars of each format, a truncated one, and a
// saved index.
TEST(FuzzSeeds, ShardIndexes) {
  const char* corpus = std::getenv("STOKER_FUZZ_CORPUS");
  if (corpus == nullptr) GTEST_SKIP() << "STOKER_FUZZ_CORPUS is not set";
  const fs::path folder = fs::path(corpus) / "shard_index_fuzz";
  fs::create_directories(folder);
  for (const std::string format : {"gnu", "posix", "ustar"}) {
    const std::string tar = make_tar("seed-" + format, format, 2);
    fs::copy_file(tar, folder / ("tar-" + format), fs::copy_options::overwrite_existing);
  }
  const std::string bytes = read_file(scratch_path("seed-gnu.tar"));
  write_file((folder / "tar-truncated").string(), bytes.substr(0, 1800));
  const std::vector<uint8_t> index = scan(scratch_path("seed-gnu.tar")).encode();
  write_file((folder / "index").string(), std::string(index.begin(), index.end()));
}

}  // namespace
}  // namespace stoker
