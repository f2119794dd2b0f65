#include <algorithm>
#include <string>

#include "sampling/detail/common.h"
#include "stoker/sampling.h"

namespace stoker::sampling {

namespace detail {

Status check_partition(int64_t rank, int64_t world_size) {
  if (world_size < 1) {
    return Status(StatusCode::kInvalidArgument,
                  "world_size must be at least 1, got " + std::to_string(world_size));
  }
  if (rank < 0 || rank >= world_size) {
    return Status(
        StatusCode::kInvalidArgument,
        "rank must be in [0, " + std::to_string(world_size) + "), got " + std::to_string(rank));
  }
  return ok_status();
}

Status check_resume(const std::optional<ElasticStart>& resume) {
  if (resume && resume->start < 0) {
    return Status(
        StatusCode::kInvalidArgument,
        "an elastic resume starts at a global position >= 0, got " + std::to_string(resume->start));
  }
  return ok_status();
}

}  // namespace detail

Status Sampler::check_range(uint32_t epoch, int64_t start, size_t count) const {
  const int64_t positions = epoch_size(epoch);
  if (start < 0 || start > positions || count > static_cast<uint64_t>(positions - start)) {
    return Status(StatusCode::kInvalidArgument,
                  "positions [" + std::to_string(start) + ", " +
                      std::to_string(start + static_cast<int64_t>(count)) + ") are outside epoch " +
                      std::to_string(epoch) + "'s " + std::to_string(positions) + " positions");
  }
  return ok_status();
}

Result<ElasticStart> Sampler::elastic_remainder(uint32_t /*epoch*/, int64_t /*delivered*/) const {
  return Status(StatusCode::kUnsupported,
                "this sampler deals its epochs otherwise: a stream of shards resumes elastically "
                "by ShardStreamSampler::remainder");
}

Result<ElasticStart> Sampler::interleaved_remainder(uint32_t epoch, int64_t delivered,
                                                    const std::optional<ElasticStart>& resume,
                                                    int64_t world_size) const {
  STOKER_RETURN_IF_ERROR(check_range(epoch, delivered, 0));
  const int64_t first = resume && resume->epoch == epoch ? resume->start : 0;
  return ElasticStart{.epoch = epoch, .start = first + delivered * world_size};
}

Status Sampler::fill(uint32_t epoch, int64_t start, std::span<int64_t> out) const {
  STOKER_RETURN_IF_ERROR(check_range(epoch, start, out.size()));
  for (size_t k = 0; k < out.size(); ++k) out[k] = at(epoch, start + static_cast<int64_t>(k));
  return ok_status();
}

Result<int64_t> Sampler::next(SamplerState* state, std::span<int64_t> out) const {
  const int64_t epoch_positions = epoch_size(state->epoch);
  if (state->position < 0 || state->position > epoch_positions) {
    return Status(StatusCode::kInvalidArgument,
                  "state position " + std::to_string(state->position) + " is outside the epoch's " +
                      std::to_string(epoch_positions) + " positions");
  }
  const int64_t count =
      std::min<int64_t>(static_cast<int64_t>(out.size()), epoch_positions - state->position);
  STOKER_RETURN_IF_ERROR(fill(state->epoch, state->position, out.first(count)));
  state->position += count;
  return count;
}

}  // namespace stoker::sampling
