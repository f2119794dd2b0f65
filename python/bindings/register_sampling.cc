// Bindings for stoker::sampling. Samplers are immutable C++ objects; the Python wrappers
// (python/stoker/sampling.py) hold the mutable (epoch, position) and ask for ids in blocks,
// which come back as numpy arrays filled with the GIL released.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include "arrays.h"
#include "errors.h"
#include "stoker/sampling.h"
#include "stoker/shard_order.h"

namespace nb = nanobind;

namespace stoker::python {
namespace {

using namespace stoker::sampling;

using Doubles = nb::ndarray<const double, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using Int64s = nb::ndarray<const int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

// Every sampling error is bad input (kInvalidArgument): stoker.InvalidArgumentError.
template <typename T>
T value_or_raise(Result<T> result) {
  return python::value_or_raise(std::move(result), Area::kDataset);
}

nb::ndarray<nb::numpy, int64_t> fill(const Sampler& sampler, uint32_t epoch, int64_t start,
                                     int64_t count) {
  if (count < 0) throw nb::value_error("count must be non-negative");
  std::vector<int64_t> ids(static_cast<size_t>(count));
  Status status;
  {
    nb::gil_scoped_release release;
    status = sampler.fill(epoch, start, ids);
  }
  raise_if_error(status, Area::kDataset);
  return owned_array(std::move(ids));
}

// One of `epoch`'s arrays (`which`: its stream or its order) as a read-only view that keeps the
// epoch alive while numpy holds it: no copy, and the sampler's cache may drop the epoch.
nb::ndarray<nb::numpy, const int64_t> epoch_array(
    const ShardStreamSampler& sampler, uint32_t epoch,
    const std::vector<int64_t> ShardStreamSampler::EpochOrder::*which) {
  using Held = std::shared_ptr<const ShardStreamSampler::EpochOrder>;
  Held order;
  {
    nb::gil_scoped_release release;  // the first call computes the epoch
    order = sampler.epoch_order(epoch);
  }
  const std::vector<int64_t>& ids = (*order).*which;
  auto* held = new Held(std::move(order));
  nb::capsule owner(held, [](void* p) noexcept { delete static_cast<Held*>(p); });
  return nb::ndarray<nb::numpy, const int64_t>(ids.data(), {ids.size()}, owner);
}

// An elastic resume as Python passes it: (epoch, start), or None.
using ElasticPair = std::optional<std::pair<uint32_t, int64_t>>;
std::optional<ElasticStart> elastic_start(const ElasticPair& resume) {
  if (!resume) return std::nullopt;
  return ElasticStart{.epoch = resume->first, .start = resume->second};
}

// A shard stream's elastic resume as Python passes it: (epoch, world_size, [(rank, begin,
// end), ...]), or None.
using PieceTuple = std::tuple<int64_t, int64_t, int64_t>;
using StreamTuple = std::tuple<uint32_t, int64_t, std::vector<PieceTuple>>;
std::optional<ElasticStream> elastic_stream(const std::optional<StreamTuple>& resume) {
  if (!resume) return std::nullopt;
  ElasticStream stream{.epoch = std::get<0>(*resume), .world_size = std::get<1>(*resume)};
  for (const auto& [rank, begin, end] : std::get<2>(*resume)) {
    stream.pieces.push_back({.rank = rank, .begin = begin, .end = end});
  }
  return stream;
}

nb::dict imbalance_dict(const Imbalance& imbalance) {
  nb::dict d;
  d["mean"] = imbalance.mean;
  d["worst"] = imbalance.worst;
  d["total"] = imbalance.total;
  return d;
}

}  // namespace

void register_sampling(nb::module_& m) {
  nb::class_<Sampler>(m, "Sampler")
      .def_prop_ro("size", &Sampler::size)
      .def("epoch_size", &Sampler::epoch_size, nb::arg("epoch"),
           nb::call_guard<nb::gil_scoped_release>())
      .def("at", &Sampler::at, nb::arg("epoch"), nb::arg("position"),
           nb::call_guard<nb::gil_scoped_release>())
      .def("fill", &fill, nb::arg("epoch"), nb::arg("start"), nb::arg("count"))
      .def(
          "elastic_remainder",
          [](const Sampler& sampler, uint32_t epoch, int64_t delivered) {
            const ElasticStart rest = value_or_raise(sampler.elastic_remainder(epoch, delivered));
            return std::make_pair(rest.epoch, rest.start);
          },
          nb::arg("epoch"), nb::arg("delivered"),
          "(epoch, start): the elastic resume that goes on with `epoch` on any world size once "
          "every rank of this run delivered its first `delivered` positions of it.");

  nb::class_<DistributedSampler, Sampler>(m, "DistributedSampler")
      .def(
          nb::new_([](int64_t n, bool shuffle, uint64_t seed, int64_t rank, int64_t world_size,
                      bool drop_last, ElasticPair resume) {
            return value_or_raise(DistributedSampler::create(n, {.shuffle = shuffle,
                                                                 .seed = seed,
                                                                 .rank = rank,
                                                                 .world_size = world_size,
                                                                 .drop_last = drop_last,
                                                                 .resume = elastic_start(resume)}));
          }),
          nb::arg("n"), nb::kw_only(), nb::arg("shuffle") = true, nb::arg("seed") = 0,
          nb::arg("rank") = 0, nb::arg("world_size") = 1, nb::arg("drop_last") = false,
          nb::arg("resume").none() = nb::none(),
          "Samples 0 .. n - 1 per epoch, this rank's share (stoker/sampling.h, "
          "DistributedOptions: the keywords' defaults are its).");

  nb::class_<MappedSampler, Sampler>(m, "MappedSampler")
      .def(nb::new_([](std::shared_ptr<const Sampler> inner, Int64s ids) {
             return value_or_raise(
                 MappedSampler::create(std::move(inner), std::span(ids.data(), ids.shape(0))));
           }),
           nb::arg("inner"), nb::arg("ids"));

  nb::class_<WeightedSampler, Sampler>(m, "WeightedSampler")
      .def(nb::new_([](Doubles weights, std::optional<int64_t> num_samples, uint64_t seed,
                       int64_t rank, int64_t world_size, bool drop_last, ElasticPair resume) {
             Result<std::unique_ptr<WeightedSampler>> sampler = [&] {
               nb::gil_scoped_release release;
               return WeightedSampler::create(std::span(weights.data(), weights.shape(0)),
                                              {.num_samples = num_samples,
                                               .seed = seed,
                                               .rank = rank,
                                               .world_size = world_size,
                                               .drop_last = drop_last,
                                               .resume = elastic_start(resume)});
             }();
             return value_or_raise(std::move(sampler));
           }),
           nb::arg("weights"), nb::kw_only(), nb::arg("num_samples").none() = nb::none(),
           nb::arg("seed") = 0, nb::arg("rank") = 0, nb::arg("world_size") = 1,
           nb::arg("drop_last") = false, nb::arg("resume").none() = nb::none());

  nb::class_<MixSampler, Sampler>(m, "MixSampler")
      .def(nb::new_([](Doubles weights, Int64s sizes, std::optional<int64_t> num_samples,
                       uint64_t seed, int64_t rank, int64_t world_size, bool drop_last,
                       ElasticPair resume) {
             Result<std::unique_ptr<MixSampler>> sampler = [&] {
               nb::gil_scoped_release release;
               return MixSampler::create(std::span(weights.data(), weights.shape(0)),
                                         std::span(sizes.data(), sizes.shape(0)),
                                         {.num_samples = num_samples,
                                          .seed = seed,
                                          .rank = rank,
                                          .world_size = world_size,
                                          .drop_last = drop_last,
                                          .resume = elastic_start(resume)});
             }();
             return value_or_raise(std::move(sampler));
           }),
           nb::arg("weights"), nb::arg("sizes"), nb::kw_only(),
           nb::arg("num_samples").none() = nb::none(), nb::arg("seed") = 0, nb::arg("rank") = 0,
           nb::arg("world_size") = 1, nb::arg("drop_last") = false,
           nb::arg("resume").none() = nb::none(),
           "Draws over datasets laid end to end: a dataset by weight, then one of its samples.");

  nb::class_<LoadBalancedSampler, Sampler>(m, "LoadBalancedSampler")
      .def(nb::new_([](Doubles costs, int64_t batch_size, bool shuffle, uint64_t seed, int64_t rank,
                       int64_t world_size, bool drop_last, ElasticPair resume) {
             Result<std::unique_ptr<LoadBalancedSampler>> sampler = [&] {
               nb::gil_scoped_release release;
               return LoadBalancedSampler::create(std::span(costs.data(), costs.shape(0)),
                                                  {.batch_size = batch_size,
                                                   .shuffle = shuffle,
                                                   .seed = seed,
                                                   .rank = rank,
                                                   .world_size = world_size,
                                                   .drop_last = drop_last,
                                                   .resume = elastic_start(resume)});
             }();
             return value_or_raise(std::move(sampler));
           }),
           nb::arg("costs"), nb::kw_only(), nb::arg("batch_size") = 1, nb::arg("shuffle") = true,
           nb::arg("seed") = 0, nb::arg("rank") = 0, nb::arg("world_size") = 1,
           nb::arg("drop_last") = false, nb::arg("resume").none() = nb::none())
      .def(
          "report",
          [](const LoadBalancedSampler& sampler, uint32_t epoch) {
            BalanceReport report;
            {
              nb::gil_scoped_release release;
              report = sampler.report(epoch);
            }
            nb::dict d;
            d["steps"] = report.steps;
            d["before"] = imbalance_dict(report.before);
            d["after"] = imbalance_dict(report.after);
            return d;
          },
          nb::arg("epoch"));

  nb::class_<ShardStreamSampler, Sampler>(m, "ShardStreamSampler")
      .def(nb::new_([](Int64s shard_samples, Int64s shard_bytes, bool shuffle, uint64_t seed,
                       int64_t shuffle_buffer, int64_t rank, int64_t world_size, bool equal_batches,
                       bool drop_last, int64_t batch_size, std::optional<StreamTuple> resume) {
             Result<std::unique_ptr<ShardStreamSampler>> sampler = [&] {
               nb::gil_scoped_release release;
               return ShardStreamSampler::create(
                   std::span(shard_samples.data(), shard_samples.shape(0)),
                   std::span(shard_bytes.data(), shard_bytes.shape(0)),
                   {.shuffle = shuffle,
                    .seed = seed,
                    .shuffle_buffer = shuffle_buffer,
                    .rank = rank,
                    .world_size = world_size,
                    .equal_batches = equal_batches,
                    .drop_last = drop_last,
                    .batch_size = batch_size,
                    .resume = elastic_stream(resume)});
             }();
             return value_or_raise(std::move(sampler));
           }),
           nb::arg("counts"), nb::arg("shard_bytes"), nb::kw_only(), nb::arg("shuffle") = true,
           nb::arg("seed") = 0, nb::arg("shuffle_buffer") = 8192, nb::arg("rank") = 0,
           nb::arg("world_size") = 1, nb::arg("equal_batches") = false,
           nb::arg("drop_last") = false, nb::arg("batch_size") = 1,
           nb::arg("resume").none() = nb::none(),
           "A shard dataset's order for one rank (see stoker/shard_order.h); `resume`: an "
           "elastic resume, (epoch, world_size, [(rank, begin, end), ...]).")
      .def(
          "remainder",
          [](const ShardStreamSampler& sampler, uint32_t epoch,
             const std::vector<int64_t>& delivered) {
            ElasticStream rest = value_or_raise(sampler.remainder(epoch, delivered));
            std::vector<PieceTuple> pieces;
            for (const StreamPiece& p : rest.pieces) pieces.emplace_back(p.rank, p.begin, p.end);
            return StreamTuple(rest.epoch, rest.world_size, std::move(pieces));
          },
          nb::arg("epoch"), nb::arg("delivered"),
          "What the run's ranks had not delivered of `epoch` after delivered[r] positions each, "
          "as an elastic resume (epoch, world_size, pieces).")
      .def(
          "epoch_stream",
          [](const ShardStreamSampler& sampler, uint32_t epoch) {
            return epoch_array(sampler, epoch, &ShardStreamSampler::EpochOrder::stream);
          },
          nb::arg("epoch"),
          "This rank's ids of `epoch` in reading order, before the shuffle buffer (read-only).")
      .def(
          "epoch_order",
          [](const ShardStreamSampler& sampler, uint32_t epoch) {
            return epoch_array(sampler, epoch, &ShardStreamSampler::EpochOrder::order);
          },
          nb::arg("epoch"),
          "The ids of `epoch`'s positions: the buffer's output, cut (read-only).");

  m.def(
      "expand_group_weights",
      [](Doubles weights, Int64s sizes, bool per_sample) {
        Result<std::vector<double>> expanded = [&] {
          nb::gil_scoped_release release;
          return expand_group_weights(std::span(weights.data(), weights.shape(0)),
                                      std::span(sizes.data(), sizes.shape(0)),
                                      per_sample ? GroupWeight::kPerSample : GroupWeight::kTotal);
        }();
        return owned_array(value_or_raise(std::move(expanded)));
      },
      nb::arg("weights"), nb::arg("sizes"), nb::arg("per_sample"));

  m.def(
      "deal_shards",
      [](Int64s shard_bytes, bool shuffle, uint64_t seed, uint32_t epoch, int64_t world_size) {
        Result<std::vector<std::vector<int64_t>>> ranks = [&] {
          nb::gil_scoped_release release;
          return deal_shards(std::span(shard_bytes.data(), shard_bytes.shape(0)), shuffle, seed,
                             epoch, world_size);
        }();
        nb::list out;
        for (auto& shards : value_or_raise(std::move(ranks)))
          out.append(owned_array(std::move(shards)));
        return out;
      },
      nb::arg("shard_bytes"), nb::arg("shuffle"), nb::arg("seed"), nb::arg("epoch"),
      nb::arg("world_size"),
      "Each rank's shards in `epoch`, dealt by bytes (see stoker/shard_order.h).");

  m.def(
      "shuffle_buffer_order",
      [](Int64s stream, int64_t buffer_size, uint64_t seed, uint32_t epoch, int64_t rank) {
        std::vector<int64_t> order;
        {
          nb::gil_scoped_release release;
          order = shuffle_buffer_order(std::span(stream.data(), stream.shape(0)), buffer_size, seed,
                                       epoch, rank);
        }
        return owned_array(std::move(order));
      },
      nb::arg("stream"), nb::arg("buffer_size"), nb::arg("seed"), nb::arg("epoch"), nb::arg("rank"),
      "What a bounded shuffle buffer emits for `stream`.");

  m.def(
      "shuffle_buffer_state",
      [](Int64s stream, int64_t buffer_size, uint64_t seed, uint32_t epoch, int64_t rank,
         int64_t emitted) {
        Result<ShuffleBufferState> state = [&] {
          nb::gil_scoped_release release;
          return shuffle_buffer_state(std::span(stream.data(), stream.shape(0)), buffer_size, seed,
                                      epoch, rank, emitted);
        }();
        ShuffleBufferState value = value_or_raise(std::move(state));
        return nb::make_tuple(value.consumed, owned_array(std::move(value.buffer)));
      },
      nb::arg("stream"), nb::arg("buffer_size"), nb::arg("seed"), nb::arg("epoch"), nb::arg("rank"),
      nb::arg("emitted"),
      "(ids taken in, the buffer's ids) after `emitted` ids of shuffle_buffer_order().");
}

}  // namespace stoker::python
