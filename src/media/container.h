// Container: one open demuxer over one ByteSource, reading only its video stream (a
// PacketStream), and the scan that builds a FrameTable from it.
//
// Ownership: owns the AVFormatContext, the I/O context it reads through, and a reusable packet;
// shares the source.
// Thread-safety: none; a Container is used by one thread at a time (its ThreadMediaCache's).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "media/detail/byte_source_io.h"
#include "media/detail/ffmpeg.h"
#include "media/packet_stream.h"
#include "stoker/byte_source.h"
#include "stoker/frame_table.h"

namespace stoker::media {

class Container final : public PacketStream {
 public:
  /// Opens the container in `source`. With a table, the stream is the table's and FFmpeg's
  /// stream probing (avformat_find_stream_info) is skipped; without one, streams are probed and
  /// the best video stream is chosen. Other streams are discarded at the demuxer.
  static Result<std::unique_ptr<Container>> open(std::shared_ptr<const ByteSource> source,
                                                 const FrameTable* table);

  /// One demux pass over the whole source recording every video packet; no decoding, unless
  /// the container leaves packets without a pts (AVI, MPEG-PS with B-frames): then one decoding
  /// pass more tells the display order (see VideoStreamInfo::pts_from_decoding). Leaves the
  /// container at its end. The table records `mtime_ns` (0 when the source has none) and the
  /// source's size as the version it describes.
  ///
  /// Each packet's byte position is recorded too, and the table says whether packets may be
  /// read by it (VideoStreamInfo::packets_addressable): a container that stores packets
  /// verbatim, without a parser, every packet's bytes checked against the file's. On a remote
  /// source, an MP4/MOV is scanned from its header alone: the sample tables give every
  /// packet's timestamps, flags and position, and the packets' own bytes are not fetched.
  Result<std::shared_ptr<const FrameTable>> scan(int64_t mtime_ns);

  /// Falls back to the start of the file when the container's own seek overshoots.
  Status seek_to_packet(const FrameTable& table, int64_t target, int64_t* packets_read) override;
  /// With the container's timestamps.
  Result<bool> read_packet() override;
  int64_t locate(const FrameTable& table) override;
  const std::shared_ptr<const ByteSource>& source() const override { return io_->source(); }
  int64_t take_bytes_read() override { return io_->take_bytes_read(); }

  /// The demuxer's video stream: its codec parameters and time base (what a muxer copying its
  /// packets is set up from), and the name FFmpeg gives the container ("mov,mp4,...").
  const AVStream& stream() const { return *format_->streams[stream_index_]; }
  const char* format_name() const { return format_->iformat->name; }

 private:
  Container(std::unique_ptr<detail::ByteSourceIo> io, detail::UniqueFormatContext format,
            int stream_index);
  Status seek_to_timestamp(int64_t timestamp);
  /// Fills the pts of `packets` (and which are shown) from the order a decoder shows their
  /// frames in.
  Status pts_from_decoding(const VideoStreamInfo& info, std::vector<PacketEntry>& packets);
  /// The status of a failed FFmpeg call on this container: the source's own error when a read
  /// failed, else FFmpeg's.
  Status failure(int error, const std::string& what);

  // Whether packets may be read by position (see scan()); `verified`: each packet's bytes were
  // compared with the file's at its position.
  bool packets_addressable(const std::vector<PacketEntry>& packets, bool verified) const;
  // Has the demuxer's reads of packet data answered with zeros, unread: the sample tables of
  // an MP4 already gave every packet's position. False when the demuxer needs packet bytes.
  bool skip_packet_bytes();

  // Declared before format_: the demuxer reads through it, so it is destroyed after.
  std::unique_ptr<detail::ByteSourceIo> io_;
  detail::UniqueFormatContext format_;
  int stream_index_;
};

}  // namespace stoker::media
