#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/random.h"
#include "stoker/sampling.h"

namespace stoker::sampling {

Result<std::unique_ptr<MixSampler>> MixSampler::create(std::span<const double> weights,
                                                       std::span<const int64_t> sizes,
                                                       WeightedOptions options) {
  if (weights.size() != sizes.size()) {
    return Status(StatusCode::kInvalidArgument, std::to_string(weights.size()) + " weights for " +
                                                    std::to_string(sizes.size()) +
                                                    " datasets: give one per dataset");
  }
  std::vector<int64_t> offsets{0};
  for (size_t k = 0; k < sizes.size(); ++k) {
    if (sizes[k] < 0) {
      return Status(StatusCode::kInvalidArgument,
                    "dataset " + std::to_string(k) + " has a negative size");
    }
    if (sizes[k] == 0 && weights[k] > 0) {
      return Status(StatusCode::kInvalidArgument,
                    "dataset " + std::to_string(k) +
                        " is empty but has a positive weight: nothing can be drawn from it");
    }
    offsets.push_back(offsets.back() + sizes[k]);
  }
  options.num_samples = options.num_samples.value_or(offsets.back());
  STOKER_ASSIGN_OR_RETURN(std::unique_ptr<WeightedSampler> datasets,
                          WeightedSampler::create(weights, options));
  return std::unique_ptr<MixSampler>(
      new MixSampler(std::move(datasets), std::move(offsets), options));
}

int64_t MixSampler::at(uint32_t epoch, int64_t position) const {
  const int64_t dataset = datasets_->at(epoch, position);
  const auto g = static_cast<uint64_t>(datasets_->draw(epoch, position));
  const std::array<uint32_t, 4> w =
      core::random_words(options_.seed, epoch, g, core::kMixSampleStream);
  const int64_t size = offsets_[dataset + 1] - offsets_[dataset];
  return offsets_[dataset] + core::uniform_below(w[0], w[1], size);
}

}  // namespace stoker::sampling
