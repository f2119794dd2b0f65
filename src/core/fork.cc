#include "core/fork.h"

#include <pthread.h>

#include <atomic>

namespace stoker::core {
namespace {

std::atomic<uint64_t> generation{0};

void after_fork_in_child() { generation.fetch_add(1, std::memory_order_relaxed); }

}  // namespace

uint64_t fork_generation() {
  // Registered on first use: whatever exists before it has not been used by stoker yet.
  static const bool registered = pthread_atfork(nullptr, nullptr, &after_fork_in_child) == 0;
  (void)registered;
  return generation.load(std::memory_order_relaxed);
}

}  // namespace stoker::core
