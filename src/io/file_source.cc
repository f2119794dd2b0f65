// The local-file ByteSource: one read-only descriptor, read with pread, so that any number of
// threads read at once without sharing a file position.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/file.h"
#include "stoker/byte_source.h"

namespace stoker {
namespace {

int64_t mtime_of(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

// Which file this is and which version of it: device and inode (a file renamed over the path is
// another inode), size, modification time and change time. The change time is set by the
// kernel on every write, rename or attribute change and cannot be set back by a program (as
// utime sets mtime), so a rewrite in place that keeps the size and restores the mtime still
// changes it, at the file system's timestamp granularity.
std::string identity_of(const struct stat& st) {
  return "dev " + std::to_string(st.st_dev) + " inode " + std::to_string(st.st_ino) + " size " +
         std::to_string(st.st_size) + " mtime " + std::to_string(mtime_of(st)) + " ctime " +
         std::to_string(static_cast<int64_t>(st.st_ctim.tv_sec) * 1000000000 + st.st_ctim.tv_nsec);
}

class FileSource final : public ByteSource {
 public:
  FileSource(std::string path, int fd, const struct stat& st)
      : ByteSource(std::move(path)),
        fd_(fd),
        size_(static_cast<int64_t>(st.st_size)),
        mtime_ns_(mtime_of(st)),
        identity_(identity_of(st)) {}
  ~FileSource() override { ::close(fd_); }

  int64_t size() const override { return size_; }
  int64_t mtime_ns() const override { return mtime_ns_; }
  std::string version_tag() const override { return identity_; }

  Status check_unchanged() const override {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) {
      return Status(StatusCode::kIoError, "cannot stat '" + name() + "': " + std::strerror(errno));
    }
    // Size and mtime only: the open descriptor keeps the old bytes when the path is renamed
    // over (which changes the old inode's ctime), so only a write into this inode counts.
    if (st.st_size == size_ && mtime_of(st) == mtime_ns_) return Status();
    return Status(StatusCode::kCorruptData,
                  "'" + name() + "' changed while it was open (" + std::to_string(size_) +
                      " bytes then, " + std::to_string(st.st_size) + " now; its identity then " +
                      identity_ + ", now " + identity_of(st) + "): it was rewritten in place");
  }

  Result<size_t> read_at(int64_t offset, std::span<uint8_t> out) const override {
    if (offset < 0) {
      return Status(StatusCode::kInvalidArgument,
                    "'" + name() + "': read at negative offset " + std::to_string(offset));
    }
    size_t done = 0;
    while (done < out.size() && offset + static_cast<int64_t>(done) < size_) {
      const ssize_t n = ::pread(fd_, out.data() + done, out.size() - done,
                                static_cast<off_t>(offset + static_cast<int64_t>(done)));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        return Status(StatusCode::kIoError, "'" + name() + "': cannot read at byte " +
                                                std::to_string(offset + done) + ": " +
                                                std::strerror(errno));
      }
      if (n == 0) break;  // the file shrank since it was opened: the caller sees a short read
      done += static_cast<size_t>(n);
    }
    return done;
  }

 private:
  const int fd_;
  const int64_t size_;
  const int64_t mtime_ns_;
  const std::string identity_;  // identity_of() at open
};

}  // namespace

Result<std::unique_ptr<ByteSource>> open_file_source(const std::string& path) {
  STOKER_RETURN_IF_ERROR(core::check_path(path));
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    return Status(error == ENOENT ? StatusCode::kNotFound : StatusCode::kIoError,
                  "cannot open '" + path + "': " + std::strerror(error));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int error = errno;
    ::close(fd);
    return Status(StatusCode::kIoError, "cannot stat '" + path + "': " + std::strerror(error));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status(StatusCode::kInvalidArgument, "'" + path + "' is not a regular file");
  }
  return std::unique_ptr<ByteSource>(new FileSource(path, fd, st));
}

}  // namespace stoker
