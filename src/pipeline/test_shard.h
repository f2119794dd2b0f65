// The shard tests' dataset: a tar shard of JPEGs, captions, labels and json objects made by
// ffmpeg and tar, and the spec that reads it. Test-only.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "media/testing/test_videos.h"
#include "pipeline/batch_source.h"
#include "stoker/byte_source.h"
#include "stoker/shard_source.h"

namespace stoker::testing {

inline void write(const std::string& path, const std::string& bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

// A shard of `samples` samples s0, s1, ...: each a JPEG (ffmpeg's test pattern, its size
// varying), a caption, a label and a json object; sample `bad_label`'s label is no integer.
struct TestShard {
  std::string path;
  std::shared_ptr<const ShardSamples> samples;
};

inline TestShard make_shard(const std::string& name, int samples, int bad_label = -1) {
  const std::string folder =
      (std::filesystem::path(test_media_dir()) / (name + "-members")).string();
  std::filesystem::remove_all(folder);
  std::filesystem::create_directories(folder);
  std::string list;
  for (int k = 0; k < samples; ++k) {
    const std::string key = folder + "/s" + std::to_string(k);
    const Status encoded =
        run_command("ffmpeg -nostdin -y -loglevel error -f lavfi -i testsrc2=size=" +
                    std::to_string(64 + 8 * (k % 3)) + "x48 -frames:v 1 " + key + ".jpg");
    EXPECT_TRUE(encoded.ok()) << encoded.message();
    write(key + ".txt", "caption " + std::to_string(k) + " \xc3\xa9");
    write(key + ".cls", k == bad_label ? "seven" : std::to_string(k % 5));
    write(key + ".json",
          "{\"w\": " + std::to_string(100 + k) + ", \"url\": \"u" + std::to_string(k) + "\"}");
    for (const char* ext : {".cls", ".jpg", ".json", ".txt"}) {
      list += " s" + std::to_string(k) + ext;
    }
  }
  const std::string tar = (std::filesystem::path(test_media_dir()) / (name + ".tar")).string();
  const Status made =
      run_command("tar --format=gnu --mtime=@0 -C " + folder + " -cf " + tar + list);
  EXPECT_TRUE(made.ok()) << made.message();

  auto source = open_file_source(tar);
  EXPECT_TRUE(source.ok());
  auto index = ShardIndex::scan(**source);
  EXPECT_TRUE(index.ok());
  auto shard =
      ShardSamples::group({tar}, {std::make_shared<const ShardIndex>(std::move(index).value())});
  EXPECT_TRUE(shard.ok()) << shard.status().message();
  return TestShard{tar, *shard};
}

// The spec: image (jpg, 32x32 uint8 NCHW), caption, label and json (w int64, url str).
inline std::vector<ShardField> shard_spec() {
  auto field = [&](std::string name, ShardFieldKind kind, std::string member) {
    ShardField f;
    f.name = std::move(name);
    f.kind = kind;
    f.alternatives = {std::move(member)};
    return f;
  };
  ShardField image = field("image", ShardFieldKind::kImage, "jpg");
  image.transform.resize_height = image.transform.resize_width = 32;
  image.height = image.width = 32;
  ShardField json = field("meta", ShardFieldKind::kJson, "json");
  json.json_keys = {{"w", "int64"}, {"url", "str"}};
  return {image, field("caption", ShardFieldKind::kText, "txt"),
          field("label", ShardFieldKind::kLabel, "cls"), json};
}

// A Loader of a shard dataset's source.
inline Result<std::unique_ptr<Loader>> shard_loader(
    std::shared_ptr<const ShardSamples> samples, std::vector<ShardField> fields,
    std::shared_ptr<const sampling::Sampler> sampler, const LoaderOptions& options) {
  STOKER_ASSIGN_OR_RETURN(
      std::unique_ptr<pipeline::BatchSource> source,
      make_shard_source(std::move(samples), std::move(fields), std::move(sampler), options));
  return Loader::create(std::move(source), options);
}

}  // namespace stoker::testing
