// Clang's thread-safety attributes, as macros that vanish under other compilers. They let a
// clang build with -Wthread-safety prove, at compile time, that every field annotated
// GUARDED_BY(mu) is touched only with `mu` held, and that functions marked REQUIRES(mu) are
// only called with it held. `make test` runs such a build (build-clang).
//
// See https://clang.llvm.org/docs/ThreadSafetyAnalysis.html for the meaning of each attribute.
#pragma once

#if defined(__clang__)
#define STOKER_THREAD_ANNOTATION_(x) __attribute__((x))
#else
#define STOKER_THREAD_ANNOTATION_(x)
#endif

/// A class whose objects are locks (core::Mutex).
#define CAPABILITY(x) STOKER_THREAD_ANNOTATION_(capability(x))
/// An RAII class that holds a lock for its lifetime (core::MutexLock).
#define SCOPED_CAPABILITY STOKER_THREAD_ANNOTATION_(scoped_lockable)
/// The field may be read or written only while holding `x`.
#define GUARDED_BY(x) STOKER_THREAD_ANNOTATION_(guarded_by(x))
/// What the pointer points to may be used only while holding `x`.
#define PT_GUARDED_BY(x) STOKER_THREAD_ANNOTATION_(pt_guarded_by(x))
/// The caller must hold the lock(s).
#define REQUIRES(...) STOKER_THREAD_ANNOTATION_(requires_capability(__VA_ARGS__))
/// The caller must not hold the lock(s) (the function takes them itself).
#define EXCLUDES(...) STOKER_THREAD_ANNOTATION_(locks_excluded(__VA_ARGS__))
/// The function takes the lock(s) and returns holding them.
#define ACQUIRE(...) STOKER_THREAD_ANNOTATION_(acquire_capability(__VA_ARGS__))
/// The function releases the lock(s) the caller held.
#define RELEASE(...) STOKER_THREAD_ANNOTATION_(release_capability(__VA_ARGS__))
/// The function returns a reference to the lock `x`.
#define RETURN_CAPABILITY(x) STOKER_THREAD_ANNOTATION_(lock_returned(x))
/// Turns the analysis off for one function, where it cannot follow the locking (say why).
#define NO_THREAD_SAFETY_ANALYSIS STOKER_THREAD_ANNOTATION_(no_thread_safety_analysis)
