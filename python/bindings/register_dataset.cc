// Bindings for EpisodeIndex. The Python front (python/stoker/dataset_index.py) reads LeRobot
// metadata and Parquet with pyarrow and passes whole numpy columns here; build_episode_index
// copies them once into an EpisodeIndexSource and scans the videos with the GIL released.
// Lookups are vectorised (one call per array of rows); column() is a zero-copy, read-only view
// of the mapped file, kept alive by the Python index object that returned it.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "arrays.h"
#include "dataset/episode_placement.h"
#include "errors.h"
#include "index_handle.h"
#include "stoker/episode_index.h"
#include "stoker/video_reader.h"
#include "stoker/window_plan.h"

namespace nb = nanobind;

namespace stoker::python {
namespace {

using Doubles = nb::ndarray<const double, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using Int64Matrix = nb::ndarray<const int64_t, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
using DoubleMatrix = nb::ndarray<const double, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
using AnyArray = nb::ndarray<nb::c_contig, nb::device::cpu>;
using ReadOnlyArray = nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu>;

template <typename T, typename Array>
std::vector<T> to_vector(const Array& array) {
  return std::vector<T>(array.data(), array.data() + array.shape(0));
}

// Calls a Python progress callable from the building thread. Captures only a borrowed pointer
// (copying an nb::object would touch its reference count without the GIL); the first exception
// the callable raises is kept and re-raised once the build returns, later calls are skipped.
struct ProgressRelay {
  PyObject* callable = nullptr;
  std::optional<nb::python_error> error;  // GUARDED_BY(the GIL)

