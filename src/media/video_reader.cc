#include "stoker/video_reader.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <sstream>
#include <vector>

#include "core/env.h"
#include "core/file.h"
#include "media/container.h"
#include "media/media_cache.h"
#include "stoker/byte_slice.h"
#include "stoker/remote_source.h"

namespace stoker {

using media::Container;
using media::Decoder;
using media::PacketStream;
using media::ThreadMediaCache;

namespace {

constexpr int kMaxOutputSide = 1 << 14;

std::string describe_frame(const FrameTable& table, int64_t frame) {
  std::ostringstream out;
  out << "frame " << frame << " (pts " << table.pts_seconds(frame) << " s)";
  return out.str();
}

// Whether two crops name the same region (every empty crop is the whole frame).
bool same_region(const CropRect& a, const CropRect& b) { return a.empty() ? b.empty() : a == b; }

std::string describe_crop(const CropRect& crop) {
  return std::to_string(crop.width) + "x" + std::to_string(crop.height) + " at (" +
         std::to_string(crop.x) + ", " + std::to_string(crop.y) + ")";
}

// What is wrong with the output size in `options`, or an empty string.
std::string invalid_output_size(const OutputOptions& options) {
  if ((options.height > 0) != (options.width > 0) || options.height < 0 || options.width < 0 ||
      options.height > kMaxOutputSide || options.width > kMaxOutputSide) {
    return "output size " + std::to_string(options.height) + "x" + std::to_string(options.width) +
           " is invalid";
  }
  return "";
}

// What is wrong with a frame index, or an empty string.
std::string invalid_frame_index(int64_t index, int64_t num_frames) {
  if (index >= 0 && index < num_frames) return "";
  return "frame index " + std::to_string(index) + " is out of range (the video has " +
         std::to_string(num_frames) + " frames)";
}

// The distinct requested frames, sorted, and what the decode pass knows about each.
struct WantedFrames {
  std::vector<int64_t> frames;       // sorted, unique
  std::vector<int64_t> requests;     // request positions sorted by frame, in request order
                                     // within one frame
  std::vector<size_t> first;         // frames[k]'s requests: requests[first[k] .. first[k + 1])
  std::vector<uint8_t> produced;     // written to all its requests
  std::vector<int64_t> fed_in_pass;  // pass in which its packet went to the decoder, -1 if none
  std::vector<int> seeks;            // seeks made to reach it

  // Position of `frame` in `frames`, or -1.
  int64_t find(int64_t frame) const {
    auto it = std::lower_bound(frames.begin(), frames.end(), frame);
    return (it != frames.end() && *it == frame) ? it - frames.begin() : -1;
  }
};

// One get_frames() call: decodes forward over the wanted frames with as few seeks and as little
// decoding as the GOP and reference structure allow.
class DecodePass {
 public:
  DecodePass(const FrameTable& table, PacketStream& container, Decoder& decoder,
             media::FrameConverter& converter, const OutputOptions& options, int out_height,
             int out_width, std::span<const FrameRequest> requests, WantedFrames& wanted,
             DecodeStats& stats)
      : table_(table),
        container_(container),
        decoder_(decoder),
        converter_(converter),
        options_(options),
        out_height_(out_height),
        out_width_(out_width),
        frame_bytes_(static_cast<size_t>(out_height) * out_width *
                     pixel_bytes(options.pixel_format)),
        requests_(requests),
        wanted_(wanted),
        stats_(stats),
        frame_(av_frame_alloc()) {}

  Status run() {
    if (!frame_) return Status(StatusCode::kInternal, "cannot allocate a frame");
    size_t cursor = 0;  // first wanted frame not yet produced
    while (cursor < wanted_.frames.size()) {
      if (!can_continue_to(cursor)) {
        STOKER_RETURN_IF_ERROR(seek_for(cursor));
        STOKER_RETURN_IF_ERROR(decode_held_packet());
      } else if (nothing_left_to_feed_here(cursor)) {
        // Every wanted frame this run can reach is in the decoder; flushing them out is cheaper
        // than decoding the reference frames that reordering would otherwise wait for.
        STOKER_RETURN_IF_ERROR(drain());
      } else {
        STOKER_ASSIGN_OR_RETURN(bool more, container_.read_packet());
        if (more) {
          ++stats_.packets_read;
          STOKER_RETURN_IF_ERROR(decode_held_packet());
        } else {
          STOKER_RETURN_IF_ERROR(drain());
        }
      }
      while (cursor < wanted_.frames.size() && wanted_.produced[cursor]) ++cursor;
      if (cursor < wanted_.frames.size()) STOKER_RETURN_IF_ERROR(check_not_lost(cursor));
    }
    return Status();
  }

