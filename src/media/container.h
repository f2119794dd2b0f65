// Container: one open demuxer over one ByteSource, reading only its video stream, and the scan
// that builds a FrameTable from it.
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
#include "stoker/byte_source.h"
#include "stoker/frame_table.h"

namespace stoker::media {

class Container {
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
  Result<std::shared_ptr<const FrameTable>> scan(int64_t mtime_ns);

  /// Seeks so that packet() holds packet `target` (decode order) of `table`; packets before it
  /// are read and dropped. Falls back to the start of the file when the container's own seek
  /// overshoots. Afterwards next_packet == target + 1.
  Status seek_to_packet(const FrameTable& table, int64_t target, int64_t* packets_read);

  /// Reads the next video packet into packet(), with the container's timestamps. Returns
  /// false at end of file.
  Result<bool> read_packet();
  /// The position of packet() in `table` (decode order), or -1 when the table has no such
  /// packet; sets its pts to the table's, by which the decoder's frame is then told apart.
  int64_t locate(const FrameTable& table);
  AVPacket* packet() { return packet_.get(); }
  const std::shared_ptr<const ByteSource>& source() const { return io_->source(); }

  /// Unique for the process's lifetime, so a decoder can tell which container it follows.
  const uint64_t id;

  /// Decode-order position of the packet read_packet() returns next, -1 when unknown. Kept by
  /// whoever reads, so that a later call can continue forward instead of seeking.
  int64_t next_packet = -1;

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

  // Declared before format_: the demuxer reads through it, so it is destroyed after.
  std::unique_ptr<detail::ByteSourceIo> io_;
  detail::UniqueFormatContext format_;
  int stream_index_;
  detail::UniquePacket packet_;
};

}  // namespace stoker::media
