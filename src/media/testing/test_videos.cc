#include "media/testing/test_videos.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

namespace stoker::testing {

std::string test_media_dir() {
  const char* dir = std::getenv("STOKER_TEST_MEDIA_DIR");
  std::filesystem::path path = dir != nullptr
                                   ? std::filesystem::path(dir)
                                   : std::filesystem::temp_directory_path() / "stoker-test-media";
  std::filesystem::create_directories(path);
  return path.string();
}

std::string scratch_path(const std::string& name) {
  return (std::filesystem::path(test_media_dir()) / name).string();
}

void write_file(const std::string& path, const std::string& bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

Status run_command(const std::string& command) {
  std::string output;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return Status(StatusCode::kIoError, "cannot run: " + command);
  char buffer[4096];
  size_t n = 0;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) output.append(buffer, n);
  const int code = pclose(pipe);
  if (code != 0) {
    return Status(StatusCode::kInternal,
                  "command failed (" + std::to_string(code) + "): " + command + "\n" + output);
  }
  return Status();
}

Result<std::string> make_test_video(const TestVideoSpec& spec) {
  const std::filesystem::path path =
      std::filesystem::path(test_media_dir()) / (spec.name + "." + spec.extension);
  if (std::filesystem::exists(path)) return path.string();
  const std::string temporary =
      path.string() + ".part" + std::to_string(getpid()) + "." + spec.extension;
  std::string command =
      "ffmpeg -nostdin -y -loglevel error -f lavfi -i testsrc2=size=" + std::to_string(spec.width) +
      "x" + std::to_string(spec.height) + ":rate=" + std::to_string(spec.fps) +
      ":duration=" + std::to_string(spec.seconds);
  if (!spec.filter.empty()) command += " -vf '" + spec.filter + "'";
  command += " " + spec.encoder_args + " '" + temporary + "'";
  Status status = run_command(command);
  if (!status.ok()) return status;
  // Another test process may have made the same video meanwhile: the first one made stays
  // (a link does not replace), so a reader already open on it never sees it replaced.
  std::error_code exists;
  std::filesystem::create_hard_link(temporary, path, exists);
  std::filesystem::remove(temporary);
  return path.string();
}

std::vector<TestVideoSpec> frame_exact_specs() {
  const std::string x264 = "-c:v libx264 -preset veryfast -pix_fmt yuv420p";
  return {
      {.name = "h264_gop30_bframes",
       .extension = "mp4",
       .seconds = 4,
       .encoder_args = x264 + " -g 30 -bf 3"},
      {.name = "h264_gop250_bframes",
       .extension = "mp4",
       .seconds = 10,
       .encoder_args = x264 + " -g 250 -bf 3"},
      {.name = "h264_all_intra", .extension = "mp4", .seconds = 2, .encoder_args = x264 + " -g 1"},
      {.name = "hevc_bframes",
       .extension = "mp4",
       .seconds = 4,
       .encoder_args = "-c:v libx265 -preset veryfast -pix_fmt yuv420p -tag:v hvc1 "
                       "-x265-params log-level=error:keyint=30:min-keyint=30:bframes=3"},
      {.name = "vp9_webm",
       .extension = "webm",
       .seconds = 3,
       .encoder_args = "-c:v libvpx-vp9 -deadline good -cpu-used 8 -g 30 -lag-in-frames 16 "
                       "-auto-alt-ref 1 -b:v 300k -pix_fmt yuv420p"},
      {.name = "av1_lerobot",
       .extension = "mp4",
       .seconds = 3,
       .encoder_args = "-c:v libsvtav1 -preset 12 -g 2 -crf 30 -pix_fmt yuv420p"},
      {.name = "h264_vfr",
       .extension = "mkv",
       .seconds = 3,
       .encoder_args = x264 + " -g 30 -bf 2 -vsync vfr -enc_time_base 1/1000",
       // Frames 30..59 are spaced 50 ms apart instead of 33 ms: a variable frame rate.
       .filter =
           "settb=1/1000,setpts=(N/30+if(gte(N\\,30)\\,(min(N\\,60)-30)*(1/20-1/30)\\,0))/TB"},
      {.name = "h264_offset_start",
       .extension = "mkv",
       .seconds = 2,
       .encoder_args = x264 + " -g 15 -bf 2 -output_ts_offset 2.5"},
      {.name = "h264_mov_offset_start",
       .extension = "mov",
       .seconds = 2,
       .encoder_args = x264 + " -g 15 -bf 2 -output_ts_offset 1.25"},
      {.name = "h264_odd_size",
       .extension = "mp4",
       .width = 161,
       .height = 97,
       .seconds = 2,
       .encoder_args = "-c:v libx264 -preset veryfast -pix_fmt yuv444p -g 20 -bf 2"},
      {.name = "vp9_odd_size",
       .extension = "webm",
       .width = 99,
       .height = 75,
       .seconds = 2,
       .encoder_args = "-c:v libvpx-vp9 -deadline realtime -cpu-used 8 -g 10 -pix_fmt yuv420p"},
      // Legacy pairs. AVI and MPEG-PS leave packets of B-frame streams without a pts: their
      // display order comes from a decoding scan (VideoStreamInfo::pts_from_decoding).
      {.name = "mpeg4_avi_bframes",
       .extension = "avi",
       .seconds = 3,
       .encoder_args = "-c:v mpeg4 -q:v 4 -bf 2 -g 30"},
      {.name = "mpeg2_ps_bframes",
       .extension = "mpg",
       .seconds = 3,
       .encoder_args = "-c:v mpeg2video -q:v 4 -bf 2 -g 15"},
      {.name = "mpeg2_ts_bframes",
       .extension = "ts",
       .seconds = 3,
       .encoder_args = "-c:v mpeg2video -q:v 4 -bf 2 -g 15"},
      {.name = "mjpeg_avi", .extension = "avi", .seconds = 2, .encoder_args = "-c:v mjpeg -q:v 4"},
      {.name = "mjpeg_mov", .extension = "mov", .seconds = 2, .encoder_args = "-c:v mjpeg -q:v 4"},
  };
}

}  // namespace stoker::testing
