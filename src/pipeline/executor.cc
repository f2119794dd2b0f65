#include "pipeline/executor.h"

#include <pthread.h>
#include <sched.h>

#include <system_error>
#include <utility>

namespace stoker::pipeline {

Result<std::unique_ptr<Executor>> Executor::create(int threads) {
  std::unique_ptr<Executor> executor(new Executor());
  try {
    executor->workers_.reserve(threads);
    for (int t = 0; t < threads; ++t) {
      executor->workers_.emplace_back([raw = executor.get()] { raw->work(); });
    }
  } catch (const std::exception& error) {  // std::system_error (EAGAIN), std::bad_alloc
    const size_t started = executor->workers_.size();
    executor.reset();  // joins the threads that did start
    return Status(StatusCode::kResourceExhausted,
                  "cannot start thread " + std::to_string(started + 1) + " of " +
                      std::to_string(threads) + ": " + error.what() +
                      " (fewer threads, or a higher limit on processes and memory, would do)");
  }
  return executor;
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
  // A worker woken by submit() must not preempt the thread that woke it: that is the trainer's
  // thread, between its steps (with 2 cores and a busy neighbour, next() on a ready batch took
  // 6-10 ms, one time slice, instead of 0.25 ms). SCHED_BATCH keeps the CPU share and drops the
  // wake-up preemption; where the system refuses it, the workers run as before.
  sched_param param{};
  pthread_setschedparam(pthread_self(), SCHED_BATCH, &param);
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
