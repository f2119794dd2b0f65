// VideoReader: frame-exact random access to one video: a local file, or any ByteSource (bytes
// in memory, ...), read with the same code.
//
// A request for frames (any order, repeats allowed) is served with the least decoding the GOP
// and reference structure allow: the requested frames are sorted, the decoder seeks to the
// keyframe before the first one and decodes forward, never seeking again while the next frame
// is reachable inside the same GOP; frames not asked for are never colour-converted, and those
// that no later frame references are not decoded at all. Each asked frame is converted to RGB
// (and resized) straight into the caller's memory, or, for depth maps (PixelFormat::kGray16),
// copied as its stored 16-bit samples.
//
// The frame returned for index i is byte-identical to frame i of a full sequential decode with
// the same conversion.
//
// Containers and decoders are pooled per calling thread (see media_cache.h), so a call on a
// warm file opens nothing and builds nothing. A reader of a local file holds no descriptor
// itself: each thread's container opens the file when it first needs it, so a dataset of many
// files keeps at most the pool's number open per thread.
//
// Ownership: open() returns a reader the caller owns; it shares its FrameTable, and the source
// it was given, if any.
// Thread-safety: a VideoReader is immutable; get_frames() and get_frames_at() may run
// concurrently from several threads, each on its own pooled container and decoder.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "stoker/byte_source.h"
#include "stoker/frame_table.h"
#include "stoker/status.h"

namespace stoker {

enum class Layout { kNHWC, kNCHW };
enum class Interpolation { kBilinear, kArea };

/// What one output pixel holds.
enum class PixelFormat {
  /// 8-bit R, G, B (3 bytes a pixel), converted from the stream's colour space.
  kRGB24,
  /// One uint16 in native byte order (2 bytes a pixel): the stream's first component (gray, or
  /// the luma of YUV) exactly as stored, not rescaled: a gray12le sample v comes out as v, in
  /// [0, 4095]. For depth maps (gray10le, gray12le, gray16le; 8-bit gray is widened). Resizing
  /// takes the nearest source pixel, so no value is invented (the `interpolation` option does
  /// not apply); `layout` does not either (one channel). Streams of RGB or palette formats, or
  /// of more than 16 bits a sample, are refused (kUnsupported).
  kGray16,
};

/// Bytes of one output pixel in `format`.
constexpr size_t pixel_bytes(PixelFormat format) { return format == PixelFormat::kGray16 ? 2 : 3; }

/// How decoded frames are written to the caller's buffer.
struct OutputOptions {
  /// Output height and width. Default 0 x 0: the video's own size. Both or neither must be set.
  int height = 0;
  int width = 0;
  /// kNHWC: [N, H, W, 3] interleaved RGB. kNCHW: [N, 3, H, W] planar RGB. Default: kNHWC.
  Layout layout = Layout::kNHWC;
  /// Resampling when resizing (kRGB24). Default: bilinear.
  Interpolation interpolation = Interpolation::kBilinear;
  /// Default: kRGB24.
  PixelFormat pixel_format = PixelFormat::kRGB24;
};

/// A region of a source frame, in pixels. Empty (width or height 0): the whole frame.
struct CropRect {
  int x = 0;
  int y = 0;
  int width = 0;
  int height = 0;
  bool empty() const { return width <= 0 || height <= 0; }
  bool operator==(const CropRect&) const = default;
};

/// One frame to write: which frame, which region of it, and where. The caller owns `out`, which
/// must hold frame_bytes(options) bytes.
struct FrameRequest {
  int64_t frame = 0;
  CropRect crop;
  uint8_t* out = nullptr;
};

struct VideoReaderOptions {
  /// Decoder threads for one call. Default 1: parallelism comes from decoding many videos at once.
  int threads = 1;
  /// A table saved from an earlier open of these bytes (FrameTable::serialize). When given,
  /// open() neither scans them nor probes their streams; it fails if their size differs.
  std::shared_ptr<const FrameTable> frame_table;
};

/// What one call did, for tests and benchmarks that check the work is minimal.
struct DecodeStats {
  int64_t containers_opened = 0;  // 0 on a warm file
  int64_t decoders_built = 0;     // 0 when a pooled decoder was reused
  int64_t seeks = 0;
  int64_t packets_read = 0;       // packets demuxed, including those dropped before a keyframe
  int64_t packets_decoded = 0;    // packets sent to the decoder
  int64_t packets_skippable = 0;  // of those, sent with the non-reference skip switched on
  int64_t frames_received = 0;    // frames the decoder returned
  int64_t frames_converted = 0;   // conversions: one per distinct (frame, crop) asked for
  int64_t bytes_read = 0;         // bytes read from the video's source (headers included)
  /// Time in seeking (flush, demuxer seek, packets read up to the keyframe) and in colour
  /// conversion and copies to the output; the rest of a call is demuxing and decoding.
  int64_t seek_ns = 0;
  int64_t convert_ns = 0;

