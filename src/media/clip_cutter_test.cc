#include "stoker/clip_cutter.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "media/testing/remote_like_source.h"
#include "media/testing/sequential_decode.h"
#include "media/testing/test_videos.h"
#include "stoker/video_reader.h"

namespace stoker {
namespace {

using testing::decode_all_frames;
using testing::frame_exact_specs;
using testing::make_test_video;
using testing::reference_frames;
using testing::TestVideoSpec;

TestVideoSpec spec_named(const std::string& name) {
  for (const TestVideoSpec& spec : frame_exact_specs()) {
    if (spec.name == name) return spec;
  }
  ADD_FAILURE() << "no test video " << name;
  return {};
}

std::string video(const std::string& name) {
  auto path = make_test_video(spec_named(name));
  EXPECT_TRUE(path.ok()) << path.status().message();
  return path.ok() ? *path : "";
}

// A reader over a file source (its source() is the file's, as copy_clip takes).
std::unique_ptr<VideoReader> open_reader(const std::string& path) {
  auto file = open_file_source(path);
  EXPECT_TRUE(file.ok()) << file.status().message();
  if (!file.ok()) return nullptr;
  auto reader = VideoReader::open(std::shared_ptr<const ByteSource>(std::move(file).value()));
  EXPECT_TRUE(reader.ok()) << reader.status().message();
  return reader.ok() ? std::move(reader).value() : nullptr;
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

std::string output_path(const std::string& name) {
  const std::filesystem::path dir = std::filesystem::path(testing::test_media_dir()) / "clips";
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

// A copyable run [first, first + count) that starts at a keyframe after frame 0 and ends before
// the last frame when the stream has one (a cut at both ends), else one from frame 0.
std::pair<int64_t, int64_t> copyable_run(const FrameTable& table, const std::string& format) {
  const int64_t n = table.num_frames();
  std::vector<int64_t> starts;
  for (int64_t f = 1; f < n; ++f) {
    if (table.is_key()[f]) starts.push_back(f);
  }
  starts.push_back(0);
  for (int64_t first : starts) {
    for (int64_t count = n - first - 1; count >= 2; --count) {
      if (check_clip_copy(table, first, count, format).ok()) return {first, count};
    }
  }
  ADD_FAILURE() << "no copyable run";
  return {0, n};
}

struct CopyCase {
  std::string video;
  std::string format;  // "" : the source's container
};

// The heart of it: a copied run decodes to exactly the source's frames (compared with a plain
// sequential decode of each file), presented at the source's times less the first frame's.
TEST(ClipCutter, CopiedRunsDecodeToTheSourcesFramesAtTheirTimes) {
  const std::vector<CopyCase> cases = {
      {"h264_gop30_bframes", ""}, {"hevc_bframes", ""},
      {"av1_lerobot", ""},        {"vp9_webm", ""},
      {"h264_vfr", ""},           {"h264_mov_offset_start", ""},
      {"vp9_webm", "mp4"},        {"h264_gop30_bframes", "matroska"},
  };
  for (const CopyCase& c : cases) {
    SCOPED_TRACE(c.video + " into " + (c.format.empty() ? "its own container" : c.format));
    const std::string path = video(c.video);
    auto source = open_reader(path);
    ASSERT_NE(source, nullptr);
    const FrameTable& table = source->frame_table();
    const auto [first, count] = copyable_run(table, c.format);
    const std::string target = output_path(c.video + "-" + c.format + "-clip");
    auto copied = copy_clip(source->source(), table, first, count, target, {.format = c.format});
    ASSERT_TRUE(copied.ok()) << copied.status().message();
    EXPECT_EQ(copied->frames, count);
    EXPECT_EQ(copied->bytes, static_cast<int64_t>(std::filesystem::file_size(target)));
    EXPECT_EQ(copied->first_packet, table.packet_of_frame(first));
    EXPECT_FALSE(std::filesystem::exists(target + ".partial"));

    auto clip = open_reader(target);
    ASSERT_NE(clip, nullptr);
    ASSERT_EQ(clip->num_frames(), count);
    EXPECT_EQ(clip->frame_table().stream().codec, table.stream().codec);
    for (int64_t i = 0; i < count; ++i) {
      EXPECT_NEAR(clip->frame_table().pts_seconds(i),
                  table.pts_seconds(first + i) - table.pts_seconds(first), 1e-3)
          << "frame " << i;
    }
    EXPECT_EQ(clip->frame_table().pts_seconds(0), 0.0);
    const auto& expected = reference_frames(path);
    auto got = decode_all_frames(target, OutputOptions{});
    ASSERT_TRUE(got.ok()) << got.status().message();
    ASSERT_EQ(static_cast<int64_t>(got->size()), count);
    for (int64_t i = 0; i < count; ++i) {
      EXPECT_TRUE((*got)[i] == expected[first + i]) << "frame " << i << " of " << target;
    }
  }
}

// In the source's own time base the times are kept exactly (MP4's track timescale is a
// multiple of it), composition offsets and all.
TEST(ClipCutter, MP4TimesAreKeptExactly) {
  const std::string path = video("h264_gop30_bframes");
  auto source = open_reader(path);
  ASSERT_NE(source, nullptr);
  const FrameTable& table = source->frame_table();
  ASSERT_GT(table.stream().video_delay, 0);  // B-frames: presentation and decode order differ
  const std::string target = output_path("exact.mp4");
  ASSERT_TRUE(copy_clip(source->source(), table, 30, 60, target).ok());
  auto clip = open_reader(target);
  ASSERT_NE(clip, nullptr);
  ASSERT_EQ(clip->num_frames(), 60);
  const FrameTable& out = clip->frame_table();
  const int64_t origin = table.packets()[table.packet_of_frame(30)].pts;
  bool reordered = false;
  for (int64_t i = 0; i < 60; ++i) {
    const PacketEntry& got = out.packets()[out.packet_of_frame(i)];
    const PacketEntry& want = table.packets()[table.packet_of_frame(30 + i)];
    // pts * num / den, compared as rationals.
    EXPECT_EQ(
        static_cast<__int128>(got.pts) * out.stream().time_base_num * table.stream().time_base_den,
        static_cast<__int128>(want.pts - origin) * table.stream().time_base_num *
            out.stream().time_base_den)
        << "frame " << i;
    EXPECT_EQ(static_cast<__int128>(got.pts - got.dts) * out.stream().time_base_num *
                  table.stream().time_base_den,
              static_cast<__int128>(want.pts - want.dts) * table.stream().time_base_num *
                  out.stream().time_base_den)
        << "composition offset of frame " << i;
    reordered = reordered || want.pts != want.dts;
  }
  EXPECT_TRUE(reordered);
}

TEST(ClipCutter, RunStartingBetweenKeyframesIsRefused) {
  auto source = open_reader(video("h264_gop30_bframes"));
  ASSERT_NE(source, nullptr);
  const FrameTable& table = source->frame_table();
  ASSERT_TRUE(table.is_key()[30] && !table.is_key()[31]);
  const Status refused = check_clip_copy(table, 31, 29, "mp4");
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("frames [31, 60) do not start on a keyframe"), std::string::npos)
      << refused.message();
  EXPECT_NE(refused.message().find("shows frame 30"), std::string::npos) << refused.message();
  const std::string target = output_path("between-keyframes.mp4");
  std::filesystem::remove(target);
  auto copied = copy_clip(source->source(), table, 31, 29, target);
  EXPECT_EQ(copied.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(copied.status().message().find(source->name()), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(target));
}

// With 3 B-frames, frames shown after the run's last frame are decoded inside it: a run that
// ends there leaves a packet of another frame between its own, and is refused, naming it.
TEST(ClipCutter, RunCuttingAReorderedGroupIsRefused) {
  auto source = open_reader(video("h264_gop30_bframes"));
  ASSERT_NE(source, nullptr);
  const FrameTable& table = source->frame_table();
  EXPECT_TRUE(check_clip_copy(table, 30, 30, "mp4").ok());  // a whole GOP
  int refused = 0;
  for (int64_t count = 1; count < 30; ++count) {
    const Status status = check_clip_copy(table, 30, count, "mp4");
    // Copyable exactly when the packets of frames 30 .. 30 + count - 1 are a run.
    int64_t lo = INT64_MAX, hi = -1;
    for (int64_t f = 30; f < 30 + count; ++f) {
      lo = std::min(lo, table.packet_of_frame(f));
      hi = std::max(hi, table.packet_of_frame(f));
    }
    EXPECT_EQ(status.ok(), hi - lo + 1 == count) << count << ": " << status.message();
    if (!status.ok()) {
      ++refused;
      EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
      EXPECT_NE(status.message().find("cut a group of reordered frames: packet "),
                std::string::npos)
          << status.message();
    }
  }
  EXPECT_GT(refused, 0);  // the stream does reorder
  EXPECT_EQ(check_clip_copy(table, 0, table.num_frames() + 1, "").code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(check_clip_copy(table, 5, 0, "").code(), StatusCode::kInvalidArgument);
}

// x265's open GOPs: the frames shown just before a CRA keyframe are decoded after it, from
// references of the GOP before. A run that starts with them is a contiguous run of packets
// from a keyframe, yet cannot be copied: it is refused, naming the frame.
TEST(ClipCutter, LeadingPicturesOfAnOpenGopAreRefused) {
  auto source = open_reader(video("hevc_bframes"));
  ASSERT_NE(source, nullptr);
  const FrameTable& table = source->frame_table();
  int64_t key = -1;  // a keyframe whose next packet in decode order shows the frame before it
  for (int64_t f = 1; f < table.num_frames() && key < 0; ++f) {
    const int64_t p = table.packet_of_frame(f);
    if (table.is_key()[f] && table.frame_of_packet(p + 1) == f - 1) key = f;
  }
  ASSERT_GT(key, 0) << "the stream has no open GOP";
  const Status status = check_clip_copy(table, key - 1, 2, "mp4");
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("need packets before them: frame " + std::to_string(key - 1)),
            std::string::npos)
      << status.message();
}

TEST(ClipCutter, SameCutTwiceIsTheSameBytes) {
  auto source = open_reader(video("hevc_bframes"));
  ASSERT_NE(source, nullptr);
  const auto [first, count] = copyable_run(source->frame_table(), "");
  const std::string a = output_path("twice-a.mp4"), b = output_path("twice-b.mp4");
  ASSERT_TRUE(copy_clip(source->source(), source->frame_table(), first, count, a).ok());
  ASSERT_TRUE(copy_clip(source->source(), source->frame_table(), first, count, b).ok());
  const std::vector<uint8_t> bytes = read_bytes(a);
  EXPECT_FALSE(bytes.empty());
  EXPECT_TRUE(bytes == read_bytes(b));
  // The index is at the front (faststart): moov before mdat.
  const std::string text(bytes.begin(), bytes.end());
  EXPECT_LT(text.find("moov"), text.find("mdat"));
}

TEST(ClipCutter, CodecTheMuxerCannotStoreIsUnsupported) {
  auto source = open_reader(video("h264_gop30_bframes"));
  ASSERT_NE(source, nullptr);
  const Status status = check_clip_copy(source->frame_table(), 0, 30, "webm");
  EXPECT_EQ(status.code(), StatusCode::kUnsupported);
  EXPECT_NE(status.message().find("webm muxer cannot store h264"), std::string::npos)
      << status.message();
  EXPECT_EQ(check_clip_copy(source->frame_table(), 0, 30, "no-such-container").code(),
            StatusCode::kUnsupported);
  const std::string target = output_path("h264.webm");
  auto copied =
      copy_clip(source->source(), source->frame_table(), 0, 30, target, {.format = "webm"});
  EXPECT_EQ(copied.status().code(), StatusCode::kUnsupported);
  EXPECT_FALSE(std::filesystem::exists(target));
  EXPECT_FALSE(std::filesystem::exists(target + ".partial"));
}

// A source that cannot be read past `broken`: a disk or a connection failing mid-file.
class BrokenSource final : public ByteSource {
 public:
  BrokenSource(std::string name, std::vector<uint8_t> bytes, int64_t broken)
      : ByteSource(name),
        bytes_(memory_source(std::move(name), std::move(bytes))),
        broken_(broken) {}
  int64_t size() const override { return bytes_->size(); }
  Result<size_t> read_at(int64_t offset, std::span<uint8_t> out) const override {
    if (offset + static_cast<int64_t>(out.size()) > broken_) {
      return Status(StatusCode::kIoError, name() + ": read failed at " + std::to_string(offset));
    }
    return bytes_->read_at(offset, out);
  }

 private:
  std::unique_ptr<ByteSource> bytes_;
  int64_t broken_;
};

// Damaged inputs are named, and leave nothing at the target: a file that fails to read inside
// the run, one that is not a video, one of another size than its table (truncated).
TEST(ClipCutter, DamagedSourceIsNamed) {
  // The index at the front, so that the damage is met while reading packets.
  auto made = make_test_video({.name = "clip_cutter_faststart",
                               .extension = "mp4",
                               .seconds = 4,
                               .encoder_args = "-c:v libx264 -preset veryfast -pix_fmt yuv420p "
                                               "-g 30 -bf 3 -movflags +faststart"});
  ASSERT_TRUE(made.ok()) << made.status().message();
  const std::string path = *made;
  auto whole = open_reader(path);
  ASSERT_NE(whole, nullptr);
  const FrameTable& table = whole->frame_table();
  const std::string target = output_path("from-damaged.mp4");
  auto expect_refused = [&](std::shared_ptr<const ByteSource> source, StatusCode code,
                            const std::string& detail) {
    auto copied = copy_clip(source, table, 30, 60, target);
    ASSERT_FALSE(copied.ok());
    EXPECT_EQ(copied.status().code(), code) << copied.status().message();
    EXPECT_NE(copied.status().message().find("of '" + source->name() + "' to '" + target + "'"),
              std::string::npos)
        << copied.status().message();
    EXPECT_NE(copied.status().message().find(detail), std::string::npos)
        << copied.status().message();
    EXPECT_FALSE(std::filesystem::exists(target));
    EXPECT_FALSE(std::filesystem::exists(target + ".partial"));
  };
  const std::vector<uint8_t> bytes = read_bytes(path);
  const PacketEntry& broken = table.packets()[table.packet_of_frame(70)];
  expect_refused(std::make_shared<BrokenSource>("broken.mp4", bytes, broken.pos),
                 StatusCode::kIoError, "read failed at");

  std::vector<uint8_t> junk = bytes;
  std::fill(junk.begin(), junk.begin() + 64, uint8_t{'x'});  // no MP4 box at the top
  expect_refused(memory_source("junk.mp4", std::move(junk)), StatusCode::kCorruptData,
                 "cannot open");

  std::vector<uint8_t> truncated(bytes.begin(), bytes.begin() + broken.pos);
  expect_refused(memory_source("truncated.mp4", std::move(truncated)), StatusCode::kCorruptData,
                 "the frame table is stale");
}

TEST(ClipCutter, UnwritableTargetIsAnIoError) {
  auto source = open_reader(video("av1_lerobot"));
  ASSERT_NE(source, nullptr);
  const std::string target = output_path("missing-folder/clip.mp4");
  auto copied = copy_clip(source->source(), source->frame_table(), 0, 4, target);
  EXPECT_EQ(copied.status().code(), StatusCode::kIoError) << copied.status().message();
  EXPECT_NE(copied.status().message().find(target), std::string::npos) << copied.status().message();
}

// From a remote source the run's bytes are asked for in one prefetch before they are read.
TEST(ClipCutter, RemoteSourceIsPrefetchedOnceForTheRun) {
  const std::string path = video("h264_gop30_bframes");
  auto local = open_reader(path);
  ASSERT_NE(local, nullptr);
  const FrameTable& table = local->frame_table();
  ASSERT_TRUE(table.stream().packets_addressable);
  auto remote =
      std::make_shared<testing::RemoteLikeSource>("s3://bucket/h264.mp4", read_bytes(path));
  const std::string target = output_path("from-remote.mp4");
  auto copied = copy_clip(remote, table, 30, 60, target);
  ASSERT_TRUE(copied.ok()) << copied.status().message();
  const std::vector<ByteRange> prefetched = remote->take_prefetched();
  int64_t lo = INT64_MAX, hi = 0;
  for (int64_t f = 30; f < 90; ++f) {
    const PacketEntry& p = table.packets()[table.packet_of_frame(f)];
    lo = std::min(lo, p.pos);
    hi = std::max(hi, p.pos + p.size);
  }
  ASSERT_EQ(prefetched.size(), 1u);  // the packets of an MP4 run lie one after another
  EXPECT_EQ(prefetched[0], (ByteRange{lo, hi - lo}));
  auto got = decode_all_frames(target, OutputOptions{});
  ASSERT_TRUE(got.ok()) << got.status().message();
  const auto& expected = reference_frames(path);
  ASSERT_EQ(got->size(), 60u);
  for (int64_t i = 0; i < 60; ++i) EXPECT_TRUE((*got)[i] == expected[30 + i]) << i;
}

}  // namespace
}  // namespace stoker
