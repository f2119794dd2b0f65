// Bindings for the io layer's remote sources: the options of object storage (RemoteOptions,
// resolved from the environment as the AWS CLI does), the process's range cache and its
// counters, and a stat of any source, local or remote. Every call that may touch the network
// or the disk releases the GIL.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "arrays.h"
#include "errors.h"
#include "stoker/byte_slice.h"
#include "stoker/byte_source.h"
#include "stoker/remote_source.h"

namespace nb = nanobind;

namespace stoker::python {

void register_io(nb::module_& m) {
  const RemoteOptions defaults;
  nb::class_<RemoteOptions>(m, "RemoteOptions")
      .def(
          "__init__",
          [](RemoteOptions* self, std::string region, std::string endpoint_url, std::string profile,
             std::string access_key_id, std::string secret_access_key, std::string session_token,
             bool anonymous, int max_attempts, double total_timeout_s, double connect_timeout_s,
             double low_speed_timeout_s, double backoff_base_s, double backoff_max_s,
             int64_t read_through_gap_bytes, int64_t min_request_bytes) {
            new (self) RemoteOptions{.region = std::move(region),
                                     .endpoint_url = std::move(endpoint_url),
                                     .profile = std::move(profile),
                                     .access_key_id = std::move(access_key_id),
                                     .secret_access_key = std::move(secret_access_key),
                                     .session_token = std::move(session_token),
                                     .anonymous = anonymous,
                                     .max_attempts = max_attempts,
                                     .total_timeout_s = total_timeout_s,
                                     .connect_timeout_s = connect_timeout_s,
                                     .low_speed_timeout_s = low_speed_timeout_s,
                                     .backoff_base_s = backoff_base_s,
                                     .backoff_max_s = backoff_max_s,
                                     .read_through_gap_bytes = read_through_gap_bytes,
                                     .min_request_bytes = min_request_bytes};
          },
          nb::kw_only(), nb::arg("region") = defaults.region,
          nb::arg("endpoint_url") = defaults.endpoint_url, nb::arg("profile") = defaults.profile,
          nb::arg("access_key_id") = defaults.access_key_id,
          nb::arg("secret_access_key") = defaults.secret_access_key,
          nb::arg("session_token") = defaults.session_token,
          nb::arg("anonymous") = defaults.anonymous,
          nb::arg("max_attempts") = defaults.max_attempts,
          nb::arg("total_timeout_s") = defaults.total_timeout_s,
          nb::arg("connect_timeout_s") = defaults.connect_timeout_s,
          nb::arg("low_speed_timeout_s") = defaults.low_speed_timeout_s,
          nb::arg("backoff_base_s") = defaults.backoff_base_s,
          nb::arg("backoff_max_s") = defaults.backoff_max_s,
          nb::arg("read_through_gap_bytes") = defaults.read_through_gap_bytes,
          nb::arg("min_request_bytes") = defaults.min_request_bytes)
      .def_rw("region", &RemoteOptions::region)
      .def_rw("endpoint_url", &RemoteOptions::endpoint_url, "implies path-style addressing")
      .def_rw("profile", &RemoteOptions::profile)
      .def_rw("access_key_id", &RemoteOptions::access_key_id)
      .def_rw("secret_access_key", &RemoteOptions::secret_access_key)
      .def_rw("session_token", &RemoteOptions::session_token)
      .def_rw("anonymous", &RemoteOptions::anonymous, "unsigned requests (public buckets)")
      .def_rw("max_attempts", &RemoteOptions::max_attempts, "0: 8")
      .def_rw("total_timeout_s", &RemoteOptions::total_timeout_s, "0: 120")
      .def_rw("connect_timeout_s", &RemoteOptions::connect_timeout_s, "0: 10")
      .def_rw("low_speed_timeout_s", &RemoteOptions::low_speed_timeout_s, "0: 15")
      .def_rw("backoff_base_s", &RemoteOptions::backoff_base_s, "0: 0.05")
      .def_rw("backoff_max_s", &RemoteOptions::backoff_max_s, "0: 5")
      .def_rw("read_through_gap_bytes", &RemoteOptions::read_through_gap_bytes, "-1: 1 MiB")
      .def_rw("min_request_bytes", &RemoteOptions::min_request_bytes, "0: 256 KiB")
      .doc() =
      "How to reach and read remote objects (see stoker/remote_source.h); empty strings and "
      "zeros mean 'from the environment' or the default.";

  m.def(
      "resolve_remote_options",
      [](const RemoteOptions& options) {
        Result<RemoteOptions> resolved = [&] {
          nb::gil_scoped_release release;  // reads the AWS shared files
          return resolve_remote_options(options);
        }();
        return value_or_raise(std::move(resolved), Area::kDataset);
      },
      nb::arg("options"),
      "`options` with every empty field filled from the environment (AWS variables, "
      "~/.aws/credentials and ~/.aws/config) and the defaults.");

  m.def(
      "set_remote_options",
      [](const std::string& prefix, const RemoteOptions& options) {
        nb::gil_scoped_release release;
        set_remote_options(prefix, options);
      },
      nb::arg("prefix"), nb::arg("options"),
      "Options for every URL starting with `prefix` that stoker opens (the longest prefix "
      "wins).");

  m.def(
      "configure_remote_cache",
      [](int64_t memory_bytes, const std::string& disk_folder, int64_t disk_bytes) {
        nb::gil_scoped_release release;
        configure_remote_cache(memory_bytes, disk_folder, disk_bytes);
      },
      nb::arg("memory_bytes"), nb::arg("disk_folder") = "", nb::arg("disk_bytes") = 0,
      "The process's range cache: `memory_bytes` in memory, and up to `disk_bytes` in "
      "`disk_folder` when it is not empty.");

  m.def(
      "remote_stats",
      [] {
        const RemoteStats stats = remote_stats();
        nb::dict d;
        d["requests"] = stats.requests;
        d["retries"] = stats.retries;
        d["failures"] = stats.failures;
        d["bytes_fetched"] = stats.bytes_fetched;
        d["cache_hits"] = stats.cache_hits;
        d["cache_misses"] = stats.cache_misses;
        d["disk_cache_hits"] = stats.disk_cache_hits;
        d["wait_s"] = stats.wait_s;
        return d;
      },
      "Counters of this process's remote reads since it started.");

  m.def(
      "list_objects",
      [](const std::string& prefix_url, bool remember) {
        Result<std::vector<ListedObject>> listed = [&] {
          nb::gil_scoped_release release;  // one request per 1,000 objects
          Result<std::vector<ListedObject>> objects = list_remote_objects(prefix_url);
          if (objects.ok() && remember) remember_listed_objects(*objects);
          return objects;
        }();
        std::vector<std::tuple<std::string, int64_t, std::string>> objects;
        for (ListedObject& object : value_or_raise(std::move(listed), Area::kDataset)) {
          objects.emplace_back(std::move(object.url), object.size, std::move(object.etag));
        }
        return objects;
      },
      nb::arg("prefix_url"), nb::arg("remember") = false,
      "(url, size, ETag) of every object under an s3:// prefix, in key order: one ListObjectsV2 "
      "request per 1,000 objects. remember: the engine then opens these objects with what the "
      "listing said, without a HEAD each (remember_listed_objects).");

  m.def(
      "remember_objects",
      [](const std::vector<std::string>& urls, const Int64s& sizes,
         const std::vector<std::string>& etags) {
        if (urls.size() != static_cast<size_t>(sizes.size()) || urls.size() != etags.size()) {
          throw nb::value_error("remember_objects: urls, sizes and etags differ in length");
        }
        std::vector<ListedObject> objects(urls.size());
        for (size_t k = 0; k < urls.size(); ++k) {
          objects[k] = ListedObject{.url = urls[k], .size = sizes(k), .etag = etags[k]};
        }
        nb::gil_scoped_release release;
        remember_listed_objects(objects);
      },
      nb::arg("urls"), nb::arg("sizes"), nb::arg("etags"),
      "Tells the engine the size and ETag of objects (a listing's, or an index's record of "
      "one): it opens them without a HEAD each and reads them with If-Match "
      "(remember_listed_objects).");

  m.def(
      "byte_slice_name",
      [](const std::string& whole, int64_t offset, int64_t length) {
        return byte_slice_name(ByteSlice{whole, ByteRange{offset, length}});
      },
      nb::arg("whole"), nb::arg("offset"), nb::arg("length"),
      "The name of `length` bytes at `offset` of the file or object `whole` "
      "('<whole>#bytes=<offset>+<length>'): what open_source, VideoReader and the episode "
      "index read as a file of its own (stoker/byte_slice.h).");
  m.def(
      "parse_byte_slice",
      [](const std::string& name) -> std::optional<std::tuple<std::string, int64_t, int64_t>> {
        std::optional<ByteSlice> slice = parse_byte_slice(name);
        if (!slice.has_value()) return std::nullopt;
        return std::make_tuple(slice->whole, slice->range.offset, slice->range.length);
      },
      nb::arg("name"),
      "(whole, offset, length) of a byte slice's name, or None for a plain path or URL.");

  m.def(
      "stat_source",
      [](const std::string& path_or_url) {
        Result<std::tuple<int64_t, std::string, int64_t>> stat =
            [&]() -> Result<std::tuple<int64_t, std::string, int64_t>> {
          nb::gil_scoped_release release;  // a HEAD request for a URL
          STOKER_ASSIGN_OR_RETURN(std::shared_ptr<const ByteSource> source,
                                  open_source(path_or_url));
          return std::make_tuple(source->size(), source->version_tag(), source->mtime_ns());
        }();
        return value_or_raise(std::move(stat), Area::kDataset);
      },
      nb::arg("path_or_url"),
      "(size, version_tag, mtime_ns) of a local file or a remote object (opened once per "
      "process and URL).");

  m.def(
      "read_ranges",
      [](const std::string& path_or_url,
         nb::ndarray<const int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu> offsets,
         nb::ndarray<const int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu> sizes) {
        if (offsets.shape(0) != sizes.shape(0)) {
          throw nb::value_error("offsets and sizes must have the same length");
        }
        Result<std::vector<uint8_t>> bytes = [&]() -> Result<std::vector<uint8_t>> {
          nb::gil_scoped_release release;
          STOKER_ASSIGN_OR_RETURN(std::shared_ptr<const ByteSource> source,
                                  open_source(path_or_url));
          const size_t n = offsets.shape(0);
          std::vector<ByteRange> ranges(n);
          int64_t total = 0;
          for (size_t i = 0; i < n; ++i) {
            if (offsets(i) < 0 || sizes(i) < 0 || offsets(i) + sizes(i) > source->size()) {
              return Status(StatusCode::kInvalidArgument,
                            source->name() + ": the range of " + std::to_string(sizes(i)) +
                                " bytes at " + std::to_string(offsets(i)) + " is outside its " +
                                std::to_string(source->size()) + " bytes");
            }
            ranges[i] = ByteRange{offsets(i), sizes(i)};
            total += sizes(i);
          }
          if (source->is_remote()) {
            std::vector<ByteRange> sorted = ranges;
            std::sort(sorted.begin(), sorted.end(),
                      [](const ByteRange& a, const ByteRange& b) { return a.offset < b.offset; });
            source->prefetch(sorted);
          }
          std::vector<uint8_t> out(static_cast<size_t>(total));
          size_t at = 0;
          for (const ByteRange& range : ranges) {
            std::span<uint8_t> slot(out.data() + at, static_cast<size_t>(range.length));
            STOKER_ASSIGN_OR_RETURN(size_t got, source->read_at(range.offset, slot));
            if (got != slot.size()) {
              return Status(StatusCode::kIoError,
                            source->name() + ": short read at " + std::to_string(range.offset));
            }
            at += slot.size();
          }
          return out;
        }();
        return owned_array(value_or_raise(std::move(bytes), Area::kDataset));
      },
      nb::arg("path_or_url"), nb::arg("offsets"), nb::arg("sizes"),
      "The bytes of each range [offset, offset + size) of a local file (pread) or a remote "
      "object (the ranges prefetched together through the range cache), one after another.");

  m.def("is_remote_url", &is_remote_url, nb::arg("path"),
        "Whether `path` is an s3://, http:// or https:// URL.");
}

}  // namespace stoker::python
