// Bindings for the ETL's unit of work: transcode_frames on one episode of one camera. The
// Python front (python/stoker/etl.py) runs many of these on a thread pool; each call releases
// the GIL for all of its work (opening the source, decoding, encoding, checking the output).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "arrays.h"
#include "errors.h"
#include "stoker/member_check.h"
#include "stoker/transcode.h"
#include "stoker/video_reader.h"

namespace nb = nanobind;

namespace stoker::python {
namespace {

nb::dict transcode(const std::string& source, std::optional<nb::bytes> frame_table,
                   int64_t first_frame, int64_t num_frames, const std::string& target,
                   const TranscodeOptions& options) {
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
  raise_if_error(result.status(), Area::kVideo);
  nb::dict out;
  out["frames"] = result->frames;
  out["bytes"] = result->bytes;
  out["duration"] = result->duration;
  out["seconds"] = result->seconds;
  out["pts"] = owned_array(std::move(result->pts_seconds));
  return out;
}

}  // namespace

// The members of one sample checked with the GIL released: the writer's threads check many
// samples at once.
std::vector<std::string> check_members(const std::vector<std::string>& fields,
                                       const std::vector<nb::bytes>& members) {
  if (fields.size() != members.size()) {
    raise_if_error(
        Status(StatusCode::kInvalidArgument, std::to_string(fields.size()) + " fields for " +
                                                 std::to_string(members.size()) + " members"),
        Area::kDataset);
  }
  std::vector<std::span<const uint8_t>> bytes;
  bytes.reserve(members.size());
  for (const nb::bytes& member : members) {
    bytes.emplace_back(reinterpret_cast<const uint8_t*>(member.c_str()), member.size());
  }
  std::vector<std::string> problems(members.size());
  nb::gil_scoped_release release;
  for (size_t i = 0; i < bytes.size(); ++i) {
    const Status status = check_member(fields[i], bytes[i]);
    if (!status.ok()) problems[i] = status.message();
  }
  return problems;
}

void register_etl(nb::module_& m) {
  nb::class_<TranscodeOptions>(m, "TranscodeOptions")
      .def(nb::init<>())
      .def_rw("height", &TranscodeOptions::height)
      .def_rw("width", &TranscodeOptions::width)
      .def_rw("encoder", &TranscodeOptions::encoder)
      .def_rw("interpolation", &TranscodeOptions::interpolation)
      .def_rw("chunk_frames", &TranscodeOptions::chunk_frames)
      .doc() = "One transcode: output size, encoder, resampling (see stoker/transcode.h).";

  m.def("check_members", &check_members, nb::arg("fields"), nb::arg("members"),
        "Per member, \"\" when the loader can read it as its field's kind (images decoded "
        "whole; json an object; txt, text UTF-8; npy an array; cls an integer; other fields "
        "unchecked), else what is wrong (stoker/member_check.h).");

  m.def("transcode", &transcode, nb::arg("source"), nb::arg("frame_table").none(),
        nb::arg("first_frame"), nb::arg("num_frames"), nb::arg("target"), nb::arg("options"),
        "Re-encodes frames [first_frame, first_frame + num_frames) of `source` into the MP4 "
        "`target` (atomically, checked), keeping their timestamps. Returns frames, bytes, "
        "duration, seconds and pts (float64 seconds from 0).");
}

}  // namespace stoker::python
