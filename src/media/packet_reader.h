// PacketReader: a PacketStream that reads each packet straight from the byte position its frame
// table records, with no demuxer and no container header: the table already holds what the
// decoder needs (codec parameters, extradata, every packet's timestamps, flags and position).
// Used for remote sources, whose windows are fetched whole by prefetch() before decoding, so
// that each packet read here is a copy out of the range cache.
//
// REQUIRES: the table's stream().packets_addressable.
// Ownership: shares the source; the table is given to each seek, as to a Container, and must
// outlive the reads that follow it.
// Thread-safety: none; used by one thread at a time.
#pragma once

#include <memory>
#include <utility>

#include "media/packet_stream.h"

namespace stoker::media {

class PacketReader final : public PacketStream {
 public:
  explicit PacketReader(std::shared_ptr<const ByteSource> source);

  Status seek_to_packet(const FrameTable& table, int64_t target, int64_t* packets_read) override;
  Result<bool> read_packet() override;
  int64_t locate(const FrameTable& table) override;
  const std::shared_ptr<const ByteSource>& source() const override { return source_; }
  int64_t take_bytes_read() override { return std::exchange(bytes_read_, 0); }

 private:
  const std::shared_ptr<const ByteSource> source_;
  const FrameTable* table_ = nullptr;  // the last seek's
  int64_t cursor_ = 0;                 // the packet read_packet() reads next
  int64_t current_ = -1;               // the packet packet() holds
  int64_t bytes_read_ = 0;             // since the last take_bytes_read()
};

}  // namespace stoker::media
