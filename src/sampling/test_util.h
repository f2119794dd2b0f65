// Helpers for the sampling tests.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "stoker/sampling.h"

namespace stoker::sampling::testing {

/// The whole epoch of `sampler`, through fill().
inline std::vector<int64_t> epoch_ids(const Sampler& sampler, uint32_t epoch) {
  std::vector<int64_t> ids(sampler.epoch_size(epoch));
  Status status = sampler.fill(epoch, 0, ids);
  EXPECT_TRUE(status.ok()) << status.message();
  return ids;
}

/// The value of a Result that must hold one.
template <typename T>
T must(Result<T> result) {
  EXPECT_TRUE(result.ok()) << result.status().message();
  return std::move(result).value();
}

/// How often each id in [0, n) appears in `ids`.
inline std::vector<int64_t> counts_of(const std::vector<int64_t>& ids, int64_t n) {
  std::vector<int64_t> counts(n, 0);
  for (int64_t id : ids) {
    EXPECT_GE(id, 0);
    EXPECT_LT(id, n);
    if (id >= 0 && id < n) counts[id]++;
  }
  return counts;
}

}  // namespace stoker::sampling::testing
