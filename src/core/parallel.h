// parallel_for: the one place stoker starts threads for a one-off pass over a list (opening
// shard indexes, scanning videos, decoding a list of images). The Loader's Executor and the
// remote I/O pool keep their own long-lived threads.
//
// Thread-safety: `work` runs on several threads at once, each index once; `progress` runs on
// the calling thread only.
#pragma once

#include <cstddef>
#include <functional>

namespace stoker::core {

/// Calls work(i) once for each i in [0, n), on up to `threads` threads (fewer when the system
/// starts no more; at least the caller's), and returns when every call has returned. With
/// `progress`, the calling thread reports instead of working: progress(done) after each change,
/// the last with done == n. REQUIRES: work does not throw.
void parallel_for(size_t n, int threads, const std::function<void(size_t)>& work,
                  const std::function<void(size_t)>& progress = nullptr);

}  // namespace stoker::core
