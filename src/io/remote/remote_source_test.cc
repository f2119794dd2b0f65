#include "stoker/remote_source.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "io/remote/io_pool.h"
#include "io/remote/testing/http_test_server.h"

namespace stoker {
namespace {

using io::testing::HttpTestServer;
using Fault = HttpTestServer::Fault;

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 generator(seed);
  std::vector<uint8_t> bytes(n);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(generator());
  return bytes;
}

std::string temporary_folder(const std::string& name) {
  const auto folder = std::filesystem::temp_directory_path() /
                      ("stoker-remote-test-" + std::to_string(::getpid())) / name;
  std::filesystem::remove_all(folder);
  std::filesystem::create_directories(folder);
  return folder.string();
}

// Quick limits, so failing tests fail in seconds.
RemoteOptions fast_options() {
  return RemoteOptions{.max_attempts = 4,
                       .total_timeout_s = 5,
                       .connect_timeout_s = 2,
                       .low_speed_timeout_s = 1,
                       .backoff_base_s = 0.01,
                       .backoff_max_s = 0.05,
                       .min_request_bytes = 64 << 10};
}

class RemoteSourceTest : public ::testing::Test {
 protected:
  // Each test has objects of its own (a path named after it), so the process-wide cache holds
  // nothing of another test's.
  std::string path(const std::string& name) {
    std::string result = "/";
    result.append(::testing::UnitTest::GetInstance()->current_test_info()->name());
    return result.append("/").append(name);
  }
  std::unique_ptr<ByteSource> open(const std::string& object_path,
                                   RemoteOptions options = fast_options()) {
    auto source = open_remote_source(server_.url(object_path), options);
    EXPECT_TRUE(source.ok()) << source.status().message();
    return source.ok() ? std::move(source).value() : nullptr;
  }

