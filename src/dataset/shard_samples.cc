#include "stoker/shard_samples.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <limits>
#include <unordered_map>

#include "core/byte_io.h"
#include "core/crc32c.h"
#include "core/env.h"
#include "core/file.h"
#include "core/fnv1a.h"
#include "core/fuzzing.h"
#include "dataset/shard_members.h"
#include "stoker/byte_source.h"
#include "stoker/remote_source.h"

namespace stoker {
namespace {

constexpr char kMagic[8] = {'S', 'T', 'K', 'S', 'M', 'P', 'L', 'S'};
// 1: the shards (URL, bytes, version, members, damage); per sample its shard, first member,
// label and key; per field its name and members; the duplicates; a trailing CRC-32C.
constexpr uint32_t kVersion = 1;
// URLs, versions, notes and names longer than this in a table are damage, not data.
constexpr size_t kMaxString = 1 << 20;
constexpr int64_t kLimit = std::numeric_limits<int32_t>::max();

Status corrupt(const std::string& what, const std::string& why) {
  return Status(StatusCode::kCorruptData, what + ": " + why);
}

// The version of a local file (device, inode, size, times), "" when it cannot be had.
std::string file_version(const std::string& path) {
  Result<std::unique_ptr<ByteSource>> file = open_file_source(path);
  return file.ok() ? (*file)->version_tag() : "";
}

// Where open() keeps the table of these shards at these versions.
std::string table_path_for(const std::string& cache_dir,
                           const std::vector<ShardSamples::Shard>& shards) {
  std::string key = std::to_string(kVersion);
  for (const ShardSamples::Shard& s : shards) {
    key += '\0' + s.url + '\0' + std::to_string(s.bytes) + '\0' + s.version;
  }
  char digest[40];
  std::snprintf(digest, sizeof(digest), "%016llx%016llx",
                static_cast<unsigned long long>(core::fnv1a(key)),
                static_cast<unsigned long long>(core::fnv1a(key, 0x5bd1e995)));
  return cache_dir + "/shards/samples-" + std::to_string(shards.size()) + "-" + digest + ".table";
}

// The grouped samples, before they are laid out as a table.
struct Grouped {
  std::vector<ShardSamples::Shard> shards;
  std::vector<int32_t> sample_shard, first_member;
  std::vector<int64_t> labels, shard_first, key_offsets{0};
  std::string keys;
  std::vector<std::string> fields;
  std::vector<std::vector<int32_t>> field_members;
  std::vector<ShardSamples::Duplicate> duplicates;
};

Result<Grouped> group_members(const std::vector<std::string>& urls,
                              const std::vector<std::shared_ptr<const ShardIndex>>& indexes) {
  Grouped g;
  std::unordered_map<std::string, int32_t> found;  // field name -> its number as found
  std::vector<std::string> names;
  std::vector<std::vector<int32_t>> members;  // per field as found, per sample (grown as met)
  std::vector<ShardSamples::Duplicate> duplicates;
  for (size_t s = 0; s < indexes.size(); ++s) {
    const ShardIndex& index = *indexes[s];
    if (static_cast<int64_t>(index.members().size()) > kLimit) {
      return corrupt(urls[s], "more than 2^31 members");
    }
    g.shards.push_back(ShardSamples::Shard{.url = urls[s],
                                           .bytes = index.shard_bytes(),
                                           .version = index.opened_version(),
                                           .members = static_cast<int64_t>(index.members().size()),
                                           .damage = index.damage()});
    g.shard_first.push_back(static_cast<int64_t>(g.sample_shard.size()));
    std::string_view current;
    bool any = false;
    for (size_t m = 0; m < index.members().size(); ++m) {
      const ShardIndex::Member& member = index.members()[m];
      auto [key, field] = shard_member_field(member.name);
      if (!any || key != current) {
        any = true;
        g.sample_shard.push_back(static_cast<int32_t>(s));
        g.first_member.push_back(static_cast<int32_t>(m));
        g.labels.push_back(-1);
        g.keys.append(key);
        g.key_offsets.push_back(static_cast<int64_t>(g.keys.size()));
        current = key;  // a view of the member's name, which the index keeps
      }
      const auto sample = static_cast<int64_t>(g.sample_shard.size() - 1);
      auto [at, added] = found.try_emplace(field, static_cast<int32_t>(names.size()));
      if (added) {
        names.push_back(field);
        members.emplace_back();
      }
      std::vector<int32_t>& column = members[at->second];
      if (static_cast<int64_t>(column.size()) > sample && column[sample] >= 0) {
        duplicates.push_back({sample, at->second, member.name});
        continue;
      }
      column.resize(sample + 1, -1);
      column[sample] = static_cast<int32_t>(m);
      if (field == "cls" && member.label != ShardIndex::kNoLabel) g.labels.back() = member.label;
    }
  }
  const auto n = static_cast<int64_t>(g.sample_shard.size());
  g.shard_first.push_back(n);
  // Fields in name order, each column over every sample.
  std::vector<int32_t> order(names.size());
  for (size_t f = 0; f < order.size(); ++f) order[f] = static_cast<int32_t>(f);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return names[a] < names[b]; });
  std::vector<int32_t> renumbered(names.size());
  for (size_t f = 0; f < order.size(); ++f) {
    renumbered[order[f]] = static_cast<int32_t>(f);
    g.fields.push_back(names[order[f]]);
    members[order[f]].resize(n, -1);
    g.field_members.push_back(std::move(members[order[f]]));
  }
  for (ShardSamples::Duplicate& d : duplicates) d.field = renumbered[d.field];
  std::stable_sort(duplicates.begin(), duplicates.end(), [](const auto& a, const auto& b) {
    return a.sample != b.sample ? a.sample < b.sample : a.field < b.field;
  });
  g.duplicates = std::move(duplicates);
  return g;
}

