// S3's ListObjectsV2 answers read page by page: keys with entities, sizes, ETags, the next
// page's token, and answers that are not listings refused by name.
#include "io/remote/object_listing.h"

#include <gtest/gtest.h>

namespace stoker::io {
namespace {

constexpr char kPage[] = R"(<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>data</Name>
<Prefix>ds/</Prefix><KeyCount>2</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>true</IsTruncated>
<Contents><Key>ds/videos/a&amp;b.mp4</Key><LastModified>2026-01-01T00:00:00.000Z</LastModified>
<ETag>&quot;9b2cf535f27731c974343645a3985328&quot;</ETag><Size>1234</Size>
<StorageClass>STANDARD</StorageClass></Contents>
<Contents><Key>ds/meta/info&#x0D;.json</Key><ETag>"abc-2"</ETag><Size>0</Size></Contents>
<NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken>
</ListBucketResult>)";

TEST(ObjectListing, APageGivesEachObjectsUrlSizeAndEtagAndTheNextToken) {
  Result<ListingPage> page = parse_listing_page("data", kPage);
  ASSERT_TRUE(page.ok()) << page.status().message();
  ASSERT_EQ(page->objects.size(), 2u);
  EXPECT_EQ(page->objects[0].url, "s3://data/ds/videos/a&b.mp4");
  EXPECT_EQ(page->objects[0].size, 1234);
  EXPECT_EQ(page->objects[0].etag, "\"9b2cf535f27731c974343645a3985328\"");
  EXPECT_EQ(page->objects[1].url, "s3://data/ds/meta/info\r.json");
  EXPECT_EQ(page->objects[1].size, 0);
  EXPECT_EQ(page->next_token, "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=");
}

TEST(ObjectListing, TheLastPageHasNoTokenAndAnEmptyPageNoObjects) {
  Result<ListingPage> page = parse_listing_page(
      "data", "<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>");
  ASSERT_TRUE(page.ok());
  EXPECT_TRUE(page->objects.empty());
  EXPECT_TRUE(page->next_token.empty());
}

TEST(ObjectListing, AnswersThatAreNotListingsAreRefused) {
  for (const char* body : {
           "<Error><Code>NoSuchBucket</Code></Error>",
           "<ListBucketResult><Contents><Size>3</Size></Contents></ListBucketResult>",
           "<ListBucketResult><Contents><Key>k</Key><Size>-1</Size></Contents></ListBucketResult>",
           "<ListBucketResult><Contents><Key>k</Key><Size>12x</Size></Contents></ListBucketResult>",
           "<ListBucketResult><Contents><Key>k</Key><Size>1</Size></ListBucketResult>",
           "<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>",
       }) {
    Result<ListingPage> page = parse_listing_page("data", body);
    ASSERT_FALSE(page.ok()) << body;
    EXPECT_EQ(page.status().code(), StatusCode::kCorruptData) << body;
    EXPECT_NE(page.status().message().find("bucket 'data'"), std::string::npos) << body;
  }
}

TEST(ObjectListing, TheQueryIsSortedAndEncodedAsSignedRequestsNeedIt) {
  EXPECT_EQ(listing_query("ds/a b+c/", ""), "list-type=2&prefix=ds%2Fa%20b%2Bc%2F");
  EXPECT_EQ(listing_query("", "t/k=="), "continuation-token=t%2Fk%3D%3D&list-type=2&prefix=");
}

}  // namespace
}  // namespace stoker::io
