// ShardSamples: the samples of a dataset of tar shards, grouped from the shards' indexes, and
// the saved table a process opens them again from without touching a member.
//
// Grouping (WebDataset's rule): a member's key is its path up to the first dot of its file
// name and its field the rest, lower-cased (`dir/x.seg.PNG`: key `dir/x`, field `seg.png`);
// consecutive members of one shard with one key make one sample. Per sample the table keeps
// its shard, its first member, its key and its label (a small `.cls` member's integer, -1 when
// it has none); per field name found, the member each sample has of it (-1: none), and the
// samples that have a field twice (the second is not read).
//
// The table: open() gets every shard's size and version (a stat, or a HEAD) and maps the table
// saved under `<cache_dir>/shards/` for exactly those shards at those versions (checksummed:
// a damaged table is rebuilt, never trusted); without one it opens the shards' indexes
// (open_shard_indexes: cache, sidecar or scan), groups them and saves the table. reopen()
// maps a table open() saved, given the file identity open() saw (table_version()): one stat
// and one map, no checksum pass, no request to the shards, nothing per member. That is what
// an unpickled dataset does in every Ray task and spawned process.
//
// Shard indexes: index() opens a shard's on first use (from the cache, a sidecar or a scan)
// and binds it to the shard's version recorded in the table, so a shard that changed since
// the table was made is refused by ShardIndex::read_members, never read as another sample.
//
// Ownership: shared (std::shared_ptr<const ShardSamples>) by a dataset and its loaders.
// Thread-safety: immutable but for the indexes index() opens, under a lock; any number of
// threads may use one.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "stoker/shard_index.h"
#include "stoker/status.h"

namespace stoker {

class ShardSamples {
 public:
  /// A shard as the table records it.
  struct Shard {
    std::string url;
    int64_t bytes = 0;
    std::string version;  // ByteSource::version_tag() when it was opened
    int64_t members = 0;  // in its index
    std::string damage;   // ShardIndex::damage(): "" when whole
  };
  /// A sample that has a field twice: the field, and the name of the member not read.
  struct Duplicate {
    int64_t sample = 0;
    int32_t field = 0;  // into fields()
    std::string second;
  };

  /// The samples of the shards at `urls` (local paths or URLs), opened `threads` at a time.
  /// `sidecar_notes` (when given) receives, per shard, why its sidecar was refused ("" when
  /// used, absent, or when the table spared opening the indexes). `cache_dir` "" neither
  /// reads nor saves a table. Errors: the first shard that cannot be opened, by URL;
  /// kCorruptData when the shards hold no sample.
  static Result<std::shared_ptr<const ShardSamples>> open(
      std::span<const std::string> urls, const std::string& cache_dir, int threads,
      std::vector<std::string>* sidecar_notes = nullptr);
  /// The samples of the table at `table`, which open() saved and whose file had version
  /// `table_version` then (table_version()); the shards' indexes are opened from `cache_dir`
  /// as they are used. Errors: kCorruptData when the file is not that table any more (or
  /// never was one); kNotFound when it is gone. The caller opens the shards again then.
  static Result<std::shared_ptr<const ShardSamples>> reopen(const std::string& table,
                                                            const std::string& table_version,
                                                            const std::string& cache_dir);
  /// The samples of a table's bytes, checked as open() checks a saved table (checksum,
  /// structure, every value in range), without a cache folder: for tests and fuzzing.
  /// Errors: kCorruptData naming `what`.
  static Result<std::shared_ptr<const ShardSamples>> from_bytes(std::vector<uint8_t> bytes,
                                                                const std::string& what);
  /// The bytes of the table (what open() saves).
  std::span<const uint8_t> table_bytes() const;
  /// Groups the members of opened indexes (one per URL) into samples; nothing is saved.
  static Result<std::shared_ptr<const ShardSamples>> group(
      std::vector<std::string> urls, std::vector<std::shared_ptr<const ShardIndex>> indexes);

  ~ShardSamples();
  ShardSamples(const ShardSamples&) = delete;
  ShardSamples& operator=(const ShardSamples&) = delete;

