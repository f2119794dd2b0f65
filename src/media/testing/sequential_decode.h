// The frame-exactness reference: a plain decode of every frame of a file, in order, with no
// seeking, no frame table and no skipping, converted with the same FrameConverter the reader
// uses. Frame i of this decode is what VideoReader must return for index i.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "stoker/status.h"
#include "stoker/video_reader.h"

namespace stoker::testing {

/// Every frame of `path`'s best video stream, each converted with `options` (RGB, or 16-bit
/// samples for PixelFormat::kGray16; height/width of 0 mean the stream's own size).
Result<std::vector<std::vector<uint8_t>>> decode_all_frames(const std::string& path,
                                                            const OutputOptions& options);

/// decode_all_frames(path, {}) decoded once per path and process and kept (a test's failure
/// if it cannot be decoded: an empty list). For the tests of one binary; not thread-safe.
const std::vector<std::vector<uint8_t>>& reference_frames(const std::string& path);

}  // namespace stoker::testing
