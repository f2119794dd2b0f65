#include "media/packet_reader.h"

#include <atomic>
#include <span>

namespace stoker::media {
namespace {

std::atomic<uint64_t> next_stream_id{0};

}  // namespace

PacketStream::PacketStream() : id(next_stream_id.fetch_add(1) + 1), packet_(av_packet_alloc()) {}

PacketReader::PacketReader(std::shared_ptr<const ByteSource> source) : source_(std::move(source)) {}

Status PacketReader::seek_to_packet(const FrameTable& table, int64_t target,
                                    int64_t* packets_read) {
  table_ = &table;
  cursor_ = target;
  STOKER_ASSIGN_OR_RETURN(bool read, read_packet());
  if (!read) {
    return Status(StatusCode::kInternal, "packet " + std::to_string(target) + " of " +
                                             std::to_string(table.packets().size()) +
                                             " is past the end of the table");
  }
  ++*packets_read;
  next_packet = target + 1;
  return Status();
}

Result<bool> PacketReader::read_packet() {
  if (table_ == nullptr) return false;
  const auto packets = table_->packets();
  if (cursor_ >= static_cast<int64_t>(packets.size())) return false;
  const PacketEntry& entry = packets[cursor_];
  AVPacket* packet = packet_.get();
  av_packet_unref(packet);
  if (av_new_packet(packet, entry.size) < 0) {
    return Status(StatusCode::kResourceExhausted,
                  "cannot allocate a packet of " + std::to_string(entry.size) + " bytes");
  }
  Result<size_t> got =
      source_->read_at(entry.pos, std::span(packet->data, static_cast<size_t>(entry.size)));
  if (!got.ok()) return got.status().with_context("packet " + std::to_string(cursor_));
  if (*got != static_cast<size_t>(entry.size)) {
    return Status(StatusCode::kCorruptData,
                  "packet " + std::to_string(cursor_) + " at byte " + std::to_string(entry.pos) +
                      " is cut short: the file ends " + std::to_string(entry.size - *got) +
                      " bytes early (the file changed since it was scanned?)");
  }
  bytes_read_ += entry.size;
  packet->pts = entry.pts;
  packet->dts = entry.dts;
  packet->duration = entry.duration;
  packet->pos = entry.pos;
  packet->flags = (entry.is_key ? AV_PKT_FLAG_KEY : 0) | (entry.shown ? 0 : AV_PKT_FLAG_DISCARD);
  current_ = cursor_++;
  return true;
}

int64_t PacketReader::locate(const FrameTable& table) {
  return current_ < static_cast<int64_t>(table.packets().size()) ? current_ : -1;
}

}  // namespace stoker::media
