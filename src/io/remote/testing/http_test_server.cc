#include "io/remote/testing/http_test_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <ctime>
#include <stdexcept>

namespace stoker::io::testing {
namespace {

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

bool send_all(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::send(fd, p, size, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

std::string s3_error(const std::string& code, const std::string& message) {
  return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>" + code + "</Code><Message>" +
         message + "</Message><RequestId>test</RequestId></Error>";
}

std::string percent_decoded(const std::string& path) {
  std::string decoded;
  for (size_t i = 0; i < path.size(); ++i) {
    if (path[i] == '%' && i + 2 < path.size()) {
      decoded.push_back(static_cast<char>(std::stoi(path.substr(i + 1, 2), nullptr, 16)));
      i += 2;
    } else {
      decoded.push_back(path[i]);
    }
  }
  return decoded;
}

// An HTTP date (RFC 9110 IMF-fixdate) of Unix time `seconds`.
std::string http_date(int64_t seconds) {
  const std::time_t t = static_cast<std::time_t>(seconds);
  std::tm parts{};
  ::gmtime_r(&t, &parts);
  char text[64];
  std::strftime(text, sizeof(text), "%a, %d %b %Y %H:%M:%S GMT", &parts);
  return text;
}

constexpr int64_t kFirstMtime = 1445412480;  // Wed, 21 Oct 2015 07:28:00 GMT

const char* reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 206:
      return "Partial Content";
    case 301:
      return "Moved Permanently";
    case 400:
      return "Bad Request";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 412:
      return "Precondition Failed";
    case 416:
      return "Range Not Satisfiable";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Slow Down";
    default:
      return "Status";
  }
}

}  // namespace

HttpTestServer::HttpTestServer() {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      ::listen(listen_fd_, 64) != 0) {
    throw std::runtime_error("test server: cannot listen on 127.0.0.1");
  }
  socklen_t length = sizeof(address);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&address), &length);
  port_ = ntohs(address.sin_port);
  acceptor_ = std::thread([this] { accept_loop(); });
}

HttpTestServer::~HttpTestServer() {
  {
    core::MutexLock lock(&mutex_);
    stop_ = true;
  }
  acceptor_.join();
  std::vector<std::thread> connections;
  {
    core::MutexLock lock(&mutex_);
    connections.swap(connections_);
  }
  for (std::thread& thread : connections) thread.join();
  ::close(listen_fd_);
}

std::string HttpTestServer::url(const std::string& path) const {
  return "http://127.0.0.1:" + std::to_string(port_) + path;
}

void HttpTestServer::put(const std::string& path, std::vector<uint8_t> bytes) {
  core::MutexLock lock(&mutex_);
  ++versions_;
  objects_[path] = Object{std::move(bytes), "\"v" + std::to_string(versions_) + "\"",
                          kFirstMtime + versions_ - 1};
}

std::string HttpTestServer::etag(const std::string& path) {
  core::MutexLock lock(&mutex_);
  return objects_[path].etag;
}

void HttpTestServer::set_honour_if_match(bool honour) {
  core::MutexLock lock(&mutex_);
  honour_if_match_ = honour;
}

void HttpTestServer::set_validators(bool etag, bool last_modified) {
  core::MutexLock lock(&mutex_);
  send_etag_ = etag;
  send_last_modified_ = last_modified;
}

void HttpTestServer::set_bucket_region(const std::string& region) {
  core::MutexLock lock(&mutex_);
  bucket_region_ = region;
}

void HttpTestServer::set_fault(Fault fault, int times, double stall_s) {
  core::MutexLock lock(&mutex_);
  fault_ = fault;
  fault_times_ = times;
  stall_s_ = stall_s;
}

std::vector<std::string> HttpTestServer::log() {
  core::MutexLock lock(&mutex_);
  return log_;
}

int64_t HttpTestServer::requests() {
  core::MutexLock lock(&mutex_);
  return static_cast<int64_t>(log_.size());
}

void HttpTestServer::reset_log() {
  core::MutexLock lock(&mutex_);
  log_.clear();
}

bool HttpTestServer::stopping() {
  core::MutexLock lock(&mutex_);
  return stop_;
}