 private:
  int64_t pass() const { return pass_; }

  // Whether decoding forward from the current position reaches wanted frame `k` without
  // crossing into a later GOP than its own.
  bool can_continue_to(size_t k) const {
    if (decoder_.positioned_in != container_.id || container_.next_packet < 0) return false;
    if (wanted_.fed_in_pass[k] == pass_) return true;  // already in the decoder's pipeline
    const int64_t frame = wanted_.frames[k];
    const int64_t next = container_.next_packet;
    return table_.sync_packet_of_frame(frame) <= next && table_.packet_of_frame(frame) >= next;
  }

  // Whether no wanted frame from `cursor` on still needs a packet from the current position:
  // each is either already fed, or lies beyond a keyframe that a seek reaches more cheaply.
  bool nothing_left_to_feed_here(size_t cursor) const {
    for (size_t k = cursor; k < wanted_.frames.size(); ++k) {
      if (wanted_.produced[k] || wanted_.fed_in_pass[k] == pass_) continue;
      return table_.sync_packet_of_frame(wanted_.frames[k]) > container_.next_packet;
    }
    return true;
  }

  Status seek_for(size_t k) {
    const int64_t frame = wanted_.frames[k];
    if (++wanted_.seeks[k] > 2) {
      return error_at(frame, StatusCode::kCorruptData,
                      "the decoder does not produce it after seeking to its keyframe");
    }
    const auto started = core::now();
    avcodec_flush_buffers(decoder_.context.get());
    const int64_t sync = table_.sync_packet_of_frame(frame);
    Status seeked = container_.seek_to_packet(table_, sync, &stats_.packets_read);
    stats_.seek_ns += core::nanoseconds_since(started);
    if (!seeked.ok()) {
      decoder_.positioned_in = 0;
      return seeked.with_context(describe_frame(table_, frame));
    }
    ++stats_.seeks;
    ++pass_;
    decoder_.positioned_in = container_.id;
    decoder_.pass_start = sync;
    return Status();
  }

  // Sends the packet held by the container to the decoder, switching the non-reference skip on
  // unless the packet carries a wanted frame, then collects every frame the decoder returns.
  Status decode_held_packet() {
    AVPacket* packet = container_.packet();
    const int64_t position = container_.locate(table_);
    if (position < 0) {
      decoder_.positioned_in = 0;
      return Status(StatusCode::kCorruptData,
                    "packet with pts " + std::to_string(packet->pts) +
                        " is not in the frame table (the file changed since it was scanned?)");
    }
    container_.next_packet = position + 1;
    const int64_t frame = table_.frame_of_packet(position);
    const int64_t k = frame < 0 ? -1 : wanted_.find(frame);
    const bool wanted = k >= 0 && !wanted_.produced[k];
    AVCodecContext* ctx = decoder_.context.get();
    ctx->skip_frame = wanted ? AVDISCARD_DEFAULT : AVDISCARD_NONREF;
    if (wanted) wanted_.fed_in_pass[k] = pass_;
    ++stats_.packets_decoded;
    if (!wanted) ++stats_.packets_skippable;
    const int sent = avcodec_send_packet(ctx, packet);
    if (sent < 0 && sent != AVERROR(EAGAIN)) {
      last_decoder_error_ =
          "packet " + std::to_string(position) + ": " + media::detail::av_error_text(sent);
    }
    return receive_frames();
  }

  // End of file: flush the decoder's delayed frames out. The decoder must then seek again.
  Status drain() {
    avcodec_send_packet(decoder_.context.get(), nullptr);
    Status status = receive_frames();
    decoder_.positioned_in = 0;
    container_.next_packet = -1;
    return status;
  }

