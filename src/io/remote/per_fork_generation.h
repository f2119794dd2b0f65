// PerForkGeneration<T>: one T per fork generation (core/fork.h), made on first use in each.
//
// A forked child inherits its parent's memory but not its threads: a mutex some parent thread
// held at fork() stays locked forever, and a curl handle's sockets are the parent's
// connections. So process-wide state that owns threads, locks or connections (the I/O pool, the
// range cache, curl's share handle) is made anew in each generation instead of reset, and the
// parent's copy is left alone: never locked, never destroyed. Each value keeps a pointer to
// the one it replaced, so nothing is unreachable (LeakSanitizer stays quiet) and nothing is
// freed that a parent thread's leftovers might still name.
//
// Getting the value takes no lock (a compare-and-swap), so it is safe in a child whose parent
// forked while another thread was inside get().
// Thread-safety: get() may be called from any thread; T guards itself.
#pragma once

#include <atomic>
#include <cstdint>

#include "core/fork.h"

namespace stoker::io {

template <typename T>
class PerForkGeneration {
 public:
  /// This generation's T, default-constructed on first use. T's constructor must not start
  /// threads or take locks of other objects: two threads may build one at once and one of
  /// them is then destroyed unused.
  T& get() {
    const uint64_t generation = core::fork_generation();
    Node* node = current_.load(std::memory_order_acquire);
    while (node == nullptr || node->generation != generation) {
      Node* fresh = new Node(generation, node);
      if (current_.compare_exchange_strong(node, fresh, std::memory_order_acq_rel)) {
        return fresh->value;
      }
      delete fresh;  // another thread installed this generation's first; `node` is it now
    }
    return node->value;
  }

 private:
  struct Node {
    Node(uint64_t g, Node* p) : generation(g), previous(p) {}
    T value;
    uint64_t generation;
    Node* previous;  // the parent's, kept reachable and intact
  };
  std::atomic<Node*> current_{nullptr};
};

}  // namespace stoker::io
