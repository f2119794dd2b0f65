// FrameTable: what stoker knows about one video stream without decoding it.
//
// Built by one demux scan of the file (every packet's timestamps and key flag, no decoding), it
// maps a frame index (presentation order) to its timestamp and to the keyframe a decoder must
// start from to reach it. It also keeps the stream's codec parameters, so that a file reopened
// with a saved table needs neither the scan nor FFmpeg's stream probing.
//
// Ownership: shared as std::shared_ptr<const FrameTable>; immutable once built.
// Thread-safety: all const methods may be called from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "stoker/byte_source.h"
#include "stoker/status.h"

namespace stoker {

/// The decoder-facing description of a video stream, in plain types (no FFmpeg headers here).
struct VideoStreamInfo {
  std::string codec;  // FFmpeg codec name, e.g. "h264", "av1"
  int width = 0;
  int height = 0;
  int pixel_format = -1;  // FFmpeg AVPixelFormat value; -1 when unknown
  int profile = -1;
  int level = -1;
  int bits_per_raw_sample = 0;
  int color_range = 0;  // FFmpeg AVColorRange
  int color_space = 2;  // FFmpeg AVColorSpace (2 = unspecified)
  int sample_aspect_num = 0;
  int sample_aspect_den = 1;
  int video_delay = 0;    // frames of reordering delay (B-frames)
  int time_base_num = 1;  // stream time base: pts * num / den = seconds
  int time_base_den = 1;
  int stream_index = 0;            // index of the video stream inside its container
  std::vector<uint8_t> extradata;  // codec configuration (SPS/PPS, av1C, ...)
  /// The container does not give every packet a presentation time (AVI, MPEG-PS with
  /// B-frames): the packets' pts were worked out by decoding the stream once (the order the
  /// decoder shows frames in), and packets are told apart by a checksum of their bytes, as the
  /// container's timestamps can differ from one read to the next (MPEG-PS after a seek).
  bool pts_from_decoding = false;
  /// Every packet is stored verbatim in the file at PacketEntry::pos, size bytes (MP4/MOV,
  /// Matroska without a parser): a reader may then read packets by position, without a
  /// demuxer, and fetch exactly the bytes a window needs (what remote sources do).
  bool packets_addressable = false;
};

/// One packet of the video stream, in decode (file) order.
struct PacketEntry {
  int64_t pts = 0;       // presentation timestamp, stream time base
  int64_t dts = 0;       // decode timestamp, stream time base
  int64_t duration = 0;  // stream time base; 0 when the container does not say
  bool is_key = false;   // the container marks it a random-access point
  bool shown = true;     // false for packets the container tells the decoder to drop (edit lists)
  uint32_t crc = 0;      // CRC-32C of its bytes; only in tables whose pts_from_decoding is set
  int64_t pos = -1;      // byte offset of its bytes in the file, -1 when the container hides it
  int32_t size = 0;      // its size in bytes
};

class FrameTable {
 public:
  /// Builds the derived lookups from a scan's packets. Fails (kUnsupported / kCorruptData) when
  /// two shown packets share a timestamp or no packet is shown, since frame-exact access is then
  /// impossible. `file_size` and `file_mtime_ns` identify the scanned file's version.
  static Result<std::shared_ptr<const FrameTable>> create(VideoStreamInfo stream,
                                                          std::vector<PacketEntry> packets,
                                                          int64_t file_size, int64_t file_mtime_ns);

  /// Reads bytes written by serialize(). Fails with kCorruptData on any malformed or
  /// foreign-version input; never reads outside `bytes`.
  static Result<std::shared_ptr<const FrameTable>> deserialize(std::span<const uint8_t> bytes);
  /// A versioned binary form of the table, for storing in a dataset index.
  std::vector<uint8_t> serialize() const;

  const VideoStreamInfo& stream() const { return stream_; }
  int64_t file_size() const { return file_size_; }
  int64_t file_mtime_ns() const { return file_mtime_ns_; }

  /// Frames are the shown packets, in presentation order.
  int64_t num_frames() const { return static_cast<int64_t>(frame_packet_.size()); }
  /// Presentation time of frame i in seconds; REQUIRES: 0 <= i < num_frames().
  double pts_seconds(int64_t i) const { return pts_seconds_[i]; }
  std::span<const double> pts_seconds() const { return pts_seconds_; }
  /// 1 when frame i is a random-access point, else 0 (bytes, so Python can view them as bool).
  std::span<const uint8_t> is_key() const { return is_key_; }
  /// Average frame rate over the stream: (frames - 1) / (last pts - first pts).
  double fps() const { return fps_; }
  /// From the first frame's pts to the end of the last frame, in seconds.
  double duration() const { return duration_; }

  /// Packets in decode order, as scanned.
  std::span<const PacketEntry> packets() const { return packets_; }
  /// Decode-order position of frame i's packet.
  int64_t packet_of_frame(int64_t i) const { return frame_packet_[i]; }
  /// Decode-order position of the keyframe packet from which decoding forward produces frame i
  /// correctly: the last key packet at or before it whose own pts is not later than frame i's
  /// (so open-GOP leading pictures go back one more keyframe). 0 when no keyframe qualifies.
  int64_t sync_packet_of_frame(int64_t i) const { return frame_sync_packet_[i]; }
  /// The frame a packet shows, or -1 for packets that are not shown.
  int64_t frame_of_packet(int64_t p) const { return packet_frame_[p]; }
  /// The packet whose pts equals `pts`, or -1 when none does.
  int64_t packet_with_pts(int64_t pts) const;
  /// The packet whose bytes have CRC-32C `crc`, or -1 (tables with stream().pts_from_decoding
  /// only, where the checksums are unique).
  int64_t packet_with_crc(uint32_t crc) const;
  /// The frame whose pts equals `pts`, or -1.
  int64_t frame_with_pts(int64_t pts) const;
  /// The frame whose presentation time is nearest to `seconds` (ties go to the earlier frame).
  int64_t nearest_frame(double seconds) const;

  /// The bytes a decoder reads to produce `frames` (sorted, distinct) in one forward pass: the
  /// packets from each frame's sync packet to its own, as sorted disjoint file ranges, ranges
  /// less than `gap` bytes apart merged. Empty unless stream().packets_addressable.
  std::vector<ByteRange> byte_ranges(std::span<const int64_t> frames, int64_t gap) const;

 private:
  FrameTable() = default;
  Status derive();

  VideoStreamInfo stream_;
  std::vector<PacketEntry> packets_;
  int64_t file_size_ = 0;
  int64_t file_mtime_ns_ = 0;

  // Derived by derive(); never serialized.
  std::vector<int64_t> frame_packet_;       // frame -> packet
  std::vector<int64_t> packet_frame_;       // packet -> frame or -1
  std::vector<int64_t> frame_sync_packet_;  // frame -> packet to start decoding from
  std::vector<int64_t> sorted_pts_;         // pts of every packet, ascending
  std::vector<int64_t> sorted_pts_packet_;  // packet of sorted_pts_[k]
  std::vector<uint32_t> sorted_crc_;        // pts_from_decoding: every packet's crc, ascending
  std::vector<int64_t> sorted_crc_packet_;  // packet of sorted_crc_[k]
  std::vector<double> pts_seconds_;
  std::vector<uint8_t> is_key_;
  double fps_ = 0;
  double duration_ = 0;
};

}  // namespace stoker
