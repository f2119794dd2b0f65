#include "io/remote/disk_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <system_error>
#include <vector>

#include "core/fnv1a.h"
#include "core/random.h"

namespace stoker::io {
namespace {

namespace fs = std::filesystem;
constexpr const char* kSuffix = ".range";

std::string file_of(const CacheConfig& config, const std::string& key) {
  char name[40];
  std::snprintf(name, sizeof(name), "%016llx%016llx",
                static_cast<unsigned long long>(core::mix64(core::fnv1a(key, 0))),
                static_cast<unsigned long long>(core::mix64(core::fnv1a(key, 0x5bd1e995))));
  return config.disk_folder + "/" + name + kSuffix;
}

bool write_all(int fd, std::span<const uint8_t> bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

void trim(const CacheConfig& config) {
  struct Entry {
    fs::file_time_type time;
    uintmax_t size;
    fs::path path;
  };
  std::vector<Entry> entries;
  uintmax_t total = 0;
  std::error_code error;
  for (const auto& item : fs::directory_iterator(config.disk_folder, error)) {
    if (item.path().extension() != kSuffix) continue;
    std::error_code e;
    const uintmax_t size = item.file_size(e);
    const auto time = item.last_write_time(e);
    if (e) continue;  // removed by another process meanwhile
    entries.push_back({time, size, item.path()});
    total += size;
  }
  if (total <= static_cast<uintmax_t>(std::max<int64_t>(0, config.disk_bytes))) return;
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.time < b.time; });
  for (const Entry& entry : entries) {
    if (total <= static_cast<uintmax_t>(std::max<int64_t>(0, config.disk_bytes))) break;
    std::error_code e;
    if (fs::remove(entry.path, e)) total -= entry.size;
  }
}

}  // namespace

bool disk_cache_read(const CacheConfig& config, const std::string& key, std::span<uint8_t> out) {
  if (config.disk_folder.empty()) return false;
  const std::string path = file_of(config, key);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st {};
  bool hit = ::fstat(fd, &st) == 0 && static_cast<uint64_t>(st.st_size) == out.size();
  size_t done = 0;
  while (hit && done < out.size()) {
    const ssize_t n = ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      hit = false;
    else
      done += static_cast<size_t>(n);
  }
  if (hit) ::futimens(fd, nullptr);  // recently used: trimmed last
  ::close(fd);
  return hit;
}

void disk_cache_write(const CacheConfig& config, const std::string& key,
                      std::span<const uint8_t> bytes) {
  if (config.disk_folder.empty() || static_cast<int64_t>(bytes.size()) > config.disk_bytes) return;
  static std::atomic<uint64_t> serial{0};
  const std::string path = file_of(config, key);
  const std::string temporary = path + ".tmp" + std::to_string(::getpid()) + "." +
                                std::to_string(serial.fetch_add(1, std::memory_order_relaxed));
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return;
  const bool written = write_all(fd, bytes);
  ::close(fd);
  // No fsync: a cache file lost in a crash is only fetched again.
  if (!written || ::rename(temporary.c_str(), path.c_str()) != 0) {
    ::unlink(temporary.c_str());
    return;
  }
  trim(config);
}

}  // namespace stoker::io
