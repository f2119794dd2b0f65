// Bindings for stoker::Loader. A batch goes to Python as arrays that point into the batch's
// buffer (numpy arrays, or torch tensors through DLPack): nothing is copied, and the buffer
// returns to the loader's pool when the last of them is released. The consumer waits for a
// batch with the GIL released.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "arrays.h"
#include "errors.h"
#include "index_handle.h"
#include "pipeline/batch_source.h"
#include "stoker/episode_source.h"
#include "stoker/loader.h"
#include "stoker/mix_source.h"
#include "stoker/shard_source.h"

namespace nb = nanobind;

namespace stoker::python {
namespace {

template <typename Framework>
nb::object field_array(const Batch& batch, size_t f, nb::handle owner) {
  const BatchField& field = batch.fields()[f];
  std::vector<size_t> shape(field.shape.begin(), field.shape.end());
  shape[0] = static_cast<size_t>(batch.size());
  nb::ndarray<Framework> array(batch.data(f), shape.size(), shape.data(), owner, nullptr,
                               dlpack_dtype(field.type));
  return nb::cast(array, nb::rv_policy::reference);
}

template <typename Framework>
nb::object column_array(const BatchColumn& column, nb::handle owner) {
  std::vector<size_t> shape(column.shape.begin(), column.shape.end());
  nb::ndarray<Framework> array(const_cast<uint8_t*>(column.bytes.data()), shape.size(),
                               shape.data(), owner, nullptr, dlpack_dtype(column.type));
  return nb::cast(array, nb::rv_policy::reference);
}

// A strings column as a list of str, made in one pass over its arena.
nb::list column_strings(const BatchColumn& column) {
  nb::list strings;
  const char* arena = reinterpret_cast<const char*>(column.bytes.data());
  for (size_t k = 0; k + 1 < column.offsets.size(); ++k) {
    strings.append(nb::steal(PyUnicode_DecodeUTF8(
        arena + column.offsets[k], column.offsets[k + 1] - column.offsets[k], "surrogatepass")));
  }
  return strings;
}

// One batch as (fields, samples, episodes, epoch, index): the buffer's arrays, then the
// columns (strings as lists); the arrays keep the batch alive.
nb::tuple batch_to_python(std::shared_ptr<const Batch> batch, bool torch) {
  auto* held = new std::shared_ptr<const Batch>(batch);
  nb::capsule owner(held,
                    [](void* p) noexcept { delete static_cast<std::shared_ptr<const Batch>*>(p); });
  nb::dict fields;
  for (size_t f = 0; f < batch->fields().size(); ++f) {
    fields[batch->fields()[f].name.c_str()] = torch ? field_array<nb::pytorch>(*batch, f, owner)
                                                    : field_array<nb::numpy>(*batch, f, owner);
  }
  for (const BatchColumn& column : batch->columns()) {
    fields[column.name.c_str()] = column.strings ? column_strings(column)
                                  : torch        ? column_array<nb::pytorch>(column, owner)
                                                 : column_array<nb::numpy>(column, owner);
  }
  return nb::make_tuple(fields, copied_array<int64_t>(batch->samples()),
                        copied_array<int64_t>(batch->episodes()), batch->epoch(), batch->index());
}

nb::dict decode_stats_dict(const DecodeStats& s) {
  nb::dict d;
  d["containers_opened"] = s.containers_opened;
  d["decoders_built"] = s.decoders_built;
  d["seeks"] = s.seeks;
  d["packets_read"] = s.packets_read;
  d["packets_decoded"] = s.packets_decoded;
  d["packets_skippable"] = s.packets_skippable;
  d["frames_received"] = s.frames_received;
  d["frames_converted"] = s.frames_converted;
  d["bytes_read"] = s.bytes_read;
  d["seek_seconds"] = s.seek_ns * 1e-9;
  d["convert_seconds"] = s.convert_ns * 1e-9;
  return d;
}

nb::dict stats_dict(const LoaderStats& s) {
  nb::dict d;
  d["batches"] = s.batches;
  d["samples"] = s.samples;
  nb::dict stages;
  stages["sampling"] = s.sampling_s;
  stages["index"] = s.index_s;
  stages["decode"] = s.decode_s;
  stages["transform"] = s.transform_s;
  stages["collate"] = s.collate_s;
  d["stage_seconds"] = stages;
  d["data_wait"] = owned_array(std::vector<double>(s.data_wait_s));
  d["data_wait_total"] = s.data_wait_total_s;
  d["ready_batches"] = s.ready_batches;
  d["mean_ready_batches"] = s.mean_ready_batches;
  d["decode"] = decode_stats_dict(s.decode);
  d["decode_calls"] = s.decode_calls;
  d["bytes_read"] = s.bytes_read;
  d["skipped"] = s.skipped;
  nb::list skips;
  for (const SkipRecord& r : s.skips) {
    nb::dict skip;
    skip["epoch"] = r.epoch;
    skip["batch"] = r.batch;
    skip["sample"] = r.sample;
    skip["replacement"] = r.replacement;
    skip["reason"] = r.reason;
    skips.append(skip);
  }
  d["skips"] = skips;
  d["batch_bytes"] = s.batch_bytes;
  d["pool_batches"] = s.pool_batches;
  d["buffers_allocated"] = s.buffers_allocated;
  d["threads"] = s.threads;
  d["pinned_memory"] = s.pinned_memory;
  return d;
}

// A Loader of the source `make` makes, with the GIL released (a source reads the cameras'
// first frame tables, or shards' indexes).
template <typename MakeSource>
std::unique_ptr<Loader> loader_of(MakeSource&& make, const LoaderOptions& options) {
  Result<std::unique_ptr<Loader>> loader = [&]() -> Result<std::unique_ptr<Loader>> {
    nb::gil_scoped_release release;
    STOKER_ASSIGN_OR_RETURN(std::unique_ptr<pipeline::BatchSource> source, make());
    return Loader::create(std::move(source), options);
  }();
  return value_or_raise(std::move(loader), Area::kDataset);
}

std::unique_ptr<Loader> make_loader(const IndexHandle& index, std::vector<WindowKey> keys,
                                    std::shared_ptr<const sampling::Sampler> sampler,
                                    const TransformOptions& transform_options,
                                    const LoaderOptions& options,
                                    std::vector<int64_t> replacement_rows,
                                    std::vector<DepthCamera> depth_cameras, RowKeys row_keys) {
  auto transform = value_or_raise(ImageTransform::create(transform_options), Area::kDataset);
  return loader_of(
      [&] {
        return make_episode_source(index.index, std::move(keys), std::move(sampler),
                                   std::move(transform), options,
                                   EpisodeOptions{.replacement_rows = std::move(replacement_rows),
                                                  .depth_cameras = std::move(depth_cameras),
                                                  .row_keys = std::move(row_keys)});
      },
      options);
}

std::unique_ptr<Loader> make_shard_loader(std::shared_ptr<ShardSamples> samples,
                                          std::vector<ShardField> fields,
                                          std::shared_ptr<const sampling::Sampler> sampler,
                                          const LoaderOptions& options) {
  return loader_of(
      [&] {
        return make_shard_source(std::move(samples), std::move(fields), std::move(sampler),
                                 options);
      },
      options);
}

MixPart episode_part(const IndexHandle& index, std::vector<WindowKey> keys,
                     const TransformOptions& transform_options, const LoaderOptions& options,
                     std::vector<DepthCamera> depth_cameras, std::vector<int64_t> rows,
                     std::vector<std::string> front_keys, std::string name, RowKeys row_keys) {
  auto transform = value_or_raise(ImageTransform::create(transform_options), Area::kDataset);
  Result<MixPart> part = [&] {
    nb::gil_scoped_release release;  // reads the cameras' first frame tables
    return make_episode_part(index.index, std::move(keys), std::move(transform), options,
                             EpisodeOptions{.replacement_rows = std::move(rows),
                                            .depth_cameras = std::move(depth_cameras),
                                            .row_keys = std::move(row_keys)});
  }();
  MixPart made = value_or_raise(std::move(part), Area::kDataset);
  made.front_keys = std::move(front_keys);
  made.name = std::move(name);
  return made;
}

MixPart shard_part(std::shared_ptr<ShardSamples> samples, std::vector<ShardField> fields,
                   const LoaderOptions& options, std::vector<std::string> front_keys,
                   std::string name) {
  Result<MixPart> part = [&] {
    nb::gil_scoped_release release;
    return make_shard_part(std::move(samples), std::move(fields), options);
  }();
  MixPart made = value_or_raise(std::move(part), Area::kDataset);
  made.front_keys = std::move(front_keys);
  made.name = std::move(name);
  return made;
}

std::unique_ptr<Loader> make_mix_loader(std::vector<MixPart*> parts,
                                        std::shared_ptr<const sampling::Sampler> sampler,
                                        const LoaderOptions& options) {
  std::vector<MixPart> taken;
  for (MixPart* part : parts) {
    if (part->source == nullptr) {
      raise_if_error(Status(StatusCode::kInvalidArgument,
                            "mix: a MixPart makes one loader: make the parts again"),
                     Area::kDataset);
    }
    taken.push_back(std::move(*part));
  }
  return loader_of([&] { return make_mix_source(std::move(taken), std::move(sampler), options); },
                   options);
}

}  // namespace

void register_pipeline(nb::module_& m) {
  nb::enum_<ErrorPolicy>(m, "ErrorPolicy")
      .value("raise_error", ErrorPolicy::kRaise)  // "raise" is a Python keyword
      .value("skip", ErrorPolicy::kSkip);

  nb::class_<LoaderOptions>(m, "LoaderOptions")
      .def(nb::init<>())
      .def_rw("batch_size", &LoaderOptions::batch_size)
      .def_rw("threads", &LoaderOptions::threads, "0: usable_cores()")
      .def_rw("prefetch", &LoaderOptions::prefetch)
      .def_rw("drop_last", &LoaderOptions::drop_last)
      .def_rw("seed", &LoaderOptions::seed)
      .def_rw("on_error", &LoaderOptions::on_error)
      .def_rw("max_replacements", &LoaderOptions::max_replacements)
      .def_rw("max_wait_records", &LoaderOptions::max_wait_records)
      .def_rw("pinned_memory", &LoaderOptions::pinned_memory)
      .doc() = "How a Loader batches (see stoker/loader.h); the defaults are C++'s.";

  nb::class_<RowKeys>(m, "RowKeys")
      .def(
          "__init__",
          [](RowKeys* keys, bool index, bool episode_index, bool frame_index, bool task_index,
             bool task, std::vector<int64_t> episode_numbers, std::vector<std::string> tasks) {
            new (keys) RowKeys{.index = index,
                               .episode_index = episode_index,
                               .frame_index = frame_index,
                               .task_index = task_index,
                               .task = task,
                               .episode_numbers = std::move(episode_numbers),
                               .tasks = std::move(tasks)};
          },
          nb::kw_only(), nb::arg("index") = false, nb::arg("episode_index") = false,
          nb::arg("frame_index") = false, nb::arg("task_index") = false, nb::arg("task") = false,
          nb::arg("episode_numbers") = std::vector<int64_t>(),
          nb::arg("tasks") = std::vector<std::string>())
      .def_ro("index", &RowKeys::index)
      .def_ro("episode_index", &RowKeys::episode_index)
      .def_ro("frame_index", &RowKeys::frame_index)
      .def_ro("task_index", &RowKeys::task_index)
      .def_ro("task", &RowKeys::task)
      .doc() =
      "What batches say of each sample's row beside the window's keys (stoker/episode_source.h): "
      "int64 [batch] fields, `task` a column of strings.";

  nb::enum_<ShardFieldKind>(m, "ShardFieldKind")
      .value("image", ShardFieldKind::kImage)
      .value("clip", ShardFieldKind::kClip)
      .value("text", ShardFieldKind::kText)
      .value("label", ShardFieldKind::kLabel)
      .value("tokens", ShardFieldKind::kTokens)
      .value("array", ShardFieldKind::kArray)
      .value("json", ShardFieldKind::kJson);

  nb::class_<ShardField>(m, "ShardField")
      .def(nb::init<>())
      .def_rw("name", &ShardField::name)
      .def_rw("kind", &ShardField::kind)
      .def_rw("alternatives", &ShardField::alternatives)
      .def_rw("transform", &ShardField::transform)
      .def_rw("height", &ShardField::height)
      .def_rw("width", &ShardField::width)
      .def_rw("frames", &ShardField::frames)
      .def_rw("layout", &ShardField::layout)
      .def_rw("pad", &ShardField::pad)
      .def_rw("max_length", &ShardField::max_length)
      .def_rw("json_keys", &ShardField::json_keys)
      .doc() =
      "One field of a shard dataset's spec, as the native loader reads it "
      "(stoker/shard_source.h).";

  nb::class_<MixPart>(m, "MixPart",
                      "One dataset of a mix, as its source (stoker/mix_source.h); one loader "
                      "takes it.")
      .def_static("for_episodes", &episode_part, nb::arg("index"), nb::arg("keys"),
                  nb::arg("transform"), nb::arg("options"), nb::arg("depth_cameras"),
                  nb::arg("rows"), nb::arg("front_keys"), nb::arg("name"), nb::kw_only(),
                  nb::arg("row_keys") = RowKeys())
      .def_static("for_shards", &shard_part, nb::arg("samples"), nb::arg("fields"),
                  nb::arg("options"), nb::arg("front_keys"), nb::arg("name"));

  nb::class_<Loader>(m, "Loader")
      .def(nb::new_(&make_loader), nb::arg("index"), nb::arg("keys"), nb::arg("sampler"),
           nb::arg("transform"), nb::arg("options"), nb::kw_only(),
           nb::arg("replacement_rows") = std::vector<int64_t>(),
           nb::arg("depth_cameras") = std::vector<DepthCamera>(), nb::arg("row_keys") = RowKeys(),
           "Batches of `keys` over the rows `sampler` gives (this rank's), on native threads; "
           "a failed sample replaced from `replacement_rows` (empty: every row) under skip; "
           "`depth_cameras` decoded as depth (stoker/episode_source.h).")
      .def_static("for_shards", &make_shard_loader, nb::arg("samples"), nb::arg("fields"),
                  nb::arg("sampler"), nb::arg("options"),
                  "Batches of a shard dataset's `fields` over the samples `sampler` gives.")
      .def_static("for_mix", &make_mix_loader, nb::arg("parts"), nb::arg("sampler"),
                  nb::arg("options"),
                  "Batches of several datasets as one, `sampler` giving ids over all their "
                  "samples laid end to end (a MixSampler).")
      .def_prop_ro("batches_per_epoch", &Loader::batches_per_epoch)
      .def("batches_in_epoch", &Loader::batches_in_epoch, nb::arg("epoch"))
      .def_prop_ro("pipeline_depth", &Loader::pipeline_depth)
      .def_prop_ro("column_names", &Loader::column_names)
      .def_prop_ro(
          "fields",
          [](const Loader& loader) {
            nb::list fields;
            for (const BatchField& f : loader.fields()) {
              fields.append(nb::make_tuple(f.name, dtype_name(f.type), f.shape));
            }
            return fields;
          },
          "[(name, dtype, shape)] of every batch array; shape[0] is the batch size.")
      .def(
          "start",
          [](Loader& loader, uint32_t epoch, int64_t batch, int64_t epochs) {
            Status status;
            {
              nb::gil_scoped_release release;
              status = loader.start(epoch, batch, epochs);
            }
            raise_if_error(status, Area::kDataset);
          },
          nb::arg("epoch"), nb::arg("batch"), nb::arg("epochs") = 1,
          "Starts a run at (epoch, batch) for `epochs` epochs (0: until stop()).")
      .def_prop_ro("position", &Loader::position, "(epoch, batch) that next() delivers next.")
      .def_prop_ro("running", &Loader::running)
      .def(
          "next",
          [](Loader& loader, bool torch) -> nb::object {
            Result<std::shared_ptr<const Batch>> batch = [&] {
              nb::gil_scoped_release release;
              return loader.next();
            }();
            raise_if_error(batch.status(), Area::kDataset);
            if (*batch == nullptr) return nb::none();
            return batch_to_python(std::move(batch).value(), torch);
          },
          nb::arg("torch"),
          "The next batch as (arrays, samples, episodes, epoch, index), or None at the end.")
      .def(
          "read",
          [](Loader& loader, const Int64s& samples, uint32_t epoch, bool torch) -> nb::object {
            Result<std::shared_ptr<const Batch>> batch = [&] {
              nb::gil_scoped_release release;
              return loader.read(std::span<const int64_t>(samples.data(), samples.shape(0)), epoch);
            }();
            raise_if_error(batch.status(), Area::kDataset);
            return batch_to_python(std::move(batch).value(), torch);
          },
          nb::arg("samples"), nb::arg("epoch"), nb::arg("torch"),
          "A batch of `samples` built now on this thread, as (arrays, samples, episodes, epoch, "
          "index); runs are untouched.")
      .def("stop", &Loader::stop, nb::call_guard<nb::gil_scoped_release>())
      .def("stats", [](const Loader& loader) { return stats_dict(loader.stats()); })
      .def("reset_stats", &Loader::reset_stats);
}

}  // namespace stoker::python