  Status receive_frames() {
    AVCodecContext* ctx = decoder_.context.get();
    for (;;) {
      const int received = avcodec_receive_frame(ctx, frame_.get());
      if (received == AVERROR(EAGAIN) || received == AVERROR_EOF) return Status();
      if (received < 0) {
        last_decoder_error_ = media::detail::av_error_text(received);
        return Status();
      }
      ++stats_.frames_received;
      Status status = take_frame();
      av_frame_unref(frame_.get());
      STOKER_RETURN_IF_ERROR(status);
    }
  }

  Status take_frame() {
    const int64_t pts = frame_->pts != AV_NOPTS_VALUE ? frame_->pts : frame_->best_effort_timestamp;
    const int64_t frame = table_.frame_with_pts(pts);
    if (frame < 0) {
      decoder_.positioned_in = 0;
      return Status(StatusCode::kCorruptData, "the decoder returned a frame with pts " +
                                                  std::to_string(pts) +
                                                  ", which is not in the frame table");
    }
    last_output_frame_ = frame;
    const int64_t k = wanted_.find(frame);
    if (k < 0 || wanted_.produced[k]) return Status();
    // A frame whose keyframe lies before this pass's start (an open-GOP leading picture) was
    // decoded from missing references: not taken; its own seek will produce it correctly.
    if (table_.sync_packet_of_frame(frame) < decoder_.pass_start) return Status();
    if (frame_->decode_error_flags != 0 || (frame_->flags & AV_FRAME_FLAG_CORRUPT) != 0) {
      return error_at(frame, StatusCode::kCorruptData, "the decoder reports it corrupt");
    }
    const auto started = core::now();
    Status written = write_requests(k);
    stats_.convert_ns += core::nanoseconds_since(started);
    STOKER_RETURN_IF_ERROR(written.with_context(describe_frame(table_, frame)));
    wanted_.produced[k] = 1;
    return Status();
  }

  // Writes the decoded frame to every request of wanted frame `k`: each distinct crop is
  // converted once, into its first request's output, and copied from there to the others.
  Status write_requests(int64_t k) {
    converted_.clear();
    for (size_t i = wanted_.first[k]; i < wanted_.first[k + 1]; ++i) {
      const FrameRequest& request = requests_[wanted_.requests[i]];
      const FrameRequest* done = nullptr;
      for (const FrameRequest* earlier : converted_) {
        if (same_region(earlier->crop, request.crop)) {
          done = earlier;
          break;
        }
      }
      if (done != nullptr) {
        if (done->out != request.out) std::memcpy(request.out, done->out, frame_bytes_);
        continue;
      }
      Status converted =
          converter_.convert(*frame_, options_, out_height_, out_width_, request.out, request.crop);
      if (!converted.ok()) {
        return request.crop.empty() ? converted
                                    : converted.with_context("crop " + describe_crop(request.crop));
      }
      ++stats_.frames_converted;
      converted_.push_back(&request);
    }
    return Status();
  }

  // The decoder emits frames in presentation order: once it has emitted a later frame, a wanted
  // frame fed in this pass that never came out was dropped by the decoder.
  Status check_not_lost(size_t k) {
    const int64_t frame = wanted_.frames[k];
    const bool passed = last_output_frame_ > frame || decoder_.positioned_in == 0;
    if (!passed || wanted_.fed_in_pass[k] != pass_) return Status();
    if (table_.sync_packet_of_frame(frame) < decoder_.pass_start) return Status();
    std::string why = "the decoder did not produce it";
    if (!last_decoder_error_.empty()) why += " (" + last_decoder_error_ + ")";
    return error_at(frame, StatusCode::kCorruptData, why);
  }

  Status error_at(int64_t frame, StatusCode code, const std::string& why) {
    decoder_.positioned_in = 0;
    return Status(code, describe_frame(table_, frame) + ": " + why);
  }

