#include <string>

#include "stoker/sampling.h"

namespace stoker::sampling {

Result<std::unique_ptr<MappedSampler>> MappedSampler::create(std::shared_ptr<const Sampler> inner,
                                                             std::span<const int64_t> ids) {
  if (inner == nullptr) {
    return Status(StatusCode::kInvalidArgument, "a mapped sampler needs an inner sampler");
  }
  for (size_t k = 0; k < ids.size(); ++k) {
    if (ids[k] < 0) {
      return Status(StatusCode::kInvalidArgument,
                    "ids[" + std::to_string(k) + "] is negative: " + std::to_string(ids[k]));
    }
  }
  return std::unique_ptr<MappedSampler>(
      new MappedSampler(std::move(inner), std::vector<int64_t>(ids.begin(), ids.end())));
}

int64_t MappedSampler::at(uint32_t epoch, int64_t position) const {
  const int64_t id = inner_->at(epoch, position);
  return id >= 0 && id < static_cast<int64_t>(ids_.size()) ? ids_[id] : -1;
}

Status MappedSampler::fill(uint32_t epoch, int64_t start, std::span<int64_t> out) const {
  STOKER_RETURN_IF_ERROR(inner_->fill(epoch, start, out));
  const int64_t n = static_cast<int64_t>(ids_.size());
  for (size_t k = 0; k < out.size(); ++k) {
    if (out[k] < 0 || out[k] >= n) {
      return Status(StatusCode::kInvalidArgument,
                    "the inner sampler gave id " + std::to_string(out[k]) + " at position " +
                        std::to_string(start + static_cast<int64_t>(k)) +
                        ", outside the mapped sampler's " + std::to_string(n) + " ids");
    }
    out[k] = ids_[out[k]];
  }
  return ok_status();
}

}  // namespace stoker::sampling
