// Bindings for the media layer: VideoReader (over a file or bytes), how frames are written
// (Layout, Interpolation), the encoders' options, and copying a clip's packets (clip_cutter.h).
// Arrays cross zero-copy: frames are written straight into the numpy array the Python wrapper
// allocated (or the caller passed as out=).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "arrays.h"
#include "errors.h"
#include "stoker/byte_source.h"
#include "stoker/clip_cutter.h"
#include "stoker/remote_source.h"
#include "stoker/video_encoder.h"
#include "stoker/video_reader.h"

namespace nb = nanobind;

namespace stoker::python {
namespace {

using Frames = nb::ndarray<uint8_t, nb::c_contig, nb::device::cpu>;
using Indices = nb::ndarray<const int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using Seconds = nb::ndarray<const double, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

// The options of an open: the threads, and the saved frame table, when given.
VideoReaderOptions reader_options(const std::string& name, int threads,
                                  const std::optional<nb::bytes>& frame_table) {
  VideoReaderOptions options{.threads = threads};
  if (frame_table.has_value()) {
    auto table = FrameTable::deserialize(
        std::span(static_cast<const uint8_t*>(static_cast<const void*>(frame_table->c_str())),
                  frame_table->size()));
    raise_if_error(table.status().with_context("video '" + name + "'"), Area::kVideo);
    options.frame_table = std::move(table).value();
  }
  return options;
}

// VideoReader::verify() as a dict of numpy arrays and lists (the GIL released meanwhile).
nb::dict verify_video(const VideoReader& reader) {
  Result<VerifyReport> verified = [&] {
    nb::gil_scoped_release release;
    return reader.verify();
  }();
  VerifyReport report = value_or_raise(std::move(verified), Area::kVideo);
  nb::dict out;
  out["width"] = owned_array(std::move(report.width));
  out["height"] = owned_array(std::move(report.height));
  out["pixel_format"] = owned_array(std::move(report.pixel_format));
  out["corrupt"] = owned_array(std::move(report.corrupt));
  out["difference"] = owned_array(std::move(report.difference));
  nb::list refused;
  for (auto& [packet, why] : report.refused) refused.append(nb::make_tuple(packet, why));
  out["refused"] = refused;
  nb::list unmatched;
  for (auto [packet, frame] : report.unmatched) unmatched.append(nb::make_tuple(packet, frame));
  out["unmatched"] = unmatched;
  out["stopped"] = report.stopped;
  nb::dict names;
  for (auto& [code, name] : report.pixel_format_names) names[nb::int_(code)] = name;
  out["pixel_format_names"] = names;
  out["packets_decoded"] = report.packets_decoded;
  return out;
}

std::unique_ptr<VideoReader> open_reader(const std::string& path, int threads,
                                         std::optional<nb::bytes> frame_table) {
  VideoReaderOptions options = reader_options(path, threads, frame_table);
  Result<std::unique_ptr<VideoReader>> reader = [&] {
    nb::gil_scoped_release release;
    return VideoReader::open(path, std::move(options));
  }();
  return value_or_raise(std::move(reader), Area::kVideo);
}

// A reader over a copy of `data`: the copy belongs to the reader (and its containers), so no
// Python object is released from a decoding thread.
std::unique_ptr<VideoReader> open_bytes(const std::string& name, nb::bytes data, int threads,
                                        std::optional<nb::bytes> frame_table) {
  VideoReaderOptions options = reader_options(name, threads, frame_table);
  const auto* begin = static_cast<const uint8_t*>(static_cast<const void*>(data.c_str()));
  std::vector<uint8_t> bytes(begin, begin + data.size());
  Result<std::unique_ptr<VideoReader>> reader = [&] {
    nb::gil_scoped_release release;
    return VideoReader::open(memory_source(name, std::move(bytes)), std::move(options));
  }();
  return value_or_raise(std::move(reader), Area::kVideo);
}

// One video that clips are copied from (clip_cutter.h): its source opened and its frame table
// read once, for every clip cut from it. Immutable: its calls may run on any threads at once.
class ClipSource {
 public:
  ClipSource(std::shared_ptr<const ByteSource> source, std::shared_ptr<const FrameTable> table)
      : source_(std::move(source)), table_(std::move(table)) {}

