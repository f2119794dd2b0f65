// ShardIndex: where each member of a tar shard lies, bound to the bytes it describes.
//
// A shard is a tar file in WebDataset's layout (stoker/shards.py groups its members into
// samples). Its index lists every regular file member: name, data offset, size, the CRC-32C of
// the member's 512-byte tar header, and the value of small integer `.cls` members. It comes
// from one pass over the headers (scan), or from its saved binary form (encode / decode: a
// sidecar `<shard>.index` written beside the shard, or a cache file), checksummed so damaged
// bytes are refused, never trusted.
//
// Bound to content: the header CRCs tie the index to the shard it was made from. A saved index
// is accepted for a shard only when the shard's size and its first and last members' headers
// match (check_headers: two small reads), and every member read by read_members is checked
// against its header on the way (the header is read with the data: one range each), so an
// index of another shard, or of an earlier version of this one, cannot deliver a wrong member.
// Headers alone do not tell a shard rewritten with the same names and sizes (tar headers of
// mtime 0, as Python's tarfile and stoker shard write them) from the one indexed, so an index
// opened by open_shard_indexes is also bound to the shard's version when it was opened
// (ByteSource::version_tag: a file's device, inode, size, mtime and ctime; an object's ETag),
// which read_members compares before and after reading. Not detected: bytes that change without
// a write through the file system (bit rot, a disk's silent corruption: shards carry no
// checksum of their data), and a rewrite within the file system's timestamp granularity of the
// previous write that keeps the inode and size.
//
// Damage: a scan keeps the members before the first damage (a corrupt header, a member cut by
// the end of the file, no end-of-archive marker) and says what and where in damage().
//
// Ownership: values; read_members writes into memory the caller owns.
// Thread-safety: a ShardIndex is immutable once made; any number of threads may read from one.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "stoker/byte_source.h"
#include "stoker/status.h"

namespace stoker {

class ShardIndex {
 public:
  /// The label of a member that is not a small integer `.cls`.
  static constexpr int64_t kNoLabel = std::numeric_limits<int64_t>::min();
  /// The bytes of a tar header: read_members puts one before each member's data.
  static constexpr int64_t kHeaderBytes = 512;

  struct Member {
    std::string name;          // the path in the tar (long names resolved)
    int64_t offset = 0;        // of the data; its header is the kHeaderBytes before
    int64_t size = 0;          // of the data
    uint32_t header_crc = 0;   // CRC-32C of the header block
    int64_t label = kNoLabel;  // a `.cls` member's integer, when it holds one (<= 32 bytes)
  };

  ShardIndex() = default;

  /// One pass over the tar headers of `source` (data skipped; remote shards read in large
  /// ranges). Damage is not an error: see damage(). Errors: the reads' (kIoError, ...).
  static Result<ShardIndex> scan(const ByteSource& source);

  /// The saved form: magic, version, the members, the damage note, a CRC-32C of it all.
  std::vector<uint8_t> encode() const;
  /// Errors (kCorruptData, naming `what`): not an index of this version, damaged bytes.
  static Result<ShardIndex> decode(std::span<const uint8_t> bytes, const std::string& what);

  /// The shard's size when the index was made.
  int64_t shard_bytes() const { return shard_bytes_; }
  const std::vector<Member>& members() const { return members_; }
  /// "" when the tar was whole; else what is wrong and at which byte (members after it lost).
  const std::string& damage() const { return damage_; }

  /// The version (ByteSource::version_tag) of the shard this index was opened for; "" when
  /// not bound (made by scan or decode alone, or a source without versions).
  const std::string& opened_version() const { return opened_version_; }
  /// Binds the index to the shard's version at open (open_shard_indexes calls it).
  void bind_to_version(std::string version) { opened_version_ = std::move(version); }

  /// OK when `source` has this index's size and its first and last members' headers; else
  /// kCorruptData saying how it differs (the index belongs to another shard or version).
  Status check_headers(const ByteSource& source) const;

  /// Reads members `members` (indices into members()) of `source` into `out`, one after
  /// another, each as its kHeaderBytes header then its data; `starts[i]` receives where member
  /// i's data begins in `out`. Each header is checked against the index, and a bound index's
  /// version against the source's before the reads and after them (check_unchanged).
  /// REQUIRES: out.size() == bytes_to_read(members), starts.size() == members.size(). Errors:
  /// kInvalidArgument (a member out of range); kCorruptData naming the shard (and the member)
  /// when the shard's size, version or a header differs from the index ("changed since its
  /// index was made"); the reads'.
  Status read_members(const ByteSource& source, std::span<const int64_t> members,
                      std::span<uint8_t> out, std::span<int64_t> starts) const;
  /// The bytes read_members needs for `members`; -1 when one is out of range.
  int64_t bytes_to_read(std::span<const int64_t> members) const;

 private:
  int64_t shard_bytes_ = 0;
  std::vector<Member> members_;
  std::string damage_;
  std::string opened_version_;  // not saved: a property of the open, not of the bytes
};

/// Opens the index of each shard in `urls` (local paths or URLs, as open_source takes them),
/// `threads` at a time: from the cache under `cache_dir` (keyed by the URL, size and version:
/// ETag or mtime), else from the sidecar `<url>.index` when it passes check_headers, else by
/// a scan; what was not cached is cached (written by rename, without fsync: a damaged cache
/// file fails its checksum and is rebuilt). `sidecar_notes`, when given, receives per shard
/// why its sidecar was refused ("" when used or absent). Errors: the first shard that cannot
/// be opened or read, by URL.
Result<std::vector<std::shared_ptr<const ShardIndex>>> open_shard_indexes(
    std::span<const std::string> urls, const std::string& cache_dir, int threads,
    std::vector<std::string>* sidecar_notes = nullptr);

/// The cache file open_shard_indexes keeps for a shard of this URL, size and version.
std::string shard_index_cache_path(const std::string& cache_dir, const std::string& url,
                                   int64_t size, const std::string& version);

}  // namespace stoker
