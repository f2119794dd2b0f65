// A small HTTP/1.1 server on 127.0.0.1 for the remote-source tests: objects in memory served
// by HEAD and ranged GET (ETag, Last-Modified, If-Match, Content-Range, keep-alive), with faults
// switched on per test: the errors, resets, stalls and short bodies object storage produces,
// and the ways of servers that are not S3 (If-Match ignored, no ETag sent).
//
// Thread-safety: every method may be called from any thread; each connection is served on a
// thread of its own. The destructor stops and joins them all.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "core/mutex.h"

namespace stoker::io::testing {

class HttpTestServer {
 public:
  enum class Fault {
    kNone,
    kSlowDown503,   // 503 with S3's SlowDown XML
    kError500,      // 500 with S3's InternalError XML
    kCloseAtOnce,   // the connection closed without a response (a reset)
    kTruncated,     // half the body, then the connection closed (Content-Length says more)
    kStall,         // half the body, then a pause of stall_s, then the rest
    kSignature403,  // 403 SignatureDoesNotMatch
    kExpired403,    // 403 AccessDenied "Request has expired" (a presigned URL)
    kNoSuchKey404,  // 404 NoSuchKey
    kNoSuchBucket404,
    kRefuseHead403,  // 403 to HEAD only, GET served (presigned GET URLs)
    // What S3 answers a request signed for another region than the bucket's (kept for every
    // request): a header x-amz-bucket-region naming it, and for a GET (HEAD has no body)
    // S3's XML error.
    kWrongRegion400,  // 400 AuthorizationHeaderMalformed ("the region 'x' is wrong; ...")
    kWrongRegion301,  // 301 PermanentRedirect (a virtual-hosted request to the wrong region)
  };

  HttpTestServer();
  ~HttpTestServer();
  HttpTestServer(const HttpTestServer&) = delete;
  HttpTestServer& operator=(const HttpTestServer&) = delete;

  /// "http://127.0.0.1:<port>" + path; "http://127.0.0.1:<port>" alone for an endpoint.
  std::string url(const std::string& path = "") const;

  /// Serves `bytes` at `path` (e.g. "/videos/a.mp4", or "/bucket/key" for S3 path style) with
  /// a new ETag and a Last-Modified one second later than the previous put's (the first:
  /// Wed, 21 Oct 2015 07:28:00 GMT).
  void put(const std::string& path, std::vector<uint8_t> bytes) EXCLUDES(mutex_);
  std::string etag(const std::string& path) EXCLUDES(mutex_);

  /// Whether If-Match is honoured (412 on a mismatch, the default) or ignored, as some web
  /// servers and CDNs do; which validators replies carry (both by default).
  void set_honour_if_match(bool honour) EXCLUDES(mutex_);
  void set_validators(bool etag, bool last_modified) EXCLUDES(mutex_);

  /// The region kWrongRegion* faults name as the bucket's. Default "eu-west-1".
  void set_bucket_region(const std::string& region) EXCLUDES(mutex_);

  /// The next `times` requests (every one when negative) meet `fault`.
  void set_fault(Fault fault, int times = -1, double stall_s = 3) EXCLUDES(mutex_);

  /// Requests received since the last reset_log(), one line each: "GET /path bytes=a-b " or
  /// "HEAD /path ", then "if-match " / "signed " when those headers came. The path is as
  /// sent (percent-encoded); objects are found by its decoded form.
  std::vector<std::string> log() EXCLUDES(mutex_);
  int64_t requests() EXCLUDES(mutex_);
  void reset_log() EXCLUDES(mutex_);

 private:
  struct Object {
    std::vector<uint8_t> bytes;
    std::string etag;
    int64_t mtime_s = 0;  // Unix seconds
  };
  void accept_loop();
  void serve(int fd);
  bool stopping() EXCLUDES(mutex_);

  int listen_fd_ = -1;
  int port_ = 0;
  std::thread acceptor_;
  core::Mutex mutex_;
  bool stop_ GUARDED_BY(mutex_) = false;
  std::vector<std::thread> connections_ GUARDED_BY(mutex_);
  std::map<std::string, Object> objects_ GUARDED_BY(mutex_);
  int64_t versions_ GUARDED_BY(mutex_) = 0;
  Fault fault_ GUARDED_BY(mutex_) = Fault::kNone;
  int fault_times_ GUARDED_BY(mutex_) = 0;
  double stall_s_ GUARDED_BY(mutex_) = 3;
  bool honour_if_match_ GUARDED_BY(mutex_) = true;
  bool send_etag_ GUARDED_BY(mutex_) = true;
  bool send_last_modified_ GUARDED_BY(mutex_) = true;
  std::string bucket_region_ GUARDED_BY(mutex_) = "eu-west-1";
  std::vector<std::string> log_ GUARDED_BY(mutex_);
};

}  // namespace stoker::io::testing
