// The fork generation: a number that a child process sees change after fork(). State a parent
// left behind in the child (open containers, decoders whose threads did not survive the fork,
// a loader's worker pool) compares it with the generation it was made in, and is abandoned
// rather than used.
//
// Thread-safety: fork_generation() may be called from any thread.
#pragma once

#include <cstdint>

namespace stoker::core {

/// 0 in a process that was not forked since stoker's first call here; one more in each
/// child of each fork() after that.
uint64_t fork_generation();

}  // namespace stoker::core
