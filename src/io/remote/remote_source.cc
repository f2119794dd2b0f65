// The remote ByteSource (open_remote_source), and the process-wide registries that
// open_source() and set_remote_options() keep.
#include "stoker/remote_source.h"

#include <atomic>
#include <filesystem>
#include <map>
#include <utility>
#include <vector>

#include "core/mutex.h"
#include "io/remote/cache_config.h"
#include "io/remote/object_request.h"
#include "io/remote/per_fork_generation.h"
#include "io/remote/range_cache.h"
#include "io/remote/remote_object.h"
#include "io/remote/remote_options.h"

namespace stoker {
namespace {

bool starts_with(const std::string& text, const std::string& prefix) {
  return text.rfind(prefix, 0) == 0;
}

class RemoteSource final : public ByteSource {
 public:
  explicit RemoteSource(std::shared_ptr<const io::RemoteObject> object)
      : ByteSource(object->target.name), object_(std::move(object)) {}

  int64_t size() const override { return object_->size; }
  int64_t mtime_ns() const override { return object_->mtime_ns; }
  // Every ranged GET carries If-Match and checks the reply's version: a replaced object
  // fails the read that sees it.
  Status check_unchanged() const override { return Status(); }
  std::string version_tag() const override { return object_->etag; }
  bool is_remote() const override { return true; }

  void prefetch(std::span<const ByteRange> ranges) const override {
    io::range_cache().prefetch(object_, ranges);
  }

  Result<size_t> read_at(int64_t offset, std::span<uint8_t> out) const override {
    if (offset < 0) {
      return Status(StatusCode::kInvalidArgument,
                    "'" + name() + "': read at negative offset " + std::to_string(offset));
    }
    return io::range_cache().read(object_, offset, out);
  }

 private:
  const std::shared_ptr<const io::RemoteObject> object_;
};

// What HEAD (or the GET of byte 0 that stands in for it) said about the object.
Result<io::RemoteObject> describe(io::ObjectTarget target) {
  io::RemoteObject object;
  io::HttpResponse head_failed;
  Result<io::HttpResponse> head = io::send_with_retries(
      target, io::HttpRequest{.method = io::HttpMethod::kHead}, {}, &head_failed);
  if (head.ok() && head->content_length >= 0) {
    object.size = head->content_length;
    object.etag = head->etag;
    object.mtime_ns = head->mtime_ns;
  } else {
    // HEAD is refused by presigned GET URLs, and a HEAD error has no body to say which S3
    // error it was (a wrong region, missing key, refused credentials): a GET of the first
    // byte answers both. Not after a 5xx or 429, which were retried as long as allowed.
    const bool refused = !head.ok() && head_failed.curl_code == 0 && head_failed.status >= 300 &&
                         head_failed.status < 500 && head_failed.status != 429;
    if (head.ok() || refused) {
      uint8_t first = 0;
      io::HttpResponse get_failed;
      Result<io::HttpResponse> get = io::send_with_retries(
          target, io::HttpRequest{.method = io::HttpMethod::kGet, .range = ByteRange{0, 1}},
          std::span<uint8_t>(&first, 1), &get_failed);
      // The same refusal, now in S3's words (its XML body); else what HEAD met.
      if (!get.ok())
        return head.ok() || get_failed.status == head_failed.status ? get.status() : head.status();
      object.size = get->status == 206 ? get->content_range_total : get->content_length;
      object.etag = get->etag;
      object.mtime_ns = get->mtime_ns;
      if (object.size < 0) {
        return Status(StatusCode::kIoError, target.name + ": the server did not say the size");
      }
    } else {
      return head.status();
    }
  }
  object.cache_key =
      target.name + "\n" +
      (object.etag.empty() ? std::to_string(object.size) + "@" + std::to_string(object.mtime_ns)
                           : object.etag);
  object.target = std::move(target);
  return object;
}

// Options registered with set_remote_options(): an immutable list per call, swapped in
// without a lock (a forked child reads it whatever its parent's threads were doing).
struct OptionsRegistry {
  std::vector<std::pair<std::string, RemoteOptions>> entries;
  const OptionsRegistry* previous = nullptr;  // kept: a reader may still hold it
};
std::atomic<const OptionsRegistry*> registered_options{nullptr};

RemoteOptions options_for(const std::string& url) {
  const OptionsRegistry* registry = registered_options.load(std::memory_order_acquire);
  const std::pair<std::string, RemoteOptions>* best = nullptr;
  if (registry != nullptr) {
    for (const auto& entry : registry->entries) {
      if (starts_with(url, entry.first) &&
          (best == nullptr || entry.first.size() > best->first.size())) {
        best = &entry;
      }
    }
  }
  return best == nullptr ? RemoteOptions{} : best->second;
}

// The remote sources open_source() opened, one per URL, in this fork generation.
class SharedSources {
 public:
  std::shared_ptr<const ByteSource> find(const std::string& url) EXCLUDES(mutex_) {
    core::MutexLock lock(&mutex_);
    const auto found = sources_.find(url);
    return found == sources_.end() ? nullptr : found->second;
  }
  // The source kept for `url`: `source`, or one another thread kept first.
  std::shared_ptr<const ByteSource> keep(const std::string& url,
                                         std::shared_ptr<const ByteSource> source)
      EXCLUDES(mutex_) {
    core::MutexLock lock(&mutex_);
    return sources_.emplace(url, std::move(source)).first->second;
  }
  void forget_prefix(const std::string& prefix) EXCLUDES(mutex_) {
    core::MutexLock lock(&mutex_);
    for (auto it = sources_.lower_bound(prefix);
         it != sources_.end() && starts_with(it->first, prefix);) {
      it = sources_.erase(it);
    }
  }

