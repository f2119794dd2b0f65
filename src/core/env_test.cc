#include "core/env.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace stoker::core {
namespace {

TEST(ParallelFor, CallsEveryIndexOnceOnSeveralThreads) {
  constexpr size_t kItems = 1000;
  std::vector<std::atomic<int>> calls(kItems);
  std::atomic<int> busy{0}, most_busy{0};
  parallel_for(kItems, 4, [&](size_t i) {
    const int now = ++busy;
    for (int seen = most_busy; now > seen && !most_busy.compare_exchange_weak(seen, now);) {
    }
    std::this_thread::yield();
    ++calls[i];
    --busy;
  });
  for (size_t i = 0; i < kItems; ++i) EXPECT_EQ(calls[i], 1) << "index " << i;
  EXPECT_LE(most_busy, 4);
}

TEST(ParallelFor, ReportsProgressOnTheCallersThreadEndingWithTheTotal) {
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<bool> worked_on_caller{false};
  std::vector<size_t> reports;
  parallel_for(
      50, 3,
      [&](size_t) {
        if (std::this_thread::get_id() == caller) worked_on_caller = true;
      },
      [&](size_t done) {
        EXPECT_EQ(std::this_thread::get_id(), caller);
        reports.push_back(done);
      });
  ASSERT_FALSE(reports.empty());
  EXPECT_EQ(reports.back(), 50u);
  for (size_t k = 1; k < reports.size(); ++k) EXPECT_GT(reports[k], reports[k - 1]);
  EXPECT_FALSE(worked_on_caller);
}

TEST(ParallelFor, NothingToDoReturnsAtOnce) {
  int calls = 0;
  std::vector<size_t> reports;
  parallel_for(
      0, 8, [&](size_t) { ++calls; }, [&](size_t done) { reports.push_back(done); });
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(reports, std::vector<size_t>{0});
}

// A test's Env: a clock that moves only when told, and passes over lists on the caller's
// thread alone, counting them.
class FakeEnv : public Env {
 public:
  Clock::time_point now() const override { return Clock::time_point(std::chrono::seconds(at)); }
  void parallel_for(size_t n, int, const std::function<void(size_t)>& work,
                    const std::function<void(size_t)>& progress) const override {
    ++passes;
    for (size_t i = 0; i < n; ++i) work(i);
    if (progress) progress(n);
  }
  int64_t at = 100;
  mutable int passes = 0;
};

TEST(Env, AnInstalledEnvGivesTheTimeAndRunsThePassesUntilRemoved) {
  FakeEnv fake;
  set_env(&fake);
  const Clock::time_point start = now();
  fake.at += 3;
  EXPECT_EQ(seconds_since(start), 3.0);
  EXPECT_EQ(nanoseconds_since(start), 3'000'000'000);
  std::vector<std::thread::id> ran_on;
  parallel_for(5, 8, [&](size_t) { ran_on.push_back(std::this_thread::get_id()); });
  EXPECT_EQ(fake.passes, 1);
  EXPECT_EQ(ran_on, std::vector<std::thread::id>(5, std::this_thread::get_id()));
  set_env(nullptr);
  EXPECT_GT(now().time_since_epoch().count(), 0);
  EXPECT_NE(now(), Clock::time_point(std::chrono::seconds(fake.at)));
}

}  // namespace
}  // namespace stoker::core
