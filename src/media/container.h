// Container: one open demuxer on one file, reading only its video stream, and the scan that
// builds a FrameTable from it.
//
// Ownership: owns the AVFormatContext and a reusable packet.
// Thread-safety: none; a Container is used by one thread at a time (its ThreadMediaCache's).
#pragma once

#include <memory>
#include <string>

#include "media/detail/ffmpeg.h"
#include "stoker/frame_table.h"

namespace stoker::media {

/// The file's identity for staleness checks: size and modification time.
struct FileIdentity {
  int64_t size = 0;
  int64_t mtime_ns = 0;
};
/// Errors carry the OS's reason only; the caller names the file.
Result<FileIdentity> stat_file(const std::string& path);

class Container {
 public:
  /// Opens `path`. With a table, the stream is the table's and FFmpeg's stream probing
  /// (avformat_find_stream_info) is skipped; without one, streams are probed and the best video
  /// stream is chosen. Other streams are discarded at the demuxer.
  static Result<std::unique_ptr<Container>> open(const std::string& path, const FrameTable* table);

  /// One demux pass over the whole file recording every video packet; no decoding. Leaves the
  /// container at end of file.
  Result<std::shared_ptr<const FrameTable>> scan(const FileIdentity& identity);

  /// Seeks so that packet() holds packet `target` (decode order) of `table`; packets before it
  /// are read and dropped. Falls back to the start of the file when the container's own seek
  /// overshoots. Afterwards next_packet == target + 1.
  Status seek_to_packet(const FrameTable& table, int64_t target, int64_t* packets_read);

  /// Reads the next video packet into packet(). Returns false at end of file.
  Result<bool> read_packet();
  AVPacket* packet() { return packet_.get(); }

  /// Unique for the process's lifetime, so a decoder can tell which container it follows.
  const uint64_t id;

  /// Decode-order position of the packet read_packet() returns next, -1 when unknown. Kept by
  /// whoever reads, so that a later call can continue forward instead of seeking.
  int64_t next_packet = -1;

 private:
  Container(std::string path, detail::UniqueFormatContext format, int stream_index);
  Status seek_to_timestamp(int64_t timestamp);

  std::string path_;
  detail::UniqueFormatContext format_;
  int stream_index_;
  detail::UniquePacket packet_;
};

}  // namespace stoker::media
