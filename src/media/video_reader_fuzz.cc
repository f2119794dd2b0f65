// libFuzzer target: a video held in memory, opened (container probe and frame-table scan) and
// decoded (the first, a middle and the last frame, resized), through the same ByteSource path
// as files. Any input must give a result or an error: no crash, no hang, no out-of-bounds
// access. Built by `make fuzz` / `make test-fuzz`.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "stoker/byte_source.h"
#include "stoker/video_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto reader = stoker::VideoReader::open(
      stoker::memory_source("fuzz.mp4", std::vector<uint8_t>(data, data + size)));
  if (!reader.ok()) return 0;
  const stoker::OutputOptions options{.height = 32, .width = 32};
  const int64_t n = (*reader)->num_frames();
  std::vector<int64_t> frames = {0, n / 2, n - 1};
  std::vector<uint8_t> out(frames.size() * (*reader)->frame_bytes(options));
  (*reader)->get_frames(frames, options, out);
  return 0;
}