  static std::unique_ptr<ClipSource> open(const std::string& path,
                                          std::optional<nb::bytes> frame_table) {
    std::optional<std::string> saved;
    if (frame_table.has_value()) saved.emplace(frame_table->c_str(), frame_table->size());
    Result<std::unique_ptr<ClipSource>> opened = [&]() -> Result<std::unique_ptr<ClipSource>> {
      nb::gil_scoped_release release;
      STOKER_ASSIGN_OR_RETURN(std::shared_ptr<const ByteSource> source, open_source(path));
      std::shared_ptr<const FrameTable> table;
      if (saved.has_value()) {
        auto read = FrameTable::deserialize(
            std::span(reinterpret_cast<const uint8_t*>(saved->data()), saved->size()));
        if (!read.ok()) return read.status().with_context("video '" + path + "'");
        table = std::move(read).value();
      } else {  // one scan, as VideoReader's
        STOKER_ASSIGN_OR_RETURN(std::unique_ptr<VideoReader> reader, VideoReader::open(source));
        table = reader->shared_frame_table();
      }
      return std::make_unique<ClipSource>(std::move(source), std::move(table));
    }();
    return value_or_raise(std::move(opened), Area::kVideo);
  }

  std::optional<std::string> refusal(int64_t first_frame, int64_t num_frames,
                                     const std::string& format) const {
    const Status status = check_clip_copy(*table_, first_frame, num_frames, format);
    if (status.ok()) return std::nullopt;
    return status.message();
  }

  nb::dict copy(int64_t first_frame, int64_t num_frames, const std::string& target,
                const std::string& format) const {
    Result<ClipCopyResult> result = [&] {
      nb::gil_scoped_release release;
      return copy_clip(source_, *table_, first_frame, num_frames, target,
                       ClipCopyOptions{.format = format});
    }();
    raise_if_error(result.status(), Area::kVideo);
    nb::dict out;
    out["frames"] = result->frames;
    out["bytes"] = result->bytes;
    out["first_packet"] = result->first_packet;
    return out;
  }

  const std::string& name() const { return source_->name(); }

