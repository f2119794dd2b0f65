// Remote sources: objects in S3 (or an S3-compatible store) and files behind HTTP(S), read as
// ByteSources by ranged GET requests on libcurl.
//
// Conventions are those of the AWS SDKs and CLI, so that existing setups just work:
// - credentials from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN, else the
//   shared files ~/.aws/credentials and ~/.aws/config (AWS_SHARED_CREDENTIALS_FILE,
//   AWS_CONFIG_FILE) under AWS_PROFILE (default "default");
// - the region from AWS_REGION / AWS_DEFAULT_REGION / the profile (default us-east-1);
// - the endpoint from AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL / the profile's endpoint_url; with
//   an endpoint, path-style addressing (endpoint/bucket/key), else virtual-hosted AWS.
// Any field set in RemoteOptions overrides what the environment says.
//
// Every request is retried on 5xx, 429/SlowDown, connection resets, timeouts and short bodies,
// with exponential backoff and full jitter, within max_attempts and total_timeout_s; a stalled
// transfer is abandoned after low_speed_timeout_s. Ranged reads carry If-Match with the ETag
// seen at open, and since not every server honours it, each reply must also show the version
// opened (its ETag, else its Last-Modified, and its size): an object replaced since fails as
// changed (kCorruptData, not retried) instead of mixing two versions. A server that sends
// neither ETag nor Last-Modified can be checked by size alone.
//
// Ownership: open_remote_source() returns a source the caller owns; sources of one process
// share its connection pool, its range cache and its I/O threads, which live until exit.
// Thread-safety: everything here may be called from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "stoker/byte_source.h"
#include "stoker/status.h"

namespace stoker {

/// How to reach and read remote objects. Empty strings and zeros mean "from the environment"
/// (see above) or the default given.
struct RemoteOptions {
  // Where and who.
  std::string region;
  std::string endpoint_url;  // e.g. "http://127.0.0.1:9000"; implies path-style addressing
  std::string profile;
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;
  bool anonymous = false;  // unsigned requests (public buckets)

  // Retries and time limits.
  int max_attempts = 0;            // default 8: tries per request, the first included
  double total_timeout_s = 0;      // default 120: for one request, all tries and waits included
  double connect_timeout_s = 0;    // default 10
  double low_speed_timeout_s = 0;  // default 15: a transfer below 1 KiB/s this long is abandoned
  double backoff_base_s = 0;       // default 0.05: the wait before try n is uniform in
  double backoff_max_s = 0;        // [0, min(backoff_max_s (default 5), base * 2^n)]

  // Reads.
  int64_t read_through_gap_bytes = -1;  // default 64 KiB: ranges closer than this, one request
  int64_t min_request_bytes = 0;        // default 256 KiB: a small read fetches this much ahead

  bool operator==(const RemoteOptions&) const = default;
};

/// Counters of the whole process's remote reads since it started; the Loader reports the
/// difference over an epoch.
struct RemoteStats {
  int64_t requests = 0;       // HTTP requests made (each try counts)
  int64_t retries = 0;        // tries after a first one failed
  int64_t failures = 0;       // requests that failed after their last try
  int64_t bytes_fetched = 0;  // body bytes received
  int64_t cache_hits = 0;     // read_at() calls served wholly from the range cache
  int64_t cache_misses = 0;   // read_at() calls that had to fetch (or wait for a prefetch)
  int64_t disk_cache_hits = 0;
  double wait_s = 0;  // time read_at() callers spent waiting for bytes
};
RemoteStats remote_stats();

/// Whether `path` names a remote object: it starts with s3://, http:// or https://.
bool is_remote_url(const std::string& path);

/// Opens the object at `url` (s3://bucket/key, http(s)://...) with one HEAD request (a ranged
/// GET of its first byte where HEAD is refused, as for presigned GET URLs), learning its size
/// and ETag. Errors name the URL, the HTTP status, the attempts and the cause (S3's error code
/// and message), and say plainly when credentials are wrong (kPermissionDenied), the bucket or
/// key is missing (kNotFound), or the region is not the bucket's (kInvalidArgument, naming the
/// bucket's region).
Result<std::unique_ptr<ByteSource>> open_remote_source(const std::string& url,
                                                       const RemoteOptions& options = {});

/// `options` with every empty field filled from the environment as above (credentials, region,
/// endpoint, the defaults of the limits): what other clients of the same store use (pyarrow's
/// S3FileSystem reads a remote dataset's metadata with it). Errors: a named profile that the
/// shared files do not have (kNotFound), an unreadable shared file (kIoError).
Result<RemoteOptions> resolve_remote_options(const RemoteOptions& options);

/// Options that open_source() uses for every URL starting with `prefix` (the longest matching
/// prefix wins; URLs matching none use the environment's). What a dataset over s3://bucket/ds
/// registers, so that the videos its index names are opened with its options. New options
/// for a prefix open its sources again; the same options again change nothing.
void set_remote_options(const std::string& prefix, const RemoteOptions& options);

/// The process's range cache: at most `memory_bytes` of fetched ranges in memory (default
/// 256 MiB; least recently used first out), and, when `disk_folder` is not empty, up to
/// `disk_bytes` of them kept on local disk across processes for repeated epochs.
void configure_remote_cache(int64_t memory_bytes, const std::string& disk_folder,
                            int64_t disk_bytes);

/// An object of a listing: its URL, size and ETag (quotes included, as S3 sends it).
struct ListedObject {
  std::string url;
  int64_t size = 0;
  std::string etag;
};

/// Every object whose URL starts with `prefix_url` ("s3://bucket/datasets/pusht/"; "s3://bucket"
/// lists the whole bucket), by ListObjectsV2: one request per 1,000 objects, each retried as
/// reads are, with the options registered for the prefix (set_remote_options). What tells a
/// dataset's object sizes and versions at the cost of one request per thousand objects instead
/// of a HEAD each. In key order. Errors as open_remote_source()'s (a missing bucket:
/// kNotFound; refused credentials: kPermissionDenied), naming the prefix; kInvalidArgument for
/// a URL that is not s3://.
Result<std::vector<ListedObject>> list_remote_objects(const std::string& prefix_url);

/// Tells open_source() the size and ETag of objects a listing gave (list_remote_objects()), so
/// that opening one of them sends no HEAD request: its reads carry If-Match with that ETag and
/// check each reply's, so an object replaced since the listing fails as changed (kCorruptData),
/// as one replaced since a HEAD does. A later call replaces what an earlier one said of the same
/// URL; objects without an ETag are left out (a listing gives no Last-Modified to check them
/// by). A source already opened keeps the version it was opened at; set_remote_options() with
/// new options for a prefix forgets what was said of the objects under it. What a dataset
/// calls with its listing, or with the versions its cached index recorded at its build (a warm
/// open lists no videos), so that its first batch does not send a HEAD per video. Per process:
/// a forked child knows none (and opens with a HEAD).
void remember_listed_objects(const std::vector<ListedObject>& objects);

/// A byte slice's name (`<path or URL>#bytes=<offset>+<length>`, stoker/byte_slice.h) opens
/// its whole file or object as below and returns the slice over it.
/// A local path opens open_file_source(); a URL opens open_remote_source() with the options
/// registered for it (or, for an object remember_listed_objects() was told of, with what the
/// listing said and no request). Remote sources are opened once per process and URL and shared.
Result<std::shared_ptr<const ByteSource>> open_source(const std::string& path_or_url);

}  // namespace stoker
