// Files on the local disk: what stoker asks of the operating system about them, in one place.
// The index and the ETL use these instead of calling open, ofstream or mmap themselves.
//
// - stat_file: a file's size and modification time, the identity staleness checks compare;
// - write_file_atomically / commit_file: a file appears at its path complete or not at all,
//   and survives a crash once the call returns (written, fsynced, renamed, folder fsynced); an
//   existing file is replaced by rename, never truncated in place, so a reader that mapped it
//   keeps the old bytes;
// - MappedFile: a read-only mapping of a whole file.
//
// Errors are kIoError (or kNotFound), with the OS's reason and the path in the message.
// Thread-safety: free functions, safe from any thread; a MappedFile is immutable.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "stoker/status.h"

namespace stoker::core {

/// kInvalidArgument when `path` cannot name a file: it is empty or holds a NUL byte, where the
/// operating system would cut it and open another file.
Status check_path(const std::string& path);

/// A file's version, for staleness checks: its size and modification time.
struct FileIdentity {
  int64_t size = 0;
  int64_t mtime_ns = 0;
  bool operator==(const FileIdentity&) const = default;
};

/// The identity of the regular file at `path`. Errors: kNotFound, kIoError, kInvalidArgument
/// (not a regular file); the message is the OS's reason only, the caller names the file.
Result<FileIdentity> stat_file(const std::string& path);

/// Writes `bytes` to a temporary file beside `path`, flushes it to disk, renames it to `path`
/// and flushes the folder. The folder must exist. On failure no file is left at `path` that
/// was not there before, and the temporary file is removed.
Status write_file_atomically(const std::string& path, std::span<const uint8_t> bytes);

/// Debug hook for crash tests (an index build takes milliseconds, too short to kill it by
/// chance): when this environment variable is "half:TEXT" or "whole:TEXT" and `path` contains
/// TEXT, write_file_atomically and write_cache_file pause kPauseWritingSeconds with the
/// temporary file half written, or whole but not yet renamed, first writing "stoker debug:
/// paused writing '<temporary>' to '<path>': <when>" on stderr. Unset (always, outside tests):
/// one getenv per file written, nothing else.
inline constexpr const char* kPauseWritingVariable = "STOKER_DEBUG_PAUSE_WRITING";
inline constexpr int kPauseWritingSeconds = 30;

/// As write_file_atomically, without the flushes: readers see the whole file or the old one,
/// but a crash may leave it damaged. For caches whose checksum refuses a damaged file, where a
/// flush per file would cost more than the work cached (8 ms each, for thousands of shards).
Status write_cache_file(const std::string& path, std::span<const uint8_t> bytes);

/// Creates the folder `path` and its missing parents (nothing when it exists).
Status create_directories(const std::string& path);

/// Makes a file written at `temporary` (complete, closed) durable and renames it to `path`:
/// fsync of the file, rename, fsync of the folder. `temporary` must be in the folder of `path`.
Status commit_file(const std::string& temporary, const std::string& path);

/// Removes `path` if it exists; errors are ignored (for cleaning up after a failure).
void remove_file_if_present(const std::string& path);

/// A whole file mapped read-only. The bytes stay valid while the MappedFile lives. The file
/// must not be truncated in place while mapped (reading the lost pages would raise SIGBUS);
/// replacing it by rename, as stoker's own writes do, is safe.
class MappedFile {
 public:
  /// Errors: kNotFound, kIoError (cannot open, stat or map); the message names the path.
  static Result<std::unique_ptr<MappedFile>> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const uint8_t> bytes() const { return {data_, size_}; }

  /// Drops this process's pages of the mapping (madvise MADV_DONTNEED), for a pass that read
  /// every byte once (a checksum at open): the resident set shrinks by them, while the bytes
  /// stay valid and are read again from the page cache on the next access. Thread-safe, as
  /// it changes no byte; a no-op on an empty file.
  void release_resident() const;

 private:
  MappedFile(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  const uint8_t* data_;
  size_t size_;
};

}  // namespace stoker::core
