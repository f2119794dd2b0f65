// S3's ListObjectsV2, page by page: the request for a page and what its XML answer says.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "stoker/remote_source.h"
#include "stoker/status.h"

namespace stoker::io {

/// One page of a listing: its objects (URLs made from the bucket and each key), and the token
/// of the next page (empty on the last).
struct ListingPage {
  std::vector<ListedObject> objects;
  std::string next_token;
};

/// The query of a ListObjectsV2 request for the keys under `prefix`, after `token` (empty: the
/// first page), with its parameters sorted and percent-encoded as SigV4 signs them.
std::string listing_query(const std::string& prefix, const std::string& token);

/// Reads one ListObjectsV2 answer of bucket `bucket`. Errors (kCorruptData): a body that is
/// not a listing, an object without a key or a size, a truncated listing without a next token.
Result<ListingPage> parse_listing_page(const std::string& bucket, const std::string& body);

}  // namespace stoker::io
