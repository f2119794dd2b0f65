// What a failed request means, in words: S3's XML error (<Code>, <Message>) read from the
// error body, and the StatusCode and plain sentence of an HTTP status for an object.
//
// Thread-safety: pure functions.
#pragma once

#include <string>

#include "stoker/status.h"

namespace stoker::io {

struct S3Error {
  std::string code;     // "SlowDown", "NoSuchKey", ...; empty when the body is not S3's XML
  std::string message;  // S3's sentence
  std::string region;   // <Region>: the bucket's, in AuthorizationHeaderMalformed
};

/// The <Code>, <Message> and <Region> of an S3 error document (entities like &amp; decoded).
S3Error parse_s3_error(const std::string& body);

/// `text` with XML's five named entities (&amp; &lt; &gt; &quot; &apos;) and numeric character
/// references below 128 (&#13; &#x0D;, as S3 writes control characters in keys) decoded.
std::string decode_xml_entities(const std::string& text);

/// What a failed request asked, for explaining its answer.
struct RequestContext {
  std::string bucket;    // empty unless S3
  std::string key;       // empty unless S3
  std::string if_match;  // the ETag asked for with If-Match
  std::string region;    // S3: the region the request was signed for (or sent to)
  bool signed_request = false;
  std::string bucket_region;  // the reply's x-amz-bucket-region header, if any
};

/// The code and the sentence for a request `context` that got HTTP `status` with S3 error
/// `error`. A wrong region (S3's 301 PermanentRedirect, 307, or 400 AuthorizationHeaderMalformed,
/// the bucket's region from x-amz-bucket-region or <Region>) is kInvalidArgument, with the
/// region to set.
struct ErrorMeaning {
  StatusCode code = StatusCode::kIoError;
  std::string sentence;  // empty when the status says nothing more than itself
};
ErrorMeaning explain_http_error(long status, const S3Error& error, const RequestContext& context);

}  // namespace stoker::io
