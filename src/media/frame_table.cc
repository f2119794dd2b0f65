#include "stoker/frame_table.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "core/byte_io.h"
#include "core/crc32c.h"
#include "core/fuzzing.h"
#include "media/detail/ffmpeg.h"

namespace stoker {
namespace {

using core::ByteReader;
using core::ByteWriter;

constexpr char kMagic[8] = {'S', 'T', 'K', 'F', 'T', 'B', 'L', '\0'};
// 2: a CRC-32C of everything before it closes the table. 3: each packet's byte position and
// size, and whether packets may be read by them.
constexpr uint32_t kFormatVersion = 3;
constexpr int kMaxSide = 1 << 14;
constexpr size_t kMaxExtradata = 1 << 24;
constexpr int kMaxVideoDelay = 64;

Status malformed(const std::string& what) {
  return Status(StatusCode::kCorruptData, "frame table is malformed: " + what);
}

// What the decoder is built from must be something FFmpeg accepts: a table that passed its
// checksum can still come from a buggy writer or a hand-made file, and values out of FFmpeg's
// ranges can make a decoder assert instead of fail.
Status check_stream(const VideoStreamInfo& s) {
  if (avcodec_descriptor_get_by_name(s.codec.c_str()) == nullptr) {
    return malformed("unknown codec '" + s.codec + "'");
  }
  if (s.width <= 0 || s.height <= 0 || s.width > kMaxSide || s.height > kMaxSide) {
    return malformed("frame size " + std::to_string(s.width) + "x" + std::to_string(s.height) +
                     " is out of range");
  }
  if (s.pixel_format != AV_PIX_FMT_NONE &&
      av_pix_fmt_desc_get(static_cast<AVPixelFormat>(s.pixel_format)) == nullptr) {
    return malformed("unknown pixel format " + std::to_string(s.pixel_format));
  }
  if (s.color_range < 0 || s.color_range >= AVCOL_RANGE_NB || s.color_space < 0 ||
      s.color_space >= AVCOL_SPC_NB) {
    return malformed("colour range or space out of range");
  }
  if (s.sample_aspect_num < 0 || s.sample_aspect_den < 0 || s.bits_per_raw_sample < 0 ||
      s.bits_per_raw_sample > 64 || s.video_delay < 0 || s.video_delay > kMaxVideoDelay ||
      s.stream_index < 0) {
    return malformed("stream parameters out of range");
  }
  if (s.extradata.size() > kMaxExtradata) return malformed("extradata too large");
  return Status();
}

}  // namespace

Result<std::shared_ptr<const FrameTable>> FrameTable::create(VideoStreamInfo stream,
                                                             std::vector<PacketEntry> packets,
                                                             int64_t file_size,
                                                             int64_t file_mtime_ns) {
  std::shared_ptr<FrameTable> table(new FrameTable());
  table->stream_ = std::move(stream);
  table->packets_ = std::move(packets);
  table->file_size_ = file_size;
  table->file_mtime_ns_ = file_mtime_ns;
  STOKER_RETURN_IF_ERROR(table->derive());
  return std::shared_ptr<const FrameTable>(std::move(table));
}

Status FrameTable::derive() {
  if (stream_.time_base_num <= 0 || stream_.time_base_den <= 0) {
    return malformed("time base is not positive");
  }
  const int64_t num_packets = static_cast<int64_t>(packets_.size());
  if (stream_.packets_addressable) {
    for (const PacketEntry& p : packets_) {
      if (p.pos < 0 || p.size <= 0 || p.pos > file_size_ - p.size) {
        return malformed("packet at byte " + std::to_string(p.pos) + " (" + std::to_string(p.size) +
                         " bytes) lies outside the " + std::to_string(file_size_) + "-byte file");
      }
    }
  }

  // Every packet is identified by its pts while decoding, so pts must be unique.
  sorted_pts_packet_.resize(num_packets);
  std::iota(sorted_pts_packet_.begin(), sorted_pts_packet_.end(), 0);
  std::stable_sort(sorted_pts_packet_.begin(), sorted_pts_packet_.end(),
                   [&](int64_t a, int64_t b) { return packets_[a].pts < packets_[b].pts; });
  sorted_pts_.resize(num_packets);
  for (int64_t k = 0; k < num_packets; ++k) {
    sorted_pts_[k] = packets_[sorted_pts_packet_[k]].pts;
    if (k > 0 && sorted_pts_[k] == sorted_pts_[k - 1]) {
      return Status(StatusCode::kUnsupported, "two packets share pts " +
                                                  std::to_string(sorted_pts_[k]) +
                                                  "; frames cannot be told apart");
    }
  }

  sorted_crc_.clear();
  sorted_crc_packet_.clear();
  if (stream_.pts_from_decoding) {  // packets are then told apart by their bytes' checksums
    sorted_crc_packet_.resize(num_packets);
    std::iota(sorted_crc_packet_.begin(), sorted_crc_packet_.end(), 0);
    std::stable_sort(sorted_crc_packet_.begin(), sorted_crc_packet_.end(),
                     [&](int64_t a, int64_t b) { return packets_[a].crc < packets_[b].crc; });
    sorted_crc_.resize(num_packets);
    for (int64_t k = 0; k < num_packets; ++k) {
      sorted_crc_[k] = packets_[sorted_crc_packet_[k]].crc;
      if (k > 0 && sorted_crc_[k] == sorted_crc_[k - 1]) {
        return Status(StatusCode::kUnsupported,
                      "the container gives no pts and two packets have the same bytes; frames "
                      "cannot be told apart");
      }
    }
  }

  frame_packet_.clear();
  packet_frame_.assign(num_packets, -1);
  for (int64_t p : sorted_pts_packet_) {
    if (!packets_[p].shown) continue;
    packet_frame_[p] = static_cast<int64_t>(frame_packet_.size());
    frame_packet_.push_back(p);
  }
  const int64_t num_frames = static_cast<int64_t>(frame_packet_.size());
  if (num_frames == 0) return Status(StatusCode::kCorruptData, "the video stream has no frames");

  const double tb = static_cast<double>(stream_.time_base_num) / stream_.time_base_den;
  pts_seconds_.resize(num_frames);
  is_key_.resize(num_frames);
  for (int64_t i = 0; i < num_frames; ++i) {
    const PacketEntry& packet = packets_[frame_packet_[i]];
    pts_seconds_[i] = static_cast<double>(packet.pts) * tb;
    is_key_[i] = packet.is_key ? 1 : 0;
  }

  // Sync point of each frame: walk back over key packets from the frame's own packet until one
  // is shown no later than the frame (an open-GOP leading picture needs the previous GOP).
  std::vector<int64_t> last_key_at_or_before(num_packets, -1);
  for (int64_t p = 0, last = -1; p < num_packets; ++p) {
    if (packets_[p].is_key) last = p;
    last_key_at_or_before[p] = last;
  }
  frame_sync_packet_.resize(num_frames);
  for (int64_t i = 0; i < num_frames; ++i) {
    const int64_t packet = frame_packet_[i];
    int64_t key = last_key_at_or_before[packet];
    while (key > 0 && packets_[key].pts > packets_[packet].pts) {
      key = last_key_at_or_before[key - 1];
    }
    frame_sync_packet_[i] = std::max<int64_t>(key, 0);
  }

  const double span = pts_seconds_.back() - pts_seconds_.front();
  fps_ = (num_frames > 1 && span > 0) ? (num_frames - 1) / span : 0.0;
  const int64_t last_duration = packets_[frame_packet_.back()].duration;
  const double last_seconds = last_duration > 0 ? last_duration * tb : (fps_ > 0 ? 1.0 / fps_ : 0);
  duration_ = span + last_seconds;
  return Status();
}

int64_t FrameTable::packet_with_pts(int64_t pts) const {
  auto it = std::lower_bound(sorted_pts_.begin(), sorted_pts_.end(), pts);
  if (it == sorted_pts_.end() || *it != pts) return -1;
  return sorted_pts_packet_[it - sorted_pts_.begin()];
}

int64_t FrameTable::packet_with_crc(uint32_t crc) const {
  auto it = std::lower_bound(sorted_crc_.begin(), sorted_crc_.end(), crc);
  if (it == sorted_crc_.end() || *it != crc) return -1;
  return sorted_crc_packet_[it - sorted_crc_.begin()];
}

int64_t FrameTable::frame_with_pts(int64_t pts) const {
  const int64_t packet = packet_with_pts(pts);
  return packet < 0 ? -1 : packet_frame_[packet];
}

int64_t FrameTable::nearest_frame(double seconds) const {
  auto it = std::lower_bound(pts_seconds_.begin(), pts_seconds_.end(), seconds);
  if (it == pts_seconds_.begin()) return 0;
  if (it == pts_seconds_.end()) return num_frames() - 1;
  const int64_t after = it - pts_seconds_.begin();
  return (seconds - pts_seconds_[after - 1] <= pts_seconds_[after] - seconds) ? after - 1 : after;
}

std::vector<ByteRange> FrameTable::byte_ranges(std::span<const int64_t> frames, int64_t gap) const {
  std::vector<ByteRange> ranges;
  if (!stream_.packets_addressable) return ranges;
  // Decode-order packet spans [sync, own] of the frames, merged where they touch or overlap.
  std::vector<std::pair<int64_t, int64_t>> spans;
  for (int64_t frame : frames) {
    spans.emplace_back(frame_sync_packet_[frame], frame_packet_[frame]);
  }
  std::sort(spans.begin(), spans.end());
  for (size_t k = 0; k < spans.size();) {
    auto [first, last] = spans[k];
    for (++k; k < spans.size() && spans[k].first <= last + 1; ++k) {
      last = std::max(last, spans[k].second);
    }
    for (int64_t p = first; p <= last; ++p) {
      ranges.push_back(ByteRange{packets_[p].pos, packets_[p].size});
    }
  }
  // Packets of other streams may lie between, and B-frames keep file order = decode order, but
  // nothing requires it: sort by position, then merge what is `gap` or less apart.
  std::sort(ranges.begin(), ranges.end(),
            [](const ByteRange& a, const ByteRange& b) { return a.offset < b.offset; });
  std::vector<ByteRange> merged;
  for (const ByteRange& r : ranges) {
    if (!merged.empty() && r.offset <= merged.back().end() + gap) {
      merged.back().length = std::max(merged.back().end(), r.end()) - merged.back().offset;
    } else {
      merged.push_back(r);
    }
  }
  return merged;
}

std::vector<uint8_t> FrameTable::serialize() const {
  ByteWriter w;
  w.bytes(kMagic, sizeof(kMagic));
  w.pod<uint32_t>(kFormatVersion);
  w.pod<int64_t>(file_size_);
  w.pod<int64_t>(file_mtime_ns_);
  w.string(stream_.codec);
  for (int v : {stream_.width, stream_.height, stream_.pixel_format, stream_.profile, stream_.level,
                stream_.bits_per_raw_sample, stream_.color_range, stream_.color_space,
                stream_.sample_aspect_num, stream_.sample_aspect_den, stream_.video_delay,
                stream_.time_base_num, stream_.time_base_den, stream_.stream_index}) {
    w.pod<int32_t>(v);
  }
  w.pod<uint8_t>(static_cast<uint8_t>((stream_.pts_from_decoding ? 1 : 0) |
                                      (stream_.packets_addressable ? 2 : 0)));
  w.pod<uint32_t>(static_cast<uint32_t>(stream_.extradata.size()));
  w.bytes(stream_.extradata.data(), stream_.extradata.size());
  w.pod<uint64_t>(packets_.size());
  for (const PacketEntry& p : packets_) {
    w.pod<int64_t>(p.pts);
    w.pod<int64_t>(p.dts);
    w.pod<int64_t>(p.duration);
    w.pod<uint8_t>(static_cast<uint8_t>((p.is_key ? 1 : 0) | (p.shown ? 2 : 0)));
    if (stream_.pts_from_decoding) w.pod<uint32_t>(p.crc);
    w.pod<int64_t>(p.pos);
    w.pod<int32_t>(p.size);
  }
  w.pod<uint32_t>(core::crc32c(w.buffer()));
  return w.take();
}

Result<std::shared_ptr<const FrameTable>> FrameTable::deserialize(std::span<const uint8_t> all) {
  ByteReader header(all);
  char magic[sizeof(kMagic)];
  if (!header.bytes(magic, sizeof(magic)) || std::memcmp(magic, kMagic, sizeof(kMagic)) != 0) {
    return malformed("it does not start with the frame-table signature");
  }
  uint32_t version = 0;
  if (!header.pod(&version)) return malformed("truncated header");
  if (version != kFormatVersion) {
    return malformed("format version " + std::to_string(version) + ", expected " +
                     std::to_string(kFormatVersion));
  }
  uint32_t stored_crc = 0;
  if (all.size() < sizeof(kMagic) + 2 * sizeof(uint32_t)) return malformed("truncated");
  const std::span<const uint8_t> bytes = all.first(all.size() - sizeof(stored_crc));
  std::memcpy(&stored_crc, all.data() + bytes.size(), sizeof(stored_crc));
  if (core::crc32c(bytes) != stored_crc && !core::kFuzzing) {
    return malformed("its checksum does not match (the bytes were damaged)");
  }
  ByteReader r(bytes.subspan(sizeof(kMagic) + sizeof(version)));
  std::shared_ptr<FrameTable> table(new FrameTable());
  VideoStreamInfo& s = table->stream_;
  if (!r.pod(&table->file_size_) || !r.pod(&table->file_mtime_ns_) || !r.string(&s.codec, 64)) {
    return malformed("truncated header");
  }
  for (int* field :
       {&s.width, &s.height, &s.pixel_format, &s.profile, &s.level, &s.bits_per_raw_sample,
        &s.color_range, &s.color_space, &s.sample_aspect_num, &s.sample_aspect_den, &s.video_delay,
        &s.time_base_num, &s.time_base_den, &s.stream_index}) {
    int32_t v = 0;
    if (!r.pod(&v)) return malformed("truncated stream description");
    *field = v;
  }
  uint8_t stream_flags = 0;
  if (!r.pod(&stream_flags) || stream_flags > 3) return malformed("stream flags");
  s.pts_from_decoding = (stream_flags & 1) != 0;
  s.packets_addressable = (stream_flags & 2) != 0;
  uint32_t extradata_size = 0;
  if (!r.pod(&extradata_size) || extradata_size > bytes.size()) {
    return malformed("truncated extradata");
  }
  s.extradata.resize(extradata_size);
  if (!r.bytes(s.extradata.data(), extradata_size)) return malformed("truncated extradata");
  uint64_t num_packets = 0;
  constexpr size_t kPacketBytes = 4 * sizeof(int64_t) + sizeof(int32_t) + 1;
  if (!r.pod(&num_packets) || num_packets > bytes.size() / kPacketBytes) {
    return malformed("truncated packet list");
  }
  table->packets_.resize(num_packets);
  for (PacketEntry& p : table->packets_) {
    uint8_t flags = 0;
    if (!r.pod(&p.pts) || !r.pod(&p.dts) || !r.pod(&p.duration) || !r.pod(&flags) ||
        (s.pts_from_decoding && !r.pod(&p.crc)) || !r.pod(&p.pos) || !r.pod(&p.size)) {
      return malformed("truncated packet list");
    }
    p.is_key = flags & 1;
    p.shown = flags & 2;
  }
  if (!r.at_end()) return malformed("trailing bytes after the packet list");
  STOKER_RETURN_IF_ERROR(check_stream(s));
  STOKER_RETURN_IF_ERROR(table->derive());
  return std::shared_ptr<const FrameTable>(std::move(table));
}

}  // namespace stoker
