// The in-memory ByteSource: reads are copies out of a span kept alive by its owner.
#include <algorithm>
#include <cstring>

#include "stoker/byte_source.h"

namespace stoker {
namespace {

class MemorySource final : public ByteSource {
 public:
  MemorySource(std::string name, std::span<const uint8_t> bytes, std::shared_ptr<const void> owner)
      : ByteSource(std::move(name)), bytes_(bytes), owner_(std::move(owner)) {}

  int64_t size() const override { return static_cast<int64_t>(bytes_.size()); }

  Result<size_t> read_at(int64_t offset, std::span<uint8_t> out) const override {
    if (offset < 0) {
      return Status(StatusCode::kInvalidArgument,
                    "'" + name() + "': read at negative offset " + std::to_string(offset));
    }
    if (offset >= size()) return size_t{0};
    const size_t n = std::min(out.size(), bytes_.size() - static_cast<size_t>(offset));
    std::memcpy(out.data(), bytes_.data() + offset, n);
    return n;
  }

 private:
  const std::span<const uint8_t> bytes_;
  const std::shared_ptr<const void> owner_;
};

}  // namespace

std::unique_ptr<ByteSource> memory_source(std::string name, std::span<const uint8_t> bytes,
                                          std::shared_ptr<const void> owner) {
  return std::make_unique<MemorySource>(std::move(name), bytes, std::move(owner));
}

std::unique_ptr<ByteSource> memory_source(std::string name, std::vector<uint8_t> bytes) {
  auto held = std::make_shared<const std::vector<uint8_t>>(std::move(bytes));
  const std::span<const uint8_t> view(*held);
  return memory_source(std::move(name), view, std::move(held));
}

}  // namespace stoker
