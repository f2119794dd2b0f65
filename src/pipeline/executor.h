// Executor: a fixed pool of worker threads running queued tasks, lowest priority value first
// (first come, first served among equals). The loader gives each batch's tasks the batch's
// serial number, so the batch the consumer waits for is always worked on first.
//
// Ownership: owns its threads; the destructor drops the tasks still queued and joins the
// threads after their current task.
// Thread-safety: submit() may be called from any thread, including from a task.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <queue>
#include <thread>
#include <vector>

namespace stoker::pipeline {

class Executor {
 public:
  explicit Executor(int threads);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  int threads() const { return static_cast<int>(workers_.size()); }
  /// Queues `task`. A task must not throw; it runs on one of the pool's threads.
  void submit(int64_t priority, std::function<void()> task);

 private:
  struct Task {
    int64_t priority;
    int64_t sequence;
    std::function<void()> run;
    bool operator<(const Task& other) const {  // std::priority_queue pops the largest
      return priority != other.priority ? priority > other.priority : sequence > other.sequence;
    }
  };
  void work();

  std::mutex mutex_;
  std::condition_variable wake_;
  std::priority_queue<Task> queue_;  // GUARDED_BY(mutex_)
  int64_t sequence_ = 0;             // GUARDED_BY(mutex_)
  bool stopping_ = false;            // GUARDED_BY(mutex_)
  std::vector<std::thread> workers_;
};

}  // namespace stoker::pipeline
