// The remote ByteSource (open_remote_source), and the process-wide registries that
// open_source() and set_remote_options() keep.
#include "stoker/remote_source.h"

#include <atomic>
#include <filesystem>
#include <functional>
#include <iterator>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "core/mutex.h"
#include "io/remote/cache_config.h"
#include "io/remote/object_listing.h"
#include "io/remote/object_request.h"
#include "io/remote/per_fork_generation.h"
#include "io/remote/range_cache.h"
#include "io/remote/remote_object.h"
#include "io/remote/remote_options.h"
#include "stoker/byte_slice.h"

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

// The key an object's bytes are cached under: its URL and its version.
std::string cache_key(const std::string& name, const io::RemoteObject& object) {
  return name + "\n" +
         (object.etag.empty() ? std::to_string(object.size) + "@" + std::to_string(object.mtime_ns)
                              : object.etag);
}

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
  object.cache_key = cache_key(target.name, object);
  object.target = std::move(target);
  return object;
}

// Target of `url` with `options` resolved (credentials, region and endpoint for s3://).
Result<io::ObjectTarget> resolved_target(const std::string& url, const RemoteOptions& options) {
  RemoteOptions resolved;
  if (starts_with(url, "s3://")) {
    STOKER_ASSIGN_OR_RETURN(resolved, resolve_remote_options(options));
  } else {
    resolved = io::with_default_limits(options);  // no credentials, region or endpoint
  }
  return io::make_object_target(url, resolved);
}

// What remember_listed_objects() was told: URL -> (size, ETag). One table per fork generation.
class ListedObjects {
 public:
  void remember(const std::vector<ListedObject>& objects) EXCLUDES(mutex_) {
    core::MutexLock lock(&mutex_);
    for (const ListedObject& object : objects) {
      if (object.etag.empty() || object.size < 0) continue;
      known_[object.url] = {object.size, object.etag};
    }
  }
  std::optional<std::pair<int64_t, std::string>> find(const std::string& url) EXCLUDES(mutex_) {
    core::MutexLock lock(&mutex_);
    const auto found = known_.find(url);
    if (found == known_.end()) return std::nullopt;
    return found->second;
  }
  // What a listing said under `prefix` was seen with the options it replaces: forgotten.
  void forget_prefix(const std::string& prefix) EXCLUDES(mutex_) {
    core::MutexLock lock(&mutex_);
    for (auto it = known_.lower_bound(prefix);
         it != known_.end() && starts_with(it->first, prefix);) {
      it = known_.erase(it);
    }
  }

 private:
  core::Mutex mutex_;
  std::map<std::string, std::pair<int64_t, std::string>> known_ GUARDED_BY(mutex_);
};
io::PerForkGeneration<ListedObjects> listed_objects;

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

// The remote sources open_source() opened, one per URL, in this fork generation. Each URL is
// opened once (one HEAD): a thread asking for a URL that another thread is opening waits for
// that open and shares its source or its error, so a video a decode thread and a prefetching
// I/O thread touch at once costs one request, not two.
class SharedSources {
 public:
  using Open = std::function<Result<std::unique_ptr<ByteSource>>()>;

  Result<std::shared_ptr<const ByteSource>> get(const std::string& url, const Open& open)
      EXCLUDES(mutex_) {
    core::MutexLock lock(&mutex_);
    for (;;) {
      if (const auto found = sources_.find(url); found != sources_.end()) return found->second;
      const auto pending = opening_.find(url);
      if (pending == opening_.end()) break;
      const std::shared_ptr<Opening> other = pending->second;
      while (!other->done) opened_.wait(&mutex_);
      if (!other->status.ok()) return other->status;
      if (other->source != nullptr) return other->source;
    }
    auto mine = std::make_shared<Opening>();
    opening_.emplace(url, mine);
    lock.unlock();
    Result<std::unique_ptr<ByteSource>> opened = open();
    lock.lock();
    opening_.erase(url);
    mine->done = true;
    if (opened.ok()) {
      mine->source = std::shared_ptr<const ByteSource>(std::move(opened).value());
      if (mine->keep) sources_.emplace(url, mine->source);
    } else {
      mine->status = opened.status();
    }
    opened_.signal_all();
    if (!mine->status.ok()) return mine->status;
    return mine->source;
  }

  void forget_prefix(const std::string& prefix) EXCLUDES(mutex_) {
    core::MutexLock lock(&mutex_);
    for (auto it = sources_.lower_bound(prefix);
         it != sources_.end() && starts_with(it->first, prefix);) {
      it = sources_.erase(it);
    }
    // Opens in progress under the old options serve their callers, and are not kept.
    for (auto it = opening_.lower_bound(prefix);
         it != opening_.end() && starts_with(it->first, prefix); ++it) {
      it->second->keep = false;
    }
  }

 private:
  // An open in progress; done once it has a source or a status.
  struct Opening {
    bool done = false;
    bool keep = true;  // false once forget_prefix() dropped its URL's options
    Status status;
    std::shared_ptr<const ByteSource> source;
  };

  core::Mutex mutex_;
  core::CondVar opened_;
  std::map<std::string, std::shared_ptr<const ByteSource>> sources_ GUARDED_BY(mutex_);
  std::map<std::string, std::shared_ptr<Opening>> opening_ GUARDED_BY(mutex_);
};
io::PerForkGeneration<SharedSources> shared_sources;

}  // namespace

