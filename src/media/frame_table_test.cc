#include "stoker/frame_table.h"

#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <string>
#include <utility>

namespace stoker {
namespace {

VideoStreamInfo stream_info() {
  VideoStreamInfo s;
  s.codec = "h264";
  s.width = 64;
  s.height = 48;
  s.time_base_num = 1;
  s.time_base_den = 30;
  s.extradata = {1, 2, 3};
  return s;
}

// An open-GOP stream in decode order: I0 P3 B1 B2 | I6 B4 B5 P9 B7 B8, where B4 and B5 are
// leading pictures of the second GOP that reference the first.
std::vector<PacketEntry> open_gop_packets() {
  std::vector<PacketEntry> packets;
  const int64_t pts[] = {0, 3, 1, 2, 6, 4, 5, 9, 7, 8};
  for (int64_t i = 0; i < 10; ++i) {
    packets.push_back({.pts = pts[i], .dts = i - 1, .duration = 1, .is_key = pts[i] % 6 == 0});
  }
  return packets;
}

TEST(FrameTable, FramesAreInPresentationOrder) {
  auto table = FrameTable::create(stream_info(), open_gop_packets(), 1000, 5);
  ASSERT_TRUE(table.ok()) << table.status().message();
  const FrameTable& t = **table;
  ASSERT_EQ(t.num_frames(), 10);
  for (int64_t i = 0; i < 10; ++i) {
    EXPECT_DOUBLE_EQ(t.pts_seconds(i), i / 30.0);
    EXPECT_EQ(t.frame_of_packet(t.packet_of_frame(i)), i);
  }
  EXPECT_DOUBLE_EQ(t.fps(), 30.0);
  EXPECT_DOUBLE_EQ(t.duration(), 10 / 30.0);
  EXPECT_EQ(t.is_key()[0], 1);
  EXPECT_EQ(t.is_key()[6], 1);
  EXPECT_EQ(t.is_key()[4], 0);
}

TEST(FrameTable, LeadingPicturesSyncToThePreviousKeyframe) {
  auto table = FrameTable::create(stream_info(), open_gop_packets(), 1000, 5);
  ASSERT_TRUE(table.ok());
  const FrameTable& t = **table;
  EXPECT_EQ(t.sync_packet_of_frame(2), 0);
  EXPECT_EQ(t.sync_packet_of_frame(4), 0);  // decoded after I6 but shown before it
  EXPECT_EQ(t.sync_packet_of_frame(5), 0);
  EXPECT_EQ(t.sync_packet_of_frame(6), 4);
  EXPECT_EQ(t.sync_packet_of_frame(9), 4);
}

TEST(FrameTable, HiddenPacketsAreNotFrames) {
  auto packets = open_gop_packets();
  packets[2].shown = false;  // pts 1, e.g. dropped by an edit list
  auto table = FrameTable::create(stream_info(), packets, 1000, 5);
  ASSERT_TRUE(table.ok());
  EXPECT_EQ((*table)->num_frames(), 9);
  EXPECT_EQ((*table)->frame_with_pts(1), -1);
  EXPECT_EQ((*table)->packet_with_pts(1), 2);
  EXPECT_EQ((*table)->frame_with_pts(2), 1);
}

TEST(FrameTable, NearestFrame) {
  auto table = FrameTable::create(stream_info(), open_gop_packets(), 1000, 5);
  ASSERT_TRUE(table.ok());
  EXPECT_EQ((*table)->nearest_frame(-5.0), 0);
  EXPECT_EQ((*table)->nearest_frame(2.0 / 30 + 0.001), 2);
  EXPECT_EQ((*table)->nearest_frame(2.6 / 30), 3);
  EXPECT_EQ((*table)->nearest_frame(100.0), 9);
}

TEST(FrameTable, RejectsDuplicateTimestampsAndEmptyStreams) {
  auto packets = open_gop_packets();
  packets[3].pts = packets[2].pts;
  EXPECT_EQ(FrameTable::create(stream_info(), packets, 1, 1).status().code(),
            StatusCode::kUnsupported);
  EXPECT_EQ(FrameTable::create(stream_info(), {}, 1, 1).status().code(), StatusCode::kCorruptData);
}

TEST(FrameTable, SerializeRoundTrip) {
  auto table = FrameTable::create(stream_info(), open_gop_packets(), 1234, 5678);
  ASSERT_TRUE(table.ok());
  std::vector<uint8_t> bytes = (*table)->serialize();
  auto copy = FrameTable::deserialize(bytes);
  ASSERT_TRUE(copy.ok()) << copy.status().message();
  EXPECT_EQ((*copy)->serialize(), bytes);
  EXPECT_EQ((*copy)->file_size(), 1234);
  EXPECT_EQ((*copy)->file_mtime_ns(), 5678);
  EXPECT_EQ((*copy)->stream().extradata, stream_info().extradata);
  EXPECT_EQ((*copy)->sync_packet_of_frame(5), 0);
}

// Packets stored one after the other, 100 bytes each from byte 40: addressable.
std::vector<PacketEntry> addressable_packets() {
  std::vector<PacketEntry> packets = open_gop_packets();
  for (size_t i = 0; i < packets.size(); ++i) {
    packets[i].pos = 40 + 100 * static_cast<int64_t>(i);
    packets[i].size = 100;
  }
  return packets;
}

TEST(FrameTable, PacketPositionsRoundTripAndGiveEachWindowItsBytes) {
  VideoStreamInfo info = stream_info();
  info.packets_addressable = true;
  auto table = FrameTable::create(info, addressable_packets(), 1040, 0);
  ASSERT_TRUE(table.ok()) << table.status().message();
  auto copy = FrameTable::deserialize((*table)->serialize());
  ASSERT_TRUE(copy.ok()) << copy.status().message();
  EXPECT_TRUE((*copy)->stream().packets_addressable);
  EXPECT_EQ((*copy)->packets()[3].pos, 340);
  EXPECT_EQ((*copy)->packets()[3].size, 100);
  // Frame 1 (packet 2) decodes from packet 0; frame 7 (packet 8) from packet 4 (I6's GOP,
  // whose leading pictures need the first: sync packet 0 for frames 4 and 5 only).
  const int64_t frame_1[] = {1};
  EXPECT_EQ((*copy)->byte_ranges(frame_1, 0), (std::vector<ByteRange>{{40, 300}}));
  const int64_t frames_1_7[] = {1, 7};
  EXPECT_EQ((*copy)->byte_ranges(frames_1_7, 0), (std::vector<ByteRange>{{40, 300}, {440, 500}}));
  EXPECT_EQ((*copy)->byte_ranges(frames_1_7, 100), (std::vector<ByteRange>{{40, 900}}));
  // A table whose packets are not addressable has no ranges to give.
  auto plain = FrameTable::create(stream_info(), addressable_packets(), 1040, 0);
  EXPECT_TRUE((*plain)->byte_ranges(frame_1, 0).empty());
}

TEST(FrameTable, RefusesPacketPositionsOutsideTheFile) {
  VideoStreamInfo info = stream_info();
  info.packets_addressable = true;
  std::vector<PacketEntry> packets = addressable_packets();
  EXPECT_FALSE(FrameTable::create(info, packets, 1039, 0).ok());  // the last ends at 1040
  packets[4].pos = -1;
  EXPECT_FALSE(FrameTable::create(info, packets, 1040, 0).ok());
  packets[4].pos = 440;
  packets[4].size = 0;
  EXPECT_FALSE(FrameTable::create(info, packets, 1040, 0).ok());
}

// Regression: an empty extradata (VP9 in WebM has none) made deserialize() pass a null pointer
// to memcpy, which UBSan reports.
TEST(FrameTable, SerializeRoundTripWithoutExtradata) {
  VideoStreamInfo info = stream_info();
  info.extradata.clear();
  auto table = FrameTable::create(info, open_gop_packets(), 1, 2);
  ASSERT_TRUE(table.ok());
  auto copy = FrameTable::deserialize((*table)->serialize());
  ASSERT_TRUE(copy.ok()) << copy.status().message();
  EXPECT_TRUE((*copy)->stream().extradata.empty());
}

TEST(FrameTable, DeserializeRejectsEveryTruncationAndRandomDamage) {
  auto table = FrameTable::create(stream_info(), open_gop_packets(), 1234, 5678);
  ASSERT_TRUE(table.ok());
  const std::vector<uint8_t> bytes = (*table)->serialize();
  for (size_t size = 0; size < bytes.size(); ++size) {
    auto result = FrameTable::deserialize(std::span(bytes.data(), size));
    EXPECT_FALSE(result.ok()) << "accepted a table cut to " << size << " bytes";
  }
  // Every damaged byte is caught by the checksum: before it, damaged codec parameters reached
  // the decoder, which could abort inside avcodec_send_packet.
  std::mt19937 rng(7);
  for (int trial = 0; trial < 500; ++trial) {
    std::vector<uint8_t> damaged = bytes;
    const size_t at = rng() % damaged.size();
    damaged[at] ^= static_cast<uint8_t>(1 + rng() % 255);
    auto result = FrameTable::deserialize(damaged);
    EXPECT_FALSE(result.ok()) << "accepted a table damaged at byte " << at;
  }
}

// A table whose checksum holds can still come from a buggy writer: what the decoder would be
// built from is checked against FFmpeg's ranges.
TEST(FrameTable, DeserializeRefusesStreamParametersFFmpegWouldNotTake) {
  const std::vector<std::pair<std::string, std::function<void(VideoStreamInfo&)>>> cases = {
      {"unknown codec", [](VideoStreamInfo& s) { s.codec = "no-such-codec"; }},
      {"out of range", [](VideoStreamInfo& s) { s.width = 1 << 20; }},
      {"unknown pixel format", [](VideoStreamInfo& s) { s.pixel_format = 100000; }},
      {"colour range", [](VideoStreamInfo& s) { s.color_space = 1000; }},
      {"out of range", [](VideoStreamInfo& s) { s.video_delay = -3; }},
  };
  for (const auto& [says, damage] : cases) {
    VideoStreamInfo info = stream_info();
    damage(info);
    auto table = FrameTable::create(info, open_gop_packets(), 1, 2);
    ASSERT_TRUE(table.ok());
    auto copy = FrameTable::deserialize((*table)->serialize());
    ASSERT_FALSE(copy.ok()) << says;
    EXPECT_NE(copy.status().message().find(says), std::string::npos) << copy.status().message();
  }
}

}  // namespace
}  // namespace stoker
