#include "core/host_memory.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

namespace stoker {
namespace {

constexpr size_t kAlignment = 64;

class AlignedMemory final : public HostMemory {
 public:
  AlignedMemory() : HostMemory(false) {}
  Result<uint8_t*> allocate(size_t bytes) const override {
    const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    auto* memory =
        static_cast<uint8_t*>(std::aligned_alloc(kAlignment, rounded ? rounded : kAlignment));
    if (memory == nullptr) {
      return Status(StatusCode::kResourceExhausted,
                    "cannot allocate " + std::to_string(bytes) + " bytes");
    }
    return memory;
  }
  void release(uint8_t* memory) const override { std::free(memory); }
};

// The two CUDA runtime entry points this needs, with their C signatures.
using HostAllocFn = int (*)(void**, size_t, unsigned int);
using FreeHostFn = int (*)(void*);
using ErrorStringFn = const char* (*)(int);

class PinnedMemory final : public HostMemory {
 public:
  PinnedMemory(void* library, HostAllocFn alloc, FreeHostFn free, ErrorStringFn error_string)
      : HostMemory(true),
        library_(library),
        alloc_(alloc),
        free_(free),
        error_string_(error_string) {}
  // The library stays loaded: memory may be released after this object is gone.
  ~PinnedMemory() override { (void)library_; }

  Result<uint8_t*> allocate(size_t bytes) const override {
    void* memory = nullptr;
    const int error = alloc_(&memory, bytes ? bytes : 1, /*cudaHostAllocDefault=*/0);
    if (error != 0 || memory == nullptr) {
      return Status(
          StatusCode::kUnsupported,
          "cudaHostAlloc of " + std::to_string(bytes) + " bytes failed: " +
              (error_string_ ? error_string_(error) : ("error " + std::to_string(error))));
    }
    return static_cast<uint8_t*>(memory);  // page-aligned
  }
  void release(uint8_t* memory) const override { free_(memory); }

 private:
  void* library_;
  HostAllocFn alloc_;
  FreeHostFn free_;
  ErrorStringFn error_string_;
};

}  // namespace

Result<std::shared_ptr<const HostMemory>> HostMemory::create(bool pinned) {
  if (!pinned) return std::shared_ptr<const HostMemory>(std::make_shared<AlignedMemory>());
  std::string tried;
  const char* override_path = std::getenv("STOKER_CUDART");
  const char* names[] = {override_path, "libcudart.so", "libcudart.so.13", "libcudart.so.12",
                         "libcudart.so.11.0"};
  for (const char* name : names) {
    if (name == nullptr || *name == '\0') continue;
    tried += std::string(tried.empty() ? "" : ", ") + name;
    void* library = dlopen(name, RTLD_NOW | RTLD_GLOBAL);
    if (library == nullptr) continue;
    auto alloc = reinterpret_cast<HostAllocFn>(dlsym(library, "cudaHostAlloc"));
    auto free = reinterpret_cast<FreeHostFn>(dlsym(library, "cudaFreeHost"));
    auto error_string = reinterpret_cast<ErrorStringFn>(dlsym(library, "cudaGetErrorString"));
    if (alloc == nullptr || free == nullptr) continue;
    return std::shared_ptr<const HostMemory>(
        std::make_shared<PinnedMemory>(library, alloc, free, error_string));
  }
  return Status(StatusCode::kUnsupported,
                "pinned memory needs the CUDA runtime, and none could be loaded (tried " + tried +
                    "; set STOKER_CUDART to its path)");
}

size_t HostMemory::available_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  size_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) : SIZE_MAX;
}

}  // namespace stoker
