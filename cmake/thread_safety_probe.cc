// Compiled by `make test-thread-safety` with clang's -Wthread-safety, which must reject it: the
// analysis is on, and it catches a GUARDED_BY field touched without its mutex.
#include "core/mutex.h"

namespace {

struct Counter {
  stoker::core::Mutex mutex;
  int value GUARDED_BY(mutex) = 0;
};

}  // namespace

int increment_without_the_lock(Counter& counter) { return ++counter.value; }