  HttpTestServer server_;
};

TEST_F(RemoteSourceTest, ReadsTheBytesOfTheObject) {
  const auto bytes = random_bytes(300000, 1);
  server_.put(path("a.bin"), bytes);
  auto source = open(path("a.bin"));
  ASSERT_NE(source, nullptr);
  EXPECT_TRUE(source->is_remote());
  EXPECT_EQ(source->size(), 300000);
  EXPECT_EQ(source->version_tag(), server_.etag(path("a.bin")));
  EXPECT_EQ(source->mtime_ns(), int64_t{1445412480} * 1000000000);
  EXPECT_EQ(source->name(), server_.url(path("a.bin")));

  std::vector<uint8_t> out(bytes.size());
  auto whole = source->read_at(0, out);
  ASSERT_TRUE(whole.ok()) << whole.status().message();
  EXPECT_EQ(*whole, bytes.size());
  EXPECT_EQ(out, bytes);

  std::vector<uint8_t> tail(64);
  ASSERT_EQ(*source->read_at(source->size() - 10, tail), 10u);
  EXPECT_TRUE(std::equal(tail.begin(), tail.begin() + 10, bytes.end() - 10));
  EXPECT_EQ(*source->read_at(source->size(), tail), 0u);
  EXPECT_EQ(source->read_at(-1, tail).status().code(), StatusCode::kInvalidArgument);
  // Every GET carried the ETag seen at open.
  for (const std::string& line : server_.log()) {
    if (line.rfind("GET", 0) == 0) {
      EXPECT_NE(line.find("if-match"), std::string::npos) << line;
    }
  }
}

TEST_F(RemoteSourceTest, SmallReadsShareOneReadAheadRequest) {
  const auto bytes = random_bytes(1 << 20, 2);
  server_.put(path("v.mp4"), bytes);
  auto source = open(path("v.mp4"));  // min_request_bytes: 64 KiB
  server_.reset_log();
  const RemoteStats before = remote_stats();
  std::vector<uint8_t> out(4096);
  for (int64_t offset = 0; offset < 64 * 1024; offset += 4096) {
    ASSERT_EQ(*source->read_at(offset, out), out.size());
    ASSERT_TRUE(std::equal(out.begin(), out.end(), bytes.begin() + offset));
  }
  const RemoteStats after = remote_stats();
  EXPECT_EQ(server_.requests(), 1);
  EXPECT_EQ(after.cache_misses - before.cache_misses, 1);
  EXPECT_EQ(after.cache_hits - before.cache_hits, 15);
  EXPECT_EQ(after.bytes_fetched - before.bytes_fetched, 64 * 1024);
}

TEST_F(RemoteSourceTest, PrefetchCoalescesNearRangesAndSplitsFarOnes) {
  const auto bytes = random_bytes(4 << 20, 3);
  server_.put(path("v.mp4"), bytes);
  RemoteOptions options = fast_options();
  options.read_through_gap_bytes = 100000;
  auto source = open(path("v.mp4"), options);
  server_.reset_log();
  // Two near ranges (gap 50000) and one far (gap 2 MiB).
  const std::vector<ByteRange> ranges = {{0, 10000}, {60000, 10000}, {2200000, 5000}};
  source->prefetch(ranges);
  for (const ByteRange& range : ranges) {
    std::vector<uint8_t> out(static_cast<size_t>(range.length));
    ASSERT_EQ(*source->read_at(range.offset, out), out.size());
    EXPECT_TRUE(std::equal(out.begin(), out.end(), bytes.begin() + range.offset));
  }
  const auto log = server_.log();
  ASSERT_EQ(log.size(), 2u);
  auto asked = [&](const std::string& range) {
    return std::any_of(log.begin(), log.end(), [&](const std::string& line) {
      return line.find(" " + range + " ") != std::string::npos;
    });
  };
  EXPECT_TRUE(asked("0-69999")) << log[0] << " | " << log[1];
  EXPECT_TRUE(asked("2200000-2204999")) << log[0] << " | " << log[1];
  // Prefetching what is cached asks for nothing.
  source->prefetch(ranges);
  std::vector<uint8_t> out(100);
  ASSERT_EQ(*source->read_at(60000, out), 100u);
  EXPECT_EQ(server_.requests(), 2);
}

TEST_F(RemoteSourceTest, AReadWaitsForThePrefetchThatHasItsBytes) {
  const auto bytes = random_bytes(200000, 4);
  server_.put(path("v.mp4"), bytes);
  auto source = open(path("v.mp4"));
  server_.reset_log();
  server_.set_fault(Fault::kStall, 1, 0.3);  // the prefetch takes ~0.3 s
  const RemoteStats before = remote_stats();
  const std::vector<ByteRange> ranges = {{1000, 150000}};
  source->prefetch(ranges);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the prefetch is under way
  std::vector<uint8_t> out(1000);
  ASSERT_EQ(*source->read_at(100000, out), out.size());
  EXPECT_TRUE(std::equal(out.begin(), out.end(), bytes.begin() + 100000));
  const RemoteStats after = remote_stats();
  EXPECT_EQ(server_.requests(), 1);  // the read made no request of its own
  EXPECT_GT(after.wait_s - before.wait_s, 0.1);
  EXPECT_EQ(after.cache_misses - before.cache_misses, 1);
}

TEST_F(RemoteSourceTest, RetriesUntilTheServerRecovers) {
  const auto bytes = random_bytes(100000, 5);
  server_.put(path("v.mp4"), bytes);
  auto source = open(path("v.mp4"));
  for (Fault fault :
       {Fault::kSlowDown503, Fault::kError500, Fault::kCloseAtOnce, Fault::kTruncated}) {
    SCOPED_TRACE(static_cast<int>(fault));
    const RemoteStats before = remote_stats();
    server_.reset_log();
    server_.set_fault(fault, 2);
    std::vector<uint8_t> out(5000);
    auto got = source->read_at(static_cast<int64_t>(fault) * 20000, out);
    ASSERT_TRUE(got.ok()) << got.status().message();
    EXPECT_TRUE(
        std::equal(out.begin(), out.end(), bytes.begin() + static_cast<int64_t>(fault) * 20000));
    const RemoteStats after = remote_stats();
    EXPECT_EQ(server_.requests(), 3);
    // curl itself retries a request on a kept-alive connection that closed at once.
    EXPECT_EQ(after.retries - before.retries, fault == Fault::kCloseAtOnce ? 1 : 2);
    EXPECT_EQ(after.requests - before.requests, after.retries - before.retries + 1);
    EXPECT_EQ(after.failures - before.failures, 0);
    configure_remote_cache(0, "", 0);  // the next read fetches again
    configure_remote_cache(256 << 20, "", 0);
  }
}

TEST_F(RemoteSourceTest, AServerThatNeverRecoversFailsWithinTheTotalTimeout) {
  server_.put(path("v.mp4"), random_bytes(1000, 6));
  auto source = open(path("v.mp4"));
  server_.set_fault(Fault::kSlowDown503);
  const RemoteStats before = remote_stats();
  const auto start = std::chrono::steady_clock::now();
  RemoteOptions options = fast_options();
  options.max_attempts = 1000;
  options.total_timeout_s = 1.5;
  options.backoff_max_s = 0.2;
  auto patient = open_remote_source(server_.url(path("v.mp4")), options);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(patient.ok());
  EXPECT_LT(seconds, 2.5);
  EXPECT_GT(seconds, 1.0);
  const std::string message = patient.status().message();
  EXPECT_EQ(patient.status().code(), StatusCode::kIoError);
  EXPECT_NE(message.find(server_.url(path("v.mp4")) + ": HEAD failed after "), std::string::npos)
      << message;
  EXPECT_NE(message.find("HTTP 503"), std::string::npos) << message;
  EXPECT_EQ(remote_stats().failures - before.failures, 1);

  // A read too, by max_attempts: the message has the range, the attempts, S3's code.
  std::vector<uint8_t> out(100);
  auto read = source->read_at(0, out);
  ASSERT_FALSE(read.ok());
  EXPECT_NE(read.status().message().find("GET bytes=0-999 failed after 4 attempts in "),
            std::string::npos)
      << read.status().message();
  EXPECT_NE(read.status().message().find("HTTP 503 SlowDown (Please reduce your request rate.)"),
            std::string::npos)
      << read.status().message();
}

TEST_F(RemoteSourceTest, AStalledTransferIsAbandonedAndRetried) {
  const auto bytes = random_bytes(200000, 7);
  server_.put(path("v.mp4"), bytes);
  auto source = open(path("v.mp4"));  // low_speed_timeout_s: 1
  server_.set_fault(Fault::kStall, 1, 30);
  const RemoteStats before = remote_stats();
  const auto start = std::chrono::steady_clock::now();
  std::vector<uint8_t> out(100000);
  auto got = source->read_at(0, out);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(got.ok()) << got.status().message();
  EXPECT_TRUE(std::equal(out.begin(), out.end(), bytes.begin()));
  EXPECT_LT(seconds, 4.0);
  EXPECT_EQ(remote_stats().retries - before.retries, 1);
}

TEST_F(RemoteSourceTest, AStoreThatStopsAnsweringFailsAtTheDeadlineNamingIt) {
  server_.put(path("v.mp4"), random_bytes(200000, 9));
  RemoteOptions options = fast_options();
  options.total_timeout_s = 0.6;  // shorter than the stall detector's low_speed_timeout_s
  auto impatient = open_remote_source(server_.url(path("v.mp4")), options);
  ASSERT_TRUE(impatient.ok()) << impatient.status().message();
  server_.set_fault(Fault::kStall, 1, 30);
  const auto start = std::chrono::steady_clock::now();
  std::vector<uint8_t> out(100000);
  auto got = (*impatient)->read_at(0, out);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(got.ok());
  EXPECT_LT(seconds, 1.5);
  const std::string message = got.status().message();
  EXPECT_NE(message.find(server_.url(path("v.mp4")) + ": GET bytes=0-99999 failed after "),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("the request's deadline ran out (total_timeout_s = 0.6 s)"),
            std::string::npos)
      << message;
}

TEST_F(RemoteSourceTest, RefusedCredentialsArePermissionDenied) {
  server_.put(path("v.mp4"), random_bytes(1000, 8));
  server_.set_fault(Fault::kSignature403);
  auto source = open_remote_source(server_.url(path("v.mp4")), fast_options());
  ASSERT_FALSE(source.ok());
  EXPECT_EQ(source.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(source.status().message().find("SignatureDoesNotMatch"), std::string::npos)
      << source.status().message();
  EXPECT_NE(source.status().message().find("the credentials were refused"), std::string::npos);

  server_.set_fault(Fault::kExpired403);
  auto expired = open_remote_source(server_.url(path("v.mp4")), fast_options());
  EXPECT_EQ(expired.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(expired.status().message().find("expired"), std::string::npos);
}

TEST_F(RemoteSourceTest, APresignedUrlRefusingHeadIsOpenedByAGetOfItsFirstByte) {
  const auto bytes = random_bytes(5000, 9);
  server_.put(path("v.mp4"), bytes);
  server_.set_fault(Fault::kRefuseHead403);
  auto source = open(path("v.mp4"));
  ASSERT_NE(source, nullptr);
  EXPECT_EQ(source->size(), 5000);
  EXPECT_EQ(source->version_tag(), server_.etag(path("v.mp4")));
  std::vector<uint8_t> out(5000);
  ASSERT_EQ(*source->read_at(0, out), 5000u);
  EXPECT_EQ(out, bytes);
}

TEST_F(RemoteSourceTest, MissingObjectsAreNotFound) {
  auto missing = open_remote_source(server_.url(path("none.mp4")), fast_options());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);

  RemoteOptions s3 = fast_options();
  s3.endpoint_url = server_.url();
  s3.access_key_id = "AKIDTEST";
  s3.secret_access_key = "secret";
  auto no_key = open_remote_source("s3://bucket" + path("none.mp4"), s3);
  EXPECT_EQ(no_key.status().code(), StatusCode::kNotFound);
  EXPECT_NE(no_key.status().message().find("no object '" + path("none.mp4").substr(1) +
                                           "' in bucket 'bucket'"),
            std::string::npos)
      << no_key.status().message();

  server_.set_fault(Fault::kNoSuchBucket404);
  auto no_bucket = open_remote_source("s3://nobucket/key", s3);
  EXPECT_EQ(no_bucket.status().code(), StatusCode::kNotFound);
  EXPECT_NE(no_bucket.status().message().find("bucket 'nobucket' does not exist"),
            std::string::npos)
      << no_bucket.status().message();
}

TEST_F(RemoteSourceTest, AnObjectReplacedSinceOpeningFailsAsChanged) {
  server_.put(path("v.mp4"), random_bytes(10000, 10));
  auto source = open(path("v.mp4"));
  const std::string old_etag = source->version_tag();
  server_.put(path("v.mp4"), random_bytes(10000, 11));
  std::vector<uint8_t> out(100);
  auto read = source->read_at(0, out);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), StatusCode::kCorruptData);
  EXPECT_NE(read.status().message().find("changed since it was opened (ETag " + old_etag),
            std::string::npos)
      << read.status().message();
  EXPECT_TRUE(source->check_unchanged().ok());
}

