#include "io/remote/object_listing.h"

#include <charconv>

#include "io/remote/remote_error.h"

namespace stoker::io {
namespace {

// The text of the first <name> element in body[from, to), entities decoded; `found` says
// whether there was one.
std::string element(const std::string& body, size_t from, size_t to, const std::string& name,
                    bool* found) {
  const std::string open = "<" + name + ">";
  const size_t start = body.find(open, from);
  *found = false;
  if (start == std::string::npos || start >= to) return "";
  const size_t end = body.find("</" + name + ">", start + open.size());
  if (end == std::string::npos || end > to) return "";
  *found = true;
  return decode_xml_entities(body.substr(start + open.size(), end - start - open.size()));
}

std::string query_encode(const std::string& value) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string encoded;
  for (unsigned char c : value) {
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
        c == '_' || c == '.' || c == '~') {
      encoded.push_back(static_cast<char>(c));
    } else {
      encoded += {'%', kHex[c >> 4], kHex[c & 15]};
    }
  }
  return encoded;
}

Status bad_listing(const std::string& bucket, const std::string& why) {
  return Status(StatusCode::kCorruptData,
                "the listing of bucket '" + bucket + "' is not S3's ListObjectsV2 answer: " + why);
}

}  // namespace

std::string listing_query(const std::string& prefix, const std::string& token) {
  std::string query;
  if (!token.empty()) query += "continuation-token=" + query_encode(token) + "&";
  return query + "list-type=2&prefix=" + query_encode(prefix);
}

Result<ListingPage> parse_listing_page(const std::string& bucket, const std::string& body) {
  if (body.find("<ListBucketResult") == std::string::npos) {
    return bad_listing(bucket, "no <ListBucketResult>");
  }
  ListingPage page;
  size_t at = 0;
  while (true) {
    const size_t start = body.find("<Contents>", at);
    if (start == std::string::npos) break;
    const size_t end = body.find("</Contents>", start);
    if (end == std::string::npos) return bad_listing(bucket, "an unclosed <Contents>");
    bool has_key = false, has_size = false, has_etag = false;
    const std::string key = element(body, start, end, "Key", &has_key);
    const std::string size_text = element(body, start, end, "Size", &has_size);
    const std::string etag = element(body, start, end, "ETag", &has_etag);
    int64_t size = -1;
    const auto parsed =
        std::from_chars(size_text.data(), size_text.data() + size_text.size(), size);
    if (!has_key || !has_size || parsed.ec != std::errc() ||
        parsed.ptr != size_text.data() + size_text.size() || size < 0) {
      return bad_listing(bucket, "an object without a key or a size");
    }
    page.objects.push_back({.url = "s3://" + bucket + "/" + key, .size = size, .etag = etag});
    at = end;
  }
  bool truncated_found = false, token_found = false;
  const std::string truncated = element(body, 0, body.size(), "IsTruncated", &truncated_found);
  if (truncated == "true") {
    page.next_token = element(body, 0, body.size(), "NextContinuationToken", &token_found);
    if (page.next_token.empty()) return bad_listing(bucket, "truncated, with no next token");
  }
  return page;
}

}  // namespace stoker::io
