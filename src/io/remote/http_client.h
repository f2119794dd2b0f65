// One HTTP request on libcurl, tried once: HEAD, or GET of a byte range with the body written
// straight into the caller's buffer. Retries, backoff and error messages are the caller's
// (object_request.h); this file only reports what happened.
//
// Each thread reuses one curl easy handle (kept-alive connections), and all of a process's
// handles share one DNS and TLS-session cache; both are made anew in a forked child, which
// must not touch its parent's connections.
//
// Thread-safety: http_perform() may be called from any number of threads at once.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "stoker/byte_source.h"

namespace stoker::io {

/// AWS Signature V4 over S3 (libcurl's CURLOPT_AWS_SIGV4).
struct AwsSigning {
  std::string region;
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // sent as x-amz-security-token when not empty
};

enum class HttpMethod { kHead, kGet };

struct HttpRequest {
  HttpMethod method = HttpMethod::kGet;
  std::string url;
  std::optional<ByteRange> range;  // GET: "Range: bytes=offset-(end-1)"; none: the whole body
  std::string if_match;            // an ETag, sent as If-Match when not empty
  /// The object as it was opened, which a 2xx reply must show, since not every server honours
  /// If-Match: its ETag (if_match above) else, when the reply or the open had none, its
  /// Last-Modified (expected_mtime_ns, 0: none), and its total size (expected_size, -1: not
  /// checked). A reply that carries no validator at all is taken on its size alone: RFC 9110
  /// (15.3.7) obliges a 206 to carry the ETag a 200 would, so only servers that never send one
  /// are read so. A reply of another version is cut before a byte of it reaches the body.
  int64_t expected_size = -1;
  int64_t expected_mtime_ns = 0;
  std::optional<AwsSigning> signing;
  double connect_timeout_s = 10;
  double low_speed_timeout_s = 15;  // abandoned when below 1 KiB/s this long
};

/// What one try got. A transfer error (curl_code != 0) may come with or without a status.
struct HttpResponse {
  int curl_code = 0;       // CURLcode; 0 when the transfer completed
  std::string curl_error;  // curl's words for it
  long status = 0;         // the HTTP status; 0 when none arrived
  int64_t body_bytes = 0;  // bytes of a 2xx body written into the caller's buffer
  int64_t content_length = -1;
  int64_t content_range_start = -1;  // from "Content-Range: bytes a-b/total" (or "*/total")
  int64_t content_range_total = -1;
  std::string etag;           // as sent, quotes included
  int64_t mtime_ns = 0;       // Last-Modified; 0 when absent
  std::string bucket_region;  // S3's x-amz-bucket-region, sent with a wrong region's errors
  std::string error_body;     // the start of a non-2xx body (an S3 XML error)
  /// Not empty when a 2xx reply showed another version of the object than the request's
  /// expected one (see HttpRequest::expected_size): what was expected and what came, as
  /// "ETag \"a\" at open, \"b\" in this reply". The transfer was cut (CURLE_WRITE_ERROR).
  std::string changed;
  /// A 2xx body that is not the range asked for (a 200 with the whole object for part of it,
  /// a 206 at another offset, or more bytes than the buffer holds); the transfer was cut.
  bool wrong_body = false;
  /// Abandoned for receiving less than 1 KiB in low_speed_timeout_s (curl_code is then
  /// CURLE_ABORTED_BY_CALLBACK).
  bool stalled = false;
};

/// Tries `request` once within `timeout_s`; a GET writes at most body.size() bytes of a 2xx
/// body into `body`.
HttpResponse http_perform(const HttpRequest& request, std::span<uint8_t> body, double timeout_s);

/// Percent-encodes an S3 object key as S3 expects it in a path: unreserved characters and '/'
/// kept, every other byte %XX.
std::string encode_s3_key(const std::string& key);

}  // namespace stoker::io