  const FrameTable& table_;
  PacketStream& container_;
  Decoder& decoder_;
  media::FrameConverter& converter_;
  const OutputOptions& options_;
  const int out_height_;
  const int out_width_;
  const size_t frame_bytes_;
  std::span<const FrameRequest> requests_;
  WantedFrames& wanted_;
  DecodeStats& stats_;
  media::detail::UniqueFrame frame_;
  int64_t pass_ = 0;
  int64_t last_output_frame_ = -1;
  std::string last_decoder_error_;
  std::vector<const FrameRequest*> converted_;  // write_requests(): the distinct crops written
};

// VideoReader::verify(): every packet from the first, in file order, each frame that comes out
// recorded (size, pixel format, flags, difference from the previous frame), none converted.
class VerifyPass {
 public:
  VerifyPass(const FrameTable& table, PacketStream& stream, Decoder& decoder, VerifyReport& report)
      : table_(table),
        stream_(stream),
        decoder_(decoder),
        report_(report),
        frame_(av_frame_alloc()) {
    const size_t n = static_cast<size_t>(table.num_frames());
    report.width.assign(n, 0);
    report.height.assign(n, 0);
    report.pixel_format.assign(n, -1);
    report.corrupt.assign(n, 0);
    report.difference.assign(n, -1.0f);
    name_format(table.stream().pixel_format);
  }

  Status run() {
    if (!frame_) return Status(StatusCode::kInternal, "cannot allocate a frame");
    AVCodecContext* ctx = decoder_.context.get();
    avcodec_flush_buffers(ctx);
    decoder_.positioned_in = 0;  // left unpositioned: the next get_frames() seeks
    ctx->skip_frame = AVDISCARD_DEFAULT;
    int64_t read = 0;
    Status seeked = stream_.seek_to_packet(table_, 0, &read);
    if (!seeked.ok()) {
      report_.stopped = seeked.message();
      return Status();
    }
    for (int64_t position = 0;; ++position) {
      decode_held_packet(position);
      Result<bool> more = stream_.read_packet();
      if (!more.ok()) {
        report_.stopped =
            "after packet " + std::to_string(position) + ": " + more.status().message();
        break;
      }
      if (!*more) break;
    }
    avcodec_send_packet(ctx, nullptr);
    receive_frames();
    stream_.next_packet = -1;
    return Status();
  }

 private:
  void decode_held_packet(int64_t position) {
    AVPacket* packet = stream_.packet();
    const int64_t located = stream_.locate(table_);
    if (located < 0) {
      const int64_t expected = position < static_cast<int64_t>(table_.packets().size())
                                   ? table_.frame_of_packet(position)
                                   : -1;
      report_.unmatched.emplace_back(position, expected);
    }
    AVCodecContext* ctx = decoder_.context.get();
    ++report_.packets_decoded;
    for (;;) {
      const int sent = avcodec_send_packet(ctx, packet);
      if (sent == AVERROR(EAGAIN)) {  // the decoder wants its frames taken out first
        if (!receive_frames()) return;
        continue;
      }
      if (sent < 0) report_.refused.emplace_back(position, media::detail::av_error_text(sent));
      break;
    }
    receive_frames();
  }

  // Takes every frame the decoder has ready; false when it returned an error instead.
  bool receive_frames() {
    AVCodecContext* ctx = decoder_.context.get();
    for (;;) {
      const int received = avcodec_receive_frame(ctx, frame_.get());
      if (received == AVERROR(EAGAIN) || received == AVERROR_EOF) return true;
      if (received < 0) return false;
      take_frame();
      av_frame_unref(frame_.get());
    }
  }

  void take_frame() {
    const AVFrame& f = *frame_;
    const int64_t pts = f.pts != AV_NOPTS_VALUE ? f.pts : f.best_effort_timestamp;
    const int64_t frame = table_.frame_with_pts(pts);
    if (frame < 0 || report_.width[frame] != 0) return;  // unknown, or already produced
    report_.width[frame] = f.width;
    report_.height[frame] = f.height;
    report_.pixel_format[frame] = f.format;
    report_.corrupt[frame] = f.decode_error_flags != 0 || (f.flags & AV_FRAME_FLAG_CORRUPT) != 0;
    name_format(f.format);
    report_.difference[frame] = difference_from_previous(frame);
  }