 private:
  core::Mutex mutex_;
  std::map<std::string, std::shared_ptr<const ByteSource>> sources_ GUARDED_BY(mutex_);
};
io::PerForkGeneration<SharedSources> shared_sources;

}  // namespace

bool is_remote_url(const std::string& path) {
  return starts_with(path, "s3://") || starts_with(path, "http://") ||
         starts_with(path, "https://");
}

Result<std::unique_ptr<ByteSource>> open_remote_source(const std::string& url,
                                                       const RemoteOptions& options) {
  RemoteOptions resolved;
  if (starts_with(url, "s3://")) {
    STOKER_ASSIGN_OR_RETURN(resolved, resolve_remote_options(options));
  } else {
    resolved = io::with_default_limits(options);  // no credentials, region or endpoint
  }
  STOKER_ASSIGN_OR_RETURN(io::ObjectTarget target, io::make_object_target(url, resolved));
  STOKER_ASSIGN_OR_RETURN(io::RemoteObject object, describe(std::move(target)));
  return std::unique_ptr<ByteSource>(
      new RemoteSource(std::make_shared<const io::RemoteObject>(std::move(object))));
}

void set_remote_options(const std::string& prefix, const RemoteOptions& options) {
  auto* fresh = new OptionsRegistry();
  const OptionsRegistry* current = registered_options.load(std::memory_order_acquire);
  do {
    fresh->entries.clear();
    if (current != nullptr) {
      for (const auto& entry : current->entries) {
        if (entry.first != prefix) fresh->entries.push_back(entry);
      }
    }
    fresh->entries.emplace_back(prefix, options);
    fresh->previous = current;
  } while (!registered_options.compare_exchange_weak(current, fresh, std::memory_order_acq_rel));
  // Sources opened under the old options are opened again with the new.
  shared_sources.get().forget_prefix(prefix);
}

void configure_remote_cache(int64_t memory_bytes, const std::string& disk_folder,
                            int64_t disk_bytes) {
  if (!disk_folder.empty()) {
    std::error_code error;
    std::filesystem::create_directories(disk_folder, error);  // a failure: every write misses
  }
  io::set_cache_config(memory_bytes, disk_folder, disk_bytes);
  io::range_cache().trim();
}

Result<std::shared_ptr<const ByteSource>> open_source(const std::string& path_or_url) {
  if (!is_remote_url(path_or_url)) {
    STOKER_ASSIGN_OR_RETURN(std::unique_ptr<ByteSource> file, open_file_source(path_or_url));
    return std::shared_ptr<const ByteSource>(std::move(file));
  }
  SharedSources& sources = shared_sources.get();
  if (auto source = sources.find(path_or_url)) return source;
  STOKER_ASSIGN_OR_RETURN(std::unique_ptr<ByteSource> opened,
                          open_remote_source(path_or_url, options_for(path_or_url)));
  return sources.keep(path_or_url, std::shared_ptr<const ByteSource>(std::move(opened)));
}

}  // namespace stoker