bool is_remote_url(const std::string& path) {
  return starts_with(path, "s3://") || starts_with(path, "http://") ||
         starts_with(path, "https://");
}

Result<std::unique_ptr<ByteSource>> open_remote_source(const std::string& url,
                                                       const RemoteOptions& options) {
  STOKER_ASSIGN_OR_RETURN(io::ObjectTarget target, resolved_target(url, options));
  STOKER_ASSIGN_OR_RETURN(io::RemoteObject object, describe(std::move(target)));
  return std::unique_ptr<ByteSource>(
      new RemoteSource(std::make_shared<const io::RemoteObject>(std::move(object))));
}

void remember_listed_objects(const std::vector<ListedObject>& objects) {
  listed_objects.get().remember(objects);
}

void set_remote_options(const std::string& prefix, const RemoteOptions& options) {
  const OptionsRegistry* current = registered_options.load(std::memory_order_acquire);
  if (current != nullptr) {
    for (const auto& entry : current->entries) {
      // The same options again (a dataset opened again): its sources stay open.
      if (entry.first == prefix && entry.second == options) return;
    }
  }
  auto* fresh = new OptionsRegistry();
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
  // Sources opened under the old options are opened again with the new (and asked again).
  shared_sources.get().forget_prefix(prefix);
  listed_objects.get().forget_prefix(prefix);
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

Result<std::vector<ListedObject>> list_remote_objects(const std::string& prefix_url) {
  if (!starts_with(prefix_url, "s3://")) {
    return Status(StatusCode::kInvalidArgument,
                  "'" + prefix_url + "' cannot be listed: only s3:// URLs have listings");
  }
  const std::string rest = prefix_url.substr(5);
  const size_t slash = rest.find('/');
  const std::string bucket = rest.substr(0, slash);
  const std::string prefix = slash == std::string::npos ? "" : rest.substr(slash + 1);
  if (bucket.empty()) {
    return Status(StatusCode::kInvalidArgument,
                  "'" + prefix_url + "' names no bucket (s3://bucket/prefix)");
  }
  STOKER_ASSIGN_OR_RETURN(RemoteOptions options, resolve_remote_options(options_for(prefix_url)));
  // A target for a key in the bucket, whose URL, cut before the key, is the bucket's.
  STOKER_ASSIGN_OR_RETURN(io::ObjectTarget target,
                          io::make_object_target("s3://" + bucket + "/k", options));
  const std::string bucket_url = target.request_url.substr(0, target.request_url.size() - 1);
  target.name = prefix_url + " (listing)";
  target.key = prefix;
  std::vector<ListedObject> objects;
  std::vector<uint8_t> body(16 << 20);  // a page of 1,000 keys of S3's longest is ~1.3 MB
  std::string token;
  do {
    target.request_url = bucket_url + "?" + io::listing_query(prefix, token);
    STOKER_ASSIGN_OR_RETURN(io::HttpResponse response,
                            io::send_with_retries(target, io::HttpRequest{}, body));
    STOKER_ASSIGN_OR_RETURN(
        io::ListingPage page,
        io::parse_listing_page(bucket, std::string(reinterpret_cast<const char*>(body.data()),
                                                   static_cast<size_t>(response.body_bytes))));
    objects.insert(objects.end(), std::make_move_iterator(page.objects.begin()),
                   std::make_move_iterator(page.objects.end()));
    token = std::move(page.next_token);
  } while (!token.empty());
  return objects;
}

Result<std::shared_ptr<const ByteSource>> open_source(const std::string& path_or_url) {
  if (std::optional<ByteSlice> slice = parse_byte_slice(path_or_url)) {
    // The whole file or object is opened (and, remote, shared) once; slices are cheap views.
    STOKER_ASSIGN_OR_RETURN(std::shared_ptr<const ByteSource> whole, open_source(slice->whole));
    STOKER_ASSIGN_OR_RETURN(std::unique_ptr<ByteSource> part,
                            slice_source(std::move(whole), slice->range));
    return std::shared_ptr<const ByteSource>(std::move(part));
  }
  if (!is_remote_url(path_or_url)) {
    STOKER_ASSIGN_OR_RETURN(std::unique_ptr<ByteSource> file, open_file_source(path_or_url));
    return std::shared_ptr<const ByteSource>(std::move(file));
  }
  return shared_sources.get().get(path_or_url, [&]() -> Result<std::unique_ptr<ByteSource>> {
    const RemoteOptions options = options_for(path_or_url);
    const auto listed = listed_objects.get().find(path_or_url);
    if (!listed.has_value()) return open_remote_source(path_or_url, options);
    // Its size and version as listed: no HEAD (Last-Modified unknown, 0: the ETag rules).
    STOKER_ASSIGN_OR_RETURN(io::ObjectTarget target, resolved_target(path_or_url, options));
    io::RemoteObject object;
    object.size = listed->first;
    object.etag = listed->second;
    object.cache_key = cache_key(target.name, object);
    object.target = std::move(target);
    return std::unique_ptr<ByteSource>(
        new RemoteSource(std::make_shared<const io::RemoteObject>(std::move(object))));
  });
}

}  // namespace stoker
