// Mutex, MutexLock and CondVar: std::mutex and std::condition_variable with clang's
// thread-safety annotations (thread_annotations.h), so that the -Wthread-safety build checks
// every GUARDED_BY field of stoker. Use these instead of the std types for any lock that
// guards state.
//
// Thread-safety: a Mutex is shared by the threads it serializes; a MutexLock belongs to the
// thread that made it; a CondVar's wait() must be called with the mutex it is given held.
#pragma once

#include <condition_variable>
#include <mutex>

#include "core/thread_annotations.h"

namespace stoker::core {

class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() ACQUIRE() { mutex_.lock(); }
  void unlock() RELEASE() { mutex_.unlock(); }

 private:
  friend class CondVar;
  std::mutex mutex_;
};

/// Holds a Mutex from construction to destruction; unlock()/lock() release and retake it in
/// between (for calls that must not run under the lock).
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mutex) ACQUIRE(mutex) : mutex_(mutex) { mutex_->lock(); }
  ~MutexLock() RELEASE() {
    if (held_) mutex_->unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void unlock() RELEASE() {
    held_ = false;
    mutex_->unlock();
  }
  void lock() ACQUIRE() {
    mutex_->lock();
    held_ = true;
  }

 private:
  Mutex* const mutex_;
  bool held_ = true;
};

/// A condition variable. Every wait on one CondVar must pass the same Mutex.
class CondVar {
 public:
  CondVar() = default;
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  /// Releases `mutex`, blocks until signalled (or woken spuriously), and retakes `mutex`.
  /// Callers loop on their condition, `while (!ready) cv.wait(&mutex);`, so the thread-safety
  /// analysis sees the condition read under the lock. REQUIRES: the caller holds `mutex`.
  void wait(Mutex* mutex) REQUIRES(mutex) {
    std::unique_lock<std::mutex> lock(mutex->mutex_, std::adopt_lock);
    condition_.wait(lock);
    lock.release();  // the caller keeps holding the mutex
  }
  void signal() { condition_.notify_one(); }
  void signal_all() { condition_.notify_all(); }

 private:
  std::condition_variable condition_;
};

}  // namespace stoker::core
