#include "stoker/byte_source.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <numeric>
#include <thread>

namespace stoker {
namespace {

std::string temporary_path(const std::string& name) {
  const auto folder =
      std::filesystem::temp_directory_path() / ("stoker-io-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(folder);
  return (folder / name).string();
}

std::vector<uint8_t> counting_bytes(size_t n) {
  std::vector<uint8_t> bytes(n);
  std::iota(bytes.begin(), bytes.end(), uint8_t{7});
  return bytes;
}

std::string write_file(const std::string& name, const std::vector<uint8_t>& bytes) {
  const std::string path = temporary_path(name);
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  return path;
}

// What every source must do: whole, partial and past-the-end reads, and a bad offset.
void expect_reads_like(const ByteSource& source, const std::vector<uint8_t>& bytes) {
  ASSERT_EQ(source.size(), static_cast<int64_t>(bytes.size()));
  std::vector<uint8_t> out(bytes.size());
  auto whole = source.read_at(0, out);
  ASSERT_TRUE(whole.ok()) << whole.status().message();
  EXPECT_EQ(*whole, bytes.size());
  EXPECT_EQ(out, bytes);

  std::vector<uint8_t> middle(100);
  ASSERT_EQ(*source.read_at(1000, middle), 100u);
  EXPECT_TRUE(std::equal(middle.begin(), middle.end(), bytes.begin() + 1000));

  std::vector<uint8_t> tail(64);
  ASSERT_EQ(*source.read_at(source.size() - 10, tail), 10u);  // a short read at the end
  EXPECT_TRUE(std::equal(tail.begin(), tail.begin() + 10, bytes.end() - 10));
  EXPECT_EQ(*source.read_at(source.size(), tail), 0u);
  EXPECT_EQ(*source.read_at(source.size() + 5, tail), 0u);

  auto negative = source.read_at(-1, tail);
  EXPECT_EQ(negative.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(negative.status().message().find(source.name()), std::string::npos);
}

TEST(FileSource, ReadsAtAnyOffset) {
  const auto bytes = counting_bytes(5000);
  const std::string path = write_file("plain.bin", bytes);
  auto source = open_file_source(path);
  ASSERT_TRUE(source.ok()) << source.status().message();
  EXPECT_EQ((*source)->name(), path);
  expect_reads_like(**source, bytes);
}

TEST(FileSource, ThreadsReadAtOnceWithoutSharingAPosition) {
  const auto bytes = counting_bytes(1 << 16);
  auto opened = open_file_source(write_file("shared.bin", bytes));
  ASSERT_TRUE(opened.ok());
  const ByteSource& source = **opened;
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::vector<uint8_t> out(997);
      for (int64_t offset = t * 13; offset + 997 <= source.size(); offset += 4001) {
        auto got = source.read_at(offset, out);
        if (!got.ok() || *got != out.size() ||
            !std::equal(out.begin(), out.end(), bytes.begin() + offset)) {
          ++mismatches;
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(FileSource, MissingFileAndFolderAreRefusedByName) {
  const std::string missing = temporary_path("no-such-file.bin");
  auto source = open_file_source(missing);
  EXPECT_EQ(source.status().code(), StatusCode::kNotFound);
  EXPECT_NE(source.status().message().find(missing), std::string::npos);

  const std::string folder = temporary_path("a-folder");
  std::filesystem::create_directories(folder);
  auto not_a_file = open_file_source(folder);
  EXPECT_EQ(not_a_file.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(not_a_file.status().message().find("not a regular file"), std::string::npos);
}

TEST(MemorySource, ReadsLikeAFile) {
  const auto bytes = counting_bytes(5000);
  auto source = memory_source("memory:counting", bytes);
  EXPECT_EQ(source->name(), "memory:counting");
  expect_reads_like(*source, bytes);
}

TEST(MemorySource, TheOwnerKeepsTheBytesAlive) {
  auto held = std::make_shared<std::vector<uint8_t>>(counting_bytes(3000));
  const std::vector<uint8_t> copy = *held;
  auto source = memory_source("memory:owned", std::span<const uint8_t>(*held), held);
  held.reset();  // the source is the bytes' last owner now
  expect_reads_like(*source, copy);
}

}  // namespace
}  // namespace stoker
