// Executor: a fixed pool of worker threads running queued tasks, lowest priority value first
// (first come, first served among equals). The loader gives each batch's tasks the batch's
// serial number, so the batch the consumer waits for is always worked on first. The workers run
// under SCHED_BATCH (Linux): as CPU-bound background work, they do not preempt the consumer when
// it wakes them.
//
// Ownership: owns its threads; the destructor drops the tasks still queued and joins the
// threads after their current task.
// Thread-safety: submit() may be called from any thread, including from a task.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <queue>
#include <thread>
#include <vector>

#include "core/mutex.h"
#include "stoker/status.h"

namespace stoker::pipeline {

class Executor {
 public:
  /// Starts `threads` threads. Errors (kResourceExhausted): the system refused a thread; the
  /// ones already started are joined first.
  static Result<std::unique_ptr<Executor>> create(int threads);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  int threads() const { return static_cast<int>(workers_.size()); }
  /// Queues `task`. A task must not throw; it runs on one of the pool's threads.
  void submit(int64_t priority, std::function<void()> task) EXCLUDES(mutex_);

 private:
  struct Task {
    int64_t priority;
    int64_t sequence;
    std::function<void()> run;
    bool operator<(const Task& other) const {  // std::priority_queue pops the largest
      return priority != other.priority ? priority > other.priority : sequence > other.sequence;
    }
  };
  Executor() = default;
  void work() EXCLUDES(mutex_);

  core::Mutex mutex_;
  core::CondVar wake_;
  std::priority_queue<Task> queue_ GUARDED_BY(mutex_);
  int64_t sequence_ GUARDED_BY(mutex_) = 0;
  bool stopping_ GUARDED_BY(mutex_) = false;
  std::vector<std::thread> workers_;
};

}  // namespace stoker::pipeline
