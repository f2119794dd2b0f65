#include "io/remote/http_client.h"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <memory>

#include "core/env.h"
#include "core/fork.h"
#include "core/mutex.h"
#include "io/remote/per_fork_generation.h"

namespace stoker::io {
namespace {

constexpr size_t kErrorBodyBytes = 8192;

void ensure_curl_initialized() {
  static const bool initialized = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
  (void)initialized;  // a failure shows as curl_easy_init() returning null
}

// The DNS and TLS-session caches every handle of this generation shares. curl asks for a lock
// per kind of data; each kind has its own Mutex.
class CurlShare {
 public:
  CurlShare() {
    ensure_curl_initialized();
    share_ = curl_share_init();
    if (share_ == nullptr) return;
    curl_share_setopt(share_, CURLSHOPT_LOCKFUNC, &CurlShare::lock);
    curl_share_setopt(share_, CURLSHOPT_UNLOCKFUNC, &CurlShare::unlock);
    curl_share_setopt(share_, CURLSHOPT_USERDATA, this);
    curl_share_setopt(share_, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
    curl_share_setopt(share_, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
  }
  ~CurlShare() {  // only ever runs on a share that lost the race to be this generation's
    if (share_ != nullptr) curl_share_cleanup(share_);
  }
  CurlShare(const CurlShare&) = delete;
  CurlShare& operator=(const CurlShare&) = delete;

  CURLSH* get() const { return share_; }

 private:
  // curl pairs these calls; the analysis cannot see that across two callbacks.
  static void lock(CURL*, curl_lock_data data, curl_lock_access,
                   void* user) NO_THREAD_SAFETY_ANALYSIS {
    static_cast<CurlShare*>(user)->mutexes_[data].lock();
  }
  static void unlock(CURL*, curl_lock_data data, void* user) NO_THREAD_SAFETY_ANALYSIS {
    static_cast<CurlShare*>(user)->mutexes_[data].unlock();
  }

  CURLSH* share_ = nullptr;
  core::Mutex mutexes_[CURL_LOCK_DATA_LAST];
};

PerForkGeneration<CurlShare> curl_share;

// This thread's easy handle. One made before a fork belongs to the parent's connections: the
// child abandons it (never cleans it up, which could write to the parent's TLS sessions).
struct ThreadHandle {
  CURL* easy = nullptr;
  uint64_t generation = 0;
  ~ThreadHandle() {
    if (easy != nullptr && generation == core::fork_generation()) curl_easy_cleanup(easy);
  }
};

CURL* thread_handle() {
  thread_local ThreadHandle handle;
  const uint64_t generation = core::fork_generation();
  if (handle.easy == nullptr || handle.generation != generation) {
    ensure_curl_initialized();
    handle.easy = curl_easy_init();
    handle.generation = generation;
  } else {
    curl_easy_reset(handle.easy);  // keeps its live connections and caches
  }
  return handle.easy;
}

using core::Clock;

struct Transfer {
  const HttpRequest* request;
  std::span<uint8_t> body;
  HttpResponse* response;
  bool body_checked = false;
  // Stall detection: when the last KiB arrived, and the byte count then.
  Clock::time_point progress_time = core::now();
  curl_off_t progress_bytes = 0;
};

// curl's own low-speed check averages over several seconds, so a burst then silence goes
// unnoticed for long after low_speed_timeout_s. This one abandons a transfer that received
// less than 1 KiB in the last low_speed_timeout_s.
int on_progress(void* user, curl_off_t, curl_off_t received, curl_off_t, curl_off_t sent) {
  auto* transfer = static_cast<Transfer*>(user);
  const Clock::time_point now = core::now();
  const curl_off_t moved = received + sent;
  if (moved - transfer->progress_bytes >= 1024) {
    transfer->progress_bytes = moved;
    transfer->progress_time = now;
    return 0;
  }
  if (std::chrono::duration<double>(now - transfer->progress_time).count() >
      transfer->request->low_speed_timeout_s) {
    transfer->response->stalled = true;
    return 1;  // CURLE_ABORTED_BY_CALLBACK
  }
  return 0;
}

bool starts_with_no_case(std::string_view text, std::string_view prefix) {
  if (text.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(text[i])) != prefix[i]) return false;
  }
  return true;
}

std::string_view trimmed(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) {
    text.remove_prefix(1);
  }
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) {
    text.remove_suffix(1);
  }
  return text;
}

int64_t parse_int(std::string_view text, int64_t fallback) {
  text = trimmed(text);
  if (text.empty()) return fallback;
  int64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return fallback;
    value = value * 10 + (c - '0');
  }
  return value;
}

