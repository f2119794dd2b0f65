// LoadBalancedSampler: DistributedSampler's order, re-dealt per global step so that the ranks'
// summed costs are even (greedy longest-processing-time-first, with equal counts per rank).
#include <algorithm>
#include <cmath>
#include <functional>
#include <queue>
#include <string>
#include <utility>

#include "sampling/detail/common.h"
#include "stoker/sampling.h"

namespace stoker::sampling {
namespace {

// One global step, solved: bin b's ids (in assignment order) at ids[b * per_rank ...].
struct StepPlan {
  int64_t per_rank = 0;         // ids per rank in this step
  std::vector<int64_t> ids;     // world_size * per_rank
  std::vector<double> before;   // rank totals when dealt round-robin
  std::vector<double> after;    // bin totals after balancing
  std::vector<int64_t> order;   // scratch: step positions sorted by cost
  std::vector<int64_t> dealt;   // scratch: the step's ids in order
  std::vector<int64_t> counts;  // scratch: ids per bin so far
};

class Balancer {
 public:
  // `per_rank`: the epoch's (epoch_size()).
  Balancer(std::span<const double> costs, const LoadBalancedOptions& options, int64_t per_rank,
           uint32_t epoch)
      : costs_(costs),
        options_(options),
        per_rank_(per_rank),
        epoch_(epoch),
        order_(static_cast<int64_t>(costs.size()), options.shuffle, options.seed, epoch,
               detail::epoch_span(static_cast<int64_t>(costs.size()), options.resume, epoch)) {}

  int64_t steps() const { return (per_rank_ + options_.batch_size - 1) / options_.batch_size; }

  void solve(int64_t step, StepPlan* plan) const {
    const int64_t world = options_.world_size;
    const int64_t k = std::min(options_.batch_size, per_rank_ - step * options_.batch_size);
    const int64_t m = world * k;
    const int64_t base = step * world * options_.batch_size;
    plan->per_rank = k;
    plan->dealt.resize(m);
    plan->before.assign(world, 0.0);
    for (int64_t i = 0; i < m; ++i) {
      plan->dealt[i] = order_(base + i);
      plan->before[i % world] += costs_[plan->dealt[i]];
    }
    // 1. Heaviest first; ties by position, so the result never depends on the sort's whims.
    plan->order.resize(m);
    for (int64_t i = 0; i < m; ++i) plan->order[i] = i;
    std::sort(plan->order.begin(), plan->order.end(), [&](int64_t a, int64_t b) {
      const double ca = costs_[plan->dealt[a]], cb = costs_[plan->dealt[b]];
      return ca != cb ? ca > cb : a < b;
    });
    // 2. Each to the lightest bin that still has room (ties: the lowest bin).
    using Entry = std::pair<double, int64_t>;  // (total, bin)
    std::priority_queue<Entry, std::vector<Entry>, std::greater<>> lightest;
    for (int64_t b = 0; b < world; ++b) lightest.emplace(0.0, b);
    plan->counts.assign(world, 0);
    plan->after.assign(world, 0.0);
    plan->ids.resize(m);
    for (int64_t i : plan->order) {
      const auto [total, bin] = lightest.top();
      lightest.pop();
      const int64_t id = plan->dealt[i];
      plan->ids[bin * k + plan->counts[bin]++] = id;
      plan->after[bin] = total + costs_[id];
      if (plan->counts[bin] < k) lightest.emplace(plan->after[bin], bin);
    }
  }

  // 3. Which bin rank `rank` gets in `step`, and the order inside it.
  void rank_batch(int64_t step, const StepPlan& plan, int64_t rank, std::span<int64_t> out,
                  int64_t from) const {
    const uint64_t seed = options_.seed;
    const Permutation bins(
        options_.world_size,
        core::random_words(seed, epoch_, static_cast<uint64_t>(step), core::kBalanceRanksStream));
    const int64_t bin = bins.inverse(rank);
    const Permutation inside(
        plan.per_rank,
        core::random_words(seed, epoch_, static_cast<uint64_t>(step * options_.world_size + rank),
                           core::kBalanceOrderStream));
    for (size_t j = 0; j < out.size(); ++j) {
      out[j] = plan.ids[bin * plan.per_rank + inside(from + static_cast<int64_t>(j))];
    }
  }

