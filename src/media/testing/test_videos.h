// Test videos, encoded by the tests themselves with the ffmpeg program (small, deterministic
// sources), cached per build in $STOKER_TEST_MEDIA_DIR (or a temporary folder).
//
// Thread-safety: make_test_video() may be called from several test processes at once; files
// appear atomically (written under a temporary name, then linked to theirs), and once there
// are never replaced: tests hold readers open on them.
#pragma once

#include <string>
#include <vector>

#include "stoker/status.h"

namespace stoker::testing {

struct TestVideoSpec {
  std::string name;       // unique file stem; the spec behind a name must not change
  std::string extension;  // "mp4", "mkv", "webm", "mov"
  int width = 160;
  int height = 120;
  int fps = 30;
  double seconds = 2.0;
  std::string encoder_args;  // ffmpeg output options: codec, GOP, pixel format, ...
  std::string filter;        // extra -vf filter chain applied after the source, may be empty
};

/// The folder test media is written to.
std::string test_media_dir();

/// The spec's video, encoding it first if it is not there yet.
Result<std::string> make_test_video(const TestVideoSpec& spec);

/// A path for a test's scratch file or folder `name`, in test_media_dir().
std::string scratch_path(const std::string& name);

/// Writes `bytes` to `path` (its folder made); the whole of the file at `path` ("" if none).
void write_file(const std::string& path, const std::string& bytes);
std::string read_file(const std::string& path);

/// Runs a shell command, returning an error with its output when it fails.
Status run_command(const std::string& command);

/// The videos the frame-exactness tests run on: every codec and container case the decoder
/// promises to handle.
std::vector<TestVideoSpec> frame_exact_specs();

}  // namespace stoker::testing