// Issue 21 item 3: a server that ignores If-Match served the new version's bytes to reads
// of the old one, so a replaced object's ranges were mixed into a video opened before.
TEST_F(RemoteSourceTest, AServerIgnoringIfMatchCannotMixInTheBytesOfANewVersion) {
  server_.set_honour_if_match(false);
  const auto old_bytes = random_bytes(400000, 20);
  server_.put(path("v.mp4"), old_bytes);
  auto source = open(path("v.mp4"));  // min_request_bytes: 64 KiB
  ASSERT_NE(source, nullptr);
  const std::string old_etag = source->version_tag();
  std::vector<uint8_t> out(1000);
  ASSERT_EQ(*source->read_at(0, out), out.size());
  server_.put(path("v.mp4"), random_bytes(400000, 21));  // the same size, a new ETag
  const std::string new_etag = server_.etag(path("v.mp4"));
  ASSERT_NE(new_etag, old_etag);

  const RemoteStats before = remote_stats();
  server_.reset_log();
  auto read = source->read_at(200000, out);
  ASSERT_FALSE(read.ok()) << "read the new version's bytes as the old one's";
  EXPECT_EQ(read.status().code(), StatusCode::kCorruptData);
  const std::string message = read.status().message();
  EXPECT_NE(message.find(server_.url(path("v.mp4")) + ": GET bytes=200000-"), std::string::npos)
      << message;
  EXPECT_NE(message.find("the object changed since it was opened (ETag " + old_etag + " at open, " +
                         new_etag + " in this reply)"),
            std::string::npos)
      << message;
  // Retrying cannot help: one request, no retry.
  EXPECT_EQ(server_.requests(), 1);
  EXPECT_EQ(remote_stats().retries - before.retries, 0);

  // A prefetch meets the same answer; the read that needs its bytes fails too.
  const std::vector<ByteRange> ahead = {{300000, 50000}};
  source->prefetch(ahead);
  std::vector<uint8_t> later(50000);
  auto prefetched = source->read_at(300000, later);
  ASSERT_FALSE(prefetched.ok());
  EXPECT_NE(prefetched.status().message().find("changed since it was opened"), std::string::npos)
      << prefetched.status().message();
  // What was read before the change is the opened version's, and still served.
  ASSERT_EQ(*source->read_at(0, out), out.size());
  EXPECT_TRUE(std::equal(out.begin(), out.end(), old_bytes.begin()));
}

