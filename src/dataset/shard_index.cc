#include "stoker/shard_index.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <optional>

#include "core/byte_io.h"
#include "core/crc32c.h"
#include "core/env.h"
#include "core/file.h"
#include "core/fnv1a.h"
#include "core/fuzzing.h"
#include "stoker/remote_source.h"

namespace stoker {
namespace {

constexpr char kMagic[8] = {'S', 'T', 'K', 'S', 'H', 'I', 'D', 'X'};
// 1: members (name, offset, size, header CRC, label), the damage note, a trailing CRC.
constexpr uint32_t kVersion = 1;
constexpr int64_t kBlock = ShardIndex::kHeaderBytes;
// Remote shards are scanned in ranges this large: a header costs no request of its own.
constexpr int64_t kRemoteScanChunk = 8 << 20;
// A .cls member up to this size is read during the scan and its integer kept.
constexpr int64_t kMaxLabelBytes = 32;
// Names and notes longer than this in a saved index are damage, not data.
constexpr size_t kMaxString = 1 << 20;

std::string at_byte(int64_t offset) { return "at byte " + std::to_string(offset); }

// The bytes [pos, pos + length) of a source, served from one large range read at a time for
// remote sources (whose every read is a request) and read exactly for local ones.
class RangeReader {
 public:
  explicit RangeReader(const ByteSource& source)
      : source_(source), chunk_(source.is_remote() ? kRemoteScanChunk : 0) {}

  // Fewer bytes than asked only at the end of the source.
  Result<std::span<const uint8_t>> read(int64_t pos, int64_t length) {
    if (pos >= source_.size()) return std::span<const uint8_t>();
    length = std::max<int64_t>(0, std::min(length, source_.size() - pos));
    if (pos < start_ || pos + length > start_ + static_cast<int64_t>(buffer_.size())) {
      const int64_t want = std::min(std::max(length, chunk_), source_.size() - pos);
      buffer_.resize(static_cast<size_t>(want));
      STOKER_ASSIGN_OR_RETURN(size_t got, source_.read_at(pos, buffer_));
      buffer_.resize(got);
      start_ = pos;
      length = std::min<int64_t>(length, static_cast<int64_t>(got));
    }
    return std::span<const uint8_t>(buffer_.data() + (pos - start_), static_cast<size_t>(length));
  }

