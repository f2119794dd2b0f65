#include "io/remote/object_request.h"

#include <curl/curl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <thread>

#include "core/env.h"
#include "core/random.h"
#include "io/remote/remote_error.h"
#include "io/remote/remote_stats.h"

namespace stoker::io {
namespace {

using core::Clock;

bool starts_with(const std::string& text, const char* prefix) { return text.rfind(prefix, 0) == 0; }

// A uniform double in [0, 1) from this thread's generator. Backoff jitter need not be
// reproducible, only independent between threads.
double jitter() {
  thread_local uint64_t state =
      core::mix64(static_cast<uint64_t>(core::now().time_since_epoch().count()) ^
                  (std::hash<std::thread::id>{}(std::this_thread::get_id()) << 1));
  state += 0x9E3779B97F4A7C15ull;
  return static_cast<double>(core::mix64(state) >> 11) * 0x1.0p-53;
}

bool retryable_transfer_error(int curl_code) {
  switch (static_cast<CURLcode>(curl_code)) {
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_COULDNT_CONNECT:
      return true;
    default:
      return false;
  }
}

std::string describe_request(const HttpRequest& request) {
  if (request.method == HttpMethod::kHead) return "HEAD";
  if (!request.range.has_value()) return "GET";
  return "GET bytes=" + std::to_string(request.range->offset) + "-" +
         std::to_string(request.range->end() - 1);
}

// Why one try failed, and whether another may do better.
struct TryFailure {
  bool retryable = false;
  std::string cause;
};

TryFailure judge(const HttpRequest& request, const HttpResponse& r) {
  if (!r.changed.empty()) {  // another try gets the same version
    return {false, "HTTP " + std::to_string(r.status) +
                       " from another version of the object (the server ignored If-Match)"};
  }
  if (r.wrong_body) {
    return {false, "HTTP " + std::to_string(r.status) +
                       " with a body that is not the range asked for (the server ignored Range)"};
  }
  if (r.curl_code != 0) {
    const bool retryable = r.stalled || retryable_transfer_error(r.curl_code);
    std::string cause = r.curl_error + " (curl error " + std::to_string(r.curl_code) + ")";
    if (r.status >= 200 && r.status <= 299 && request.range.has_value()) {
      cause = "short body: " + std::to_string(r.body_bytes) + " of " +
              std::to_string(request.range->length) + " bytes, then " + cause;
    }
    return {retryable, cause};
  }
  if (r.status >= 200 && r.status <= 299) {
    // Complete transfer, too few bytes: a short body.
    return {true, "short body: " + std::to_string(r.body_bytes) + " of " +
                      std::to_string(request.range->length) + " bytes"};
  }
  const S3Error s3 = parse_s3_error(r.error_body);
  std::string cause = "HTTP " + std::to_string(r.status);
  if (!s3.code.empty()) cause += " " + s3.code;
  if (!s3.message.empty()) cause += " (" + s3.message + ")";
  return {r.status >= 500 || r.status == 429 || s3.code == "SlowDown", cause};
}

bool succeeded(const HttpRequest& request, const HttpResponse& r) {
  if (r.curl_code != 0 || r.wrong_body || !r.changed.empty() || r.status < 200 || r.status > 299) {
    return false;
  }
  return !request.range.has_value() || request.method == HttpMethod::kHead ||
         r.body_bytes == request.range->length;
}

std::string seconds_text(double seconds) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f s", seconds);
  return text;
}

}  // namespace