TEST_F(RemoteSourceTest, WithoutAnETagAReplacedObjectIsToldByItsLastModified) {
  server_.set_validators(/*etag=*/false, /*last_modified=*/true);
  server_.put(path("v.mp4"), random_bytes(400000, 22));
  auto source = open(path("v.mp4"));
  ASSERT_NE(source, nullptr);
  EXPECT_EQ(source->version_tag(), "");
  std::vector<uint8_t> out(1000);
  ASSERT_EQ(*source->read_at(0, out), out.size());
  server_.put(path("v.mp4"), random_bytes(400000, 23));  // one second later
  auto read = source->read_at(200000, out);
  ASSERT_FALSE(read.ok()) << "read the new version's bytes as the old one's";
  EXPECT_EQ(read.status().code(), StatusCode::kCorruptData);
  EXPECT_NE(read.status().message().find("the object changed since it was opened (Last-Modified "
                                         "Wed, 21 Oct 2015 07:28:00 GMT at open, "
                                         "Wed, 21 Oct 2015 07:28:01 GMT in this reply)"),
            std::string::npos)
      << read.status().message();
}

TEST_F(RemoteSourceTest, WithoutValidatorsAReplacedObjectOfAnotherSizeIsToldByItsSize) {
  server_.set_validators(/*etag=*/false, /*last_modified=*/false);
  server_.put(path("v.mp4"), random_bytes(400000, 24));
  auto source = open(path("v.mp4"));
  ASSERT_NE(source, nullptr);
  std::vector<uint8_t> out(1000);
  ASSERT_EQ(*source->read_at(0, out), out.size());
  server_.put(path("v.mp4"), random_bytes(400001, 25));
  auto read = source->read_at(200000, out);
  ASSERT_FALSE(read.ok()) << "read the new version's bytes as the old one's";
  EXPECT_EQ(read.status().code(), StatusCode::kCorruptData);
  EXPECT_NE(read.status().message().find(
                "the object changed since it was opened (400000 bytes at open, 400001 in this "
                "reply)"),
            std::string::npos)
      << read.status().message();
}

