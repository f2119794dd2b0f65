#include "pipeline/executor.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <vector>

namespace stoker::pipeline {
namespace {

TEST(Executor, RunsEveryTaskOnItsThreads) {
  std::atomic<int> ran{0};
  {
    Executor executor(4);
    EXPECT_EQ(executor.threads(), 4);
    std::atomic<int> submitted{0};
    for (int k = 0; k < 1000; ++k) {
      executor.submit(k % 7, [&] { ++ran; });
      ++submitted;
    }
    while (ran < submitted) std::this_thread::yield();
  }
  EXPECT_EQ(ran, 1000);
}

TEST(Executor, LowestPriorityFirstThenFirstComeFirstServed) {
  std::mutex mutex;
  std::vector<int> order;
  std::atomic<bool> release{false};
  std::atomic<int> done{0};
  {
    Executor executor(1);
    // Hold the only thread so that the queue fills before anything else runs.
    executor.submit(-1, [&] {
      while (!release) std::this_thread::yield();
    });
    for (int k : {5, 3, 9, 3, 1}) {
      executor.submit(k, [&, k] {
        std::lock_guard<std::mutex> lock(mutex);
        order.push_back(k * 10 + static_cast<int>(order.size()));
        ++done;
      });
    }
    release = true;
    while (done < 5) std::this_thread::yield();
  }
  // Priorities 1, 3, 3, 5, 9; each entry also records its position.
  EXPECT_EQ(order, (std::vector<int>{10, 31, 32, 53, 94}));
}

TEST(Executor, DestructionDropsQueuedTasksAndJoins) {
  std::atomic<int> ran{0};
  std::atomic<bool> started{false};
  {
    Executor executor(1);
    executor.submit(0, [&] {
      started = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      ++ran;
    });
    for (int k = 0; k < 100; ++k) executor.submit(1, [&] { ++ran; });
    while (!started) std::this_thread::yield();
  }
  EXPECT_EQ(ran, 1);  // the running task finished; the queued ones were dropped
}

}  // namespace
}  // namespace stoker::pipeline
