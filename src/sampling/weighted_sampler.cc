#include <cmath>
#include <string>

#include "sampling/detail/common.h"
#include "stoker/sampling.h"

namespace stoker::sampling {
namespace {

Status check_weight(double w, size_t i, const char* what) {
  if (!std::isfinite(w) || w < 0) {
    return Status(StatusCode::kInvalidArgument, std::string(what) + " " + std::to_string(i) +
                                                    " must be finite and non-negative, got " +
                                                    std::to_string(w));
  }
  return ok_status();
}

}  // namespace

Result<std::unique_ptr<WeightedSampler>> WeightedSampler::create(std::span<const double> weights,
                                                                 WeightedOptions options) {
  if (weights.empty()) {
    return Status(StatusCode::kInvalidArgument, "no weights: cannot draw from an empty dataset");
  }
  double sum = 0;
  size_t heaviest = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    STOKER_RETURN_IF_ERROR(check_weight(weights[i], i, "weight of sample"));
    sum += weights[i];
    if (weights[i] > weights[heaviest]) heaviest = i;
  }
  if (!(sum > 0) || !std::isfinite(sum)) {
    return Status(StatusCode::kInvalidArgument,
                  "weights must have a positive finite sum, got " + std::to_string(sum));
  }
  const auto n = static_cast<int64_t>(weights.size());
  const int64_t num_samples = options.num_samples.value_or(n);
  if (num_samples < 0) {
    return Status(StatusCode::kInvalidArgument,
                  "num_samples must be non-negative, got " + std::to_string(num_samples));
  }
  STOKER_RETURN_IF_ERROR(detail::check_partition(options.rank, options.world_size));
  STOKER_RETURN_IF_ERROR(detail::check_resume(options.resume));
  options.num_samples = num_samples;
  std::unique_ptr<WeightedSampler> sampler(new WeightedSampler(
      options, detail::per_rank_count(num_samples, options.world_size, options.drop_last)));

  // Vose's construction of Walker's alias table: every column holds probability 1/n, split
  // between its own sample (accept_) and one heavier sample (alias_).
  std::vector<double> scaled(weights.size());
  std::vector<int64_t> small, large;
  for (int64_t i = 0; i < n; ++i) {
    scaled[i] = weights[i] * static_cast<double>(n) / sum;
    (scaled[i] < 1.0 ? small : large).push_back(i);
  }
  sampler->accept_.assign(weights.size(), 1.0);
  sampler->alias_.resize(weights.size());
  for (int64_t i = 0; i < n; ++i) sampler->alias_[i] = i;
  while (!small.empty() && !large.empty()) {
    const int64_t s = small.back();
    small.pop_back();
    const int64_t l = large.back();
    sampler->accept_[s] = scaled[s];
    sampler->alias_[s] = l;
    scaled[l] = (scaled[l] + scaled[s]) - 1.0;
    if (scaled[l] < 1.0) {
      large.pop_back();
      small.push_back(l);
    }
  }
  // What is left is 1 up to rounding: keep it whole, except that a zero weight stays
  // impossible to draw.
  for (int64_t s : small) {
    if (weights[s] == 0) {
      sampler->accept_[s] = 0.0;
      sampler->alias_[s] = static_cast<int64_t>(heaviest);
    }
  }
  return sampler;
}

int64_t WeightedSampler::epoch_size(uint32_t epoch) const {
  const int64_t draws = *options_.num_samples;
  const detail::EpochSpan span = detail::epoch_span(draws, options_.resume, epoch);
  if (span.count == draws) return per_rank_;
  return detail::per_rank_count(span.count, options_.world_size, options_.drop_last);
}

int64_t WeightedSampler::draw(uint32_t epoch, int64_t position) const {
  const detail::EpochSpan span = detail::epoch_span(*options_.num_samples, options_.resume, epoch);
  return span.first + options_.rank + position * options_.world_size;
}

int64_t WeightedSampler::at(uint32_t epoch, int64_t position) const {
  const auto g = static_cast<uint64_t>(draw(epoch, position));
  const std::array<uint32_t, 4> w =
      core::random_words(options_.seed, epoch, g, core::kWeightedStream);
  const int64_t column = core::uniform_below(w[0], w[1], static_cast<int64_t>(accept_.size()));
  return core::unit_double(w[2], w[3]) < accept_[column] ? column : alias_[column];
}

Result<std::vector<double>> expand_group_weights(std::span<const double> group_weights,
                                                 std::span<const int64_t> group_sizes,
                                                 GroupWeight mode) {
  if (group_weights.size() != group_sizes.size()) {
    return Status(StatusCode::kInvalidArgument,
                  std::to_string(group_weights.size()) + " group weights for " +
                      std::to_string(group_sizes.size()) + " group sizes");
  }
  int64_t total = 0;
  for (size_t g = 0; g < group_sizes.size(); ++g) {
    STOKER_RETURN_IF_ERROR(check_weight(group_weights[g], g, "weight of group"));
    if (group_sizes[g] < 0) {
      return Status(
          StatusCode::kInvalidArgument,
          "size of group " + std::to_string(g) + " is negative: " + std::to_string(group_sizes[g]));
    }
    if (mode == GroupWeight::kTotal && group_sizes[g] == 0 && group_weights[g] > 0) {
      return Status(StatusCode::kInvalidArgument,
                    "group " + std::to_string(g) +
                        " is empty but has a positive weight: its share cannot be drawn");
    }
    total += group_sizes[g];
  }
  std::vector<double> weights;
  weights.reserve(static_cast<size_t>(total));
  for (size_t g = 0; g < group_sizes.size(); ++g) {
    const double w = mode == GroupWeight::kTotal && group_sizes[g] > 0
                         ? group_weights[g] / static_cast<double>(group_sizes[g])
                         : group_weights[g];
    weights.insert(weights.end(), static_cast<size_t>(group_sizes[g]), w);
  }
  return weights;
}

}  // namespace stoker::sampling
