// Bindings for the ETL's unit of work: transcode_frames on one episode of one camera. The
// Python front (python/stoker/etl.py) runs many of these on a thread pool; each call releases
// the GIL for all of its work (opening the source, decoding, encoding, checking the output).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <memory>
#include <optional>
#include <span>
#include <string>

#include "arrays.h"
#include "errors.h"
#include "stoker/transcode.h"
#include "stoker/video_reader.h"

namespace nb = nanobind;

namespace stoker::python {
namespace {

VideoCodec codec_of(const std::string& name) {
  if (name == "h264") return VideoCodec::kH264;
  if (name == "av1") return VideoCodec::kAV1;
  raise_if_error(Status(StatusCode::kInvalidArgument,
                        "codec must be \"h264\" or \"av1\", got \"" + name + "\""),
                 ErrorKind::kArgument);
  return VideoCodec::kH264;
}

nb::dict transcode(const std::string& source, std::optional<nb::bytes> frame_table,
                   int64_t first_frame, int64_t num_frames, const std::string& target, int height,
                   int width, const std::string& codec, int gop, int crf, const std::string& preset,
                   bool fast_decode, bool area, int threads, int chunk_frames) {
  TranscodeOptions options{.height = height,
                           .width = width,
                           .encoder = {.codec = codec_of(codec),
                                       .gop = gop,
                                       .crf = crf,
                                       .preset = preset,
                                       .fast_decode = fast_decode,
                                       .threads = threads},
                           .interpolation = area ? Interpolation::kArea : Interpolation::kBilinear,
                           .chunk_frames = chunk_frames};
  std::optional<std::string> table_bytes;
  if (frame_table.has_value()) table_bytes.emplace(frame_table->c_str(), frame_table->size());
  Result<TranscodeResult> result = [&]() -> Result<TranscodeResult> {
    nb::gil_scoped_release release;
    VideoReaderOptions reader_options;
    if (table_bytes.has_value()) {
      auto table = FrameTable::deserialize(
          std::span(reinterpret_cast<const uint8_t*>(table_bytes->data()), table_bytes->size()));
      if (!table.ok()) return table.status().with_context("video '" + source + "'");
      reader_options.frame_table = std::move(table).value();
    }
    STOKER_ASSIGN_OR_RETURN(std::unique_ptr<VideoReader> reader,
                            VideoReader::open(source, std::move(reader_options)));
    return transcode_frames(*reader, first_frame, num_frames, target, options);
  }();
  raise_if_error(result.status(), result.status().code() == StatusCode::kInvalidArgument
                                      ? ErrorKind::kArgument
                                      : ErrorKind::kDecode);
  nb::dict out;
  out["frames"] = result->frames;
  out["bytes"] = result->bytes;
  out["duration"] = result->duration;
  out["seconds"] = result->seconds;
  out["pts"] = owned_array(std::move(result->pts_seconds));
  return out;
}

}  // namespace

void register_etl(nb::module_& m) {
  m.def("transcode", &transcode, nb::arg("source"), nb::arg("frame_table").none(),
        nb::arg("first_frame"), nb::arg("num_frames"), nb::arg("target"), nb::arg("height"),
        nb::arg("width"), nb::arg("codec"), nb::arg("gop"), nb::arg("crf"), nb::arg("preset"),
        nb::arg("fast_decode"), nb::arg("area"), nb::arg("threads"), nb::arg("chunk_frames"),
        "Re-encodes frames [first_frame, first_frame + num_frames) of `source` into the MP4 "
        "`target` (atomically, checked), keeping their timestamps. Returns frames, bytes, "
        "duration, seconds and pts (float64 seconds from 0).");
}

}  // namespace stoker::python