  int64_t size() const { return static_cast<int64_t>(sample_shard_.size()); }
  const std::vector<Shard>& shards() const { return shards_; }
  const std::string& url(int64_t shard) const { return shards_[shard].url; }

  /// Per sample: its shard, the number of its first member in that shard's index, its label.
  std::span<const int32_t> sample_shard() const { return sample_shard_; }
  std::span<const int32_t> first_member() const { return first_member_; }
  std::span<const int64_t> labels() const { return labels_; }
  /// Per shard and one more: the number of its first sample (the last entry: size()).
  std::span<const int64_t> shard_first() const { return shard_first_; }
  /// The sample's key: `dir/x` for members `dir/x.jpg`, `dir/x.txt`.
  std::string_view key(int64_t sample) const;

  /// The field names the members have, sorted.
  const std::vector<std::string>& fields() const { return fields_; }
  /// The field's number in fields(), -1 when no member has it.
  int32_t field_number(std::string_view name) const;
  /// Per sample: the member it has of field `field` (a number in fields()), -1 when none.
  std::span<const int32_t> field_members(int32_t field) const { return field_members_[field]; }
  /// Samples that have a field twice, by sample then field.
  const std::vector<Duplicate>& duplicates() const { return duplicates_; }
  /// The samples that have one of `fields` (numbers in fields(); -1s are skipped) twice,
  /// sorted, each with why it cannot be read: "<url>: sample '<key>', field '<field>': the
  /// sample has two members of this field (the second is '<name>')".
  std::vector<std::pair<int64_t, std::string>> bad_samples(std::span<const int32_t> fields) const;
  /// The member sample `sample` has of the first of `fields` (numbers in fields(), -1 for one
  /// no member has) it has, and which of them that is; {-1, -1} when it has none.
  std::pair<int32_t, int32_t> member_of(int64_t sample, std::span<const int32_t> fields) const;

  /// The index of shard `shard`, opened on first use and bound to the version in the table.
  /// Errors: the open's; kCorruptData naming the shard when it is not the shard the table
  /// was made of (another size, version or number of members).
  Result<std::shared_ptr<const ShardIndex>> index(int64_t shard) const;

  /// The saved table and the identity its file had when open() made or checked it; "" when
  /// none was saved (no cache folder, a source without versions, a folder not writable).
  const std::string& table_path() const { return table_path_; }
  const std::string& table_version() const { return table_version_; }

 private:
  struct Table;
  ShardSamples();
  static Result<std::shared_ptr<ShardSamples>> view(std::unique_ptr<Table> table,
                                                    const std::string& what);
  // group()'s work, the result still open to open()'s cache fields.
  static Result<std::shared_ptr<ShardSamples>> grouped(
      std::vector<std::string> urls, std::vector<std::shared_ptr<const ShardIndex>> indexes);
  // view() of bytes that came from a file: their checksum and consistency checked too.
  static Result<std::shared_ptr<ShardSamples>> checked(std::unique_ptr<Table> table,
                                                       const std::string& what);
  /// Whether every value of the table is in range (O(samples)): for a table read from a file.
  bool consistent() const;

  std::unique_ptr<Table> table_;  // the bytes every span below points into
  std::vector<Shard> shards_;
  std::span<const int32_t> sample_shard_, first_member_;
  std::span<const int64_t> labels_, shard_first_, key_offsets_;
  std::string_view keys_;
  std::vector<std::string> fields_;
  std::vector<std::span<const int32_t>> field_members_;
  std::vector<Duplicate> duplicates_;
  std::string cache_dir_;
  std::string table_path_, table_version_;

  mutable std::mutex indexes_mutex_;
  mutable std::vector<std::shared_ptr<const ShardIndex>> indexes_;  // GUARDED_BY(mutex)
};

/// (key, field) of a tar member's name, as ShardSamples groups them: `dir/x.seg.PNG` ->
/// (`dir/x`, `seg.png`); a name without a dot in its file name is a key with field "".
std::pair<std::string_view, std::string> shard_member_field(std::string_view name);

}  // namespace stoker