// The opaque part of an entity tag: weak and strong tags of one version compare equal (RFC
// 9110 8.8.3.2's weak comparison), which is all that telling versions apart needs.
std::string_view opaque_tag(std::string_view etag) {
  if (etag.size() >= 2 && (etag[0] == 'W' || etag[0] == 'w') && etag[1] == '/') {
    etag.remove_prefix(2);
  }
  return etag;
}

std::string http_date_text(int64_t mtime_ns) {
  const std::time_t seconds = static_cast<std::time_t>(mtime_ns / 1000000000);
  std::tm parts{};
  gmtime_r(&seconds, &parts);
  char text[64];
  std::strftime(text, sizeof(text), "%a, %d %b %Y %H:%M:%S GMT", &parts);
  return text;
}

// Why a 2xx reply is not of the version `request` expects, or "" when it is (or cannot tell).
std::string version_mismatch(const HttpRequest& request, const HttpResponse& r) {
  if (!request.if_match.empty() && !r.etag.empty()) {
    if (opaque_tag(r.etag) != opaque_tag(request.if_match)) {
      return "ETag " + request.if_match + " at open, " + r.etag + " in this reply";
    }
  } else if (request.expected_mtime_ns != 0 && r.mtime_ns != 0 &&
             r.mtime_ns != request.expected_mtime_ns) {
    return "Last-Modified " + http_date_text(request.expected_mtime_ns) + " at open, " +
           http_date_text(r.mtime_ns) + " in this reply";
  }
  if (request.expected_size >= 0) {
    const int64_t total = r.status == 206 ? r.content_range_total : r.content_length;
    if (total >= 0 && total != request.expected_size) {
      return std::to_string(request.expected_size) + " bytes at open, " + std::to_string(total) +
             " in this reply";
    }
  }
  return "";
}

size_t on_header(char* data, size_t size, size_t count, void* user) {
  auto* transfer = static_cast<Transfer*>(user);
  HttpResponse& r = *transfer->response;
  const std::string_view line(data, size * count);
  if (starts_with_no_case(line, "http/")) {
    // A status line starts a response (again after a 100 Continue): forget the last one's.
    const size_t space = line.find(' ');
    r.status = space == std::string_view::npos ? 0 : parse_int(line.substr(space + 1, 3), 0);
    r.content_length = r.content_range_start = r.content_range_total = -1;
    r.etag.clear();
    r.mtime_ns = 0;
    r.bucket_region.clear();
  } else if (starts_with_no_case(line, "content-length:")) {
    r.content_length = parse_int(line.substr(15), -1);
  } else if (starts_with_no_case(line, "etag:")) {
    r.etag = std::string(trimmed(line.substr(5)));
  } else if (starts_with_no_case(line, "last-modified:")) {
    // Parsed here, not from CURLINFO_FILETIME after the transfer: the body check needs it.
    const std::string date(trimmed(line.substr(14)));
    const time_t seconds = curl_getdate(date.c_str(), nullptr);
    r.mtime_ns = seconds > 0 ? static_cast<int64_t>(seconds) * 1000000000 : 0;
  } else if (starts_with_no_case(line, "x-amz-bucket-region:")) {
    r.bucket_region = std::string(trimmed(line.substr(20)));
  } else if (starts_with_no_case(line, "content-range:")) {
    std::string_view value = trimmed(line.substr(14));
    if (starts_with_no_case(value, "bytes ")) value.remove_prefix(6);
    const size_t slash = value.find('/');
    if (slash != std::string_view::npos) {
      r.content_range_total = parse_int(value.substr(slash + 1), -1);
      const size_t dash = value.find('-');
      if (dash != std::string_view::npos && dash < slash) {
        r.content_range_start = parse_int(value.substr(0, dash), -1);
      }
    }
  }
  return size * count;
}

