// HostMemory: where batch buffers live. Plain 64-byte-aligned memory, or page-locked
// ("pinned") memory from the CUDA runtime, so that host-to-device copies can run
// asynchronously. The CUDA runtime is loaded at run time (dlopen of libcudart, which PyTorch
// has normally loaded already), so stoker builds and runs without CUDA; asking for pinned
// memory where there is no runtime or no device is an error, not a silent fallback.
//
// Ownership: allocate() returns memory the caller gives back with release() on the same
// HostMemory, which must outlive it.
// Thread-safety: allocate() and release() may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "stoker/status.h"

namespace stoker {

class HostMemory {
 public:
  /// Errors (kUnsupported), for pinned memory: no CUDA runtime library could be loaded, or it
  /// lacks cudaHostAlloc; the message says which libraries were tried.
  static Result<std::shared_ptr<const HostMemory>> create(bool pinned);
  /// The memory this process can still have, in bytes: the kernel's MemAvailable (free memory
  /// and what it can reclaim), or the physical memory where that cannot be read.
  static size_t available_bytes();
  virtual ~HostMemory() = default;

  bool pinned() const { return pinned_; }
  /// `bytes` of memory aligned to 64 bytes. Errors: out of memory; for pinned memory, what
  /// cudaHostAlloc reports (no device, driver missing).
  virtual Result<uint8_t*> allocate(size_t bytes) const = 0;
  virtual void release(uint8_t* memory) const = 0;

 protected:
  explicit HostMemory(bool pinned) : pinned_(pinned) {}

 private:
  bool pinned_;
};

}  // namespace stoker
