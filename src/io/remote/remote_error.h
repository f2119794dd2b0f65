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
};

/// The <Code> and <Message> of an S3 error document (entities like &amp; decoded).
S3Error parse_s3_error(const std::string& body);

/// The code and the sentence for a request of the object (`bucket`, `key`: empty unless S3)
/// that got HTTP `status` with S3 error `error`, and the ETag it asked for with If-Match.
struct ErrorMeaning {
  StatusCode code = StatusCode::kIoError;
  std::string sentence;  // empty when the status says nothing more than itself
};
ErrorMeaning explain_http_error(long status, const S3Error& error, const std::string& bucket,
                                const std::string& key, const std::string& if_match);

}  // namespace stoker::io
