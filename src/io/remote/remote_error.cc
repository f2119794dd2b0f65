#include "io/remote/remote_error.h"

#include <cstdlib>

namespace stoker::io {
namespace {

std::string element(const std::string& body, const std::string& name) {
  const std::string open = "<" + name + ">";
  const size_t start = body.find(open);
  if (start == std::string::npos) return "";
  const size_t end = body.find("</" + name + ">", start + open.size());
  if (end == std::string::npos) return "";
  return decode_xml_entities(body.substr(start + open.size(), end - start - open.size()));
}

}  // namespace

std::string decode_xml_entities(const std::string& text) {
  static constexpr std::pair<const char*, char> kEntities[] = {
      {"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}};
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    bool replaced = false;
    if (text[i] == '&') {
      for (const auto& [entity, c] : kEntities) {
        if (text.compare(i, std::char_traits<char>::length(entity), entity) == 0) {
          out.push_back(c);
          i += std::char_traits<char>::length(entity);
          replaced = true;
          break;
        }
      }
      const size_t end = text.find(';', i);
      if (!replaced && i + 2 < text.size() && text[i + 1] == '#' && end != std::string::npos &&
          end - i <= 8) {
        const bool hex = text[i + 2] == 'x' || text[i + 2] == 'X';
        const std::string digits = text.substr(i + (hex ? 3 : 2), end - i - (hex ? 3 : 2));
        char* stop = nullptr;
        const long code = std::strtol(digits.c_str(), &stop, hex ? 16 : 10);
        if (!digits.empty() && *stop == '\0' && code > 0 && code < 128) {
          out.push_back(static_cast<char>(code));
          i = end + 1;
          replaced = true;
        }
      }
    }
    if (!replaced) out.push_back(text[i++]);
  }
  return out;
}

S3Error parse_s3_error(const std::string& body) {
  if (body.find("<Error>") == std::string::npos) return {};
  return S3Error{.code = element(body, "Code"),
                 .message = element(body, "Message"),
                 .region = element(body, "Region")};
}

ErrorMeaning explain_http_error(long status, const S3Error& error, const RequestContext& context) {
  const std::string& bucket = context.bucket;
  const std::string& key = context.key;
  const bool s3 = !bucket.empty();
  const std::string& code = error.code;
  // S3 answers a HEAD with no body: the region header is then all there is to go by.
  const bool region_error = code == "AuthorizationHeaderMalformed" || code == "PermanentRedirect" ||
                            code == "TemporaryRedirect" ||
                            (code.empty() && (status == 301 || status == 307 || status == 400));
  const std::string& bucket_region =
      context.bucket_region.empty() ? error.region : context.bucket_region;
  if (s3 && region_error && !bucket_region.empty() && bucket_region != context.region) {
    return {StatusCode::kInvalidArgument,
            "the bucket is in region " + bucket_region + ", the request was " +
                (context.signed_request ? "signed " : "") + "for " + context.region +
                ": set region=" + bucket_region + " (S3Options) or AWS_REGION"};
  }
  if (status == 403 || code == "InvalidAccessKeyId" || code == "SignatureDoesNotMatch" ||
      code == "AccessDenied" || code == "ExpiredToken") {
    std::string sentence;
    if (error.message.find("Request has expired") != std::string::npos || code == "ExpiredToken") {
      sentence = "the presigned URL or session token has expired: make a new one";
    } else if (code == "InvalidAccessKeyId" || code == "SignatureDoesNotMatch") {
      sentence =
          "the credentials were refused: check AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or the "
          "profile";
    } else if (code == "AccessDenied") {
      sentence = "access denied: these credentials may not read this object";
    } else if (s3) {
      sentence =
          "access was refused: check the credentials (AWS_ACCESS_KEY_ID/"
          "AWS_SECRET_ACCESS_KEY or the profile) and that they may read this object";
    } else {
      sentence = "the server refused access (a presigned URL may have expired)";
    }
    return {StatusCode::kPermissionDenied, sentence};
  }
  if (status == 404 || code == "NoSuchBucket" || code == "NoSuchKey") {
    if (code == "NoSuchBucket")
      return {StatusCode::kNotFound, "bucket '" + bucket + "' does not exist"};
    if (s3) return {StatusCode::kNotFound, "no object '" + key + "' in bucket '" + bucket + "'"};
    return {StatusCode::kNotFound, "no such object"};
  }
  if (status == 412) {
    return {StatusCode::kCorruptData, "the object changed since it was opened (ETag " +
                                          context.if_match + " no longer matches)"};
  }
  return {StatusCode::kIoError, ""};
}

}  // namespace stoker::io