  // Mean absolute difference of the first plane's samples (as 8-bit levels) from the frame
  // shown just before, kept from the last call; -1 when that frame is not the one kept.
  float difference_from_previous(int64_t frame) {
    const AVFrame& f = *frame_;
    const AVPixFmtDescriptor* desc = av_pix_fmt_desc_get(static_cast<AVPixelFormat>(f.format));
    constexpr uint64_t kUnread =
        AV_PIX_FMT_FLAG_HWACCEL | AV_PIX_FMT_FLAG_BITSTREAM | AV_PIX_FMT_FLAG_FLOAT;
    if (desc == nullptr || (desc->flags & kUnread) != 0 || desc->comp[0].depth > 16 ||
        f.data[0] == nullptr || f.width <= 0 || f.height <= 0) {
      kept_frame_ = -1;
      return -1.0f;
    }
    // Plane 0's samples as 8-bit levels: a wider sample (16-bit words, its value `shift` bits
    // up) by its top 8 bits of `depth`, so a 12-bit depth camera's levels span 0-255 as 8-bit
    // video's do (its word's top byte would hold only 4 of them).
    const AVComponentDescriptor& luma = desc->comp[0];
    const int step = luma.step;
    const bool wide = luma.depth > 8;
    const bool big_endian = (desc->flags & AV_PIX_FMT_FLAG_BE) != 0;
    const int down = wide ? luma.shift + luma.depth - 8 : 0;
    const size_t pixels = static_cast<size_t>(f.width) * f.height;
    current_.resize(pixels);
    for (int y = 0; y < f.height; ++y) {
      const uint8_t* row = f.data[0] + static_cast<ptrdiff_t>(y) * f.linesize[0] + luma.offset;
      uint8_t* out = current_.data() + static_cast<size_t>(y) * f.width;
      if (!wide && step == 1) {
        std::memcpy(out, row, static_cast<size_t>(f.width));
      } else if (!wide) {
        for (int x = 0; x < f.width; ++x) out[x] = row[x * step];
      } else {
        for (int x = 0; x < f.width; ++x) {
          const uint8_t* sample = row + static_cast<ptrdiff_t>(x) * step;
          const unsigned word = big_endian ? (unsigned{sample[0]} << 8) | sample[1]
                                           : (unsigned{sample[1]} << 8) | sample[0];
          out[x] = static_cast<uint8_t>(word >> down);
        }
      }
    }
    float result = -1.0f;
    if (kept_frame_ == frame - 1 && kept_width_ == f.width && kept_height_ == f.height) {
      uint64_t total = 0;
      for (size_t i = 0; i < pixels; ++i) {
        total += static_cast<uint64_t>(std::abs(int{current_[i]} - int{kept_[i]}));
      }
      result = static_cast<float>(static_cast<double>(total) / static_cast<double>(pixels));
    }
    kept_.swap(current_);
    kept_frame_ = frame;
    kept_width_ = f.width;
    kept_height_ = f.height;
    return result;
  }

  void name_format(int format) {
    for (const auto& [code, name] : report_.pixel_format_names) {
      if (code == format) return;
    }
    const char* name = av_get_pix_fmt_name(static_cast<AVPixelFormat>(format));
    report_.pixel_format_names.emplace_back(format, name != nullptr ? name : "unknown");
  }

