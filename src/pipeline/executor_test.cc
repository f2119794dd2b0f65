#include "pipeline/executor.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <mutex>
#include <vector>

namespace stoker::pipeline {
namespace {

TEST(Executor, RunsEveryTaskOnItsThreads) {
  std::atomic<int> ran{0};
  {
    auto created = Executor::create(4);
    ASSERT_TRUE(created.ok());
    Executor& executor = **created;
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

// The workers are background work: they run under SCHED_BATCH (no wake-up preemption of the
// consumer that submits to them), and the submitting thread's own policy is left as it was.
TEST(Executor, WorkersRunAsBatchWorkAndLeaveTheSubmitterAlone) {
  const int submitter_policy = sched_getscheduler(0);
  auto created = Executor::create(2);
  ASSERT_TRUE(created.ok());
  std::atomic<int> policies_seen{0};
  std::atomic<int> batch_policies{0};
  for (int k = 0; k < 8; ++k) {
    (*created)->submit(0, [&] {
      if (sched_getscheduler(0) == SCHED_BATCH) ++batch_policies;
      ++policies_seen;
    });
  }
  while (policies_seen < 8) std::this_thread::yield();
  EXPECT_EQ(batch_policies.load(), 8);
  EXPECT_EQ(sched_getscheduler(0), submitter_policy);
}

TEST(Executor, LowestPriorityFirstThenFirstComeFirstServed) {
  std::mutex mutex;
  std::vector<int> order;
  std::atomic<bool> release{false};
  std::atomic<int> done{0};
  {
    auto created = Executor::create(1);
    ASSERT_TRUE(created.ok());
    Executor& executor = **created;
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
    auto created = Executor::create(1);
    ASSERT_TRUE(created.ok());
    Executor& executor = **created;
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

// Sanitizers reserve terabytes of address space, so a limit on it is only testable without them.
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
TEST(Executor, ThreadsTheSystemRefusesAreAnErrorNotACrash) {
  // In a child, so that the address-space limit stays there: 1500 threads need 12 GB of
  // stacks, far over the 1 GB allowed beyond what the process has now.
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    rlimit limit{};
    getrlimit(RLIMIT_AS, &limit);
    std::ifstream status("/proc/self/statm");
    size_t pages = 0;
    status >> pages;
    limit.rlim_cur = pages * static_cast<size_t>(sysconf(_SC_PAGESIZE)) + (size_t{1} << 30);
    if (setrlimit(RLIMIT_AS, &limit) != 0) _exit(3);
    auto executor = Executor::create(1500);
    if (executor.ok()) _exit(4);
    const Status& error = executor.status();
    const bool named = error.message().find("cannot start thread") != std::string::npos &&
                       error.message().find("of 1500") != std::string::npos;
    _exit(error.code() == StatusCode::kResourceExhausted && named ? 0 : 5);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}
#endif

}  // namespace
}  // namespace stoker::pipeline
