// The local-file ByteSource: one read-only descriptor, read with pread, so that any number of
// threads read at once without sharing a file position.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "stoker/byte_source.h"

namespace stoker {
namespace {

class FileSource final : public ByteSource {
 public:
  FileSource(std::string path, int fd, int64_t size)
      : ByteSource(std::move(path)), fd_(fd), size_(size) {}
  ~FileSource() override { ::close(fd_); }

  int64_t size() const override { return size_; }

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
};

}  // namespace

Result<std::unique_ptr<ByteSource>> open_file_source(const std::string& path) {
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
  return std::unique_ptr<ByteSource>(new FileSource(path, fd, static_cast<int64_t>(st.st_size)));
}

}  // namespace stoker