TEST_F(RemoteSourceTest, S3UrlsArePathStyleAndSignedWithAnEndpoint) {
  const auto bytes = random_bytes(3000, 12);
  server_.put("/my-bucket" + path("dir/a b+c.mp4"), bytes);
  RemoteOptions options = fast_options();
  options.endpoint_url = server_.url() + "/";
  options.access_key_id = "AKIDTEST";
  options.secret_access_key = "secret";
  options.session_token = "token";
  auto source = open_remote_source("s3://my-bucket" + path("dir/a b+c.mp4"), options);
  ASSERT_TRUE(source.ok()) << source.status().message();
  std::vector<uint8_t> out(3000);
  ASSERT_EQ(*(*source)->read_at(0, out), 3000u);
  EXPECT_EQ(out, bytes);
  const auto log = server_.log();
  ASSERT_FALSE(log.empty());
  // Path style, the key encoded as S3 wants it, signed, the session token sent.
  EXPECT_EQ(log[0].rfind("HEAD /my-bucket/" + path("dir/a%20b%2Bc.mp4").substr(1) + " signed", 0),
            0u)
      << log[0];
}

// Issue 21 item 18: a wrong region said only "HEAD failed ... HTTP 400" (S3 answers a HEAD
// with no body): S3's code and message and the bucket's region are what tell the fix.
TEST_F(RemoteSourceTest, AWrongRegionIsNamedWithS3sWordsAndTheBucketsRegion) {
  server_.put("/bucket" + path("v.mp4"), random_bytes(1000, 26));
  RemoteOptions options = fast_options();
  options.endpoint_url = server_.url();
  options.region = "us-east-1";
  options.access_key_id = "AKIDTEST";
  options.secret_access_key = "secret";
  const std::string url = "s3://bucket" + path("v.mp4");
  const std::string advice =
      "the bucket is in region eu-west-1, the request was signed for us-east-1: set "
      "region=eu-west-1 (S3Options) or AWS_REGION";

  server_.set_fault(Fault::kWrongRegion400);
  auto signed_wrong = open_remote_source(url, options);
  ASSERT_FALSE(signed_wrong.ok());
  EXPECT_EQ(signed_wrong.status().code(), StatusCode::kInvalidArgument);
  std::string message = signed_wrong.status().message();
  EXPECT_EQ(message.rfind(url + ": ", 0), 0u) << message;
  EXPECT_NE(message.find("HTTP 400 AuthorizationHeaderMalformed (The authorization header is "
                         "malformed; the region 'us-east-1' is wrong; expecting 'eu-west-1')"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find(advice), std::string::npos) << message;

  server_.set_fault(Fault::kWrongRegion301);
  auto redirected = open_remote_source(url, options);
  ASSERT_FALSE(redirected.ok());
  EXPECT_EQ(redirected.status().code(), StatusCode::kInvalidArgument);
  message = redirected.status().message();
  EXPECT_NE(message.find("HTTP 301 PermanentRedirect"), std::string::npos) << message;
  EXPECT_NE(message.find(advice), std::string::npos) << message;

  // Unsigned (anonymous), the advice names the region the request went to.
  options.anonymous = true;
  auto anonymous = open_remote_source(url, options);
  ASSERT_FALSE(anonymous.ok());
  EXPECT_NE(anonymous.status().message().find(
                "the bucket is in region eu-west-1, the request was for us-east-1: set "
                "region=eu-west-1 (S3Options) or AWS_REGION"),
            std::string::npos)
      << anonymous.status().message();
}

TEST_F(RemoteSourceTest, ThreadsReadRandomRangesAtOnce) {
  const auto bytes = random_bytes(2 << 20, 13);
  server_.put(path("v.mp4"), bytes);
  auto source = open(path("v.mp4"));
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 generator(t);
      std::vector<uint8_t> out;
      for (int i = 0; i < 40; ++i) {
        const int64_t offset = generator() % bytes.size();
        out.resize(1 + generator() % 200000);
        if (i % 7 == 0) {
          const ByteRange ahead{offset, static_cast<int64_t>(out.size())};
          source->prefetch(std::span(&ahead, 1));
        }
        auto got = source->read_at(offset, out);
        const size_t expected = std::min(out.size(), bytes.size() - static_cast<size_t>(offset));
        if (!got.ok() || *got != expected ||
            !std::equal(out.begin(), out.begin() + expected, bytes.begin() + offset)) {
          ++mismatches;
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST_F(RemoteSourceTest, TheDiskCacheServesALaterConfiguration) {
  const auto bytes = random_bytes(100000, 14);
  server_.put(path("v.mp4"), bytes);
  const std::string folder = temporary_folder("disk");
  configure_remote_cache(1 << 20, folder, 64 << 20);
  auto source = open(path("v.mp4"));
  std::vector<uint8_t> out(1000);
  ASSERT_EQ(*source->read_at(0, out), 1000u);
  server_.reset_log();
  // A new configuration (an empty memory cache): the range comes from disk.
  configure_remote_cache(0, folder, 64 << 20);
  const RemoteStats before = remote_stats();
  ASSERT_EQ(*source->read_at(0, out), 1000u);
  EXPECT_TRUE(std::equal(out.begin(), out.end(), bytes.begin()));
  EXPECT_EQ(server_.requests(), 0);
  EXPECT_EQ(remote_stats().disk_cache_hits - before.disk_cache_hits, 1);
  // The folder is kept under its budget.
  configure_remote_cache(0, folder, 10);
  ASSERT_EQ(*source->read_at(50000, out), 1000u);
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(folder))
    files += entry.is_regular_file();
  EXPECT_LE(files, 1);
  configure_remote_cache(256 << 20, "", 0);
}

TEST_F(RemoteSourceTest, OpenSourceSharesOneSourcePerUrl) {
  server_.put(path("v.mp4"), random_bytes(1000, 15));
  set_remote_options(server_.url(path("")), fast_options());
  server_.reset_log();
  auto a = open_source(server_.url(path("v.mp4")));
  auto b = open_source(server_.url(path("v.mp4")));
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(a->get(), b->get());
  EXPECT_EQ(server_.requests(), 1);  // one HEAD
  EXPECT_TRUE(is_remote_url("s3://b/k"));
  EXPECT_TRUE(is_remote_url("https://x/y"));
  EXPECT_FALSE(is_remote_url("/tmp/s3://x"));
}

// Issue 22: a dataset's first batch sent a HEAD per video, though the listing the dataset was
// opened from had given each object's size and ETag.
TEST_F(RemoteSourceTest, AListedObjectOpensWithoutAHeadAndReadsAtTheListedVersion) {
  const auto bytes = random_bytes(200000, 30);
  server_.put(path("v.mp4"), bytes);
  server_.put(path("other.mp4"), random_bytes(1000, 31));
  set_remote_options(server_.url(path("")), fast_options());
  const std::string url = server_.url(path("v.mp4"));
  const std::string etag = server_.etag(path("v.mp4"));
  remember_listed_objects({{.url = url, .size = 200000, .etag = etag},
                           {.url = server_.url(path("untagged.mp4")), .size = 5, .etag = ""}});
  server_.reset_log();
  auto source = open_source(url);
  ASSERT_TRUE(source.ok()) << source.status().message();
  EXPECT_EQ(server_.requests(), 0);  // no HEAD
  EXPECT_EQ((*source)->size(), 200000);
  EXPECT_EQ((*source)->version_tag(), etag);
  std::vector<uint8_t> out(1000);
  ASSERT_EQ(*(*source)->read_at(150000, out), out.size());
  EXPECT_TRUE(std::equal(out.begin(), out.end(), bytes.begin() + 150000));
  const auto log = server_.log();
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0].rfind("GET", 0), 0u) << log[0];
  EXPECT_NE(log[0].find("if-match"), std::string::npos) << log[0];

  // Replaced since the listing: the read fails as changed, as after a HEAD.
  server_.put(path("v.mp4"), random_bytes(200000, 32));
  auto read = (*source)->read_at(0, out);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), StatusCode::kCorruptData);
  EXPECT_NE(read.status().message().find("changed since it was opened (ETag " + etag),
            std::string::npos)
      << read.status().message();

  // Objects the listing did not name, or named without an ETag, are opened with a HEAD.
  server_.reset_log();
  ASSERT_TRUE(open_source(server_.url(path("other.mp4"))).ok());
  ASSERT_EQ(server_.log().size(), 1u);
  EXPECT_EQ(server_.log()[0].rfind("HEAD", 0), 0u) << server_.log()[0];
  EXPECT_EQ(open_source(server_.url(path("untagged.mp4"))).status().code(),
            StatusCode::kNotFound);  // asked, and missing

  // New options for the prefix: what the listing said is asked again.
  RemoteOptions other = fast_options();
  other.max_attempts = 3;
  set_remote_options(server_.url(path("")), other);
  server_.reset_log();
  ASSERT_TRUE(open_source(url).ok());
  ASSERT_EQ(server_.log().size(), 1u);
  EXPECT_EQ(server_.log()[0].rfind("HEAD", 0), 0u) << server_.log()[0];
}

