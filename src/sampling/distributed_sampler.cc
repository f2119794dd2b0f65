#include <string>

#include "sampling/detail/common.h"
#include "stoker/sampling.h"

namespace stoker::sampling {

Result<std::unique_ptr<DistributedSampler>> DistributedSampler::create(int64_t n,
                                                                       DistributedOptions options) {
  if (n < 0) {
    return Status(StatusCode::kInvalidArgument,
                  "the number of samples must be non-negative, got " + std::to_string(n));
  }
  STOKER_RETURN_IF_ERROR(detail::check_partition(options.rank, options.world_size));
  STOKER_RETURN_IF_ERROR(detail::check_resume(options.resume));
  const int64_t per_rank = detail::per_rank_count(n, options.world_size, options.drop_last);
  return std::unique_ptr<DistributedSampler>(new DistributedSampler(n, options, per_rank));
}

int64_t DistributedSampler::epoch_size(uint32_t epoch) const {
  const detail::EpochSpan span = detail::epoch_span(n_, options_.resume, epoch);
  if (span.count == n_) return per_rank_;
  return detail::per_rank_count(span.count, options_.world_size, options_.drop_last);
}

int64_t DistributedSampler::at(uint32_t epoch, int64_t position) const {
  const detail::EpochOrder order(n_, options_.shuffle, options_.seed, epoch,
                                 detail::epoch_span(n_, options_.resume, epoch));
  return order(options_.rank + position * options_.world_size);
}

Status DistributedSampler::fill(uint32_t epoch, int64_t start, std::span<int64_t> out) const {
  STOKER_RETURN_IF_ERROR(check_range(epoch, start, out.size()));
  if (out.empty()) return ok_status();
  const detail::EpochOrder order(n_, options_.shuffle, options_.seed, epoch,
                                 detail::epoch_span(n_, options_.resume, epoch));
  int64_t g = options_.rank + start * options_.world_size;
  for (int64_t& id : out) {
    id = order(g);
    g += options_.world_size;
  }
  return ok_status();
}

}  // namespace stoker::sampling
