// Bindings for stoker::Loader. A batch goes to Python as arrays that point into the batch's
// buffer (numpy arrays, or torch tensors through DLPack): nothing is copied, and the buffer
// returns to the loader's pool when the last of them is released. The consumer waits for a
// batch with the GIL released.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/array.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <array>
#include <optional>

#include "arrays.h"
#include "errors.h"
#include "index_handle.h"
#include "stoker/loader.h"

namespace nb = nanobind;

namespace stoker::python {
namespace {

using Int64s = nb::ndarray<const int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using Doubles = nb::ndarray<const double, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

template <typename Framework>
nb::object field_array(const Batch& batch, size_t f, nb::handle owner) {
  const BatchField& field = batch.fields()[f];
  std::vector<size_t> shape(field.shape.begin(), field.shape.end());
  shape[0] = static_cast<size_t>(batch.size());
  nb::ndarray<Framework> array(batch.data(f), shape.size(), shape.data(), owner, nullptr,
                               dlpack_dtype(field.type));
  return nb::cast(array, nb::rv_policy::reference);
}

// One batch as (fields, samples, episodes, epoch, index); the arrays keep the batch alive.
nb::tuple batch_to_python(std::shared_ptr<const Batch> batch, bool torch) {
  auto* held = new std::shared_ptr<const Batch>(batch);
  nb::capsule owner(held,
                    [](void* p) noexcept { delete static_cast<std::shared_ptr<const Batch>*>(p); });
  nb::dict fields;
  for (size_t f = 0; f < batch->fields().size(); ++f) {
    fields[batch->fields()[f].name.c_str()] = torch ? field_array<nb::pytorch>(*batch, f, owner)
                                                    : field_array<nb::numpy>(*batch, f, owner);
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
  d["ready_batches"] = s.ready_batches;
  d["mean_ready_batches"] = s.mean_ready_batches;
  d["decode"] = decode_stats_dict(s.decode);
  d["decode_calls"] = s.decode_calls;
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

CropMode crop_mode(const std::string& name) {
  if (name == "none") return CropMode::kNone;
  if (name == "center") return CropMode::kCenter;
  if (name == "random_resized") return CropMode::kRandomResized;
  throw nb::value_error(("unknown crop mode '" + name + "'").c_str());
}

DType image_dtype(const std::string& name) {
  if (name == "uint8") return DType::kUint8;
  if (name == "float16") return DType::kFloat16;
  if (name == "bfloat16") return DType::kBFloat16;
  if (name == "float32") return DType::kFloat32;
  throw nb::value_error(("unknown image dtype '" + name + "'").c_str());
}

std::unique_ptr<Loader> make_loader(
    const IndexHandle& index, const std::vector<std::string>& names,
    const std::vector<std::string>& sources, std::vector<Int64s> offsets, int64_t batch_size,
    bool shuffle, uint64_t seed, int64_t rank, int64_t world_size, bool drop_last, int threads,
    int prefetch, const std::string& on_error, int max_replacements,
    std::optional<std::pair<int, int>> resize, const std::string& crop,
    std::pair<int, int> crop_size, std::pair<double, double> scale, std::pair<double, double> ratio,
    double hflip, std::optional<std::array<float, 3>> mean, std::optional<std::array<float, 3>> std,
    const std::string& dtype, const std::string& layout, const std::string& interpolation,
    bool pinned_memory, std::optional<Doubles> costs) {
  if (names.size() != sources.size() || names.size() != offsets.size()) {
    throw nb::value_error("names, sources and offsets differ in length");
  }
  std::vector<WindowKey> keys;
  for (size_t k = 0; k < names.size(); ++k) {
    keys.push_back({.name = names[k],
                    .source = sources[k],
                    .offsets = std::vector<int64_t>(offsets[k].data(),
                                                    offsets[k].data() + offsets[k].shape(0))});
  }
  if (on_error != "raise" && on_error != "skip") {
    throw nb::value_error("on_error must be 'raise' or 'skip'");
  }
  if (layout != "NCHW" && layout != "NHWC") throw nb::value_error("layout must be NCHW or NHWC");
  if (interpolation != "bilinear" && interpolation != "area") {
    throw nb::value_error("interpolation must be 'bilinear' or 'area'");
  }
  TransformOptions t{
      .crop = crop_mode(crop),
      .crop_height = crop_size.first,
      .crop_width = crop_size.second,
      .scale_min = scale.first,
      .scale_max = scale.second,
      .ratio_min = ratio.first,
      .ratio_max = ratio.second,
      .hflip_probability = hflip,
      .dtype = image_dtype(dtype),
      .layout = layout == "NCHW" ? Layout::kNCHW : Layout::kNHWC,
      .interpolation = interpolation == "area" ? Interpolation::kArea : Interpolation::kBilinear};
  if (resize) std::tie(t.resize_height, t.resize_width) = *resize;
  if (mean.has_value() != std.has_value()) throw nb::value_error("give both mean and std");
  if (mean) {
    t.normalize = true;
    t.mean = *mean;
    t.std = *std;
  }
  auto transform = value_or_raise(ImageTransform::create(t), ErrorKind::kArgument);
  // With per-sample costs, ranks get equal decode work per step (LoadBalancedSampler); else
  // DistributedSampler's split.
  std::shared_ptr<const sampling::Sampler> sampler;
  if (costs.has_value()) {
    if (static_cast<int64_t>(costs->shape(0)) != index.index->num_rows()) {
      throw nb::value_error("costs needs one value per sample");
    }
    sampler =
        value_or_raise(sampling::LoadBalancedSampler::create(
                           std::span(costs->data(), costs->shape(0)), {.batch_size = batch_size,
                                                                       .shuffle = shuffle,
                                                                       .seed = seed,
                                                                       .rank = rank,
                                                                       .world_size = world_size,
                                                                       .drop_last = drop_last}),
                       ErrorKind::kArgument);
  } else {
    sampler = value_or_raise(
        sampling::DistributedSampler::create(index.index->num_rows(), {.shuffle = shuffle,
                                                                       .seed = seed,
                                                                       .rank = rank,
                                                                       .world_size = world_size,
                                                                       .drop_last = drop_last}),
        ErrorKind::kArgument);
  }
  LoaderOptions options{.batch_size = batch_size,
                        .threads = threads,
                        .prefetch = prefetch,
                        .drop_last = drop_last,
                        .seed = seed,
                        .on_error = on_error == "skip" ? ErrorPolicy::kSkip : ErrorPolicy::kRaise,
                        .max_replacements = max_replacements,
                        .pinned_memory = pinned_memory};
  Result<std::unique_ptr<Loader>> loader = [&] {
    nb::gil_scoped_release release;  // reads the cameras' first frame tables
    return Loader::create(index.index, std::move(keys),
                          std::shared_ptr<const sampling::Sampler>(std::move(sampler)),
                          std::move(transform), options);
  }();
  const StatusCode code = loader.status().code();
  raise_if_error(loader.status(),
                 code == StatusCode::kInvalidArgument || code == StatusCode::kUnsupported
                     ? ErrorKind::kArgument
                     : ErrorKind::kDataset);
  return std::move(loader).value();
}

}  // namespace

void register_pipeline(nb::module_& m) {
  nb::class_<Loader>(m, "Loader")
      .def(nb::new_(&make_loader), nb::arg("index"), nb::arg("names"), nb::arg("sources"),
           nb::arg("offsets"), nb::kw_only(), nb::arg("batch_size"), nb::arg("shuffle"),
           nb::arg("seed"), nb::arg("rank"), nb::arg("world_size"), nb::arg("drop_last"),
           nb::arg("threads"), nb::arg("prefetch"), nb::arg("on_error"),
           nb::arg("max_replacements"), nb::arg("resize").none(), nb::arg("crop"),
           nb::arg("crop_size"), nb::arg("scale"), nb::arg("ratio"), nb::arg("hflip"),
           nb::arg("mean").none(), nb::arg("std").none(), nb::arg("dtype"), nb::arg("layout"),
           nb::arg("interpolation"), nb::arg("pinned_memory"), nb::arg("costs").none())
      .def_prop_ro("batches_per_epoch", &Loader::batches_per_epoch)
      .def_prop_ro("pipeline_depth", &Loader::pipeline_depth)
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
            raise_if_error(status, ErrorKind::kArgument);
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
            raise_if_error(batch.status(), ErrorKind::kDataset);
            if (*batch == nullptr) return nb::none();
            return batch_to_python(std::move(batch).value(), torch);
          },
          nb::arg("torch"),
          "The next batch as (arrays, samples, episodes, epoch, index), or None at the end.")
      .def("stop", &Loader::stop, nb::call_guard<nb::gil_scoped_release>())
      .def("stats", [](const Loader& loader) { return stats_dict(loader.stats()); })
      .def("reset_stats", &Loader::reset_stats);
}

}  // namespace stoker::python