TEST_F(RemoteSourceTest, ThreadsOpeningOneUrlAtOnceShareOneHead) {
  server_.put(path("v.mp4"), random_bytes(1000, 17));
  set_remote_options(server_.url(path("")), fast_options());
  server_.reset_log();
  std::atomic<int> ready = 0;
  std::vector<std::thread> threads;
  std::vector<const ByteSource*> opened(16);
  for (size_t t = 0; t < opened.size(); ++t) {
    threads.emplace_back([&, t] {
      ready.fetch_add(1);
      while (ready.load() < static_cast<int>(opened.size())) {
      }
      auto source = open_source(server_.url(path("v.mp4")));
      opened[t] = source.ok() ? source->get() : nullptr;
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(server_.requests(), 1);  // one HEAD, whoever asked first
  for (const ByteSource* source : opened) EXPECT_EQ(source, opened[0]);
  // The same options again keep the sources; other options open them again.
  set_remote_options(server_.url(path("")), fast_options());
  ASSERT_TRUE(open_source(server_.url(path("v.mp4"))).ok());
  EXPECT_EQ(server_.requests(), 1);
  RemoteOptions other = fast_options();
  other.min_request_bytes = 4096;
  set_remote_options(server_.url(path("")), other);
  ASSERT_TRUE(open_source(server_.url(path("v.mp4"))).ok());
  EXPECT_EQ(server_.requests(), 2);
}

TEST_F(RemoteSourceTest, AForkedChildReadsWithThreadsAndConnectionsOfItsOwn) {
  const auto bytes = random_bytes(400000, 16);
  server_.put(path("v.mp4"), bytes);
  auto source = open(path("v.mp4"));
  const std::vector<ByteRange> first = {{0, 100000}};
  source->prefetch(first);  // the parent's I/O threads and connections are in use
  std::vector<uint8_t> out(1000);
  ASSERT_EQ(*source->read_at(0, out), 1000u);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // A new pool and an empty cache: the prefetch and the reads work as in the parent.
    const std::vector<ByteRange> later = {{200000, 100000}};
    source->prefetch(later);
    std::vector<uint8_t> mine(100000);
    auto got = source->read_at(200000, mine);
    auto again = source->read_at(0, mine);
    const bool ok = got.ok() && again.ok() && std::equal(mine.begin(), mine.end(), bytes.begin()) &&
                    remote_stats().cache_misses > 0;
    ::_exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  ASSERT_EQ(*source->read_at(500, out), 1000u);  // the parent goes on
  EXPECT_TRUE(std::equal(out.begin(), out.end(), bytes.begin() + 500));
}

// setenv for one test, restored after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    const char* old = std::getenv(name);
    if (old != nullptr) old_ = old;
    had_ = old != nullptr;
    if (value.empty())
      ::unsetenv(name);
    else
      ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (had_)
      ::setenv(name_, old_.c_str(), 1);
    else
      ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

TEST(ResolveRemoteOptions, ReadsTheEnvironmentAndTheSharedFilesLikeTheAwsCli) {
  const std::string home = temporary_folder("home");
  std::filesystem::create_directories(home + "/.aws");
  write_text(home + "/.aws/credentials",
             "[default]\naws_access_key_id = AKIDDEFAULT\naws_secret_access_key = s1\n"
             "# a comment\n[work]\naws_access_key_id=AKIDWORK\naws_secret_access_key=s2\n"
             "aws_session_token = t2\n");
  write_text(home + "/.aws/config",
             "[default]\nregion = eu-west-1\n[profile work]\nregion = ap-south-1\n"
             "s3 =\n  endpoint_url = http://work-store:9000\n");
  ScopedEnv home_env("HOME", home);
  ScopedEnv no_files("AWS_SHARED_CREDENTIALS_FILE", "");
  ScopedEnv no_config("AWS_CONFIG_FILE", "");
  ScopedEnv no_key("AWS_ACCESS_KEY_ID", "");
  ScopedEnv no_secret("AWS_SECRET_ACCESS_KEY", "");
  ScopedEnv no_token("AWS_SESSION_TOKEN", "");
  ScopedEnv no_profile("AWS_PROFILE", "");
  ScopedEnv no_region("AWS_REGION", "");
  ScopedEnv no_default_region("AWS_DEFAULT_REGION", "");
  ScopedEnv no_endpoint("AWS_ENDPOINT_URL", "");
  ScopedEnv no_s3_endpoint("AWS_ENDPOINT_URL_S3", "");

  auto defaults = resolve_remote_options({});
  ASSERT_TRUE(defaults.ok()) << defaults.status().message();
  EXPECT_EQ(defaults->access_key_id, "AKIDDEFAULT");
  EXPECT_EQ(defaults->secret_access_key, "s1");
  EXPECT_EQ(defaults->region, "eu-west-1");
  EXPECT_EQ(defaults->endpoint_url, "");
  EXPECT_EQ(defaults->max_attempts, 8);
  EXPECT_EQ(defaults->total_timeout_s, 120);
  EXPECT_EQ(defaults->read_through_gap_bytes, 64 << 10);
  EXPECT_EQ(defaults->min_request_bytes, 256 << 10);

  {
    ScopedEnv profile("AWS_PROFILE", "work");
    auto work = resolve_remote_options({});
    ASSERT_TRUE(work.ok()) << work.status().message();
    EXPECT_EQ(work->access_key_id, "AKIDWORK");
    EXPECT_EQ(work->session_token, "t2");
    EXPECT_EQ(work->region, "ap-south-1");
    EXPECT_EQ(work->endpoint_url, "http://work-store:9000");
  }
  {
    ScopedEnv key("AWS_ACCESS_KEY_ID", "AKIDENV");
    ScopedEnv secret("AWS_SECRET_ACCESS_KEY", "s3");
    ScopedEnv region("AWS_REGION", "us-west-2");
    ScopedEnv endpoint("AWS_ENDPOINT_URL", "http://general:1");
    ScopedEnv s3_endpoint("AWS_ENDPOINT_URL_S3", "http://s3-only:2");
    auto env = resolve_remote_options({});
    ASSERT_TRUE(env.ok());
    EXPECT_EQ(env->access_key_id, "AKIDENV");
    EXPECT_EQ(env->region, "us-west-2");
    EXPECT_EQ(env->endpoint_url, "http://s3-only:2");
    // Explicit fields win, and a profile named in the call beats the environment's keys.
    auto explicit_options =
        resolve_remote_options({.region = "sa-east-1", .profile = "work", .max_attempts = 3});
    ASSERT_TRUE(explicit_options.ok());
    EXPECT_EQ(explicit_options->region, "sa-east-1");
    EXPECT_EQ(explicit_options->access_key_id, "AKIDWORK");
    EXPECT_EQ(explicit_options->max_attempts, 3);
  }
  {
    const std::string other = temporary_folder("other");
    write_text(other + "/creds",
               "[default]\naws_access_key_id = AKIDOTHER\n"
               "aws_secret_access_key = s4\n");
    ScopedEnv files("AWS_SHARED_CREDENTIALS_FILE", other + "/creds");
    ScopedEnv config("AWS_CONFIG_FILE", other + "/no-config");
    auto moved = resolve_remote_options({});
    ASSERT_TRUE(moved.ok());
    EXPECT_EQ(moved->access_key_id, "AKIDOTHER");
    EXPECT_EQ(moved->region, "us-east-1");
  }
  auto missing = resolve_remote_options({.profile = "nobody"});
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("'nobody'"), std::string::npos);
}

}  // namespace
// The I/O threads keep the normal policy when a loader's worker (SCHED_BATCH) starts them: a
// worker waits on what they fetch. In a child, whose pool starts with its first job.
TEST(IoPool, ThreadsStartedByABatchThreadRunUnderTheNormalPolicy) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    sched_param param{};
    if (pthread_setschedparam(pthread_self(), SCHED_BATCH, &param) != 0) ::_exit(2);
    std::atomic<int> policy{-1};
    if (!io::io_pool().submit([&] { policy = sched_getscheduler(0); })) ::_exit(3);
    while (policy == -1) std::this_thread::yield();
    ::_exit(policy == SCHED_OTHER ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

}  // namespace stoker