 private:
  const ByteSource& source_;
  const int64_t chunk_;
  std::vector<uint8_t> buffer_;
  int64_t start_ = 0;
};

std::string field(const uint8_t* header, size_t offset, size_t length) {
  const char* begin = reinterpret_cast<const char*>(header + offset);
  return std::string(begin, strnlen(begin, length));
}

// A numeric header field: octal digits (spaces and NULs around them), or GNU's base-256 form
// (top bit of the first byte set). -1 when it is neither.
int64_t number(const uint8_t* header, size_t offset, size_t length) {
  const uint8_t* p = header + offset;
  if (p[0] & 0x80) {
    if (p[0] & 0x40) return -1;  // negative
    uint64_t value = p[0] & 0x3f;
    for (size_t i = 1; i < length; ++i) {
      if (value >> 55) return -1;
      value = value << 8 | p[i];
    }
    return value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
               ? -1
               : static_cast<int64_t>(value);
  }
  size_t i = 0;
  while (i < length && (p[i] == ' ' || p[i] == 0)) ++i;
  int64_t value = 0;
  bool digits = false;
  for (; i < length && p[i] >= '0' && p[i] <= '7'; ++i) {
    if (value > (std::numeric_limits<int64_t>::max() >> 3)) return -1;
    value = value * 8 + (p[i] - '0');
    digits = true;
  }
  for (; i < length; ++i) {
    if (p[i] != ' ' && p[i] != 0) return -1;
  }
  return digits ? value : -1;
}

bool checksum_matches(const uint8_t* header) {
  const int64_t stored = number(header, 148, 8);
  int64_t unsigned_sum = 0, signed_sum = 0;
  for (int i = 0; i < kBlock; ++i) {
    const uint8_t byte = (i >= 148 && i < 156) ? ' ' : header[i];
    unsigned_sum += byte;
    signed_sum += static_cast<int8_t>(byte);
  }
  return stored >= 0 && (stored == unsigned_sum || stored == signed_sum);
}

bool all_zero(std::span<const uint8_t> block) {
  return std::all_of(block.begin(), block.end(), [](uint8_t b) { return b == 0; });
}

// The extension WebDataset groups by: the file name after its first dot, lower-cased.
std::string extension(const std::string& name) {
  const size_t slash = name.rfind('/');
  const size_t dot = name.find('.', slash == std::string::npos ? 0 : slash + 1);
  if (dot == std::string::npos) return "";
  std::string ext = name.substr(dot + 1);
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return ext;
}

int64_t parse_label(std::span<const uint8_t> bytes) {
  const char* begin = reinterpret_cast<const char*>(bytes.data());
  const char* end = begin + bytes.size();
  while (begin < end && std::isspace(static_cast<unsigned char>(*begin))) ++begin;
  while (end > begin && std::isspace(static_cast<unsigned char>(end[-1]))) --end;
  if (begin < end && *begin == '+') ++begin;
  int64_t value = 0;
  const std::from_chars_result parsed = std::from_chars(begin, end, value);
  // Not an integer, or beyond int64: left to read time, which names the sample.
  if (parsed.ec != std::errc() || parsed.ptr != end || value == ShardIndex::kNoLabel) {
    return ShardIndex::kNoLabel;
  }
  return value;
}

// A pax extended header's records ("<length> <key>=<value>\n"): the path and size it sets.
void parse_pax(std::span<const uint8_t> data, std::string* path, int64_t* size) {
  size_t at = 0;
  while (at < data.size()) {
    size_t space = at;
    int64_t length = 0;
    while (space < data.size() && data[space] >= '0' && data[space] <= '9') {
      length = length * 10 + (data[space] - '0');
      if (length > static_cast<int64_t>(data.size())) return;
      ++space;
    }
    // A record holds at least its length's digits, the space and the newline.
    if (space >= data.size() || data[space] != ' ' ||
        static_cast<size_t>(length) < space - at + 2 ||
        at + static_cast<size_t>(length) > data.size()) {
      return;
    }
    const std::string record(reinterpret_cast<const char*>(data.data()) + space + 1,
                             at + static_cast<size_t>(length) - space - 2);
    const size_t equals = record.find('=');
    if (equals != std::string::npos) {
      const std::string key = record.substr(0, equals), value = record.substr(equals + 1);
      if (key == "path") *path = value;
      if (key == "size") {
        int64_t parsed = -1;
        const std::from_chars_result r =
            std::from_chars(value.data(), value.data() + value.size(), parsed);
        if (r.ec == std::errc() && parsed >= 0) *size = parsed;
      }
    }
    at += static_cast<size_t>(length);
  }
}

}  // namespace

Result<ShardIndex> ShardIndex::scan(const ByteSource& source) {
  ShardIndex index;
  index.shard_bytes_ = source.size();
  RangeReader reader(source);
  std::string long_name;  // from a GNU 'L' member or a pax header, for the next member
  int64_t pax_size = -1;
  int64_t pos = 0;
  const int64_t end = source.size();
  while (true) {
    if (pos >= end) {
      index.damage_ = "the tar ends " + at_byte(end) +
                      " without its end-of-archive blocks: the shard is truncated";
      break;
    }
    STOKER_ASSIGN_OR_RETURN(std::span<const uint8_t> header, reader.read(pos, kBlock));
    if (static_cast<int64_t>(header.size()) < kBlock) {
      index.damage_ = "the tar ends mid-header " + at_byte(pos) + ": the shard is truncated";
      break;
    }
    if (all_zero(header)) break;  // the end-of-archive marker
    if (!checksum_matches(header.data())) {
      index.damage_ = "corrupt tar header " + at_byte(pos) + " (its checksum does not match)";
      break;
    }
    const char type = static_cast<char>(header[156]);
    int64_t size = number(header.data(), 124, 12);
    if (size < 0) {
      index.damage_ = "corrupt tar header " + at_byte(pos) + " (its size is not a number)";
      break;
    }
    if (pax_size >= 0 && (type == '0' || type == '\0' || type == '7')) size = pax_size;
    const int64_t data = pos + kBlock;
    if (size > end - data) {
      index.damage_ = "the member " + at_byte(pos) + " claims " + std::to_string(size) +
                      " bytes, past the shard's end at " + std::to_string(end) +
                      ": the shard is truncated or the header damaged";
      break;
    }
    const uint32_t header_crc = core::crc32c(header);
    std::string name = field(header.data(), 0, 100);
    // POSIX ustar ("ustar\0"): a prefix field holds the start of long paths.
    if (std::memcmp(header.data() + 257, "ustar\0", 6) == 0) {
      const std::string prefix = field(header.data(), 345, 155);
      if (!prefix.empty()) name = prefix + "/" + name;
    }
    if (type == 'L' || type == 'x') {
      if (size > static_cast<int64_t>(kMaxString)) {
        index.damage_ = "corrupt tar header " + at_byte(pos) + " (a name record of " +
                        std::to_string(size) + " bytes)";
        break;
      }
      STOKER_ASSIGN_OR_RETURN(std::span<const uint8_t> bytes, reader.read(data, size));
      if (type == 'L') {
        long_name = field(bytes.data(), 0, bytes.size());
      } else {
        parse_pax(bytes, &long_name, &pax_size);
      }
    } else {
      if (type == '0' || type == '\0' || type == '7') {
        Member member{.name = long_name.empty() ? name : long_name,
                      .offset = data,
                      .size = size,
                      .header_crc = header_crc};
        if (size <= kMaxLabelBytes && extension(member.name) == "cls") {
          STOKER_ASSIGN_OR_RETURN(std::span<const uint8_t> bytes, reader.read(data, size));
          member.label = parse_label(bytes);
        }
        index.members_.push_back(std::move(member));
      }
      long_name.clear();
      pax_size = -1;
    }
    pos = data + (size + kBlock - 1) / kBlock * kBlock;
  }
  return index;
}

std::vector<uint8_t> ShardIndex::encode() const {
  core::ByteWriter w;
  w.bytes(kMagic, sizeof(kMagic));
  w.pod<uint32_t>(kVersion);
  w.pod<int64_t>(shard_bytes_);
  w.pod<uint64_t>(members_.size());
  for (const Member& m : members_) {
    w.string(m.name);
    w.pod<int64_t>(m.offset);
    w.pod<int64_t>(m.size);
    w.pod<uint32_t>(m.header_crc);
    w.pod<int64_t>(m.label);
  }
  w.string(damage_);
  w.pod<uint32_t>(core::crc32c(w.buffer()));
  return w.take();
}

Result<ShardIndex> ShardIndex::decode(std::span<const uint8_t> bytes, const std::string& what) {
  const auto corrupt = [&](const std::string& why) {
    return Status(StatusCode::kCorruptData, what + ": not a usable shard index: " + why);
  };
  if (bytes.size() < sizeof(kMagic) + 8 || std::memcmp(bytes.data(), kMagic, sizeof(kMagic))) {
    return corrupt("it does not start with stoker's shard index magic");
  }
  uint32_t stored_crc = 0;
  std::memcpy(&stored_crc, bytes.data() + bytes.size() - 4, 4);
  const std::span<const uint8_t> body = bytes.first(bytes.size() - 4);
  if (core::crc32c(body) != stored_crc && !core::kFuzzing) {
    return corrupt("its checksum does not match");
  }
  core::ByteReader r(body.subspan(sizeof(kMagic)));
  uint32_t version = 0;
  uint64_t count = 0;
  ShardIndex index;
  if (!r.pod(&version)) return corrupt("truncated");
  if (version != kVersion) {
    return corrupt("version " + std::to_string(version) + ", this stoker reads version " +
                   std::to_string(kVersion));
  }
  if (!r.pod(&index.shard_bytes_) || !r.pod(&count) || index.shard_bytes_ < 0 ||
      count > body.size() / 28) {
    return corrupt("truncated");
  }
  index.members_.resize(count);
  int64_t previous_end = 0;
  for (Member& m : index.members_) {
    if (!r.string(&m.name, kMaxString) || !r.pod(&m.offset) || !r.pod(&m.size) ||
        !r.pod(&m.header_crc) || !r.pod(&m.label)) {
      return corrupt("truncated");
    }
    if (m.offset < previous_end + kBlock || m.size < 0 || m.size > index.shard_bytes_ - m.offset) {
      return corrupt("member '" + m.name + "' lies outside the shard");
    }
    previous_end = m.offset + m.size;
  }
  if (!r.string(&index.damage_, kMaxString) || !r.at_end()) return corrupt("truncated");
  return index;
}

Status ShardIndex::check_headers(const ByteSource& source) const {
  if (source.size() != shard_bytes_) {
    return Status(StatusCode::kCorruptData,
                  source.name() + " has " + std::to_string(source.size()) +
                      " bytes, its index was made of " + std::to_string(shard_bytes_));
  }
  // The headers alone: the data of the last member may be a large clip.
  for (const size_t m : {size_t{0}, members_.size() - 1}) {
    if (m >= members_.size()) break;  // no member
    const Member& member = members_[m];
    uint8_t header[kBlock];
    STOKER_ASSIGN_OR_RETURN(size_t got, source.read_at(member.offset - kBlock, header));
    if (got != sizeof(header) || core::crc32c(header) != member.header_crc) {
      return Status(StatusCode::kCorruptData,
                    source.name() + ": the tar header of '" + member.name + "' " +
                        at_byte(member.offset - kBlock) + " is not the one indexed");
    }
  }
  return Status();
}

int64_t ShardIndex::bytes_to_read(std::span<const int64_t> members) const {
  int64_t total = 0;
  for (int64_t m : members) {
    if (m < 0 || m >= static_cast<int64_t>(members_.size())) return -1;
    total += kBlock + members_[m].size;
  }
  return total;
}

Status ShardIndex::read_members(const ByteSource& source, std::span<const int64_t> members,
                                std::span<uint8_t> out, std::span<int64_t> starts) const {
  const int64_t needed = bytes_to_read(members);
  if (needed < 0 || needed != static_cast<int64_t>(out.size()) || starts.size() != members.size()) {
    return Status(StatusCode::kInvalidArgument,
                  source.name() + ": a member outside the shard's index, or a wrong buffer");
  }
  const auto changed = [&](const std::string& how) {
    return Status(StatusCode::kCorruptData,
                  source.name() + " changed since its index was made: " + how);
  };
  if (source.size() != shard_bytes_) {
    return changed("it has " + std::to_string(source.size()) + " bytes, the index " +
                   std::to_string(shard_bytes_));
  }
  const auto replaced = [&](const std::string& now) {
    return changed("it was replaced or rewritten since it was opened (" + opened_version_ +
                   " then, " + now + " now)");
  };
  if (!opened_version_.empty() && source.version_tag() != opened_version_) {
    return replaced(source.version_tag());
  }
  if (source.is_remote()) {
    std::vector<ByteRange> ranges;
    ranges.reserve(members.size());
    for (int64_t m : members) {
      ranges.push_back({members_[m].offset - kBlock, kBlock + members_[m].size});
    }
    std::sort(ranges.begin(), ranges.end(),
              [](const ByteRange& a, const ByteRange& b) { return a.offset < b.offset; });
    source.prefetch(ranges);
  }
  size_t at = 0;
  for (size_t i = 0; i < members.size(); ++i) {
    const Member& member = members_[members[i]];
    const std::span<uint8_t> slot = out.subspan(at, static_cast<size_t>(kBlock + member.size));
    STOKER_ASSIGN_OR_RETURN(size_t got, source.read_at(member.offset - kBlock, slot));
    if (got != slot.size()) {
      return changed("the read of '" + member.name + "' ended early, " + at_byte(member.offset));
    }
    if (core::crc32c(slot.first(kBlock)) != member.header_crc) {
      return changed("the tar header of '" + member.name + "' " + at_byte(member.offset - kBlock) +
                     " is not the one indexed (rebuilt or replaced shard, or a foreign index)");
    }
    starts[i] = static_cast<int64_t>(at + kBlock);
    at += slot.size();
  }
  // A rewrite during the reads: the bytes read may be of either version.
  if (!opened_version_.empty()) {
    const Status unchanged = source.check_unchanged();
    if (!unchanged.ok()) return changed(unchanged.message());
  }
  return Status();
}

std::string shard_index_cache_path(const std::string& cache_dir, const std::string& url,
                                   int64_t size, const std::string& version) {
  const std::string key =
      url + '\0' + std::to_string(size) + '\0' + version + '\0' + std::to_string(kVersion);
  char digest[17];
  std::snprintf(digest, sizeof(digest), "%016llx",
                static_cast<unsigned long long>(core::fnv1a(key)));
  std::string name = url;
  while (!name.empty() && name.back() == '/') name.pop_back();
  name = name.substr(name.rfind('/') == std::string::npos ? 0 : name.rfind('/') + 1);
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') c = '_';
  }
  return cache_dir + "/shards/" + name.substr(0, 64) + "-" + digest + ".sidx";
}

