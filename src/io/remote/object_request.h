// Requests for one remote object with retries: what to ask (HEAD, a ranged GET), where (the
// resolved URL and signing of an ObjectTarget), and the policy that turns tries into one
// answer: retry on 5xx, 429/SlowDown, connection resets, timeouts and short bodies, with
// exponential backoff and full jitter, within max_attempts and total_timeout_s; give up at once
// on other 4xx. A failure's Status names the object, the request, the attempts, the time, the
// HTTP status, S3's error code and message, and what it means (remote_error.h).
//
// Thread-safety: send_with_retries() may be called from any number of threads at once.
#pragma once

#include <optional>
#include <span>
#include <string>

#include "io/remote/http_client.h"
#include "stoker/remote_source.h"
#include "stoker/status.h"

namespace stoker::io {

/// A remote object, resolved: its URL as the user wrote it (what messages call it), the URL
/// requests go to, how they are signed, and the limits they keep to.
struct ObjectTarget {
  std::string name;         // "s3://bucket/key" or the http(s) URL
  std::string request_url;  // where requests go
  bool is_s3 = false;
  std::string bucket;  // S3 only
  std::string key;     // S3 only
  std::optional<AwsSigning> signing;
  RemoteOptions options;  // resolved: every limit set
};

/// Resolves `url` with `options` (already resolved: see resolve_remote_options()).
/// Errors: kInvalidArgument for a URL that is neither s3:// nor http(s)://, or an s3:// URL
/// without a bucket or key.
Result<ObjectTarget> make_object_target(const std::string& url, const RemoteOptions& options);

/// Sends `request` (its url and signing are taken from `target`) until it succeeds or the
/// policy gives up. Success: a 2xx, and for a GET of a range, exactly that range's bytes in
/// `body` (body.size() == range length). HEAD and GET of a range are all this sends.
/// A 2xx reply of another version than the request expects (HttpRequest::expected_size) is
/// not retried: kCorruptData, "the object changed since it was opened (what was expected, what
/// came)". When `failed` is not null and the request fails, *failed is what its last try got.
Result<HttpResponse> send_with_retries(const ObjectTarget& target, HttpRequest request,
                                       std::span<uint8_t> body, HttpResponse* failed = nullptr);

}  // namespace stoker::io