 private:
  const std::shared_ptr<const ByteSource> source_;
  const std::shared_ptr<const FrameTable> table_;
};

}  // namespace

void register_media(nb::module_& m) {
  nb::enum_<Layout>(m, "Layout")
      .value("NHWC", Layout::kNHWC, "[N, H, W, 3] interleaved RGB")
      .value("NCHW", Layout::kNCHW, "[N, 3, H, W] planar RGB");
  nb::enum_<PixelFormat>(m, "PixelFormat")
      .value("rgb24", PixelFormat::kRGB24, "8-bit RGB, 3 bytes a pixel")
      .value("gray16", PixelFormat::kGray16,
             "one native-endian uint16 a pixel: the stored samples (depth maps)");
  nb::enum_<Interpolation>(m, "Interpolation")
      .value("bilinear", Interpolation::kBilinear)
      .value("area", Interpolation::kArea);
  nb::enum_<VideoCodec>(m, "VideoCodec")
      .value("h264", VideoCodec::kH264, "libx264")
      .value("av1", VideoCodec::kAV1, "libsvtav1");

  nb::class_<EncoderOptions>(m, "EncoderOptions",
                             "How stoker encodes video (see stoker/video_encoder.h); the "
                             "defaults are the ETL's.")
      .def(nb::init<>())
      .def_rw("codec", &EncoderOptions::codec)
      .def_rw("gop", &EncoderOptions::gop)
      .def_rw("crf", &EncoderOptions::crf, "-1: 23 for H.264, 30 for AV1")
      .def_rw("preset", &EncoderOptions::preset, "'': medium for libx264, 8 for libsvtav1")
      .def_rw("fast_decode", &EncoderOptions::fast_decode)
      .def_rw("threads", &EncoderOptions::threads)
      .def("with_codec_defaults", &with_codec_defaults,
           "A copy with the codec's crf and preset in place of -1 and ''.")
      .def(
          "check",
          [](const EncoderOptions& options, int height, int width) {
            raise_if_error(check_encoder_options(options, height, width), Area::kVideo);
          },
          nb::arg("height"), nb::arg("width"),
          "Raises stoker.InvalidArgumentError unless these options can encode height x width "
          "pictures.");

  nb::class_<VideoReader>(m, "VideoReader")
      .def(nb::new_(&open_reader), nb::arg("path"), nb::arg("threads") = 1,
           nb::arg("frame_table") = nb::none())
      .def_static("from_bytes", &open_bytes, nb::arg("name"), nb::arg("data"),
                  nb::arg("threads") = 1, nb::arg("frame_table") = nb::none(),
                  "A reader over a copy of `data` (a video held in memory), called `name` in "
                  "messages.")
      .def_prop_ro("name", &VideoReader::name, "The path, or the name given to bytes.")
      .def(
          "source_bytes",
          [](const VideoReader& r) -> nb::object {
            // Bytes in memory only: a file or a remote object is reopened by its name.
            const std::shared_ptr<const ByteSource>& source = r.source();
            if (source == nullptr || source->is_remote()) return nb::none();
            std::string bytes(static_cast<size_t>(source->size()), '\0');
            Result<size_t> read = [&] {
              nb::gil_scoped_release release;
              return source->read_at(
                  0, std::span(reinterpret_cast<uint8_t*>(bytes.data()), bytes.size()));
            }();
            raise_if_error(read.status(), Area::kVideo);
            return nb::bytes(bytes.data(), *read);
          },
          "A copy of the bytes of a reader opened from bytes (for pickling); None for a file.")
      .def_prop_ro("codec", [](const VideoReader& r) { return r.frame_table().stream().codec; })
      .def_prop_ro("width", [](const VideoReader& r) { return r.frame_table().stream().width; })
      .def_prop_ro("height", [](const VideoReader& r) { return r.frame_table().stream().height; })
      .def_prop_ro("fps", [](const VideoReader& r) { return r.frame_table().fps(); })
      .def_prop_ro("num_frames", &VideoReader::num_frames)
      .def_prop_ro("duration", [](const VideoReader& r) { return r.frame_table().duration(); })
      .def("pts", [](const VideoReader& r) { return copied_array(r.frame_table().pts_seconds()); })
      .def("is_key", [](const VideoReader& r) { return copied_array(r.frame_table().is_key()); })
      .def(
          "packet_bytes",
          [](const VideoReader& r, std::optional<std::vector<int64_t>> frames) {
            // Every packet's (offset, size) in decode order, or the byte ranges a decode of
            // `frames` reads (FrameTable::byte_ranges); [] when packets are not addressable.
            const FrameTable& table = r.frame_table();
            std::vector<std::pair<int64_t, int64_t>> out;
            if (!table.stream().packets_addressable) return out;
            if (frames.has_value()) {
              std::vector<int64_t> sorted = *frames;
              for (int64_t f : sorted) {
                if (f < 0 || f >= table.num_frames()) {
                  throw nb::index_error(
                      ("frame " + std::to_string(f) + " is out of range").c_str());
                }
              }
              std::sort(sorted.begin(), sorted.end());
              sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
              for (const ByteRange& range : table.byte_ranges(sorted, 0)) {
                out.emplace_back(range.offset, range.length);
              }
            } else {
              for (const PacketEntry& p : table.packets()) out.emplace_back(p.pos, p.size);
            }
            return out;
          },
          nb::arg("frames") = nb::none())
      .def("frame_table",
           [](const VideoReader& r) {
             std::vector<uint8_t> bytes = r.frame_table().serialize();
             return nb::bytes(reinterpret_cast<const char*>(bytes.data()), bytes.size());
           })
      .def("frame_at",
           [](const VideoReader& r, double seconds, std::optional<double> tolerance) {
             Result<int64_t> frame = r.frame_at(seconds, tolerance);
             raise_if_error(frame.status(), Area::kVideo);
             return *frame;
           })
      .def(
          "get_frames",
          [](const VideoReader& r, Indices indices, Frames out, int height, int width,
             Layout layout, Interpolation interpolation, PixelFormat pixel_format) {
            Status status;
            {
              nb::gil_scoped_release release;
              status = r.get_frames(std::span(indices.data(), indices.shape(0)),
                                    OutputOptions{.height = height,
                                                  .width = width,
                                                  .layout = layout,
                                                  .interpolation = interpolation,
                                                  .pixel_format = pixel_format},
                                    std::span(out.data(), out.size()));
            }
            raise_if_error(status, Area::kVideo);
          },
          nb::arg("indices"), nb::arg("out"), nb::arg("height"), nb::arg("width"),
          nb::arg("layout"), nb::arg("interpolation"),
          nb::arg("pixel_format") = PixelFormat::kRGB24)
      .def(
          "get_frames_at",
          [](const VideoReader& r, Seconds seconds, std::optional<double> tolerance, Frames out,
             int height, int width, Layout layout, Interpolation interpolation,
             PixelFormat pixel_format) {
            Status status;
            {
              nb::gil_scoped_release release;
              status = r.get_frames_at(std::span(seconds.data(), seconds.shape(0)), tolerance,
                                       OutputOptions{.height = height,
                                                     .width = width,
                                                     .layout = layout,
                                                     .interpolation = interpolation,
                                                     .pixel_format = pixel_format},
                                       std::span(out.data(), out.size()));
            }
            raise_if_error(status, Area::kVideo);
          },
          nb::arg("seconds"), nb::arg("tolerance").none(), nb::arg("out"), nb::arg("height"),
          nb::arg("width"), nb::arg("layout"), nb::arg("interpolation"),
          nb::arg("pixel_format") = PixelFormat::kRGB24)
      .def("verify", &verify_video,
           "Decodes every packet from the first, converting none, and says per frame what "
           "came out (see stoker/video_reader.h VerifyReport): a dict of width, height, "
           "pixel_format (int32 arrays; 0, 0, -1 where no frame came out), corrupt (uint8), "
           "difference (float32: mean absolute luma difference from the previous frame, -1 "
           "where unknown), refused and unmatched ([(packet, why)], [(packet, frame)]), "
           "stopped (str), pixel_format_names ({code: name}) and packets_decoded.");

  nb::class_<ClipSource>(m, "ClipSource",
                         "A video that clips are copied from without re-encoding (see "
                         "stoker/clip_cutter.h): its source and frame table, read once. Its "
                         "methods may be called from several threads at once.")
      .def(nb::new_(&ClipSource::open), nb::arg("source"), nb::arg("frame_table").none(),
           "Opens `source` (a path or URL) with its saved `frame_table`, or None to scan it.")
      .def_prop_ro("name", &ClipSource::name)
      .def("refusal", &ClipSource::refusal, nb::arg("first_frame"), nb::arg("num_frames"),
           nb::arg("format") = "",
           "Why copy() would refuse frames [first_frame, first_frame + num_frames) (not a run "
           "of packets from a keyframe, a cut group of reordered frames, a codec `format` "
           "cannot store), or None when it copies them.")
      .def("copy", &ClipSource::copy, nb::arg("first_frame"), nb::arg("num_frames"),
           nb::arg("target"), nb::arg("format") = "",
           "Copies the packets of frames [first_frame, first_frame + num_frames) into a new "
           "file `target` (atomically, checked); `format` is FFmpeg's muxer name, '' for the "
           "source's container. Returns frames, bytes and first_packet. Raises "
           "stoker.InvalidArgumentError when the run cannot be copied (see refusal()).");
}

}  // namespace stoker::python
