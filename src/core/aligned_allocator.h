// AlignedAllocator: a std::allocator whose blocks all start on an `Alignment`-byte boundary.
//
// For buffers handed to swscale: it picks its code paths by the alignment of the rows it reads,
// and those paths round differently, so a buffer whose alignment depends on where the heap put
// it makes the same pixels convert to other values from one run (or thread) to the next.
//
// Thread-safety: as std::allocator (stateless).
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

namespace stoker::core {

template <typename T, std::size_t Alignment = 64>
struct AlignedAllocator {
  using value_type = T;
  template <typename U>
  struct rebind {
    using other = AlignedAllocator<U, Alignment>;
  };

  AlignedAllocator() = default;
  template <typename U>
  AlignedAllocator(const AlignedAllocator<U, Alignment>&) {}  // NOLINT: converting, as allocators

  T* allocate(std::size_t n) {
    return static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{Alignment}));
  }
  void deallocate(T* p, std::size_t) { ::operator delete (p, std::align_val_t{Alignment}); }

  template <typename U>
  bool operator==(const AlignedAllocator<U, Alignment>&) const {
    return true;
  }
};

/// Bytes whose first one is 64-byte aligned.
using AlignedBytes = std::vector<uint8_t, AlignedAllocator<uint8_t>>;

}  // namespace stoker::core