template <typename T>
void put_array(core::ByteWriter& w, const std::vector<T>& values) {
  w.align(8);
  w.bytes(values.data(), values.size() * sizeof(T));
}

std::vector<uint8_t> encode(const Grouped& g) {
  core::ByteWriter w;
  w.bytes(kMagic, sizeof(kMagic));
  w.pod<uint32_t>(kVersion);
  w.pod<uint32_t>(0);
  w.pod<int64_t>(static_cast<int64_t>(g.shards.size()));
  w.pod<int64_t>(static_cast<int64_t>(g.sample_shard.size()));
  w.pod<int64_t>(static_cast<int64_t>(g.fields.size()));
  w.pod<int64_t>(static_cast<int64_t>(g.keys.size()));
  w.pod<int64_t>(static_cast<int64_t>(g.duplicates.size()));
  for (const ShardSamples::Shard& s : g.shards) {
    w.string(s.url);
    w.pod<int64_t>(s.bytes);
    w.string(s.version);
    w.pod<int64_t>(s.members);
    w.string(s.damage);
  }
  put_array(w, g.sample_shard);
  put_array(w, g.first_member);
  put_array(w, g.labels);
  put_array(w, g.shard_first);
  put_array(w, g.key_offsets);
  w.bytes(g.keys.data(), g.keys.size());
  for (size_t f = 0; f < g.fields.size(); ++f) {
    w.align(8);
    w.string(g.fields[f]);
    put_array(w, g.field_members[f]);
  }
  w.align(8);
  for (const ShardSamples::Duplicate& d : g.duplicates) {
    w.pod<int64_t>(d.sample);
    w.pod<int32_t>(d.field);
    w.string(d.second);
  }
  w.align(4);
  w.pod<uint32_t>(core::crc32c(w.buffer()));
  return w.take();
}

