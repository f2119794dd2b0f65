#include "io/remote/io_pool.h"

#include <pthread.h>
#include <sched.h>

#include <system_error>
#include <thread>

#include "io/remote/per_fork_generation.h"

namespace stoker::io {
namespace {

PerForkGeneration<IoPool> pools;

}  // namespace

IoPool& io_pool() { return pools.get(); }

bool IoPool::submit(std::function<void()> job) {
  core::MutexLock lock(&mutex_);
  if (!started_) {
    started_ = true;
    for (int i = 0; i < kThreads; ++i) {
      try {
        std::thread([this] { run(); }).detach();  // the pool is never destroyed
        ++threads_;
      } catch (const std::system_error&) {
        break;  // the system refused threads: run with those there are
      }
    }
  }
  if (threads_ == 0 || jobs_.size() >= kMaxQueued) return false;
  jobs_.push_back(std::move(job));
  work_.signal();
  return true;
}

void IoPool::run() {
  // These threads wait on the network, and a worker blocks on what they fetch: they keep the
  // normal policy, and its wake-up preemption, even when a loader's worker (SCHED_BATCH,
  // pipeline/executor.h) started them.
  sched_param param{};
  pthread_setschedparam(pthread_self(), SCHED_OTHER, &param);
  while (true) {
    std::function<void()> job;
    {
      core::MutexLock lock(&mutex_);
      while (jobs_.empty()) work_.wait(&mutex_);
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();
  }
}

}  // namespace stoker::io
