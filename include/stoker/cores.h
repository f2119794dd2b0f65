// The CPU cores this process may use: the one answer every part of stoker (the index builder,
// the Loader, the ETL, the doctor) sizes its thread pools by.
#pragma once

namespace stoker {

/// The number of CPUs in this process's affinity mask (sched_getaffinity), which taskset,
/// cgroup cpusets, container runtimes and job schedulers restrict; at least 1. Thread-safe.
int usable_cores();

}  // namespace stoker
