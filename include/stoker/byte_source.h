// ByteSource: bytes read by offset from somewhere — a local file, a buffer in memory, an object
// in S3 or behind HTTP(S) (stoker/remote_source.h). Every read stoker makes of a video goes through
// one, so the decoder does not care where the bytes live, and tests can hand it bytes in memory.
//
// Ownership: the factories return a source the caller owns (or shares). A memory source keeps
// its bytes alive through the `owner` it was given.
// Thread-safety: read_at() and every other method may be called from any number of threads at
// once; a source keeps no read position.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "stoker/status.h"

namespace stoker {

/// A span of bytes of a source: [offset, offset + length).
struct ByteRange {
  int64_t offset = 0;
  int64_t length = 0;
  int64_t end() const { return offset + length; }
  bool operator==(const ByteRange&) const = default;
};

class ByteSource {
 public:
  virtual ~ByteSource() = default;
  ByteSource(const ByteSource&) = delete;
  ByteSource& operator=(const ByteSource&) = delete;

  /// What error messages call it: the path, the URL, or the name given to bytes in memory.
  const std::string& name() const { return name_; }
  /// Its length in bytes, fixed when it was opened.
  virtual int64_t size() const = 0;
  /// When the bytes were last modified (nanoseconds since the epoch) as of opening; 0 when the
  /// source cannot say. With size(), the version a saved frame table is checked against.
  virtual int64_t mtime_ns() const { return 0; }
  /// OK while the bytes are those the source opened; kCorruptData naming the source once they
  /// changed (a file written into in place: its size or mtime differs; a rename over its path
  /// leaves the open file's bytes as they were). Cheap enough for every
  /// read call: one fstat for a file, nothing for bytes in memory.
  virtual Status check_unchanged() const { return Status(); }
  /// A tag that changes whenever the bytes do, as of opening: an object's ETag; a local file's
  /// device, inode, size, modification and change time (a rewrite in place changes the change
  /// time, a rename over the path the inode); "" when the source has none (bytes in memory).
  virtual std::string version_tag() const { return ""; }

  /// Whether every read costs a request (object storage, HTTP). Readers of such a source ask
  /// for whole windows with prefetch() and serve their small reads from what it fetched.
  virtual bool is_remote() const { return false; }
  /// A hint that `ranges` (sorted, disjoint) will be read soon: a remote source starts fetching
  /// them in the background (nearby ranges coalesced into one request) and keeps them in its
  /// cache, so the read_at() calls that follow wait for at most that one request. Never fails:
  /// a fetch that fails is retried by the read that needs it. Local sources ignore it.
  virtual void prefetch(std::span<const ByteRange> ranges) const { (void)ranges; }

  /// Reads min(out.size(), size() - offset) bytes starting at `offset` into `out` and returns
  /// how many: fewer than out.size() only at the end, 0 at or past it. Errors (kIoError,
  /// kInvalidArgument for a negative offset): the message names the source and the offset.
  virtual Result<size_t> read_at(int64_t offset, std::span<uint8_t> out) const = 0;

 protected:
  explicit ByteSource(std::string name) : name_(std::move(name)) {}

 private:
  const std::string name_;
};

/// Opens the local file at `path` for reading (one descriptor, read with pread; closed when
/// the source is destroyed). Errors: kNotFound, kIoError, kInvalidArgument (not a regular
/// file); the message names the path.
Result<std::unique_ptr<ByteSource>> open_file_source(const std::string& path);

/// `bytes`, which stay valid while `owner` lives, read as a source called `name`. Nothing is
/// copied.
std::unique_ptr<ByteSource> memory_source(std::string name, std::span<const uint8_t> bytes,
                                          std::shared_ptr<const void> owner);
/// A source over a buffer it takes.
std::unique_ptr<ByteSource> memory_source(std::string name, std::vector<uint8_t> bytes);

}  // namespace stoker
