#include "core/file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

namespace stoker::core {
namespace {

std::string fresh_folder(const std::string& name) {
  const auto folder = std::filesystem::temp_directory_path() /
                      ("stoker-file-test-" + std::to_string(::getpid())) / name;
  std::filesystem::remove_all(folder);
  std::filesystem::create_directories(folder);
  return folder.string();
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::span<const uint8_t> bytes_of(const std::string& text) {
  return {reinterpret_cast<const uint8_t*>(text.data()), text.size()};
}

size_t entries_in(const std::string& folder) {
  return static_cast<size_t>(std::distance(std::filesystem::directory_iterator(folder), {}));
}

TEST(File, StatGivesSizeAndRefusesWhatIsNotAFile) {
  const std::string folder = fresh_folder("stat");
  const std::string path = folder + "/five.txt";
  std::ofstream(path) << "12345";
  auto identity = stat_file(path);
  ASSERT_TRUE(identity.ok()) << identity.status().message();
  EXPECT_EQ(identity->size, 5);
  EXPECT_GT(identity->mtime_ns, 0);
  EXPECT_EQ(stat_file(folder + "/missing").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(stat_file(folder).status().code(), StatusCode::kInvalidArgument);
}

// A NUL byte cut the path where the OS reads it: "a.mp4\0b" opened "a.mp4".
TEST(File, PathsWithANulByteAreRefused) {
  const std::string folder = fresh_folder("nul");
  std::ofstream(folder + "/a.mp4") << "x";
  const std::string cut = folder + "/a.mp4" + std::string(1, '\0') + "b";
  EXPECT_EQ(stat_file(cut).status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(stat_file(cut).status().message().find("NUL"), std::string::npos);
  EXPECT_EQ(MappedFile::open(cut).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(write_file_atomically(cut, bytes_of("y")).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(stat_file("").status().code(), StatusCode::kInvalidArgument);
}

TEST(File, AtomicWriteReplacesByRenameLeavingNoTemporaryFile) {
  const std::string folder = fresh_folder("atomic");
  const std::string path = folder + "/index.bin";
  ASSERT_TRUE(write_file_atomically(path, bytes_of("the first version")).ok());
  EXPECT_EQ(read_text(path), "the first version");

  // A reader that mapped the old file keeps reading the old bytes: the file is replaced, not
  // truncated in place (which would make the reader's pages vanish under it).
  auto mapped = MappedFile::open(path);
  ASSERT_TRUE(mapped.ok()) << mapped.status().message();
  ASSERT_TRUE(write_file_atomically(path, bytes_of("v2")).ok());
  EXPECT_EQ(read_text(path), "v2");
  const auto old = (*mapped)->bytes();
  EXPECT_EQ(std::string(old.begin(), old.end()), "the first version");
  EXPECT_EQ(entries_in(folder), 1u);
}

TEST(File, AtomicWriteIntoAMissingFolderFailsCleanly) {
  const std::string folder = fresh_folder("missing-folder");
  const Status status = write_file_atomically(folder + "/not/there/index.bin", bytes_of("x"));
  EXPECT_EQ(status.code(), StatusCode::kNotFound);
  EXPECT_NE(status.message().find("not/there/index.bin"), std::string::npos) << status.message();
  EXPECT_EQ(entries_in(folder), 0u);
}

TEST(File, CommitMovesAFinishedFileIntoPlace) {
  const std::string folder = fresh_folder("commit");
  std::ofstream(folder + "/video.mp4.partial") << "finished";
  std::ofstream(folder + "/video.mp4") << "an old file";
  ASSERT_TRUE(commit_file(folder + "/video.mp4.partial", folder + "/video.mp4").ok());
  EXPECT_EQ(read_text(folder + "/video.mp4"), "finished");
  EXPECT_FALSE(std::filesystem::exists(folder + "/video.mp4.partial"));
  EXPECT_EQ(commit_file(folder + "/gone.partial", folder + "/gone").code(), StatusCode::kNotFound);
}

TEST(File, MappingAnEmptyAndAMissingFile) {
  const std::string folder = fresh_folder("map");
  std::ofstream(folder + "/empty");
  auto empty = MappedFile::open(folder + "/empty");
  ASSERT_TRUE(empty.ok()) << empty.status().message();
  EXPECT_TRUE((*empty)->bytes().empty());
  auto missing = MappedFile::open(folder + "/missing");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find(folder + "/missing"), std::string::npos);
}

// Pages resident in this process (mapped files included), from /proc/self/statm.
int64_t resident_pages() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident;
}

TEST(File, ReleasingAMappingsPagesShrinksTheResidentSetAndKeepsTheBytes) {
  const std::string folder = fresh_folder("release");
  std::string text(32 << 20, '\0');
  for (size_t i = 0; i < text.size(); ++i) text[i] = static_cast<char>(i * 2654435761u >> 24);
  ASSERT_TRUE(write_file_atomically(folder + "/big", bytes_of(text)).ok());
  auto mapped = MappedFile::open(folder + "/big");
  ASSERT_TRUE(mapped.ok()) << mapped.status().message();
  const auto bytes = (*mapped)->bytes();
  const int64_t before = resident_pages();
  uint64_t sum = 0;
  for (uint8_t b : bytes) sum += b;  // a checksum's pass: every page touched
  const int64_t touched = resident_pages();
  const int64_t pages = static_cast<int64_t>(bytes.size() / ::sysconf(_SC_PAGESIZE));
  EXPECT_GT(touched - before, pages * 3 / 4);
  (*mapped)->release_resident();
  EXPECT_LT(resident_pages() - before, pages / 4);
  // The bytes are still there, read again from the page cache.
  uint64_t again = 0;
  for (uint8_t b : bytes) again += b;
  EXPECT_EQ(again, sum);
  EXPECT_EQ(std::memcmp(bytes.data(), text.data(), text.size()), 0);
}

}  // namespace
}  // namespace stoker::core