size_t on_body(char* data, size_t size, size_t count, void* user) {
  auto* transfer = static_cast<Transfer*>(user);
  HttpResponse& r = *transfer->response;
  const size_t n = size * count;
  if (r.status < 200 || r.status > 299) {
    const size_t keep =
        std::min(n, kErrorBodyBytes - std::min(kErrorBodyBytes, r.error_body.size()));
    r.error_body.append(data, keep);
    return n;
  }
  if (!transfer->body_checked) {
    transfer->body_checked = true;
    const std::optional<ByteRange>& range = transfer->request->range;
    if (range.has_value()) {
      const bool whole = r.status == 200 && range->offset == 0 && r.content_length == range->length;
      const bool at_offset = r.status == 206 && r.content_range_start == range->offset;
      if (!whole && !at_offset) {
        r.wrong_body = true;
        return 0;  // cuts the transfer (CURLE_WRITE_ERROR)
      }
    }
    // Every header has arrived: a reply of another version is refused before its first byte.
    r.changed = version_mismatch(*transfer->request, r);
    if (!r.changed.empty()) return 0;
  }
  if (static_cast<size_t>(r.body_bytes) + n > transfer->body.size()) {
    r.wrong_body = true;
    return 0;
  }
  std::memcpy(transfer->body.data() + r.body_bytes, data, n);
  r.body_bytes += static_cast<int64_t>(n);
  return n;
}

long milliseconds(double seconds) { return std::max(1L, static_cast<long>(seconds * 1000.0)); }

struct HeaderList {
  curl_slist* list = nullptr;
  ~HeaderList() { curl_slist_free_all(list); }
  void add(const std::string& header) {
    curl_slist* longer = curl_slist_append(list, header.c_str());
    if (longer != nullptr) list = longer;
  }
};

}  // namespace

HttpResponse http_perform(const HttpRequest& request, std::span<uint8_t> body, double timeout_s) {
  HttpResponse response;
  CURL* curl = thread_handle();
  if (curl == nullptr) {
    response.curl_code = CURLE_FAILED_INIT;
    response.curl_error = "libcurl could not make a handle";
    return response;
  }
  char error_buffer[CURL_ERROR_SIZE] = {};
  Transfer transfer{&request, body, &response};
  HeaderList headers;
  std::string range_text;
  std::string userpwd;
  std::string sigv4;

  curl_easy_setopt(curl, CURLOPT_SHARE, curl_share.get().get());
  curl_easy_setopt(curl, CURLOPT_URL, request.url.c_str());
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error_buffer);
  curl_easy_setopt(curl, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, milliseconds(timeout_s));
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS,
                   milliseconds(std::min(timeout_s, request.connect_timeout_s)));
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1024L);
  curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME,
                   std::max(1L, static_cast<long>(request.low_speed_timeout_s + 0.5)));
  curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, &on_progress);
  curl_easy_setopt(curl, CURLOPT_XFERINFODATA, &transfer);
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, &on_header);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &transfer);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &on_body);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &transfer);
  if (request.method == HttpMethod::kHead) {
    curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
  } else if (request.range.has_value()) {
    range_text =
        std::to_string(request.range->offset) + "-" + std::to_string(request.range->end() - 1);
    curl_easy_setopt(curl, CURLOPT_RANGE, range_text.c_str());
  }
  if (!request.if_match.empty()) headers.add("If-Match: " + request.if_match);
  if (request.signing.has_value()) {
    const AwsSigning& signing = *request.signing;
    sigv4 = "aws:amz:" + signing.region + ":s3";
    userpwd = signing.access_key_id + ":" + signing.secret_access_key;
    curl_easy_setopt(curl, CURLOPT_AWS_SIGV4, sigv4.c_str());
    curl_easy_setopt(curl, CURLOPT_USERPWD, userpwd.c_str());
    // S3 wants the payload's hash in a header of its own; a GET or HEAD has no payload to sign.
    headers.add("x-amz-content-sha256: UNSIGNED-PAYLOAD");
    if (!signing.session_token.empty()) {
      headers.add("x-amz-security-token: " + signing.session_token);
    }
  }
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers.list);

  const CURLcode code = curl_easy_perform(curl);
  response.curl_code = static_cast<int>(code);
  if (code != CURLE_OK) {
    response.curl_error = error_buffer[0] != '\0' ? error_buffer : curl_easy_strerror(code);
    if (response.stalled) {
      char text[64];
      std::snprintf(text, sizeof(text), "stalled: less than 1 KiB in %g s",
                    request.low_speed_timeout_s);
      response.curl_error = text;
    }
  }
  long status = 0;
  if (curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status) == CURLE_OK && status != 0) {
    response.status = status;
  }
  // Nothing in the handle may point at this frame's buffers once we return.
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, nullptr);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, nullptr);
  return response;
}

std::string encode_s3_key(const std::string& key) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string encoded;
  encoded.reserve(key.size());
  for (unsigned char c : key) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || c == '/') {
      encoded.push_back(static_cast<char>(c));
    } else {
      encoded.push_back('%');
      encoded.push_back(kHex[c >> 4]);
      encoded.push_back(kHex[c & 15]);
    }
  }
  return encoded;
}

}  // namespace stoker::io
