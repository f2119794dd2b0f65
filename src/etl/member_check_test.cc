#include "stoker/member_check.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "media/testing/test_videos.h"

namespace stoker {
namespace {

namespace fs = std::filesystem;
using namespace std::string_literals;

std::vector<uint8_t> bytes_of(std::string_view text) { return {text.begin(), text.end()}; }

// A real JPEG and PNG, encoded by the ffmpeg program from its test pattern.
std::vector<uint8_t> ffmpeg_image(const std::string& name) {
  const std::string path = (fs::path(testing::test_media_dir()) / name).string();
  const Status made = testing::run_command(
      "ffmpeg -loglevel error -y -f lavfi -i testsrc=size=64x48 -frames:v 1 " + path);
  EXPECT_TRUE(made.ok()) << made.message();
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void expect_refused(std::string_view field, const std::vector<uint8_t>& bytes,
                    const std::string& words) {
  const Status status = check_member(field, bytes);
  EXPECT_FALSE(status.ok()) << field << ": " << words;
  EXPECT_NE(status.message().find(words), std::string::npos) << field << ": " << status.message();
}

TEST(MemberKind, IsToldByTheLastExtensionInAnyCase) {
  EXPECT_EQ(member_kind("jpg"), MemberKind::kImage);
  EXPECT_EQ(member_kind("seg.PNG"), MemberKind::kImage);
  EXPECT_EQ(member_kind("webp"), MemberKind::kImage);
  EXPECT_EQ(member_kind("json"), MemberKind::kJson);
  EXPECT_EQ(member_kind("txt"), MemberKind::kText);
  EXPECT_EQ(member_kind("action.npy"), MemberKind::kNpy);
  EXPECT_EQ(member_kind("cls"), MemberKind::kLabel);
  EXPECT_EQ(member_kind("mp4"), MemberKind::kUnchecked);
  EXPECT_EQ(member_kind("observation.images.top.mp4"), MemberKind::kUnchecked);
}

// Issue 33 item 3: `stoker shard` wrote a text file named x.jpg, a truncated JPEG and a 0-byte
// .jpg into shards with exit 0; each is refused as it is written now, as are json, text, npy and
// labels the loader would refuse.
TEST(CheckMember, RefusesWhatTheLoaderWouldRefuseAndPassesTheRest) {
  const std::vector<uint8_t> jpeg = ffmpeg_image("member-check.jpg");
  const std::vector<uint8_t> png = ffmpeg_image("member-check.png");
  EXPECT_TRUE(check_member("jpg", jpeg).ok());
  EXPECT_TRUE(check_member("seg.png", png).ok());
  expect_refused("jpg", bytes_of("just some text\n"), "not a JPEG, PNG or WebP");
  expect_refused("jpg", {jpeg.begin(), jpeg.begin() + jpeg.size() / 2}, "truncated JPEG");
  expect_refused("jpg", {}, "no bytes");
  expect_refused("png", {png.begin(), png.begin() + png.size() / 2}, "PNG");

  EXPECT_TRUE(check_member("json", bytes_of(R"({"w": 1, "url": "x"})")).ok());
  expect_refused("json", bytes_of("{not json"), "line 1");
  expect_refused("json", bytes_of("[1, 2]"), "not an object");
  EXPECT_TRUE(check_member("txt", bytes_of("a caption, é")).ok());
  expect_refused("txt", {'o', 'k', 0xff}, "utf-8");
  EXPECT_TRUE(check_member("cls", bytes_of(" 12\n")).ok());
  expect_refused("cls", bytes_of("cat"), "integer");
  // A .npy of int32 [1, 2], as numpy writes it: a 128-byte header, then the values.
  const std::string npy_header =
      "\x93NUMPY\x01\x00\x76\x00{'descr': '<i4', 'fortran_order': False, 'shape': (2,), }"s;
  std::string npy = npy_header + std::string(128 - 10 - (npy_header.size() - 10) - 1, ' ') + "\n";
  npy += "\x01\x00\x00\x00\x02\x00\x00\x00"s;
  EXPECT_TRUE(check_member("npy", bytes_of(npy)).ok())
      << check_member("npy", bytes_of(npy)).message();
  expect_refused("npy", bytes_of(npy.substr(0, npy.size() - 3)), "npy");
  expect_refused("npy", {}, "npy");
  // An array of strings is a .npy array, but no batch holds it: stoker.Array refuses it.
  const std::string strings_header =
      "\x93NUMPY\x01\x00\x76\x00{'descr': '<U1', 'fortran_order': False, 'shape': (2,), }"s;
  std::string strings =
      strings_header + std::string(128 - 10 - (strings_header.size() - 10) - 1, ' ') + "\n";
  strings += std::string("a\0\0\0b\0\0\0", 8);  // U1 [a, b]: 4 bytes a character
  expect_refused("npy", bytes_of(strings), "which batches cannot hold");
  EXPECT_TRUE(check_member("mp4", bytes_of("not checked")).ok());
}

}  // namespace
}  // namespace stoker
