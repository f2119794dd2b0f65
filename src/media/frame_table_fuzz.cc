// libFuzzer target: FrameTable::deserialize on arbitrary bytes, then every lookup a reader
// makes. Built by `make fuzz` / `make test-fuzz` (clang, -fsanitize=fuzzer,address,undefined);
// the fuzzing build skips the checksum, so that mutations reach the parser behind it.
#include <cstddef>
#include <cstdint>
#include <span>

#include "stoker/frame_table.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto table = stoker::FrameTable::deserialize(std::span(data, size));
  if (!table.ok()) return 0;
  const stoker::FrameTable& t = **table;
  for (int64_t frame = 0; frame < t.num_frames(); ++frame) {
    const int64_t packet = t.packet_of_frame(frame);
    const int64_t sync = t.sync_packet_of_frame(frame);
    if (packet < 0 || sync < 0 || sync > packet ||
        packet >= static_cast<int64_t>(t.packets().size()) || t.frame_of_packet(packet) != frame ||
        t.frame_with_pts(t.packets()[packet].pts) != frame) {
      __builtin_trap();  // the derived lookups must agree with each other
    }
    t.nearest_frame(t.pts_seconds(frame));
  }
  t.serialize();
  return 0;
}
