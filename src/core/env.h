// Env: the one place stoker reads the time and starts threads for a one-off pass over a list
// (opening shard indexes, scanning videos, decoding a list of images), so that tests can
// replace them, as leveldb's Env. The Loader's Executor and the remote I/O pool keep their own
// long-lived threads.
//
// Thread-safety: an Env's methods may be called from any thread. set_env() is for tests, while
// no other thread uses stoker.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>

namespace stoker::core {

using Clock = std::chrono::steady_clock;

class Env {
 public:
  virtual ~Env() = default;
  /// Monotonic time.
  virtual Clock::time_point now() const;
  /// Calls work(i) once for each i in [0, n), on up to `threads` threads (fewer when the
  /// system starts no more; at least the caller's), and returns when every call has returned.
  /// With `progress`, the calling thread reports instead of working: progress(done) after each
  /// change, the last with done == n. REQUIRES: work does not throw.
  virtual void parallel_for(size_t n, int threads, const std::function<void(size_t)>& work,
                            const std::function<void(size_t)>& progress) const;

  /// The process's Env: the real one, unless a test installed another with set_env().
  static const Env& current();
};

/// Makes `env` the process's Env (nullptr: the real one again). The caller keeps it alive
/// while it is installed.
void set_env(const Env* env);

inline Clock::time_point now() { return Env::current().now(); }
inline int64_t nanoseconds_since(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(now() - start).count();
}
inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(now() - start).count();
}
inline void parallel_for(size_t n, int threads, const std::function<void(size_t)>& work,
                         const std::function<void(size_t)>& progress = nullptr) {
  Env::current().parallel_for(n, threads, work, progress);
}

}  // namespace stoker::core