// Whether a table's bytes end in the CRC-32C of the bytes before it.
bool checksum_holds(std::span<const uint8_t> bytes) {
  if (bytes.size() < 4) return false;
  uint32_t stored = 0;
  std::memcpy(&stored, bytes.data() + bytes.size() - 4, 4);
  return core::crc32c(bytes.first(bytes.size() - 4)) == stored;
}

}  // namespace

std::pair<std::string_view, std::string> shard_member_field(std::string_view name) {
  const size_t slash = name.rfind('/');
  const size_t base = slash == std::string_view::npos ? 0 : slash + 1;
  const size_t dot = name.find('.', base);
  if (dot == std::string_view::npos) return {name, ""};
  std::string field(name.substr(dot + 1));
  std::transform(field.begin(), field.end(), field.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return {name.substr(0, dot), std::move(field)};
}

struct ShardSamples::Table {
  std::vector<uint8_t> owned;
  std::unique_ptr<core::MappedFile> mapped;
  std::span<const uint8_t> bytes() const {
    return mapped != nullptr ? mapped->bytes() : std::span<const uint8_t>(owned);
  }
};

ShardSamples::ShardSamples() = default;
ShardSamples::~ShardSamples() = default;

Result<std::shared_ptr<ShardSamples>> ShardSamples::view(std::unique_ptr<Table> table,
                                                         const std::string& what) {
  std::shared_ptr<ShardSamples> t(new ShardSamples());
  core::ByteReader r(table->bytes());
  char magic[sizeof(kMagic)] = {};
  uint32_t version = 0, reserved = 0;
  int64_t shards = 0, samples = 0, fields = 0, key_bytes = 0, duplicates = 0;
  if (!r.bytes(magic, sizeof(magic)) || std::memcmp(magic, kMagic, sizeof(kMagic)) != 0 ||
      !r.pod(&version) || version != kVersion) {
    return corrupt(what, "not a shard sample table of version " + std::to_string(kVersion));
  }
  // Each count is bounded by the bytes its entries take at least (a shard: three string
  // lengths and two integers), so that damage cannot ask for more memory than the table's.
  const int64_t size = static_cast<int64_t>(table->bytes().size());
  const bool counts = r.pod(&reserved) && r.pod(&shards) && r.pod(&samples) && r.pod(&fields) &&
                      r.pod(&key_bytes) && r.pod(&duplicates) && shards >= 0 &&
                      shards <= size / 28 && samples >= 0 && samples <= size / 4 && fields >= 0 &&
                      fields <= size / 4 && key_bytes >= 0 && key_bytes <= size &&
                      duplicates >= 0 && duplicates <= size / 16;
  if (!counts) return corrupt(what, "damaged (counts out of range)");
  bool ok = true;
  t->shards_.resize(shards);
  for (Shard& s : t->shards_) {
    ok = ok && r.string(&s.url, kMaxString) && r.pod(&s.bytes) &&
         r.string(&s.version, kMaxString) && r.pod(&s.members) && r.string(&s.damage, kMaxString) &&
         s.members >= 0 && s.members <= kLimit;
    if (!ok) break;
  }
  const auto n = static_cast<size_t>(samples);
  ok = ok && r.align(8) && r.view(n, &t->sample_shard_) && r.align(8) &&
       r.view(n, &t->first_member_) && r.align(8) && r.view(n, &t->labels_) && r.align(8) &&
       r.view(static_cast<size_t>(shards) + 1, &t->shard_first_) && r.align(8) &&
       r.view(n + 1, &t->key_offsets_);
  std::span<const char> keys;
  ok = ok && r.view(static_cast<size_t>(key_bytes), &keys);
  if (ok) {
    t->keys_ = std::string_view(keys.data(), keys.size());
    ok = t->key_offsets_.front() == 0 && t->key_offsets_.back() == key_bytes;
  }
  t->fields_.resize(ok ? fields : 0);
  t->field_members_.resize(t->fields_.size());
  for (size_t f = 0; ok && f < t->fields_.size(); ++f) {
    ok = r.align(8) && r.string(&t->fields_[f], kMaxString) && r.align(8) &&
         r.view(n, &t->field_members_[f]);
  }
  ok = ok && r.align(8);
  t->duplicates_.resize(ok ? duplicates : 0);
  for (size_t d = 0; ok && d < t->duplicates_.size(); ++d) {
    Duplicate& dup = t->duplicates_[d];
    ok = r.pod(&dup.sample) && r.pod(&dup.field) && r.string(&dup.second, kMaxString);
  }
  uint32_t crc = 0;
  ok = ok && r.align(4) && r.pod(&crc) && r.at_end();
  if (!ok) return corrupt(what, "damaged (its sections do not fit its size)");
  t->indexes_.resize(t->shards_.size());
  t->table_ = std::move(table);
  return t;
}

Result<std::shared_ptr<ShardSamples>> ShardSamples::checked(std::unique_ptr<Table> table,
                                                            const std::string& what) {
  if (!checksum_holds(table->bytes()) && !core::kFuzzing) {
    return corrupt(what, "damaged (its checksum does not match its bytes)");
  }
  STOKER_ASSIGN_OR_RETURN(std::shared_ptr<ShardSamples> samples, view(std::move(table), what));
  if (!samples->consistent()) return corrupt(what, "damaged (a value out of range)");
  return samples;
}

Result<std::shared_ptr<const ShardSamples>> ShardSamples::from_bytes(std::vector<uint8_t> bytes,
                                                                     const std::string& what) {
  auto table = std::make_unique<Table>();
  table->owned = std::move(bytes);
  STOKER_ASSIGN_OR_RETURN(std::shared_ptr<ShardSamples> samples, checked(std::move(table), what));
  return std::shared_ptr<const ShardSamples>(std::move(samples));
}

std::span<const uint8_t> ShardSamples::table_bytes() const { return table_->bytes(); }

Result<std::shared_ptr<ShardSamples>> ShardSamples::grouped(
    std::vector<std::string> urls, std::vector<std::shared_ptr<const ShardIndex>> indexes) {
  if (urls.size() != indexes.size()) {
    return Status(StatusCode::kInvalidArgument, "shard samples: one index per URL is needed");
  }
  STOKER_ASSIGN_OR_RETURN(Grouped grouped, group_members(urls, indexes));
  auto table = std::make_unique<Table>();
  table->owned = encode(grouped);
  STOKER_ASSIGN_OR_RETURN(std::shared_ptr<ShardSamples> samples,
                          view(std::move(table), "the grouped samples"));
  samples->indexes_ = std::move(indexes);
  return samples;
}

Result<std::shared_ptr<const ShardSamples>> ShardSamples::group(
    std::vector<std::string> urls, std::vector<std::shared_ptr<const ShardIndex>> indexes) {
  STOKER_ASSIGN_OR_RETURN(std::shared_ptr<ShardSamples> samples,
                          grouped(std::move(urls), std::move(indexes)));
  return std::shared_ptr<const ShardSamples>(std::move(samples));
}

Result<std::shared_ptr<const ShardSamples>> ShardSamples::open(
    std::span<const std::string> urls, const std::string& cache_dir, int threads,
    std::vector<std::string>* sidecar_notes) {
  if (urls.empty()) return Status(StatusCode::kInvalidArgument, "no shards given");
  // Each shard's size and version: what the table must have been made of.
  std::vector<Shard> seen(urls.size());
  std::vector<Status> errors(urls.size());
  std::atomic<bool> failed{false};
  core::parallel_for(urls.size(), threads, [&](size_t i) {
    if (failed) return;
    Result<std::shared_ptr<const ByteSource>> source = open_source(urls[i]);
    if (!source.ok()) {
      errors[i] = source.status();
      failed = true;
      return;
    }
    seen[i] =
        Shard{.url = urls[i], .bytes = (*source)->size(), .version = (*source)->version_tag()};
  });
  for (const Status& error : errors) {
    if (!error.ok()) return error;
  }
  const bool versioned =
      !cache_dir.empty() &&
      std::none_of(seen.begin(), seen.end(), [](const Shard& s) { return s.version.empty(); });
  if (sidecar_notes != nullptr) sidecar_notes->assign(urls.size(), "");
  if (versioned) {
    const std::string path = table_path_for(cache_dir, seen);
    const std::string before = file_version(path);
    Result<std::unique_ptr<core::MappedFile>> mapped =
        before.empty()
            ? Result<std::unique_ptr<core::MappedFile>>(Status(StatusCode::kNotFound, path))
            : core::MappedFile::open(path);
    if (mapped.ok()) {
      auto table = std::make_unique<Table>();
      table->mapped = std::move(mapped).value();
      Result<std::shared_ptr<ShardSamples>> saved = checked(std::move(table), path);
      const bool same =
          saved.ok() && (*saved)->shards_.size() == seen.size() &&
          std::equal(seen.begin(), seen.end(), (*saved)->shards_.begin(),
                     [](const Shard& a, const Shard& b) {
                       return a.url == b.url && a.bytes == b.bytes && a.version == b.version;
                     }) &&
          file_version(path) == before;
      if (same) {
        (*saved)->cache_dir_ = cache_dir;
        (*saved)->table_path_ = path;
        (*saved)->table_version_ = before;
        return std::shared_ptr<const ShardSamples>(std::move(saved).value());
      }
    }
  }
  // No table (or a damaged one): open the indexes, group them, save the table.
  STOKER_ASSIGN_OR_RETURN(std::vector<std::shared_ptr<const ShardIndex>> indexes,
                          open_shard_indexes(urls, cache_dir, threads, sidecar_notes));
  STOKER_ASSIGN_OR_RETURN(std::shared_ptr<ShardSamples> samples,
                          grouped({urls.begin(), urls.end()}, std::move(indexes)));
  samples->cache_dir_ = cache_dir;
  // Saved under the shards' versions now (a shard may have changed since it was first looked
  // at), when every one has a version.
  const bool still_versioned =
      versioned && std::none_of(samples->shards_.begin(), samples->shards_.end(),
                                [](const Shard& s) { return s.version.empty(); });
  if (still_versioned) {
    const std::string path = table_path_for(cache_dir, samples->shards_);
    // A table that cannot be written only costs the next open the grouping.
    if (core::create_directories(cache_dir + "/shards").ok() &&
        core::write_cache_file(path, samples->table_bytes()).ok()) {
      samples->table_path_ = path;
      samples->table_version_ = file_version(path);
    }
  }
  return std::shared_ptr<const ShardSamples>(std::move(samples));
}

Result<std::shared_ptr<const ShardSamples>> ShardSamples::reopen(const std::string& table,
                                                                 const std::string& table_version,
                                                                 const std::string& cache_dir) {
  auto changed = [&] {
    return corrupt(table,
                   "not the shard sample table the dataset was opened with (changed or "
                   "replaced since)");
  };
  if (table_version.empty() || file_version(table) != table_version) return changed();
  STOKER_ASSIGN_OR_RETURN(std::unique_ptr<core::MappedFile> mapped, core::MappedFile::open(table));
  // The same file, unchanged, as the open that checked its checksum and its consistency saw:
  // a rewrite between the two looks is a change too.
  if (file_version(table) != table_version) return changed();
  auto bytes = std::make_unique<Table>();
  bytes->mapped = std::move(mapped);
  STOKER_ASSIGN_OR_RETURN(std::shared_ptr<ShardSamples> samples, view(std::move(bytes), table));
  samples->cache_dir_ = cache_dir;
  samples->table_path_ = table;
  samples->table_version_ = table_version;
  return std::shared_ptr<const ShardSamples>(std::move(samples));
}

bool ShardSamples::consistent() const {
  const auto shards = static_cast<int64_t>(shards_.size());
  if (static_cast<int64_t>(shard_first_.size()) != shards + 1 || shard_first_.front() != 0 ||
      shard_first_.back() != size()) {
    return false;
  }
  for (int64_t s = 0; s < shards; ++s) {
    if (shard_first_[s + 1] < shard_first_[s] || shard_first_[s + 1] > size()) return false;
    for (int64_t i = shard_first_[s]; i < shard_first_[s + 1]; ++i) {
      if (sample_shard_[i] != s || first_member_[i] < 0 || first_member_[i] >= shards_[s].members ||
          key_offsets_[i + 1] < key_offsets_[i]) {
        return false;
      }
    }
  }
  for (const std::span<const int32_t> members : field_members_) {
    for (int64_t i = 0; i < size(); ++i) {
      if (members[i] >= shards_[sample_shard_[i]].members) return false;
    }
  }
  return std::all_of(duplicates_.begin(), duplicates_.end(), [&](const Duplicate& d) {
    return d.sample >= 0 && d.sample < size() && d.field >= 0 &&
           d.field < static_cast<int32_t>(fields_.size());
  });
}

std::string_view ShardSamples::key(int64_t sample) const {
  const int64_t begin = key_offsets_[sample];
  return keys_.substr(static_cast<size_t>(begin),
                      static_cast<size_t>(key_offsets_[sample + 1] - begin));
}

int32_t ShardSamples::field_number(std::string_view name) const {
  const auto at = std::lower_bound(fields_.begin(), fields_.end(), name);
  return at != fields_.end() && *at == name ? static_cast<int32_t>(at - fields_.begin()) : -1;
}

std::vector<std::pair<int64_t, std::string>> ShardSamples::bad_samples(
    std::span<const int32_t> fields) const {
  std::vector<std::pair<int64_t, std::string>> bad;
  for (const Duplicate& d : duplicates_) {
    if (std::find(fields.begin(), fields.end(), d.field) == fields.end()) continue;
    if (!bad.empty() && bad.back().first == d.sample) continue;  // one reason per sample
    bad.emplace_back(d.sample, url(sample_shard_[d.sample]) + ": sample " +
                                   python_repr(key(d.sample)) + ", field " +
                                   python_repr(fields_[d.field]) +
                                   ": the sample has two members of this field (the second is " +
                                   python_repr(d.second) + ")");
  }
  return bad;
}

std::pair<int32_t, int32_t> ShardSamples::member_of(int64_t sample,
                                                    std::span<const int32_t> fields) const {
  for (int32_t field : fields) {
    if (field < 0) continue;
    const int32_t member = field_members_[field][sample];
    if (member >= 0) return {member, field};
  }
  return {-1, -1};
}

Result<std::shared_ptr<const ShardIndex>> ShardSamples::index(int64_t shard) const {
  {
    std::lock_guard<std::mutex> lock(indexes_mutex_);
    if (indexes_[shard] != nullptr) return indexes_[shard];
  }
  const Shard& s = shards_[shard];
  std::vector<std::string> notes;
  STOKER_ASSIGN_OR_RETURN(
      std::vector<std::shared_ptr<const ShardIndex>> opened,
      open_shard_indexes(std::span<const std::string>(&s.url, 1), cache_dir_, 1, &notes));
  const ShardIndex& index = *opened[0];
  if (index.shard_bytes() != s.bytes || index.opened_version() != s.version ||
      static_cast<int64_t>(index.members().size()) != s.members) {
    return corrupt(
        s.url, "changed since the dataset was opened (" + std::to_string(index.shard_bytes()) +
                   " bytes, " + std::to_string(index.members().size()) + " members, version " +
                   index.opened_version() + " now; " + std::to_string(s.bytes) + ", " +
                   std::to_string(s.members) + ", " + s.version + " then): open the dataset again");
  }
  std::lock_guard<std::mutex> lock(indexes_mutex_);
  if (indexes_[shard] == nullptr) indexes_[shard] = std::move(opened[0]);
  return indexes_[shard];
}

}  // namespace stoker
