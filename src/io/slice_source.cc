// A window of another ByteSource: reads and prefetches shifted by its offset, its version the
// whole's.
#include <algorithm>
#include <charconv>
#include <vector>

#include "stoker/byte_slice.h"

namespace stoker {
namespace {

constexpr std::string_view kMarker = "#bytes=";

class SliceSource final : public ByteSource {
 public:
  SliceSource(std::shared_ptr<const ByteSource> whole, ByteRange range)
      : ByteSource(byte_slice_name(ByteSlice{whole->name(), range})),
        whole_(std::move(whole)),
        range_(range) {}

  int64_t size() const override { return range_.length; }
  int64_t mtime_ns() const override { return whole_->mtime_ns(); }
  Status check_unchanged() const override { return whole_->check_unchanged(); }
  std::string version_tag() const override { return whole_->version_tag(); }
  bool is_remote() const override { return whole_->is_remote(); }

  void prefetch(std::span<const ByteRange> ranges) const override {
    std::vector<ByteRange> shifted;
    shifted.reserve(ranges.size());
    for (const ByteRange& r : ranges) {
      const int64_t begin = std::clamp<int64_t>(r.offset, 0, range_.length);
      const int64_t end = std::clamp<int64_t>(r.end(), begin, range_.length);
      if (end > begin) shifted.push_back(ByteRange{range_.offset + begin, end - begin});
    }
    if (!shifted.empty()) whole_->prefetch(shifted);
  }

  Result<size_t> read_at(int64_t offset, std::span<uint8_t> out) const override {
    if (offset < 0) {
      return Status(StatusCode::kInvalidArgument,
                    "'" + name() + "': read at negative offset " + std::to_string(offset));
    }
    if (offset >= range_.length) return size_t{0};
    const size_t n = static_cast<size_t>(
        std::min<int64_t>(static_cast<int64_t>(out.size()), range_.length - offset));
    return whole_->read_at(range_.offset + offset, out.first(n));
  }

 private:
  const std::shared_ptr<const ByteSource> whole_;
  const ByteRange range_;
};

bool parse_decimal(std::string_view text, int64_t* value) {
  if (text.empty() || text.size() > 18) return false;  // no overflow
  for (char c : text) {
    if (c < '0' || c > '9') return false;  // digits only: no sign, no space
  }
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), *value);
  return error == std::errc() && end == text.data() + text.size();
}

}  // namespace

std::string byte_slice_name(const ByteSlice& slice) {
  return slice.whole + std::string(kMarker) + std::to_string(slice.range.offset) + "+" +
         std::to_string(slice.range.length);
}

std::optional<ByteSlice> parse_byte_slice(std::string_view name) {
  const size_t marker = name.rfind(kMarker);
  if (marker == std::string_view::npos || marker == 0) return std::nullopt;
  const std::string_view numbers = name.substr(marker + kMarker.size());
  const size_t plus = numbers.find('+');
  if (plus == std::string_view::npos) return std::nullopt;
  ByteRange range;
  if (!parse_decimal(numbers.substr(0, plus), &range.offset) ||
      !parse_decimal(numbers.substr(plus + 1), &range.length) || range.length <= 0) {
    return std::nullopt;
  }
  return ByteSlice{std::string(name.substr(0, marker)), range};
}

Result<std::unique_ptr<ByteSource>> slice_source(std::shared_ptr<const ByteSource> whole,
                                                 ByteRange range) {
  if (whole == nullptr) {
    return Status(StatusCode::kInvalidArgument, "slice_source: the whole source is null");
  }
  if (range.offset < 0 || range.length <= 0) {
    return Status(StatusCode::kInvalidArgument,
                  "'" + whole->name() +
                      "': a slice needs a non-negative offset and a positive "
                      "length, got " +
                      std::to_string(range.length) + " bytes at " + std::to_string(range.offset));
  }
  if (range.offset > whole->size() - range.length) {
    return Status(StatusCode::kCorruptData,
                  "'" + whole->name() + "' has " + std::to_string(whole->size()) +
                      " bytes, fewer than the slice of " + std::to_string(range.length) +
                      " bytes at " + std::to_string(range.offset) +
                      " that names it needs (the file changed since it was indexed?)");
  }
  return std::unique_ptr<ByteSource>(new SliceSource(std::move(whole), range));
}

}  // namespace stoker