void HttpTestServer::accept_loop() {
  while (!stopping()) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    core::MutexLock lock(&mutex_);
    connections_.emplace_back([this, fd] { serve(fd); });
  }
}

void HttpTestServer::serve(int fd) {
  std::string buffer;
  while (true) {
    // One request's head.
    size_t head_end;
    while ((head_end = buffer.find("\r\n\r\n")) == std::string::npos) {
      if (stopping()) {
        ::close(fd);
        return;
      }
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      char chunk[4096];
      const ssize_t n = ::recv(fd, chunk, sizeof(chunk), 0);
      if (n <= 0) {
        ::close(fd);
        return;
      }
      buffer.append(chunk, static_cast<size_t>(n));
    }
    const std::string head = buffer.substr(0, head_end);
    buffer.erase(0, head_end + 4);

    std::string method, path;
    std::map<std::string, std::string> headers;
    {
      size_t line_end = head.find("\r\n");
      const std::string request_line = head.substr(0, line_end);
      const size_t space1 = request_line.find(' ');
      const size_t space2 = request_line.find(' ', space1 + 1);
      method = request_line.substr(0, space1);
      path = request_line.substr(space1 + 1, space2 - space1 - 1);
      const size_t query = path.find('?');
      if (query != std::string::npos) path.resize(query);
      size_t start = line_end == std::string::npos ? head.size() : line_end + 2;
      while (start < head.size()) {
        line_end = head.find("\r\n", start);
        if (line_end == std::string::npos) line_end = head.size();
        const std::string line = head.substr(start, line_end - start);
        const size_t colon = line.find(':');
        if (colon != std::string::npos) {
          size_t value = colon + 1;
          while (value < line.size() && line[value] == ' ') ++value;
          headers[lower(line.substr(0, colon))] = line.substr(value);
        }
        start = line_end + 2;
      }
    }
    const bool is_head = method == "HEAD";
    std::string range_header = headers.count("range") ? headers["range"] : "";

    Fault fault;
    double stall_s;
    Object object;
    bool found;
    bool honour_if_match;
    bool send_etag;
    bool send_last_modified;
    std::string bucket_region;
    {
      core::MutexLock lock(&mutex_);
      std::string entry = method;
      entry.append(" ").append(path);
      if (!range_header.empty()) {
        entry.append(" ").append(range_header.substr(range_header.find('=') + 1));
      }
      if (headers.count("if-match")) entry.append(" if-match");
      if (headers.count("authorization")) entry.append(" signed");
      entry.append(" ");
      log_.push_back(entry);
      fault = Fault::kNone;
      stall_s = stall_s_;
      honour_if_match = honour_if_match_;
      send_etag = send_etag_;
      send_last_modified = send_last_modified_;
      bucket_region = bucket_region_;
      if (fault_ != Fault::kNone && fault_times_ != 0 &&
          !(fault_ == Fault::kRefuseHead403 && !is_head)) {
        fault = fault_;
        if (fault_times_ > 0) --fault_times_;
      }
      const auto it = objects_.find(percent_decoded(path));
      found = it != objects_.end();
      if (found) object = it->second;
    }

    int status = 200;
    std::string extra_headers;
    std::string error_body;
    int64_t first = 0, last = 0;
    switch (fault) {
      case Fault::kCloseAtOnce:
        ::close(fd);
        return;
      case Fault::kSlowDown503:
        status = 503;
        error_body = s3_error("SlowDown", "Please reduce your request rate.");
        break;
      case Fault::kError500:
        status = 500;
        error_body = s3_error("InternalError", "We encountered an internal error.");
        break;
      case Fault::kSignature403:
        status = 403;
        error_body = s3_error("SignatureDoesNotMatch",
                              "The request signature we calculated does not match the signature "
                              "you provided.");
        break;
      case Fault::kExpired403:
      case Fault::kRefuseHead403:
        status = 403;
        error_body = s3_error("AccessDenied", "Request has expired");
        break;
      case Fault::kNoSuchKey404:
        status = 404;
        error_body = s3_error("NoSuchKey", "The specified key does not exist.");
        break;
      case Fault::kNoSuchBucket404:
        status = 404;
        error_body = s3_error("NoSuchBucket", "The specified bucket does not exist");
        break;
      case Fault::kWrongRegion400: {
        // The region the request was signed for, from its SigV4 credential scope.
        const std::string& authorization = headers["authorization"];
        const size_t credential = authorization.find("Credential=");
        std::string signed_for = "?";
        if (credential != std::string::npos) {
          const size_t date = authorization.find('/', credential);
          const size_t end = date == std::string::npos ? date : authorization.find('/', date + 1);
          if (end != std::string::npos) {
            const size_t region_end = authorization.find('/', end + 1);
            signed_for = authorization.substr(end + 1, region_end - end - 1);
          }
        }
        status = 400;
        extra_headers += "x-amz-bucket-region: " + bucket_region + "\r\n";
        error_body =
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>"
            "AuthorizationHeaderMalformed</Code><Message>The authorization header is "
            "malformed; the region &apos;" +
            signed_for + "&apos; is wrong; expecting &apos;" + bucket_region +
            "&apos;</Message><Region>" + bucket_region +
            "</Region><RequestId>test</RequestId></Error>";
        break;
      }
      case Fault::kWrongRegion301:
        status = 301;
        extra_headers += "x-amz-bucket-region: " + bucket_region + "\r\n";
        error_body =
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>"
            "PermanentRedirect</Code><Message>The bucket you are attempting to access "
            "must be addressed using the specified endpoint. Please send all future "
            "requests to this endpoint.</Message><Endpoint>bucket.s3." +
            bucket_region + ".amazonaws.com</Endpoint><RequestId>test</RequestId></Error>";
        break;
      default:
        break;
    }
    const int64_t size = static_cast<int64_t>(object.bytes.size());
    if (status == 200) {
      if (!found) {
        status = 404;
        error_body = s3_error("NoSuchKey", "The specified key does not exist.");
      } else if (honour_if_match && headers.count("if-match") &&
                 headers["if-match"] != object.etag) {
        status = 412;
        error_body = s3_error("PreconditionFailed", "At least one of the preconditions failed");
      } else if (!range_header.empty() && !is_head) {
        const size_t equals = range_header.find('=');
        const size_t dash = range_header.find('-');
        first = std::stoll(range_header.substr(equals + 1, dash - equals - 1));
        last = std::min<int64_t>(size - 1, std::stoll(range_header.substr(dash + 1)));
        if (first >= size) {
          status = 416;
          extra_headers += "Content-Range: bytes */" + std::to_string(size) + "\r\n";
        } else {
          status = 206;
          extra_headers += "Content-Range: bytes " + std::to_string(first) + "-" +
                           std::to_string(last) + "/" + std::to_string(size) + "\r\n";
        }
      } else {
        first = 0;
        last = size - 1;
      }
    }
    const bool ok = status == 200 || status == 206;
    const int64_t body_length = ok ? last - first + 1 : static_cast<int64_t>(error_body.size());
    std::string response = "HTTP/1.1 " + std::to_string(status) + " " + reason(status) + "\r\n";
    response += "Content-Length: " + std::to_string(is_head && !ok ? 0 : body_length) + "\r\n";
    if (found) {
      if (send_etag) response += "ETag: " + object.etag + "\r\n";
      if (send_last_modified) {
        response += "Last-Modified: " + http_date(object.mtime_s) + "\r\n";
      }
    }
    response += "Accept-Ranges: bytes\r\n" + extra_headers + "\r\n";
    if (!send_all(fd, response.data(), response.size())) break;
    if (is_head) continue;
    if (!ok) {
      if (!send_all(fd, error_body.data(), error_body.size())) break;
      continue;
    }
    const uint8_t* body = object.bytes.data() + first;
    if (fault == Fault::kTruncated || fault == Fault::kStall) {
      const size_t half = static_cast<size_t>(body_length / 2);
      if (!send_all(fd, body, half)) break;
      if (fault == Fault::kTruncated) break;
      const auto until = std::chrono::steady_clock::now() +
                         std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                             std::chrono::duration<double>(stall_s));
      while (std::chrono::steady_clock::now() < until && !stopping()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      if (!send_all(fd, body + half, static_cast<size_t>(body_length) - half)) break;
      continue;
    }
    if (!send_all(fd, body, static_cast<size_t>(body_length))) break;
  }
  ::close(fd);
}

}  // namespace stoker::io::testing