  const FrameTable& table_;
  PacketStream& stream_;
  Decoder& decoder_;
  VerifyReport& report_;
  media::detail::UniqueFrame frame_;
  std::vector<uint8_t> kept_;     // plane 0 of frame kept_frame_, 8-bit levels, width x height
  std::vector<uint8_t> current_;  // the same of the frame being taken
  int64_t kept_frame_ = -1;
  int kept_width_ = 0;
  int kept_height_ = 0;
};

std::string file_cache_key(const std::string& path, const FrameTable& table) {
  return path + '\0' + std::to_string(table.file_size()) + '\0' +
         std::to_string(table.file_mtime_ns());
}

std::string source_cache_key(const ByteSource& source) {
  static std::atomic<uint64_t> readers{0};
  return '\1' + std::to_string(readers.fetch_add(1)) + '\0' + source.name();
}

std::string stale_table(int64_t table_size, int64_t size) {
  return "the saved frame table is stale (it describes " + std::to_string(table_size) +
         " bytes, the video has " + std::to_string(size) + ")";
}

}  // namespace

DecodeStats& DecodeStats::operator+=(const DecodeStats& other) {
  containers_opened += other.containers_opened;
  decoders_built += other.decoders_built;
  seeks += other.seeks;
  packets_read += other.packets_read;
  packets_decoded += other.packets_decoded;
  packets_skippable += other.packets_skippable;
  frames_received += other.frames_received;
  frames_converted += other.frames_converted;
  bytes_read += other.bytes_read;
  seek_ns += other.seek_ns;
  convert_ns += other.convert_ns;
  return *this;
}

VideoReader::VideoReader(std::string name, std::shared_ptr<const ByteSource> source,
                         std::shared_ptr<const FrameTable> table, int threads)
    : name_(std::move(name)),
      source_(std::move(source)),
      cache_key_(source_ != nullptr ? source_cache_key(*source_) : file_cache_key(name_, *table)),
      table_(std::move(table)),
      threads_(threads) {}

VideoReader::~VideoReader() = default;

Result<std::unique_ptr<VideoReader>> VideoReader::open(const std::string& path,
                                                       VideoReaderOptions options) {
  // A remote object or a slice of a file (a video inside a bigger file): read through its source.
  if (is_remote_url(path) || parse_byte_slice(path).has_value()) {
    Result<std::shared_ptr<const ByteSource>> remote = open_source(path);
    if (!remote.ok()) return remote.status().with_context("video '" + path + "'");
    return open(std::move(remote).value(), std::move(options));
  }
  const std::string context = "video '" + path + "'";
  if (options.threads < 1) {
    return Status(StatusCode::kInvalidArgument, context + ": threads must be at least 1");
  }
  Result<core::FileIdentity> identity = core::stat_file(path);
  if (!identity.ok()) return identity.status().with_context(context);
  std::shared_ptr<const FrameTable> table = std::move(options.frame_table);
  std::unique_ptr<Container> scanned;
  if (table != nullptr) {
    // The file is not the one the table describes: a data error, as when a loader meets it.
    if (table->file_size() != identity->size) {
      return Status(StatusCode::kCorruptData,
                    context + ": " + stale_table(table->file_size(), identity->size));
    }
    if (table->file_mtime_ns() != 0 && table->file_mtime_ns() != identity->mtime_ns) {
      return Status(StatusCode::kCorruptData,
                    context + ": the saved frame table is stale (the file was modified since)");
    }
  } else {
    Result<std::unique_ptr<ByteSource>> source = open_file_source(path);
    if (!source.ok()) return source.status().with_context(context);
    Result<std::unique_ptr<Container>> container =
        Container::open(std::move(source).value(), nullptr);
    if (!container.ok()) return container.status().with_context(context);
    Result<std::shared_ptr<const FrameTable>> built = (*container)->scan(identity->mtime_ns);
    if (!built.ok()) return built.status().with_context(context);
    table = std::move(built).value();
    scanned = std::move(container).value();
  }
  std::unique_ptr<VideoReader> reader(
      new VideoReader(path, nullptr, std::move(table), options.threads));
  if (scanned != nullptr) {
    ThreadMediaCache::current().adopt(reader->cache_key_, false, std::move(scanned));
  }
  return reader;
}

Result<std::unique_ptr<VideoReader>> VideoReader::open(std::shared_ptr<const ByteSource> source,
                                                       VideoReaderOptions options) {
  if (source == nullptr) {
    return Status(StatusCode::kInvalidArgument, "VideoReader::open: the source is null");
  }
  const std::string context = "video '" + source->name() + "'";
  if (options.threads < 1) {
    return Status(StatusCode::kInvalidArgument, context + ": threads must be at least 1");
  }
  std::shared_ptr<const FrameTable> table = std::move(options.frame_table);
  std::unique_ptr<Container> scanned;
  if (table != nullptr) {
    if (table->file_size() != source->size()) {
      return Status(StatusCode::kCorruptData,
                    context + ": " + stale_table(table->file_size(), source->size()));
    }
  } else {
    Result<std::unique_ptr<Container>> container = Container::open(source, nullptr);
    if (!container.ok()) return container.status().with_context(context);
    Result<std::shared_ptr<const FrameTable>> built = (*container)->scan(source->mtime_ns());
    if (!built.ok()) return built.status().with_context(context);
    table = std::move(built).value();
    scanned = std::move(container).value();
  }
  // A remote source is read packet by packet from the positions in the table (see
  // media_cache.h), not through the container that scanned it.
  if (source->is_remote() && table->stream().packets_addressable) scanned.reset();
  std::string name = source->name();
  std::unique_ptr<VideoReader> reader(
      new VideoReader(std::move(name), std::move(source), std::move(table), options.threads));
  if (scanned != nullptr) {
    ThreadMediaCache::current().adopt(reader->cache_key_, true, std::move(scanned));
  }
  return reader;
}

std::pair<int, int> VideoReader::output_size(const OutputOptions& options) const {
  if (options.height > 0 && options.width > 0) return {options.height, options.width};
  return {table_->stream().height, table_->stream().width};
}

size_t VideoReader::frame_bytes(const OutputOptions& options) const {
  auto [height, width] = output_size(options);
  return static_cast<size_t>(height) * width * pixel_bytes(options.pixel_format);
}

Status VideoReader::get_frames(std::span<const int64_t> indices, const OutputOptions& options,
                               std::span<uint8_t> out, DecodeStats* stats) const {
  auto invalid = [&](const std::string& why) {
    return Status(StatusCode::kInvalidArgument, "video '" + name_ + "': " + why);
  };
  if (indices.empty()) return invalid("no frames were requested (empty index list)");
  if (std::string why = invalid_output_size(options); !why.empty()) return invalid(why);
  for (int64_t index : indices) {
    if (std::string why = invalid_frame_index(index, num_frames()); !why.empty()) {
      return invalid(why);
    }
  }
  const size_t frame_size = frame_bytes(options);
  if (out.size() != indices.size() * frame_size) {
    return invalid("output buffer holds " + std::to_string(out.size()) + " bytes, " +
                   std::to_string(indices.size() * frame_size) + " are needed");
  }
  std::vector<FrameRequest> requests(indices.size());
  for (size_t k = 0; k < indices.size(); ++k) {
    requests[k] = FrameRequest{.frame = indices[k], .out = out.data() + k * frame_size};
  }
  return get_frames(requests, options, stats);
}

Status VideoReader::get_frames(std::span<const FrameRequest> requests, const OutputOptions& options,
                               DecodeStats* stats) const {
  const std::string context = "video '" + name_ + "'";
  auto invalid = [&](const std::string& why) {
    return Status(StatusCode::kInvalidArgument, context + ": " + why);
  };
  if (requests.empty()) return invalid("no frames were requested (empty request list)");
  if (std::string why = invalid_output_size(options); !why.empty()) return invalid(why);
  const int frame_width = table_->stream().width;
  const int frame_height = table_->stream().height;
  for (size_t k = 0; k < requests.size(); ++k) {
    const FrameRequest& request = requests[k];
    auto invalid_request = [&](const std::string& why) {
      return invalid("request " + std::to_string(k) + " (frame " + std::to_string(request.frame) +
                     "): " + why);
    };
    if (std::string why = invalid_frame_index(request.frame, num_frames()); !why.empty()) {
      return invalid(why);
    }
    if (request.out == nullptr) return invalid_request("the output pointer is null");
    const CropRect& crop = request.crop;
    if (crop.width < 0 || crop.height < 0) {
      return invalid_request("crop " + describe_crop(crop) + " has a negative size");
    }
    if (crop.empty()) continue;
    if (options.height == 0) {
      return invalid_request("crop " + describe_crop(crop) +
                             " needs an output size (options height and width)");
    }
    if (crop.x < 0 || crop.y < 0 || static_cast<int64_t>(crop.x) + crop.width > frame_width ||
        static_cast<int64_t>(crop.y) + crop.height > frame_height) {
      return invalid_request("crop " + describe_crop(crop) + " leaves the " +
                             std::to_string(frame_width) + "x" + std::to_string(frame_height) +
                             " frame");
    }
  }

  // Sort the requests by frame, keeping request order within a frame: each distinct frame is
  // decoded once and written to its requests in the order they were made.
  WantedFrames wanted;
  wanted.requests.resize(requests.size());
  std::iota(wanted.requests.begin(), wanted.requests.end(), 0);
  std::stable_sort(wanted.requests.begin(), wanted.requests.end(),
                   [&](int64_t a, int64_t b) { return requests[a].frame < requests[b].frame; });
  for (size_t i = 0; i < wanted.requests.size(); ++i) {
    const int64_t frame = requests[wanted.requests[i]].frame;
    if (wanted.frames.empty() || wanted.frames.back() != frame) {
      wanted.frames.push_back(frame);
      wanted.first.push_back(i);
    }
  }
  wanted.first.push_back(wanted.requests.size());
  wanted.produced.assign(wanted.frames.size(), 0);
  wanted.fed_in_pass.assign(wanted.frames.size(), -1);
  wanted.seeks.assign(wanted.frames.size(), 0);

  DecodeStats local_stats;
  DecodeStats& s = stats != nullptr ? *stats : local_stats;
  prefetch(wanted.frames);
  ThreadMediaCache& cache = ThreadMediaCache::current();
  Result<PacketStream*> container = cache.container(cache_key_, source_, name_, *table_, &s);
  if (!container.ok()) return container.status().with_context(context);
  Result<Decoder*> decoder = cache.decoder(*table_, threads_, &s);
  if (!decoder.ok()) return decoder.status().with_context(context);

  auto [height, width] = output_size(options);
  DecodePass pass(*table_, **container, **decoder, cache.converter(), options, height, width,
                  requests, wanted, s);
  Status decoded = pass.run();
  s.bytes_read += (*container)->take_bytes_read();
  if (!decoded.ok() && source_ == nullptr) {
    // A file replaced since it was indexed fails to decode: say so rather than "corrupt".
    Result<core::FileIdentity> now = core::stat_file(name_);
    if (!now.ok() || now->size != table_->file_size() ||
        (table_->file_mtime_ns() != 0 && now->mtime_ns != table_->file_mtime_ns())) {
      return Status(StatusCode::kCorruptData,
                    context +
                        ": the file changed since its frame table was made (rebuild the "
                        "index); decoding it failed with: " +
                        decoded.message());
    }
  }
  return decoded.with_context(context);
}

void VideoReader::prefetch(std::span<const int64_t> frames) const {
  if (source_ == nullptr || !source_->is_remote() || frames.empty()) return;
  std::vector<int64_t> sorted;
  for (int64_t frame : frames) {
    if (frame >= 0 && frame < num_frames()) sorted.push_back(frame);
  }
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  const std::vector<ByteRange> ranges = table_->byte_ranges(sorted, 0);
  if (!ranges.empty()) source_->prefetch(ranges);
}

Result<int64_t> VideoReader::frame_at(double seconds, std::optional<double> tolerance) const {
  const std::string context = "video '" + name_ + "'";
  if (!std::isfinite(seconds)) {
    return Status(StatusCode::kInvalidArgument,
                  context + ": time " + std::to_string(seconds) + " s is not a finite number");
  }
  const int64_t frame = table_->nearest_frame(seconds);
  const double distance = std::abs(table_->pts_seconds(frame) - seconds);
  std::ostringstream why;
  if (tolerance.has_value()) {
    if (distance > *tolerance) {
      why << "no frame within " << *tolerance << " s of t=" << seconds << " s (nearest is "
          << describe_frame(*table_, frame) << ")";
    }
  } else {
    const double start = table_->pts_seconds(0);
    const double end = start + table_->duration();
    if (seconds < start || seconds > end) {
      why << "t=" << seconds << " s is outside the video, which spans [" << start << ", " << end
          << "] s";
    }
  }
  if (!why.str().empty()) return Status(StatusCode::kInvalidArgument, context + ": " + why.str());
  return frame;
}

Status VideoReader::get_frames_at(std::span<const double> seconds, std::optional<double> tolerance,
                                  const OutputOptions& options, std::span<uint8_t> out,
                                  DecodeStats* stats) const {
  std::vector<int64_t> indices(seconds.size());
  for (size_t k = 0; k < seconds.size(); ++k) {
    STOKER_ASSIGN_OR_RETURN(indices[k], frame_at(seconds[k], tolerance));
  }
  return get_frames(indices, options, out, stats);
}

Result<VerifyReport> VideoReader::verify() const {
  const std::string context = "video '" + name_ + "'";
  DecodeStats stats;
  ThreadMediaCache& cache = ThreadMediaCache::current();
  Result<PacketStream*> container = cache.container(cache_key_, source_, name_, *table_, &stats);
  if (!container.ok()) return container.status().with_context(context);
  Result<Decoder*> decoder = cache.decoder(*table_, threads_, &stats);
  if (!decoder.ok()) return decoder.status().with_context(context);
  VerifyReport report;
  VerifyPass pass(*table_, **container, **decoder, report);
  STOKER_RETURN_IF_ERROR(pass.run().with_context(context));
  return report;
}

}  // namespace stoker
