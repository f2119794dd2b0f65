#include "core/env.h"

#include <algorithm>
#include <atomic>
#include <system_error>
#include <thread>
#include <vector>

#include "core/mutex.h"

namespace stoker::core {
namespace {

// How many calls have returned, for the progress reports.
struct Count {
  Mutex mutex;
  CondVar changed;
  size_t done GUARDED_BY(mutex) = 0;
};

std::atomic<const Env*> installed{nullptr};  // set_env()'s, for tests

}  // namespace

Clock::time_point Env::now() const { return Clock::now(); }

const Env& Env::current() {
  static const Env real;
  const Env* env = installed;
  return env != nullptr ? *env : real;
}

void set_env(const Env* env) { installed = env; }

void Env::parallel_for(size_t n, int threads, const std::function<void(size_t)>& work,
                       const std::function<void(size_t)>& progress) const {
  if (n == 0) {
    if (progress) progress(0);
    return;
  }
  std::atomic<size_t> next{0};
  Count count;
  auto run = [&] {
    for (size_t i = next++; i < n; i = next++) {
      work(i);
      if (progress) {
        MutexLock lock(&count.mutex);
        ++count.done;
        count.changed.signal();
      }
    }
  };
  // The caller works too unless it reports; it reports alone only when others work.
  const size_t wanted = std::min<size_t>(static_cast<size_t>(std::max(threads, 1)), n);
  std::vector<std::thread> pool;
  for (size_t t = progress ? 0 : 1; t < wanted; ++t) {
    try {
      pool.emplace_back(run);
    } catch (const std::system_error&) {
      break;  // the threads started so far, and the caller, do everything
    }
  }
  if (!progress || pool.empty()) {
    run();
  }
  if (progress) {
    for (size_t reported = SIZE_MAX; reported != n;) {
      {
        MutexLock lock(&count.mutex);
        while (count.done == reported) count.changed.wait(&count.mutex);
        reported = count.done;
      }
      progress(reported);
    }
  }
  for (std::thread& thread : pool) thread.join();
}

}  // namespace stoker::core
