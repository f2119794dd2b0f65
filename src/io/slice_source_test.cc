#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <numeric>

#include "stoker/byte_slice.h"
#include "stoker/remote_source.h"

namespace stoker {
namespace {

std::vector<uint8_t> counting_bytes(size_t n) {
  std::vector<uint8_t> bytes(n);
  std::iota(bytes.begin(), bytes.end(), uint8_t{3});
  return bytes;
}

// A source that remembers what it was asked to prefetch.
class RecordingSource final : public ByteSource {
 public:
  explicit RecordingSource(std::vector<uint8_t> bytes)
      : ByteSource("recording"), bytes_(std::move(bytes)) {}
  int64_t size() const override { return static_cast<int64_t>(bytes_.size()); }
  std::string version_tag() const override { return "\"etag-1\""; }
  bool is_remote() const override { return true; }
  void prefetch(std::span<const ByteRange> ranges) const override {
    asked.assign(ranges.begin(), ranges.end());
  }
  Result<size_t> read_at(int64_t offset, std::span<uint8_t> out) const override {
    if (offset >= size()) return size_t{0};
    const size_t n = std::min(out.size(), bytes_.size() - static_cast<size_t>(offset));
    std::copy_n(bytes_.begin() + offset, n, out.begin());
    return n;
  }
  mutable std::vector<ByteRange> asked;

 private:
  std::vector<uint8_t> bytes_;
};

TEST(ByteSlice, NamesRoundTripAndPlainPathsAreNoSlices) {
  const ByteSlice slice{"s3://bucket/ds/videos.lance/data/a.lance", ByteRange{64, 1000}};
  EXPECT_EQ(byte_slice_name(slice), "s3://bucket/ds/videos.lance/data/a.lance#bytes=64+1000");
  EXPECT_EQ(parse_byte_slice(byte_slice_name(slice)), slice);
  for (const char* plain : {"/data/v.mp4", "/data/a#b.mp4", "x#bytes=1", "x#bytes=-1+5",
                            "x#bytes=1+0", "x#bytes=1+2z", "#bytes=1+2", "x#bytes=+1+2"}) {
    EXPECT_FALSE(parse_byte_slice(plain).has_value()) << plain;
  }
}

TEST(SliceSource, ReadsOnlyItsWindowShiftedToZero) {
  const auto bytes = counting_bytes(5000);
  auto whole = std::make_shared<RecordingSource>(bytes);
  auto slice = slice_source(whole, ByteRange{1000, 3000});
  ASSERT_TRUE(slice.ok()) << slice.status().message();
  const ByteSource& s = **slice;
  EXPECT_EQ(s.size(), 3000);
  EXPECT_EQ(s.name(), "recording#bytes=1000+3000");
  EXPECT_EQ(s.version_tag(), "\"etag-1\"");
  EXPECT_TRUE(s.is_remote());

  std::vector<uint8_t> out(4000);
  auto got = s.read_at(0, out);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, 3000u);  // never past the window, though the whole goes on
  EXPECT_TRUE(std::equal(out.begin(), out.begin() + 3000, bytes.begin() + 1000));
  EXPECT_EQ(*s.read_at(2990, out), 10u);
  EXPECT_EQ(out[0], bytes[3990]);
  EXPECT_EQ(*s.read_at(3000, out), 0u);
  EXPECT_EQ(s.read_at(-1, out).status().code(), StatusCode::kInvalidArgument);
}

TEST(SliceSource, PrefetchesShiftedRangesClippedToTheWindow) {
  auto whole = std::make_shared<RecordingSource>(counting_bytes(5000));
  auto slice = slice_source(whole, ByteRange{1000, 3000});
  ASSERT_TRUE(slice.ok());
  const std::vector<ByteRange> ranges = {{0, 10}, {2990, 100}, {4000, 5}};
  (*slice)->prefetch(ranges);
  EXPECT_EQ(whole->asked, (std::vector<ByteRange>{{1000, 10}, {3990, 10}}));
}

TEST(SliceSource, ARangePastTheEndOfTheWholeIsRefusedByName) {
  auto whole = std::make_shared<RecordingSource>(counting_bytes(100));
  auto past = slice_source(whole, ByteRange{50, 51});
  EXPECT_EQ(past.status().code(), StatusCode::kCorruptData);
  EXPECT_NE(past.status().message().find("recording"), std::string::npos);
  EXPECT_EQ(slice_source(whole, ByteRange{0, 0}).status().code(), StatusCode::kInvalidArgument);
}

TEST(SliceSource, OpenSourceOpensASliceOfALocalFileByItsName) {
  const auto folder =
      std::filesystem::temp_directory_path() / ("stoker-slice-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(folder);
  const std::string path = (folder / "data.lance").string();
  const auto bytes = counting_bytes(4096);
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  auto source = open_source(byte_slice_name(ByteSlice{path, ByteRange{100, 200}}));
  ASSERT_TRUE(source.ok()) << source.status().message();
  std::vector<uint8_t> out(200);
  ASSERT_EQ(*(*source)->read_at(0, out), 200u);
  EXPECT_TRUE(std::equal(out.begin(), out.end(), bytes.begin() + 100));
  EXPECT_TRUE((*source)->check_unchanged().ok());
  EXPECT_EQ(open_source(byte_slice_name(ByteSlice{path, ByteRange{4000, 200}})).status().code(),
            StatusCode::kCorruptData);
  std::filesystem::remove_all(folder);
}

}  // namespace
}  // namespace stoker
