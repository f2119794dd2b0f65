// A reader across the life of a process and of its files: used in a parent, then in a forked
// child; its file rewritten or replaced while it is open. Never a hang, never another file's
// frames delivered as if they were this one's.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include "media/testing/sequential_decode.h"
#include "media/testing/test_videos.h"
#include "stoker/video_reader.h"

namespace stoker {
namespace {

namespace fs = std::filesystem;
using testing::make_test_video;

// An H.264 video with B-frames, large enough that reads go beyond the I/O buffer.
std::string h264_video() {
  auto path = make_test_video({.name = "lifecycle_h264",
                               .extension = "mp4",
                               .width = 320,
                               .height = 240,
                               .seconds = 4,
                               .encoder_args = "-c:v libx264 -preset veryfast -pix_fmt yuv420p "
                                               "-g 30 -bf 2 -x264-params scenecut=0"});
  EXPECT_TRUE(path.ok()) << path.status().message();
  return path.ok() ? *path : "";
}

std::string copy_of(const std::string& path, const std::string& name) {
  const fs::path copy = fs::path(testing::test_media_dir()) / name;
  fs::copy_file(path, copy, fs::copy_options::overwrite_existing);
  return copy.string();
}

// Whether the reader returns exactly the sequential decode's frames `indices`.
bool reads_exactly(const VideoReader& reader, const std::vector<std::vector<uint8_t>>& reference,
                   const std::vector<int64_t>& indices) {
  const size_t frame = reader.frame_bytes({});
  std::vector<uint8_t> out(indices.size() * frame);
  if (!reader.get_frames(indices, {}, out).ok()) return false;
  for (size_t k = 0; k < indices.size(); ++k) {
    if (!std::equal(reference[indices[k]].begin(), reference[indices[k]].end(),
                    out.begin() + k * frame)) {
      return false;
    }
  }
  return true;
}

// A reader warm in the parent (its container and a two-thread decoder pooled on this thread)
// is used in forked children: each reads exact frames with its own container and decoder,
// the parent's left untouched, and the parent goes on reading after them.
TEST(VideoReaderFork, ChildrenReadExactFramesWhateverTheParentHadOpen) {
  const std::string path = h264_video();
  auto reference = testing::decode_all_frames(path, {});
  ASSERT_TRUE(reference.ok());
  auto reader = VideoReader::open(path, {.threads = 2});
  ASSERT_TRUE(reader.ok());
  ASSERT_TRUE(reads_exactly(**reader, *reference, {40, 41, 42}));
  std::vector<pid_t> children;
  for (int child = 0; child < 3; ++child) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      alarm(60);  // a hang becomes a failure (SIGALRM), not a stuck test
      const bool ok = reads_exactly(**reader, *reference, {43, 44, 10 + child, 100, 119}) &&
                      reads_exactly(**reader, *reference, {0, 60 + child});
      _exit(ok ? 0 : 1);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status)) << "a child died of signal " << WTERMSIG(status);
    EXPECT_EQ(WEXITSTATUS(status), 0) << "a child read wrong frames";
  }
  EXPECT_TRUE(reads_exactly(**reader, *reference, {43, 44, 45, 1}));
}

// A file rewritten in place under an open reader (what `cp other this` does) is refused by
// name, not decoded into the other file's frames; a reader opened afterwards with the old
// table refuses it as stale.
TEST(VideoReaderChangedFile, RewrittenInPlaceIsRefused) {
  const std::string path = copy_of(h264_video(), "lifecycle_rewritten.mp4");
  auto reader = VideoReader::open(path);
  ASSERT_TRUE(reader.ok());
  std::vector<uint8_t> out((*reader)->frame_bytes({}));
  ASSERT_TRUE((*reader)->get_frames(std::vector<int64_t>{5}, {}, out).ok());

  // Same bytes, same inode, a new modification time: the version no longer matches.
  std::ifstream in(path, std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), {});
  in.close();
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  fs::last_write_time(path, fs::last_write_time(path) + std::chrono::seconds(2));

  const Status warm = (*reader)->get_frames(std::vector<int64_t>{6}, {}, out);
  EXPECT_EQ(warm.code(), StatusCode::kCorruptData);
  EXPECT_NE(warm.message().find(path), std::string::npos) << warm.message();
  EXPECT_NE(warm.message().find("changed"), std::string::npos) << warm.message();
  // On a thread with a cold cache, the reopened file is checked against the table.
  std::thread([&] {
    const Status cold = (*reader)->get_frames(std::vector<int64_t>{7}, {}, out);
    EXPECT_EQ(cold.code(), StatusCode::kCorruptData) << cold.message();
    EXPECT_NE(cold.message().find("changed since its frame table was made"), std::string::npos)
        << cold.message();
  }).join();
  auto reopened = VideoReader::open(path, {.frame_table = (*reader)->shared_frame_table()});
  EXPECT_FALSE(reopened.ok());
  EXPECT_NE(reopened.status().message().find("stale"), std::string::npos);
}

// A file replaced by rename keeps the open container reading the old, intact file; a thread
// that opens the path anew meets the new file and refuses it.
TEST(VideoReaderChangedFile, ReplacedByRenameIsRefusedWhereReopened) {
  const std::string path = copy_of(h264_video(), "lifecycle_renamed.mp4");
  auto other = make_test_video({.name = "lifecycle_other",
                                .extension = "mp4",
                                .width = 320,
                                .height = 240,
                                .seconds = 2,
                                .encoder_args = "-c:v libx264 -preset veryfast -pix_fmt yuv420p"});
  ASSERT_TRUE(other.ok());
  auto reference = testing::decode_all_frames(path, {});
  ASSERT_TRUE(reference.ok());
  auto reader = VideoReader::open(path);
  ASSERT_TRUE(reader.ok());
  ASSERT_TRUE(reads_exactly(**reader, *reference, {5}));
  const std::string incoming = copy_of(*other, "lifecycle_incoming.mp4");
  fs::rename(incoming, path);
  EXPECT_TRUE(reads_exactly(**reader, *reference, {6, 7}));  // the old file, still open
  std::thread([&] {
    std::vector<uint8_t> out((*reader)->frame_bytes({}));
    const Status cold = (*reader)->get_frames(std::vector<int64_t>{8}, {}, out);
    EXPECT_EQ(cold.code(), StatusCode::kCorruptData) << cold.message();
    EXPECT_NE(cold.message().find(path), std::string::npos) << cold.message();
  }).join();
}

}  // namespace
}  // namespace stoker