  void operator()(int64_t done, int64_t total) {
    nb::gil_scoped_acquire acquire;
    if (error.has_value()) return;
    try {
      nb::handle function(callable);
      function(done, total);
    } catch (nb::python_error& e) {
      error.emplace(std::move(e));
    }
  }
};

nb::dict build_episode_index(
    const std::string& path, double fps, Int64s episode_from_row, Int64s episode_length,
    Int64s episode_task, Doubles row_timestamp, std::vector<std::string> cameras,
    std::vector<std::string> video_files, Int64Matrix episode_video,
    DoubleMatrix episode_video_offset, std::vector<std::pair<std::string, AnyArray>> columns,
    std::vector<std::string> tracked_files, double tolerance_s, int threads,
    std::optional<nb::callable> progress,
    std::vector<std::tuple<std::string, Int64s, Int64s>> image_cameras, std::string image_file,
    bool keep_broken_episodes, std::vector<std::pair<std::string, ReadOnlyArray>> attached_arrays,
    std::vector<std::pair<std::string, std::vector<std::string>>> attached_strings) {
  const size_t num_episodes = episode_from_row.shape(0);
  const size_t num_rows = row_timestamp.shape(0);
  if (episode_length.shape(0) != num_episodes || episode_task.shape(0) != num_episodes) {
    throw nb::value_error("episode_from_row, episode_length and episode_task differ in length");
  }
  if (episode_video.shape(0) != cameras.size() || episode_video_offset.shape(0) != cameras.size()) {
    throw nb::value_error("episode_video and episode_video_offset need one row per camera");
  }
  if (episode_video.shape(1) != num_episodes || episode_video_offset.shape(1) != num_episodes) {
    throw nb::value_error("episode_video and episode_video_offset need one column per episode");
  }
  for (const auto& [name, offset, length] : image_cameras) {
    if (offset.shape(0) != num_rows || length.shape(0) != num_rows) {
      throw nb::value_error(
          ("image camera '" + name + "' needs an offset and a length per row").c_str());
    }
  }
  struct PendingColumn {
    std::string name;
    DType type;
    int64_t dim;
    const uint8_t* data;
    size_t bytes;
  };
  std::vector<PendingColumn> pending;
  for (const auto& [name, array] : columns) {
    const std::optional<DType> type = dtype_of(array.dtype());
    if (type != DType::kFloat32 && type != DType::kFloat64 && type != DType::kInt64) {
      throw nb::type_error(("column '" + name +
                            "': only float32, float64 and int64 columns can "
                            "be indexed")
                               .c_str());
    }
    if (array.ndim() < 1 || array.ndim() > 2 || array.shape(0) != num_rows) {
      throw nb::value_error(
          ("column '" + name +
           "' must have shape [rows] or [rows, dim] with rows = " + std::to_string(num_rows))
              .c_str());
    }
    const int64_t dim = array.ndim() == 2 ? static_cast<int64_t>(array.shape(1)) : 1;
    pending.push_back({name, *type, dim, static_cast<const uint8_t*>(array.data()),
                       array.size() * dtype_size(*type)});
  }

  std::vector<PendingColumn> attached;
  for (const auto& [name, array] : attached_arrays) {
    const std::optional<DType> type = dtype_of(array.dtype());
    if (type != DType::kInt32 && type != DType::kInt64 && type != DType::kFloat32 &&
        type != DType::kFloat64) {
      throw nb::type_error(
          ("attached array '" + name + "': only int32, int64, float32 and float64 arrays").c_str());
    }
    if (array.ndim() != 1) {
      throw nb::value_error(("attached array '" + name + "' must be one-dimensional").c_str());
    }
    attached.push_back({name, *type, 1, static_cast<const uint8_t*>(array.data()),
                        array.size() * dtype_size(*type)});
  }

  ProgressRelay relay;
  if (progress.has_value() && !progress->is_none()) relay.callable = progress->ptr();

  EpisodeIndexBuildReport report;
  Status status;
  {
    // The arrays stay alive (the arguments hold them) while the GIL is released.
    nb::gil_scoped_release release;
    EpisodeIndexSource source;
    source.fps = fps;
    source.episode_from_row = to_vector<int64_t>(episode_from_row);
    source.episode_length = to_vector<int64_t>(episode_length);
    source.episode_task = to_vector<int64_t>(episode_task);
    source.row_timestamp = to_vector<double>(row_timestamp);
    source.cameras = std::move(cameras);
    source.video_files = std::move(video_files);
    for (size_t c = 0; c < source.cameras.size(); ++c) {
      const int64_t* video = episode_video.data() + c * num_episodes;
      const double* offset = episode_video_offset.data() + c * num_episodes;
      source.episode_video.emplace_back(video, video + num_episodes);
      source.episode_video_offset.emplace_back(offset, offset + num_episodes);
    }
    for (const PendingColumn& column : pending) {
      source.columns.push_back(
          {.name = column.name,
           .type = column.type,
           .dim = column.dim,
           .data = std::vector<uint8_t>(column.data, column.data + column.bytes)});
    }
    for (const auto& [name, offset, length] : image_cameras) {
      source.image_cameras.push_back(name);
      source.image_offset.push_back(to_vector<int64_t>(offset));
      source.image_length.push_back(to_vector<int64_t>(length));
    }
    source.image_file = std::move(image_file);
    for (const PendingColumn& array : attached) {
      source.attached_arrays.push_back(
          {.name = array.name,
           .type = array.type,
           .data = std::vector<uint8_t>(array.data, array.data + array.bytes)});
    }
    for (auto& [name, values] : attached_strings) {
      source.attached_strings.push_back({.name = name, .values = std::move(values)});
    }
    source.tracked_files = std::move(tracked_files);
    source.tolerance_s = tolerance_s;

    EpisodeIndexBuildOptions options{.threads = threads,
                                     .keep_broken_episodes = keep_broken_episodes};
    if (relay.callable != nullptr) {
      options.progress = [&relay](int64_t done, int64_t total) { relay(done, total); };
    }
    status = EpisodeIndex::build(source, path, options, &report);
  }
  if (relay.error.has_value()) throw std::move(*relay.error);
  raise_if_error(status, Area::kDataset);
  nb::dict result;
  result["seconds"] = report.seconds;
  result["max_drift_s"] = owned_array(std::move(report.max_drift_s));
  return result;
}

// The placement of one camera's episodes in its files, as the index build places them, for a
// check that has the dataset's columns and the videos' readers (no index).
nb::dict place_episodes(double fps, Int64s episode_from_row, Int64s episode_length,
                        Doubles row_timestamp, Int64s episode_video, Doubles episode_video_offset,
                        std::vector<std::string> video_files,
                        const std::vector<const VideoReader*>& frame_tables, double tolerance_s,
                        const std::string& camera) {
  const size_t episodes = episode_from_row.shape(0);
  if (episode_video.shape(0) != episodes || episode_video_offset.shape(0) != episodes) {
    throw nb::value_error("episode_video and episode_video_offset need one value per episode");
  }
  if (frame_tables.size() != video_files.size()) {
    throw nb::value_error("frame_tables need one reader (or None) per video file");
  }
  EpisodeIndexSource source;
  source.fps = fps;
  source.episode_from_row = to_vector<int64_t>(episode_from_row);
  source.episode_length = to_vector<int64_t>(episode_length);
  source.row_timestamp = to_vector<double>(row_timestamp);
  source.cameras = {camera};
  source.episode_video = {to_vector<int64_t>(episode_video)};
  source.episode_video_offset = {to_vector<double>(episode_video_offset)};
  source.video_files = std::move(video_files);
  source.tolerance_s = tolerance_s;
  // The readers' tables are shared: they stay alive while the GIL is released.
  std::vector<std::shared_ptr<const FrameTable>> owned;
  std::vector<const FrameTable*> tables;
  for (const VideoReader* reader : frame_tables) {
    owned.push_back(reader != nullptr ? reader->shared_frame_table() : nullptr);
    tables.push_back(owned.back().get());
  }
  Result<EpisodePlacement> placed = [&] {
    nb::gil_scoped_release release;
    return stoker::place_episodes(source, 0, tables);
  }();
  EpisodePlacement placement = value_or_raise(std::move(placed), Area::kDataset);
  std::vector<std::tuple<int64_t, std::string, std::string, std::string>> problems;
  for (PlacementProblem& problem : placement.problems) {
    problems.emplace_back(problem.episode, camera, source.video_files[problem.video],
                          std::move(problem.why));
  }
  nb::dict result;
  result["first_frame"] = owned_array(std::move(placement.first_frame));
  result["drift"] = owned_array(std::move(placement.drift));
  result["snap"] = owned_array(std::move(placement.snap));
  result["order"] = owned_array(std::move(placement.order));
  result["problems"] = std::move(problems);
  return result;
}

IndexHandle open_index(const std::string& path) {
  Result<std::shared_ptr<const EpisodeIndex>> index = [&] {
    nb::gil_scoped_release release;
    return EpisodeIndex::open(path);
  }();
  raise_if_error(index.status().with_context("index '" + path + "'"), Area::kDataset);
  return IndexHandle{std::move(index).value()};
}

int64_t checked_camera(const EpisodeIndex& index, int64_t camera) {
  if (camera < 0 || camera >= index.num_cameras()) {
    throw nb::index_error(("camera " + std::to_string(camera) + " out of range [0, " +
                           std::to_string(index.num_cameras()) + ")")
                              .c_str());
  }
  return camera;
}

int64_t checked_row(const EpisodeIndex& index, int64_t row) {
  if (row < 0 || row >= index.num_rows()) {
    throw nb::index_error(("row " + std::to_string(row) + " out of range [0, " +
                           std::to_string(index.num_rows()) + ")")
                              .c_str());
  }
  return row;
}

// Applies `lookup` to every row with the GIL released; rows out of range raise IndexError.
template <typename Lookup>
nb::ndarray<nb::numpy, int64_t> map_rows(const EpisodeIndex& index, Int64s rows, Lookup lookup) {
  const size_t n = rows.shape(0);
  int64_t* out = new int64_t[n];
  nb::capsule owner(out, [](void* p) noexcept { delete[] static_cast<int64_t*>(p); });
  int64_t bad = -1;
  {
    nb::gil_scoped_release release;
    const int64_t* in = rows.data();
    const uint64_t limit = static_cast<uint64_t>(index.num_rows());
    for (size_t i = 0; i < n; ++i) {
      const int64_t row = in[i];
      if (static_cast<uint64_t>(row) >= limit) {
        bad = static_cast<int64_t>(i);
        break;
      }
      out[i] = lookup(row);
    }
  }
  if (bad >= 0) checked_row(index, rows.data()[bad]);
  return nb::ndarray<nb::numpy, int64_t>(out, {n}, owner);
}

template <typename T, typename Get>
nb::ndarray<nb::numpy, T> per_episode(const EpisodeIndex& index, Get get) {
  std::vector<T> values(static_cast<size_t>(index.num_episodes()));
  for (int64_t e = 0; e < index.num_episodes(); ++e) values[e] = get(e);
  return owned_array(std::move(values));
}

// A read-only view of `count` values of `type` at `data` in the mapping, kept alive by `self`.
nb::object mapped_view(nb::handle self, const void* data, size_t count, DType type) {
  const size_t shape[1] = {count};
  return nb::ndarray<nb::numpy, nb::ro>(data, 1, shape, self, nullptr, dlpack_dtype(type))
      .cast(nb::rv_policy::reference);
}

nb::object column_view(nb::handle self, const EpisodeIndex::ColumnView& column, int64_t rows) {
  const size_t shape[2] = {static_cast<size_t>(rows), static_cast<size_t>(column.dim)};
  // The view borrows the mapping; `self` (the Python index) owns the shared index that owns it.
  return nb::ndarray<nb::numpy, nb::ro>(static_cast<const void*>(column.data.data()), 2, shape,
                                        self, nullptr, dlpack_dtype(column.type))
      .cast(nb::rv_policy::reference);
}

}  // namespace

void register_dataset(nb::module_& m) {
  m.def(
      "build_episode_index", &build_episode_index, nb::arg("path"), nb::kw_only(), nb::arg("fps"),
      nb::arg("episode_from_row"), nb::arg("episode_length"), nb::arg("episode_task"),
      nb::arg("row_timestamp"), nb::arg("cameras"), nb::arg("video_files"),
      nb::arg("episode_video"), nb::arg("episode_video_offset"), nb::arg("columns"),
      nb::arg("tracked_files"), nb::arg("tolerance_s"), nb::arg("threads"),
      nb::arg("progress").none() = nb::none(),
      nb::arg("image_cameras") = std::vector<std::tuple<std::string, Int64s, Int64s>>(),
      nb::arg("image_file") = "", nb::arg("keep_broken_episodes") = false,
      nb::arg("attached_arrays") = std::vector<std::pair<std::string, ReadOnlyArray>>(),
      nb::arg("attached_strings") = std::vector<std::pair<std::string, std::vector<std::string>>>(),
      "Builds the episode index of a dataset from its columns and writes it to `path` "
      "(everything but the path by keyword; EpisodeIndexSource in stoker/episode_index.h says "
      "what each is).\n"
      "image_cameras: (name, offset, length) per image camera, each row's image in "
      "image_file.\n"
      "keep_broken_episodes: episodes a camera's video cannot serve are recorded in the "
      "index (EpisodeIndex.broken_episodes) instead of failing the build.\n"
      "attached_arrays, attached_strings: (name, 1-D int32/int64/float32/float64 array) and "
      "(name, list of str) kept in the index for its readers (attached_array, "
      "attached_strings).\n"
      "Returns {'seconds': float, 'max_drift_s': float64 array, one per video file}.");

  m.def("place_episodes", &place_episodes, nb::arg("fps"), nb::arg("episode_from_row"),
        nb::arg("episode_length"), nb::arg("row_timestamp"), nb::arg("episode_video"),
        nb::arg("episode_video_offset"), nb::arg("video_files"), nb::arg("frame_tables"),
        nb::arg("tolerance_s"), nb::arg("camera"),
        nb::sig("def place_episodes(fps: float, episode_from_row: Annotated[NDArray[numpy.int64], "
                "dict(shape=(None,), order='C', device='cpu', writable=False)], episode_length: "
                "Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu', "
                "writable=False)], row_timestamp: Annotated[NDArray[numpy.float64], "
                "dict(shape=(None,), order='C', device='cpu', writable=False)], episode_video: "
                "Annotated[NDArray[numpy.int64], dict(shape=(None,), order='C', device='cpu', "
                "writable=False)], episode_video_offset: Annotated[NDArray[numpy.float64], "
                "dict(shape=(None,), order='C', device='cpu', writable=False)], video_files: "
                "Sequence[str], frame_tables: Sequence[VideoReader | None], tolerance_s: float, "
                "camera: str) -> dict"),
        "Where each episode of one camera starts in its video file, exactly as the episode "
        "index build places it (dataset/episode_placement.h): per episode its file "
        "(episode_video, an index into video_files) and stated start in it "
        "(episode_video_offset); frame_tables: per file the VideoReader whose frame table it "
        "has, or None (its episodes are left unplaced).\n"
        "Returns {'first_frame': int64 [E] (-1 where unplaced), 'drift': float64 [E] (the first "
        "frame's pts minus the stated start; NaN where unplaced), 'snap': float64 [E] (the "
        "first frame's pts minus the time sought; 0 where the episodes tile their file), "
        "'order': int64 (the placed episodes, file by file, each file's in their order in it), "
        "'problems': [(episode, camera, file, why)] (what the index build records as broken)}.");

  nb::class_<IndexHandle>(m, "EpisodeIndex")
      .def_static("open", &open_index, nb::arg("path"))
      .def_prop_ro("num_rows", [](const IndexHandle& h) { return h.index->num_rows(); })
      .def_prop_ro("num_episodes", [](const IndexHandle& h) { return h.index->num_episodes(); })
      .def_prop_ro("fps", [](const IndexHandle& h) { return h.index->fps(); })
      .def_prop_ro("cameras", [](const IndexHandle& h) { return h.index->cameras(); })
      .def_prop_ro(
          "num_video_cameras", [](const IndexHandle& h) { return h.index->num_video_cameras(); },
          "The video cameras come first in `cameras`; the others are image cameras.")
      .def_prop_ro("image_file", [](const IndexHandle& h) { return h.index->image_file(); })
      .def_prop_ro(
          "broken_episodes",
          [](const IndexHandle& h) {
            std::vector<std::tuple<int64_t, int64_t, std::string>> broken;
            for (const BrokenEpisode& b : h.index->broken_episodes()) {
              broken.emplace_back(b.episode, b.camera, b.why);
            }
            return broken;
          },
          "(episode, camera, why) of each episode a camera's video could not serve when the "
          "index was built (with keep_broken_episodes); their rows must not be read.")
      .def(
          "image_bytes",
          [](const IndexHandle& h, int64_t camera, int64_t row) {
            const EpisodeIndex& index = *h.index;
            const int64_t c = checked_camera(index, camera);
            if (!index.is_image_camera(c)) {
              throw nb::value_error(
                  ("camera '" + index.cameras()[c] + "' is a video camera").c_str());
            }
            const std::span<const uint8_t> bytes = index.image_bytes(c, checked_row(index, row));
            return nb::bytes(reinterpret_cast<const char*>(bytes.data()), bytes.size());
          },
          nb::arg("camera"), nb::arg("row"),
          "A copy of the encoded image of an image camera at one row.")
      .def_prop_ro("video_files", [](const IndexHandle& h) { return h.index->video_files(); })
      .def_prop_ro("column_names",
                   [](const IndexHandle& h) {
                     std::vector<std::tuple<std::string, std::string, int64_t>> names;
                     for (const auto& column : h.index->columns()) {
                       names.emplace_back(column.name, dtype_name(column.type), column.dim);
                     }
                     return names;
                   })
      .def_prop_ro(
          "checksum", [](const IndexHandle& h) { return h.index->checksum(); },
          "CRC-32C of the index file's contents: tells one build of an index from another.")
      .def("stale_files",
           [](const IndexHandle& h) {
             nb::gil_scoped_release release;
             return h.index->stale_files();
           })
      .def(
          "episode_of_row",
          [](const IndexHandle& h, int64_t row) {
            return h.index->episode_of_row(checked_row(*h.index, row));
          },
          nb::arg("row"))
      .def(
          "frame_of_row",
          [](const IndexHandle& h, int64_t camera, int64_t row) {
            return h.index->frame_of_row(checked_camera(*h.index, camera),
                                         checked_row(*h.index, row));
          },
          nb::arg("camera"), nb::arg("row"))
      .def(
          "episode_of_rows",
          [](const IndexHandle& h, Int64s rows) {
            const EpisodeIndex& index = *h.index;
            return map_rows(index, rows, [&](int64_t row) { return index.episode_of_row(row); });
          },
          nb::arg("rows"))
      .def(
          "frames_of_rows",
          [](const IndexHandle& h, int64_t camera, Int64s rows) {
            const EpisodeIndex& index = *h.index;
            const int64_t c = checked_camera(index, camera);
            return map_rows(index, rows, [&](int64_t row) { return index.frame_of_row(c, row); });
          },
          nb::arg("camera"), nb::arg("rows"))
      .def("episode_table",
           [](const IndexHandle& h) {
             const EpisodeIndex& index = *h.index;
             return nb::make_tuple(
                 per_episode<int64_t>(index, [&](int64_t e) { return index.episode_from_row(e); }),
                 per_episode<int64_t>(index, [&](int64_t e) { return index.episode_length(e); }),
                 per_episode<int64_t>(index, [&](int64_t e) { return index.episode_task(e); }));
           })
      .def(
          "episode_views",
          [](nb::pointer_and_handle<IndexHandle> self) {
            const EpisodeIndex& index = *self.p->index;
            auto view = [&](std::span<const int64_t> values) {
              return mapped_view(self.h, values.data(), values.size(), DType::kInt64);
            };
            return nb::make_tuple(view(index.episode_from_rows()), view(index.episode_lengths()),
                                  view(index.episode_tasks()));
          },
          "(from_row, length, task) per episode, as episode_table() but read-only views of the "
          "mapped file (nothing copied); they keep the index alive.")
      .def(
          "attached_array",
          [](nb::pointer_and_handle<IndexHandle> self, const std::string& name) -> nb::object {
            const EpisodeIndex::AttachedArrayView* array = self.p->index->attached_array(name);
            if (array == nullptr) {
              throw nb::key_error(("the index has no attached array '" + name + "'").c_str());
            }
            return mapped_view(self.h, array->data.data(),
                               array->data.size() / dtype_size(array->type), array->type);
          },
          nb::arg("name"),
          "A read-only view of an array attached at build, in the mapped file; it keeps the "
          "index alive. KeyError when there is none of that name.")
      .def(
          "attached_strings",
          [](const IndexHandle& h, const std::string& name) {
            Result<std::vector<std::string>> strings = h.index->attached_strings(name);
            if (strings.status().code() == StatusCode::kNotFound) {
              throw nb::key_error(strings.status().message().c_str());
            }
            return value_or_raise(std::move(strings), Area::kDataset);
          },
          nb::arg("name"),
          "A list of strings attached at build. KeyError when there is none of that name.")
      .def(
          "videos_of",
          [](const IndexHandle& h, int64_t camera) {
            const EpisodeIndex& index = *h.index;
            const int64_t c = checked_camera(index, camera);
            return per_episode<int64_t>(index, [&](int64_t e) { return index.video_of(c, e); });
          },
          nb::arg("camera"))
      .def(
          "first_frames",
          [](const IndexHandle& h, int64_t camera) {
            const EpisodeIndex& index = *h.index;
            const int64_t c = checked_camera(index, camera);
            return per_episode<int64_t>(index, [&](int64_t e) { return index.first_frame(c, e); });
          },
          nb::arg("camera"))
      .def(
          "drifts",
          [](const IndexHandle& h, int64_t camera) {
            const EpisodeIndex& index = *h.index;
            const int64_t c = checked_camera(index, camera);
            return per_episode<double>(index, [&](int64_t e) { return index.drift(c, e); });
          },
          nb::arg("camera"))
      .def(
          "frame_table",
          [](const IndexHandle& h, int64_t video) {
            const EpisodeIndex& index = *h.index;
            const int64_t count = static_cast<int64_t>(index.video_files().size());
            if (video < 0 || video >= count) {
              throw nb::index_error(("video " + std::to_string(video) + " out of range [0, " +
                                     std::to_string(count) + ")")
                                        .c_str());
            }
            std::vector<uint8_t> bytes;
            Status status;
            {
              nb::gil_scoped_release release;
              Result<std::shared_ptr<const FrameTable>> table = index.frame_table(video);
              status = table.status();
              if (status.ok()) bytes = (*table)->serialize();
            }
            raise_if_error(status, Area::kDataset);
            return nb::bytes(reinterpret_cast<const char*>(bytes.data()), bytes.size());
          },
          nb::arg("video"))
      .def(
          "column",
          [](nb::pointer_and_handle<IndexHandle> self, const std::string& name) -> nb::object {
            const EpisodeIndex& index = *self.p->index;
            for (const EpisodeIndex::ColumnView& column : index.columns()) {
              if (column.name == name) return column_view(self.h, column, index.num_rows());
            }
            throw nb::key_error(("the index has no column '" + name + "'").c_str());
          },
          nb::arg("name"),
          "A read-only [rows, dim] view of a column in the mapped file; it keeps the index "
          "alive.");

  nb::class_<WindowKey>(m, "WindowKey")
      .def(
          "__init__",
          [](WindowKey* key, std::string name, std::string source, Int64s offsets,
             bool drop_time_axis) {
            new (key) WindowKey{.name = std::move(name),
                                .source = std::move(source),
                                .offsets = to_vector<int64_t>(offsets),
                                .drop_time_axis = drop_time_axis};
          },
          nb::arg("name"), nb::arg("source"), nb::arg("offsets"), nb::kw_only(),
          nb::arg("drop_time_axis") = false)
      .def_ro("name", &WindowKey::name)
      .def_ro("source", &WindowKey::source)
      .def_ro("offsets", &WindowKey::offsets)
      .def_ro("drop_time_axis", &WindowKey::drop_time_axis)
      .doc() =
      "One output key of a window: its name, the camera or column it reads, and its offsets in "
      "rows (empty: the sample's own row, without a time axis); drop_time_axis: one offset, "
      "output without its time axis (LeRobot's squeeze of a one-frame window).";

  nb::class_<WindowPlanner>(m, "WindowPlanner")
      .def(nb::new_([](const IndexHandle& index, std::vector<WindowKey> keys) {
             return value_or_raise(WindowPlanner::create(index.index, std::move(keys)),
                                   Area::kDataset);
           }),
           nb::arg("index"), nb::arg("keys"))
      .def(
          "plan",
          [](const WindowPlanner& planner, int64_t row) {
            WindowPlan plan;
            raise_if_error(planner.plan(row, &plan), Area::kDataset);
            nb::list reads;
            for (WindowPlan::Read& read : plan.reads) {
              nb::dict r;
              r["camera"] = read.camera;
              r["video_file"] = read.video_file;
              r["frames"] = owned_array(std::move(read.frames));
              reads.append(r);
            }
            nb::dict result;
            result["episode"] = plan.episode;
            result["rows"] = owned_array(std::move(plan.rows));
            result["pad"] = owned_array(std::move(plan.pad));
            result["key_begin"] = owned_array(std::move(plan.key_begin));
            result["key_read"] = owned_array(std::move(plan.key_read));
            result["key_read_begin"] = owned_array(std::move(plan.key_read_begin));
            result["reads"] = reads;
            return result;
          },
          nb::arg("row"),
          "Rows, pad masks and per-camera frames of sample `row` (see stoker/window_plan.h).")
      .def(
          "costs",
          [](const WindowPlanner& planner, Int64s rows) {
            std::vector<double> costs(rows.shape(0));
            Status status;
            {
              nb::gil_scoped_release release;
              for (size_t k = 0; k < costs.size() && status.ok(); ++k) {
                Result<double> cost = planner.cost(rows.data()[k]);
                status = cost.status();
                if (status.ok()) costs[k] = *cost;
              }
            }
            raise_if_error(status, Area::kDataset);
            return owned_array(std::move(costs));
          },
          nb::arg("rows"), "Estimated decode cost of each sample (see WindowPlanner::cost).");
}

}  // namespace stoker::python
