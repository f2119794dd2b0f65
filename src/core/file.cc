#include "core/file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

namespace stoker::core {
namespace {

Status os_error(const std::string& what, int error) {
  return Status(error == ENOENT ? StatusCode::kNotFound : StatusCode::kIoError,
                what + ": " + std::strerror(error));
}

std::string folder_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// Closes a descriptor when it goes out of scope.
class Descriptor {
 public:
  explicit Descriptor(int fd) : fd_(fd) {}
  ~Descriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  int get() const { return fd_; }
  /// Closes now, reporting the error a deferred write may only show here.
  int close() {
    const int result = ::close(fd_);
    fd_ = -1;
    return result;
  }

 private:
  int fd_;
};

Status sync(const std::string& path, bool folder) {
  Descriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | (folder ? O_DIRECTORY : 0)));
  if (fd.get() < 0) return os_error("cannot open '" + path + "'", errno);
  if (::fsync(fd.get()) != 0) return os_error("cannot flush '" + path + "' to disk", errno);
  return Status();
}

}  // namespace

Status check_path(const std::string& path) {
  if (path.empty()) return Status(StatusCode::kInvalidArgument, "the path is empty");
  const size_t nul = path.find('\0');
  if (nul != std::string::npos) {
    return Status(
        StatusCode::kInvalidArgument,
        "the path '" + path.substr(0, nul) + "\\0...' holds a NUL byte at " + std::to_string(nul));
  }
  return Status();
}

Result<FileIdentity> stat_file(const std::string& path) {
  STOKER_RETURN_IF_ERROR(check_path(path));
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int error = errno;
    return Status(error == ENOENT ? StatusCode::kNotFound : StatusCode::kIoError,
                  std::strerror(error));
  }
  if (!S_ISREG(st.st_mode)) return Status(StatusCode::kInvalidArgument, "not a regular file");
  return FileIdentity{
      .size = static_cast<int64_t>(st.st_size),
      .mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
}

namespace {

// The crash-test hook (see kPauseWritingVariable in file.h): pauses at `moment` ("half" or
// "whole") when the variable asks for it and `path` contains its text, after saying so on
// stderr, so that a test can kill the process right there.
void pause_for_crash_test(const std::string& path, const std::string& temporary,
                          const std::string& moment) {
  const char* variable = std::getenv(kPauseWritingVariable);
  if (variable == nullptr) return;
  const std::string wanted(variable);
  const std::string prefix = moment + ":";
  if (wanted.rfind(prefix, 0) != 0 || wanted.size() == prefix.size() ||
      path.find(wanted.substr(prefix.size())) == std::string::npos) {
    return;
  }
  std::fprintf(stderr, "stoker debug: paused writing '%s' to '%s': %s\n", temporary.c_str(),
               path.c_str(), moment == "half" ? "half of it written" : "written, not renamed");
  std::fflush(stderr);
  std::this_thread::sleep_for(std::chrono::seconds(kPauseWritingSeconds));
}

Status write_by_rename(const std::string& path, std::span<const uint8_t> bytes, bool durable) {
  STOKER_RETURN_IF_ERROR(check_path(path));
  static std::atomic<uint64_t> writes{0};
  const std::string temporary =
      path + ".tmp" + std::to_string(::getpid()) + "." + std::to_string(writes++);
  Status written = [&]() -> Status {
    Descriptor fd(::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (fd.get() < 0) return os_error("cannot create '" + temporary + "'", errno);
    size_t done = 0;
    bool paused = false;
    while (done < bytes.size()) {
      if (!paused && done >= bytes.size() / 2) {
        pause_for_crash_test(path, temporary, "half");
        paused = true;
      }
      // At most half at a time, so that the hook above sees the file half written.
      const size_t chunk = std::max<size_t>(bytes.size() / 2, 1);
      const ssize_t n =
          ::write(fd.get(), bytes.data() + done, std::min(chunk, bytes.size() - done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return os_error("cannot write '" + temporary + "'", errno);
      done += static_cast<size_t>(n);
    }
    if (durable && ::fsync(fd.get()) != 0) {
      return os_error("cannot flush '" + temporary + "'", errno);
    }
    if (fd.close() != 0) return os_error("cannot close '" + temporary + "'", errno);
    pause_for_crash_test(path, temporary, "whole");
    if (::rename(temporary.c_str(), path.c_str()) != 0) {
      return os_error("cannot rename '" + temporary + "' to '" + path + "'", errno);
    }
    return durable ? sync(folder_of(path), true) : Status();
  }();
  if (!written.ok()) remove_file_if_present(temporary);
  return written;
}

}  // namespace

Status write_file_atomically(const std::string& path, std::span<const uint8_t> bytes) {
  return write_by_rename(path, bytes, true);
}

Status write_cache_file(const std::string& path, std::span<const uint8_t> bytes) {
  return write_by_rename(path, bytes, false);
}

Status create_directories(const std::string& path) {
  STOKER_RETURN_IF_ERROR(check_path(path));
  std::error_code error;
  std::filesystem::create_directories(path, error);
  if (error) return os_error("cannot create the folder '" + path + "'", error.value());
  return Status();
}

Status commit_file(const std::string& temporary, const std::string& path) {
  STOKER_RETURN_IF_ERROR(check_path(temporary));
  STOKER_RETURN_IF_ERROR(check_path(path));
  STOKER_RETURN_IF_ERROR(sync(temporary, false));
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    return os_error("cannot rename '" + temporary + "' to '" + path + "'", errno);
  }
  return sync(folder_of(path), true);
}

void remove_file_if_present(const std::string& path) { ::unlink(path.c_str()); }

Result<std::unique_ptr<MappedFile>> MappedFile::open(const std::string& path) {
  STOKER_RETURN_IF_ERROR(check_path(path));
  Descriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return os_error("cannot open '" + path + "'", errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return os_error("cannot stat '" + path + "'", errno);
  const size_t size = static_cast<size_t>(st.st_size);
  if (size == 0) return std::unique_ptr<MappedFile>(new MappedFile(nullptr, 0));
  void* data = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd.get(), 0);
  if (data == MAP_FAILED) return os_error("cannot map '" + path + "'", errno);
  return std::unique_ptr<MappedFile>(new MappedFile(static_cast<const uint8_t*>(data), size));
}

void MappedFile::release_resident() const {
  // Only advice: on failure the pages simply stay resident.
  if (data_ != nullptr) ::madvise(const_cast<uint8_t*>(data_), size_, MADV_DONTNEED);
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace stoker::core
