// PacketStream: where a decode pass gets the packets of one video stream, in decode order, and
// how it jumps to the keyframe it must start from. Two kinds:
// - Container (container.h): FFmpeg's demuxer over the source; works for every container.
// - PacketReader (packet_reader.h): reads each packet straight from its byte position in the
//   frame table, with no demuxer; only for tables whose packets are addressable (MP4/MOV,
//   Matroska). What remote sources use: a window's bytes are known before it is read.
//
// Ownership: a stream shares its source.
// Thread-safety: none; used by one thread at a time (its ThreadMediaCache's).
#pragma once

#include <cstdint>
#include <memory>

#include "media/detail/ffmpeg.h"
#include "stoker/byte_source.h"
#include "stoker/frame_table.h"

namespace stoker::media {

class PacketStream {
 public:
  virtual ~PacketStream() = default;
  PacketStream(const PacketStream&) = delete;
  PacketStream& operator=(const PacketStream&) = delete;

  /// Positions the stream so that packet() holds packet `target` (decode order) of `table`.
  /// Packets read on the way (and dropped) are added to `packets_read`. Afterwards
  /// next_packet == target + 1.
  virtual Status seek_to_packet(const FrameTable& table, int64_t target, int64_t* packets_read) = 0;
  /// Reads the next video packet into packet(). Returns false at end of stream.
  virtual Result<bool> read_packet() = 0;
  /// The position of packet() in `table` (decode order), or -1 when the table has no such
  /// packet; sets its pts to the table's, by which the decoder's frame is then told apart.
  virtual int64_t locate(const FrameTable& table) = 0;
  /// The source the stream reads.
  virtual const std::shared_ptr<const ByteSource>& source() const = 0;
  /// The bytes read from the source since the last call (the stream's opening included), and
  /// starts counting again.
  virtual int64_t take_bytes_read() = 0;

  AVPacket* packet() { return packet_.get(); }

  /// Unique for the process's lifetime, so a decoder can tell which stream it follows.
  const uint64_t id;

  /// Decode-order position of the packet read_packet() returns next, -1 when unknown. Kept by
  /// whoever reads, so that a later call can continue forward instead of seeking.
  int64_t next_packet = -1;

 protected:
  PacketStream();
  detail::UniquePacket packet_;
};

}  // namespace stoker::media
