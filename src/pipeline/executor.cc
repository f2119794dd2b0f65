#include "pipeline/executor.h"

#include <utility>

namespace stoker::pipeline {

Executor::Executor(int threads) {
  workers_.reserve(threads);
  for (int t = 0; t < threads; ++t) workers_.emplace_back([this] { work(); });
}

Executor::~Executor() {
  {
    core::MutexLock lock(&mutex_);
    stopping_ = true;
    queue_ = {};
  }
  wake_.signal_all();
  for (std::thread& worker : workers_) worker.join();
}

void Executor::submit(int64_t priority, std::function<void()> task) {
  {
    core::MutexLock lock(&mutex_);
    if (stopping_) return;
    queue_.push(Task{priority, sequence_++, std::move(task)});
  }
  wake_.signal();
}

void Executor::work() {
  while (true) {
    std::function<void()> run;
    {
      core::MutexLock lock(&mutex_);
      while (!stopping_ && queue_.empty()) wake_.wait(&mutex_);
      if (stopping_) return;
      run = std::move(const_cast<Task&>(queue_.top()).run);
      queue_.pop();
    }
    run();
  }
}

}  // namespace stoker::pipeline