Result<ObjectTarget> make_object_target(const std::string& url, const RemoteOptions& options) {
  ObjectTarget target;
  target.name = url;
  target.options = options;
  if (starts_with(url, "s3://")) {
    const std::string rest = url.substr(5);
    const size_t slash = rest.find('/');
    if (slash == std::string::npos || slash == 0 || slash + 1 == rest.size()) {
      return Status(StatusCode::kInvalidArgument,
                    "'" + url + "' is not an S3 object URL (s3://bucket/key)");
    }
    target.is_s3 = true;
    target.bucket = rest.substr(0, slash);
    target.key = rest.substr(slash + 1);
    if (!options.endpoint_url.empty()) {
      std::string endpoint = options.endpoint_url;
      while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
      target.request_url = endpoint + "/" + target.bucket + "/" + encode_s3_key(target.key);
    } else {
      target.request_url = "https://" + target.bucket + ".s3." + options.region +
                           ".amazonaws.com/" + encode_s3_key(target.key);
    }
    if (!options.anonymous && !options.access_key_id.empty()) {
      target.signing = AwsSigning{.region = options.region,
                                  .access_key_id = options.access_key_id,
                                  .secret_access_key = options.secret_access_key,
                                  .session_token = options.session_token};
    }
    return target;
  }
  if (starts_with(url, "http://") || starts_with(url, "https://")) {
    target.request_url = url;
    return target;
  }
  return Status(StatusCode::kInvalidArgument,
                "'" + url + "' is not a remote URL (s3://, http:// or https://)");
}

Result<HttpResponse> send_with_retries(const ObjectTarget& target, HttpRequest request,
                                       std::span<uint8_t> body, HttpResponse* failed) {
  const RemoteOptions& options = target.options;
  request.url = target.request_url;
  request.signing = target.signing;
  request.connect_timeout_s = options.connect_timeout_s;
  request.low_speed_timeout_s = options.low_speed_timeout_s;
  RemoteCounters& counters = remote_counters();

  const Clock::time_point start = core::now();
  const Clock::time_point deadline =
      start + std::chrono::duration_cast<Clock::duration>(
                  std::chrono::duration<double>(options.total_timeout_s));
  auto seconds_left = [&] { return std::chrono::duration<double>(deadline - core::now()).count(); };
  int attempts = 0;
  HttpResponse last;
  TryFailure failure;
  while (true) {
    const double left = seconds_left();
    if (left < 0.001) break;
    ++attempts;
    count(counters.requests);
    if (attempts > 1) count(counters.retries);
    last = http_perform(request, body, left);
    if (last.body_bytes > 0) count(counters.bytes_fetched, last.body_bytes);
    if (succeeded(request, last)) return last;
    failure = judge(request, last);
    if (!failure.retryable || attempts >= options.max_attempts) break;
    const double cap =
        std::min(options.backoff_max_s, options.backoff_base_s * std::ldexp(1.0, attempts));
    const double wait = jitter() * cap;
    if (wait >= seconds_left()) break;  // never sleep past the deadline
    std::this_thread::sleep_for(std::chrono::duration<double>(wait));
  }
  count(counters.failures);
  if (attempts == 0) failure.cause = "no time was left to try (total_timeout_s)";
  const double elapsed = std::chrono::duration<double>(core::now() - start).count();
  std::string message = target.name + ": " + describe_request(request) + " failed after " +
                        std::to_string(attempts) + (attempts == 1 ? " attempt" : " attempts") +
                        " in " + seconds_text(elapsed) + ": " + failure.cause;
  StatusCode code = StatusCode::kIoError;
  if (!last.changed.empty()) {
    code = StatusCode::kCorruptData;
    message += ": the object changed since it was opened (" + last.changed + ")";
  } else if (last.curl_code == 0 && !last.wrong_body && last.status >= 300) {
    const ErrorMeaning meaning =
        explain_http_error(last.status, parse_s3_error(last.error_body),
                           RequestContext{.bucket = target.bucket,
                                          .key = target.key,
                                          .if_match = request.if_match,
                                          .region = target.is_s3 ? options.region : "",
                                          .signed_request = request.signing.has_value(),
                                          .bucket_region = last.bucket_region});
    code = meaning.code;
    if (!meaning.sentence.empty()) message += ": " + meaning.sentence;
  } else if (last.curl_code == CURLE_OPERATION_TIMEDOUT && !last.stalled &&
             seconds_left() < 0.001) {
    // curl's own timeout is the time left of the deadline: name the option that set it.
    message += ": the request's deadline ran out (total_timeout_s = " +
               seconds_text(options.total_timeout_s) +
               "): the store stopped answering or is too slow for it";
  }
  if (failed != nullptr) *failed = std::move(last);
  return Status(code, message);
}

}  // namespace stoker::io