 private:
  std::span<const double> costs_;
  const LoadBalancedOptions& options_;
  int64_t per_rank_;
  uint32_t epoch_;
  detail::EpochOrder order_;
};

// max / mean of one step's rank totals; 1 when the step costs nothing.
double ratio(const std::vector<double>& totals, double* max_out, double* mean_out) {
  double sum = 0, max = 0;
  for (double t : totals) {
    sum += t;
    max = std::max(max, t);
  }
  *max_out = max;
  *mean_out = sum / static_cast<double>(totals.size());
  return *mean_out > 0 ? max / *mean_out : 1.0;
}

struct ImbalanceSum {
  double ratio_sum = 0, worst = 1, max_sum = 0, mean_sum = 0;
  void add(const std::vector<double>& totals) {
    double max = 0, mean = 0;
    const double r = ratio(totals, &max, &mean);
    ratio_sum += r;
    worst = std::max(worst, r);
    max_sum += max;
    mean_sum += mean;
  }
  Imbalance result(int64_t steps) const {
    if (steps == 0) return Imbalance{};
    return Imbalance{.mean = ratio_sum / static_cast<double>(steps),
                     .worst = worst,
                     .total = mean_sum > 0 ? max_sum / mean_sum : 1.0};
  }
};

}  // namespace

Result<std::unique_ptr<LoadBalancedSampler>> LoadBalancedSampler::create(
    std::span<const double> costs, LoadBalancedOptions options) {
  for (size_t i = 0; i < costs.size(); ++i) {
    if (!std::isfinite(costs[i]) || costs[i] < 0) {
      return Status(StatusCode::kInvalidArgument, "cost of sample " + std::to_string(i) +
                                                      " must be finite and non-negative, got " +
                                                      std::to_string(costs[i]));
    }
  }
  if (options.batch_size < 1) {
    return Status(StatusCode::kInvalidArgument,
                  "batch_size must be at least 1, got " + std::to_string(options.batch_size));
  }
  STOKER_RETURN_IF_ERROR(detail::check_partition(options.rank, options.world_size));
  STOKER_RETURN_IF_ERROR(detail::check_resume(options.resume));
  const int64_t per_rank = detail::per_rank_count(static_cast<int64_t>(costs.size()),
                                                  options.world_size, options.drop_last);
  return std::unique_ptr<LoadBalancedSampler>(
      new LoadBalancedSampler(std::vector<double>(costs.begin(), costs.end()), options, per_rank));
}

int64_t LoadBalancedSampler::epoch_size(uint32_t epoch) const {
  const auto n = static_cast<int64_t>(costs_.size());
  const detail::EpochSpan span = detail::epoch_span(n, options_.resume, epoch);
  if (span.count == n) return per_rank_;
  return detail::per_rank_count(span.count, options_.world_size, options_.drop_last);
}

int64_t LoadBalancedSampler::at(uint32_t epoch, int64_t position) const {
  int64_t id = 0;
  Status status = fill(epoch, position, std::span(&id, 1));
  (void)status;  // REQUIRES: the position is in range
  return id;
}

Status LoadBalancedSampler::fill(uint32_t epoch, int64_t start, std::span<int64_t> out) const {
  STOKER_RETURN_IF_ERROR(check_range(epoch, start, out.size()));
  if (out.empty()) return ok_status();
  const Balancer balancer(costs_, options_, epoch_size(epoch), epoch);
  StepPlan plan;
  const int64_t batch = options_.batch_size;
  int64_t position = start;
  size_t done = 0;
  while (done < out.size()) {
    const int64_t step = position / batch;
    const int64_t from = position - step * batch;
    balancer.solve(step, &plan);
    const size_t count =
        std::min<size_t>(out.size() - done, static_cast<size_t>(plan.per_rank - from));
    balancer.rank_batch(step, plan, options_.rank, out.subspan(done, count), from);
    done += count;
    position += static_cast<int64_t>(count);
  }
  return ok_status();
}

BalanceReport LoadBalancedSampler::report(uint32_t epoch) const {
  const Balancer balancer(costs_, options_, epoch_size(epoch), epoch);
  StepPlan plan;
  ImbalanceSum before, after;
  const int64_t steps = balancer.steps();
  for (int64_t step = 0; step < steps; ++step) {
    balancer.solve(step, &plan);
    before.add(plan.before);
    after.add(plan.after);
  }
  return BalanceReport{
      .steps = steps, .before = before.result(steps), .after = after.result(steps)};
}

Result<ElasticStart> LoadBalancedSampler::elastic_remainder(uint32_t epoch,
                                                            int64_t delivered) const {
  if (delivered % options_.batch_size != 0) {
    return Status(StatusCode::kInvalidArgument,
                  "position " + std::to_string(delivered) +
                      " is inside a step of the load-balanced order (" +
                      std::to_string(options_.batch_size) +
                      " samples per rank): it resumes on another world size only at a step's "
                      "end");
  }
  return interleaved_remainder(epoch, delivered, options_.resume, options_.world_size);
}

}  // namespace stoker::sampling