namespace {

// The sidecar of a shard, when it has one that describes it; `note` says why one was refused.
std::optional<ShardIndex> usable_sidecar(const std::string& url, const ByteSource& shard,
                                         std::string* note) {
  Result<std::shared_ptr<const ByteSource>> sidecar = open_source(url + ".index");
  if (!sidecar.ok()) return std::nullopt;  // none: the common case for shards of other writers
  const int64_t size = (*sidecar)->size();
  std::vector<uint8_t> bytes(static_cast<size_t>(std::max<int64_t>(size, 0)));
  Result<size_t> got = (*sidecar)->read_at(0, bytes);
  Status status = got.ok() ? Status() : got.status();
  Result<ShardIndex> index =
      status.ok() ? ShardIndex::decode(bytes, url + ".index") : Result<ShardIndex>(status);
  if (index.ok()) status = index->check_headers(shard);
  if (!index.ok()) status = index.status();
  if (!status.ok()) {
    *note = "sidecar " + url + ".index refused (" + status.message() + ")";
    if (index.ok()) *note += "; it lists " + std::to_string(index->members().size()) + " members";
    return std::nullopt;
  }
  return std::move(index).value();
}

Result<std::shared_ptr<const ShardIndex>> open_one(const std::string& url,
                                                   const std::string& cache_dir,
                                                   std::string* note) {
  STOKER_ASSIGN_OR_RETURN(std::shared_ptr<const ByteSource> shard, open_source(url));
  std::string version = shard->version_tag();
  if (version.empty()) version = std::to_string(shard->mtime_ns());
  const std::string cache =
      cache_dir.empty() ? "" : shard_index_cache_path(cache_dir, url, shard->size(), version);
  if (!cache.empty()) {
    Result<std::unique_ptr<core::MappedFile>> mapped = core::MappedFile::open(cache);
    if (mapped.ok()) {
      Result<ShardIndex> cached = ShardIndex::decode((*mapped)->bytes(), cache);
      if (cached.ok() && cached->shard_bytes() == shard->size()) {
        cached->bind_to_version(shard->version_tag());
        return std::make_shared<const ShardIndex>(std::move(cached).value());
      }
    }
  }
  std::optional<ShardIndex> index = usable_sidecar(url, *shard, note);
  if (!index) {
    STOKER_ASSIGN_OR_RETURN(ShardIndex scanned, ShardIndex::scan(*shard));
    index = std::move(scanned);
  }
  if (!cache.empty()) {
    // A cache that cannot be written only costs the next process a scan.
    (void)core::create_directories(cache_dir + "/shards");
    (void)core::write_cache_file(cache, index->encode());
  }
  index->bind_to_version(shard->version_tag());
  return std::make_shared<const ShardIndex>(std::move(*index));
}

}  // namespace

Result<std::vector<std::shared_ptr<const ShardIndex>>> open_shard_indexes(
    std::span<const std::string> urls, const std::string& cache_dir, int threads,
    std::vector<std::string>* sidecar_notes) {
  const size_t n = urls.size();
  std::vector<std::shared_ptr<const ShardIndex>> opened(n);
  std::vector<Status> errors(n);
  std::vector<std::string> notes(n);
  std::atomic<bool> failed{false};
  core::parallel_for(n, threads, [&](size_t i) {
    if (failed) return;
    Result<std::shared_ptr<const ShardIndex>> index = open_one(urls[i], cache_dir, &notes[i]);
    if (index.ok()) {
      opened[i] = std::move(index).value();
    } else {
      errors[i] = index.status();
      failed = true;
    }
  });
  for (const Status& error : errors) {
    if (!error.ok()) return error;
  }
  if (sidecar_notes != nullptr) *sidecar_notes = std::move(notes);
  return opened;
}

}  // namespace stoker