  /// Adds every counter of `other` to this one's: the work of several calls.
  DecodeStats& operator+=(const DecodeStats& other);
};

/// What decoding a whole video, every frame in one forward pass, found (VideoReader::verify()).
/// Per-frame vectors have one entry per frame of the frame table, in presentation order.
struct VerifyReport {
  /// Per frame: the decoded picture's width, height and pixel format (FFmpeg's AVPixelFormat
  /// value); 0, 0 and -1 for a frame the decoder did not produce.
  std::vector<int32_t> width;
  std::vector<int32_t> height;
  std::vector<int32_t> pixel_format;
  /// Per frame: 1 when the decoder flagged the picture (decode errors, concealment, corrupt).
  std::vector<uint8_t> corrupt;
  /// Per frame: the mean absolute difference of its first plane (luma; samples wider than 8
  /// bits by their top 8 bits) from the previous frame's, in 8-bit levels; -1 for the first
  /// frame, a frame not produced, or one whose predecessor was not, or differs in size, and for
  /// float or hardware pixel formats. Near 0: the same picture twice (a duplicated frame, or a
  /// still scene).
  std::vector<float> difference;
  /// Packets (decode order) the decoder refused, with FFmpeg's reason.
  std::vector<std::pair<int64_t, std::string>> refused;
  /// Packets (decode order) whose bytes no longer match the frame table: their CRC-32C differs
  /// from the stored one (tables with stream().pts_from_decoding, which store one per packet)
  /// or their timestamp is not the table's. With the frame each would show, -1 for none.
  std::vector<std::pair<int64_t, int64_t>> unmatched;
  /// Why the pass stopped before the end of the file (a read error), or empty.
  std::string stopped;
  /// The name of each pixel format met, by AVPixelFormat value (the stream's first).
  std::vector<std::pair<int32_t, std::string>> pixel_format_names;
  int64_t packets_decoded = 0;
};

class VideoReader {
 public:
  /// Opens the local file at `path` (MP4, MKV, WebM, MOV, ...) and builds its frame table by
  /// one demux scan, or takes options.frame_table. A URL (s3://, http(s)://) opens the shared
  /// remote source of open_source() (stoker/remote_source.h) and reads it as open(source) does.
  /// Errors name the file: missing, not a video, no video stream, unknown codec, unreadable
  /// (kNotFound, kCorruptData, kUnsupported, kIoError); a saved table of another version of the
  /// file (kCorruptData, "stale").
  static Result<std::unique_ptr<VideoReader>> open(const std::string& path,
                                                   VideoReaderOptions options = {});
  /// The same over `source`, which the reader shares for its lifetime (and its containers for
  /// theirs). Messages name the video by source->name().
  static Result<std::unique_ptr<VideoReader>> open(std::shared_ptr<const ByteSource> source,
                                                   VideoReaderOptions options = {});
  ~VideoReader();
  VideoReader(const VideoReader&) = delete;
  VideoReader& operator=(const VideoReader&) = delete;

  /// The path, or the source's name.
  const std::string& name() const { return name_; }
  /// The source given to open(); null for a reader of a local file.
  const std::shared_ptr<const ByteSource>& source() const { return source_; }
  const FrameTable& frame_table() const { return *table_; }
  std::shared_ptr<const FrameTable> shared_frame_table() const { return table_; }
  int64_t num_frames() const { return table_->num_frames(); }

  /// Output (height, width) for `options`: the resize target or the video's own size.
  std::pair<int, int> output_size(const OutputOptions& options) const;
  /// Bytes one frame takes in the output for `options`.
  size_t frame_bytes(const OutputOptions& options) const;

  /// Writes frame indices[k] to out[k * frame_bytes(options)], for every k. Each distinct frame
  /// is decoded once. REQUIRES: out.size() == indices.size() * frame_bytes(options).
  /// Errors (the output is then unspecified): an empty or out-of-range index list, or a frame
  /// the file cannot produce (truncated, corrupt); the message names the file and the frame.
  Status get_frames(std::span<const int64_t> indices, const OutputOptions& options,
                    std::span<uint8_t> out, DecodeStats* stats = nullptr) const;

  /// Writes each request's frame (its crop, resized to the output size of `options`) to its
  /// `out`. Each distinct frame is decoded once, in one pass over the file, however many
  /// requests name it; each distinct (frame, crop) is converted once and copied to its other
  /// requests. A crop's origin is rounded down to the chroma grid (even pixels for 4:2:0),
  /// keeping its size. Errors: as get_frames() above, plus a crop that leaves the frame, a crop
  /// without an output size in `options`, or a null `out`.
  Status get_frames(std::span<const FrameRequest> requests, const OutputOptions& options,
                    DecodeStats* stats = nullptr) const;

  /// Starts fetching the bytes that get_frames() of `frames` (any order; out-of-range ones are
  /// ignored) will read, when the reader's source is remote and its packets are addressable:
  /// one request per run of nearby packets, in the background, so that the decode that follows
  /// finds them fetched. get_frames() does it itself; a caller that knows its next reads (the
  /// Loader, a whole batch ahead) calls it earlier, to overlap their fetch with other decoding.
  /// Does nothing for local files and bytes in memory.
  void prefetch(std::span<const int64_t> frames) const;

  /// The frame shown at each time (seconds, on the same clock as FrameTable::pts_seconds): the
  /// nearest pts. Fails when that pts is farther than `tolerance` seconds away, or, without a
  /// tolerance, when the time lies outside the video's span.
  Result<int64_t> frame_at(double seconds, std::optional<double> tolerance) const;

  /// get_frames() on frame_at() of each time.
  Status get_frames_at(std::span<const double> seconds, std::optional<double> tolerance,
                       const OutputOptions& options, std::span<uint8_t> out,
                       DecodeStats* stats = nullptr) const;

  /// Decodes every packet from the first, in file order, without converting any frame, and
  /// says frame by frame what came out (see VerifyReport): what `stoker check --deep` reads.
  /// Damage is reported, not returned as an error; errors are only for a video that cannot
  /// be opened at all (as get_frames()).
  Result<VerifyReport> verify() const;

 private:
  VideoReader(std::string name, std::shared_ptr<const ByteSource> source,
              std::shared_ptr<const FrameTable> table, int threads);

  std::string name_;
  // The source given to open(); null for a local file, which containers open by name_.
  std::shared_ptr<const ByteSource> source_;
  // What the per-thread container pool files these bytes under: the file's path and version,
  // or this reader's own source.
  std::string cache_key_;
  std::shared_ptr<const FrameTable> table_;
  int threads_;
};

}  // namespace stoker
