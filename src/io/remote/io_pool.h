// The process's I/O threads: they run the range cache's background fetches (prefetch), each
// with its own curl handle. Started on the first job; a forked child gets a pool of its own
// (PerForkGeneration). Jobs wait in a bounded queue; submit() refuses one when it is full,
// and the cache then leaves that fetch to the read that needs it. The threads run under the
// normal scheduling policy (SCHED_OTHER), whatever the thread that started them.
//
// Thread-safety: submit() may be called from any thread. The threads live until exit.
#pragma once

#include <deque>
#include <functional>

#include "core/mutex.h"

namespace stoker::io {

class IoPool {
 public:
  static constexpr int kThreads = 8;
  static constexpr size_t kMaxQueued = 4096;

  IoPool() = default;
  IoPool(const IoPool&) = delete;
  IoPool& operator=(const IoPool&) = delete;

  /// Queues `job` to run on an I/O thread; false (and `job` dropped) when the queue is full or
  /// no thread could be started.
  bool submit(std::function<void()> job) EXCLUDES(mutex_);

 private:
  void run() EXCLUDES(mutex_);

  core::Mutex mutex_;
  core::CondVar work_;
  std::deque<std::function<void()>> jobs_ GUARDED_BY(mutex_);
  int threads_ GUARDED_BY(mutex_) = 0;
  bool started_ GUARDED_BY(mutex_) = false;
};

/// This process's pool.
IoPool& io_pool();

}  // namespace stoker::io
