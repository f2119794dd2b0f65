// Bindings for ShardIndex (the index of a tar shard: its members as numpy columns, their bytes
// read with every member's tar header checked) and ShardSamples (the samples of many shards,
// grouped natively, their per-sample arrays as read-only numpy views of the table), both
// opened with the GIL released.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "arrays.h"
#include "core/file.h"
#include "dataset/shard_members.h"
#include "errors.h"
#include "shard_handle.h"
#include "stoker/remote_source.h"
#include "stoker/shard_index.h"
#include "stoker/shard_samples.h"

namespace nb = nanobind;

namespace stoker::python {
namespace {

template <typename T, typename Field>
nb::ndarray<nb::numpy, T> member_column(const ShardIndex& index, Field field) {
  std::vector<T> values;
  values.reserve(index.members().size());
  for (const ShardIndex::Member& m : index.members()) values.push_back(static_cast<T>(m.*field));
  return owned_array(std::move(values));
}

// A read-only numpy view of `values`, which `owner` (the Python object holding them) keeps.
template <typename T>
nb::ndarray<nb::numpy, const T, nb::ndim<1>> view_of(std::span<const T> values, nb::handle owner) {
  return nb::ndarray<nb::numpy, const T, nb::ndim<1>>(values.data(), {values.size()}, owner);
}

using Samples = std::shared_ptr<ShardSamples>;  // nanobind holds them as shared, non-const

Samples shared(std::shared_ptr<const ShardSamples> samples) {
  return std::const_pointer_cast<ShardSamples>(std::move(samples));
}

MemberDecoder member_decoder(const std::string& name) {
  if (name == "label") return MemberDecoder::kLabel;
  if (name == "text") return MemberDecoder::kText;
  if (name == "tokens") return MemberDecoder::kTokens;
  if (name == "array") return MemberDecoder::kArray;
  if (name == "json") return MemberDecoder::kJson;
  throw nb::value_error(
      ("decoder '" + name + "' is none of label, text, tokens, array, json").c_str());
}

// Per member: "" and the array's dtype and shape when the loader reads it as `decoder`'s field,
// else the loader's refusal. The GIL is released while they are decoded.
std::vector<std::tuple<std::string, std::string, std::vector<int64_t>>> decode_shard_members(
    const std::string& decoder, const std::vector<nb::bytes>& members,
    const std::vector<std::pair<std::string, std::string>>& json_keys) {
  const MemberDecoder kind = member_decoder(decoder);
  std::vector<JsonKey> keys;
  for (const auto& [name, type] : json_keys) {
    keys.push_back({name, value_or_raise(json_kind_named(type), Area::kDataset)});
  }
  std::vector<std::span<const uint8_t>> bytes;
  bytes.reserve(members.size());
  for (const nb::bytes& member : members) {
    bytes.emplace_back(static_cast<const uint8_t*>(static_cast<const void*>(member.c_str())),
                       member.size());
  }
  std::vector<std::tuple<std::string, std::string, std::vector<int64_t>>> out(bytes.size());
  nb::gil_scoped_release release;
  for (size_t i = 0; i < bytes.size(); ++i) {
    Result<MemberSummary> decoded = decode_member(kind, bytes[i], keys);
    if (decoded.ok()) {
      out[i] = {"", std::move(decoded->dtype), std::move(decoded->shape)};
    } else {
      std::get<0>(out[i]) = decoded.status().message();
    }
  }
  return out;
}

}  // namespace

void register_shards(nb::module_& m) {
  nb::class_<OpenedShard>(m, "ShardIndex")
      .def_ro("url", &OpenedShard::url)
      .def_prop_ro("shard_bytes", [](const OpenedShard& s) { return s.index->shard_bytes(); })
      .def_prop_ro(
          "damage", [](const OpenedShard& s) { return s.index->damage(); },
          "\"\" when the tar was whole; else what is wrong and where (the members "
          "after it are not in the index).")
      .def_prop_ro("names",
                   [](const OpenedShard& s) {
                     std::vector<std::string> names;
                     names.reserve(s.index->members().size());
                     for (const ShardIndex::Member& m : s.index->members()) names.push_back(m.name);
                     return names;
                   })
      .def_prop_ro(
          "offsets",
          [](const OpenedShard& s) {
            return member_column<int64_t>(*s.index, &ShardIndex::Member::offset);
          },
          nb::rv_policy::move)
      .def_prop_ro(
          "sizes",
          [](const OpenedShard& s) {
            return member_column<int64_t>(*s.index, &ShardIndex::Member::size);
          },
          nb::rv_policy::move)
      .def_prop_ro(
          "labels",
          [](const OpenedShard& s) {
            return member_column<int64_t>(*s.index, &ShardIndex::Member::label);
          },
          nb::rv_policy::move, "Per member: a small .cls member's integer, else NO_LABEL.")
      .def_ro_static("NO_LABEL", &ShardIndex::kNoLabel)
      .def(
          "read",
          [](const OpenedShard& s, Int64s members) {
            std::vector<int64_t> starts(members.shape(0));
            Result<std::vector<uint8_t>> bytes = [&]() -> Result<std::vector<uint8_t>> {
              nb::gil_scoped_release release;
              STOKER_ASSIGN_OR_RETURN(std::shared_ptr<const ByteSource> source, open_source(s.url));
              const std::span<const int64_t> wanted(members.data(), members.shape(0));
              const int64_t total = s.index->bytes_to_read(wanted);
              if (total < 0) {
                return Status(StatusCode::kInvalidArgument,
                              s.url + ": a member number outside its index");
              }
              std::vector<uint8_t> out(static_cast<size_t>(total));
              STOKER_RETURN_IF_ERROR(s.index->read_members(*source, wanted, out, starts));
              return out;
            }();
            return std::make_pair(owned_array(value_or_raise(std::move(bytes), Area::kDataset)),
                                  owned_array(std::move(starts)));
          },
          nb::arg("members"),
          "(bytes, starts): members `members` read one after another, each its tar header "
          "then its data, which starts at bytes[starts[i]]. Every header is checked against "
          "the index, and the shard's version against the one it had when the index was opened: "
          "a shard rewritten, replaced or resized since is a DatasetError saying it changed "
          "since its index was made.");

  nb::class_<ShardSamples>(m, "ShardSamples",
                           "The samples of a dataset of tar shards, grouped from their indexes "
                           "(stoker/shard_samples.h).")
      .def_static(
          "open",
          [](const std::vector<std::string>& urls, const std::string& cache_dir, int threads) {
            std::vector<std::string> notes;
            Result<std::shared_ptr<const ShardSamples>> opened = [&] {
              nb::gil_scoped_release release;
              return ShardSamples::open(urls, cache_dir, threads, &notes);
            }();
            return std::make_pair(shared(value_or_raise(std::move(opened), Area::kDataset)),
                                  std::move(notes));
          },
          nb::arg("urls"), nb::arg("cache_dir"), nb::arg("threads"),
          "(samples, [why each shard's sidecar was refused, or \"\"]): from the table saved "
          "under cache_dir for these shards at their versions, else from their indexes (cache, "
          "sidecar or scan, `threads` at a time), grouped, the table saved.")
      .def_static(
          "reopen",
          [](const std::string& table, const std::string& version, const std::string& cache_dir) {
            Result<std::shared_ptr<const ShardSamples>> opened = [&] {
              nb::gil_scoped_release release;
              return ShardSamples::reopen(table, version, cache_dir);
            }();
            return shared(value_or_raise(std::move(opened), Area::kDataset));
          },
          nb::arg("table"), nb::arg("version"), nb::arg("cache_dir"),
          "The samples of a table open() saved, whose file had `version` then: one stat and one "
          "map. A DatasetError when it is not that file any more.")
      .def("__len__", &ShardSamples::size)
      .def_prop_ro("urls",
                   [](const ShardSamples& s) {
                     std::vector<std::string> urls;
                     for (const ShardSamples::Shard& shard : s.shards()) urls.push_back(shard.url);
                     return urls;
                   })
      .def_prop_ro(
          "shard_bytes",
          [](const ShardSamples& s) {
            std::vector<int64_t> bytes;
            for (const ShardSamples::Shard& shard : s.shards()) bytes.push_back(shard.bytes);
            return owned_array(std::move(bytes));
          },
          nb::rv_policy::move)
      .def_prop_ro(
          "shard_members",
          [](const ShardSamples& s) {
            std::vector<int64_t> members;
            for (const ShardSamples::Shard& shard : s.shards()) members.push_back(shard.members);
            return owned_array(std::move(members));
          },
          nb::rv_policy::move)
      .def_prop_ro(
          "damaged",
          [](const ShardSamples& s) {
            std::vector<std::tuple<int64_t, std::string, int64_t>> damaged;
            for (size_t k = 0; k < s.shards().size(); ++k) {
              const ShardSamples::Shard& shard = s.shards()[k];
              if (!shard.damage.empty()) {
                damaged.emplace_back(static_cast<int64_t>(k), shard.damage, shard.members);
              }
            }
            return damaged;
          },
          "[(shard, what is wrong and where, members before it)] of the damaged shards.")
      .def_prop_ro(
          "damage",
          [](const ShardSamples& s) {
            std::vector<std::string> damage;
            for (const ShardSamples::Shard& shard : s.shards()) damage.push_back(shard.damage);
            return damage;
          },
          "Per shard: \"\" when its tar was whole, else what is wrong and where.")
      .def_prop_ro("sample_shard",
                   [](nb::handle self) {
                     return view_of(nb::cast<const ShardSamples&>(self).sample_shard(), self);
                   })
      .def_prop_ro("first_member",
                   [](nb::handle self) {
                     return view_of(nb::cast<const ShardSamples&>(self).first_member(), self);
                   })
      .def_prop_ro(
          "labels",
          [](nb::handle self) {
            return view_of(nb::cast<const ShardSamples&>(self).labels(), self);
          },
          "Per sample: its .cls member's integer, -1 when it has none.")
      .def_prop_ro(
          "shard_first",
          [](nb::handle self) {
            return view_of(nb::cast<const ShardSamples&>(self).shard_first(), self);
          },
          "Per shard and one more: its first sample's number (the last: len()).")
      .def(
          "key",
          [](const ShardSamples& s, int64_t sample) {
            if (sample < 0 || sample >= s.size()) throw nb::index_error("sample out of range");
            return std::string(s.key(sample));
          },
          nb::arg("sample"))
      .def_prop_ro(
          "keys",
          [](const ShardSamples& s) {
            std::vector<std::string> keys;
            keys.reserve(static_cast<size_t>(s.size()));
            for (int64_t i = 0; i < s.size(); ++i) keys.emplace_back(s.key(i));
            return keys;
          },
          "Every sample's key (a list built on each call).")
      .def_prop_ro("fields", &ShardSamples::fields, "The field names the members have, sorted.")
      .def(
          "field_members",
          [](nb::handle self, const std::string& name) -> nb::object {
            const auto& s = nb::cast<const ShardSamples&>(self);
            const int32_t field = s.field_number(name);
            if (field < 0) return nb::none();
            return nb::cast(view_of(s.field_members(field), self));
          },
          nb::arg("name"),
          "Per sample: its member of field `name` (its number in its shard's index), -1 when "
          "it has none; None when no sample has it.")
      .def(
          "resolve",
          [](const ShardSamples& s, const std::vector<std::string>& alternatives,
             const Int64s& samples) {
            std::vector<int32_t> fields;
            for (const std::string& name : alternatives) fields.push_back(s.field_number(name));
            std::vector<int64_t> members(samples.shape(0));
            for (size_t k = 0; k < members.size(); ++k) {
              if (samples(k) < 0 || samples(k) >= s.size()) {
                throw nb::index_error("sample out of range");
              }
              members[k] = s.member_of(samples(k), fields).first;
            }
            return owned_array(std::move(members));
          },
          nb::arg("alternatives"), nb::arg("samples"),
          "Per sample of `samples`: its member of the first of `alternatives` it has, -1 when "
          "none.")
      .def_prop_ro(
          "duplicates",
          [](const ShardSamples& s) {
            std::vector<std::tuple<int64_t, std::string, std::string>> out;
            for (const ShardSamples::Duplicate& d : s.duplicates()) {
              out.emplace_back(d.sample, s.fields()[d.field], d.second);
            }
            return out;
          },
          "[(sample, field, the second member's name)] for every field a sample has twice.")
      .def(
          "bad_samples",
          [](const ShardSamples& s, const std::vector<std::string>& fields) {
            std::vector<int32_t> numbers;
            for (const std::string& name : fields) numbers.push_back(s.field_number(name));
            return s.bad_samples(numbers);
          },
          nb::arg("fields"),
          "[(sample, why)] of the samples that have one of `fields` twice, sorted: what a "
          "loader reading those fields refuses (or skips).")
      .def(
          "index",
          [](const ShardSamples& s, int64_t shard) {
            if (shard < 0 || shard >= static_cast<int64_t>(s.shards().size())) {
              throw nb::index_error("shard out of range");
            }
            Result<std::shared_ptr<const ShardIndex>> index = [&] {
              nb::gil_scoped_release release;
              return s.index(shard);
            }();
            return OpenedShard{s.url(shard), value_or_raise(std::move(index), Area::kDataset)};
          },
          nb::arg("shard"), "The shard's ShardIndex, opened on first use.")
      .def_prop_ro("table_path", &ShardSamples::table_path)
      .def_prop_ro("table_version", &ShardSamples::table_version);

  m.def("decode_shard_members", &decode_shard_members, nb::arg("decoder"), nb::arg("members"),
        nb::arg("json_keys") = std::vector<std::pair<std::string, std::string>>(),
        "Per member, (error, dtype, shape): error \"\" when the loader reads it as a member of a "
        "`decoder` field (\"label\", \"text\", \"tokens\", \"array\" or \"json\", reading "
        "json_keys: (key, \"int64\" | \"float64\" | \"float32\" | \"bool\" | \"str\")), "
        "else the loader's refusal in its words (dataset/shard_members.h); dtype and shape of "
        "an array or token array, else \"\" and [].");

  m.def(
      "open_shard_indexes",
      [](const std::vector<std::string>& urls, const std::string& cache_dir, int threads) {
        std::vector<std::string> notes;
        Result<std::vector<std::shared_ptr<const ShardIndex>>> opened = [&] {
          nb::gil_scoped_release release;
          return open_shard_indexes(urls, cache_dir, threads, &notes);
        }();
        std::vector<std::shared_ptr<const ShardIndex>> indexes =
            value_or_raise(std::move(opened), Area::kDataset);
        std::vector<OpenedShard> out;
        out.reserve(urls.size());
        for (size_t i = 0; i < urls.size(); ++i) out.push_back({urls[i], std::move(indexes[i])});
        return std::make_pair(std::move(out), std::move(notes));
      },
      nb::arg("urls"), nb::arg("cache_dir"), nb::arg("threads"),
      "([ShardIndex per URL], [why each one's sidecar was refused, or \"\"]): each shard's "
      "index from the cache under cache_dir (\"\": none), its sidecar <url>.index when it "
      "matches the shard's headers, or a scan of its tar headers; `threads` shards at a time.");

  m.def(
      "write_shard_sidecar",
      [](const std::string& path) {
        Status status = [&]() -> Status {
          nb::gil_scoped_release release;
          STOKER_ASSIGN_OR_RETURN(std::unique_ptr<ByteSource> source, open_file_source(path));
          STOKER_ASSIGN_OR_RETURN(ShardIndex index, ShardIndex::scan(*source));
          if (!index.damage().empty()) {
            return Status(StatusCode::kCorruptData, path + ": " + index.damage());
          }
          return core::write_file_atomically(path + ".index", index.encode());
        }();
        raise_if_error(status, Area::kDataset);
      },
      nb::arg("path"),
      "Scans the local shard at `path` and writes its index beside it, as `<path>.index` "
      "(durably: written, flushed, renamed). A damaged tar is a DatasetError.");
}

}  // namespace stoker::python
