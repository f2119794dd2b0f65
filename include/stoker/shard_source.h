// Batches of a dataset of tar shards (WebDataset's layout) built by the Loader: what each
// sample's members are, which fields to decode from them, and the factory that makes the
// Loader.
//
// A sample is a run of members of one shard sharing a key (stoker/shards.py groups them; a
// ShardIndex lists them). Each field of the spec names the member each sample reads (one of
// its alternatives, e.g. jpg or png), resolved once when the dataset is opened. A batch reads
// the members of its samples by ranged reads (one per run of a shard's samples in the batch,
// each member's tar header checked against the index), and decodes them on the Loader's
// threads straight into the batch: images with the transform, clips by the video decoder,
// labels, token lengths and json numbers into fixed-size arrays; text, json strings, tokens
// and .npy arrays into the batch's columns (Batch::columns()), each one byte arena.
//
// Ownership: the Loader shares the ShardSamples; the fields are copied.
// Thread-safety: plain values.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "stoker/image_transform.h"
#include "stoker/loader.h"
#include "stoker/sampling.h"
#include "stoker/shard_index.h"
#include "stoker/status.h"
#include "stoker/video_reader.h"

namespace stoker {

/// The samples of a shard dataset: per shard its URL and index, per sample its shard and the
/// first of its members (whose name gives the sample's key).
struct ShardSamples {
  std::vector<std::string> urls;
  std::vector<std::shared_ptr<const ShardIndex>> indexes;
  std::vector<int32_t> sample_shard;
  std::vector<int32_t> sample_first_member;
  /// Samples that cannot be read, and why (a field read twice): sorted by sample.
  std::vector<std::pair<int64_t, std::string>> bad_samples;
};

enum class ShardFieldKind { kImage, kClip, kText, kLabel, kTokens, kArray, kJson };

/// One field of the spec.
struct ShardField {
  std::string name;  // the batch's name for it
  ShardFieldKind kind = ShardFieldKind::kImage;
  std::vector<std::string> alternatives;  // the member fields it reads, first found first
  std::vector<int32_t> members;           // per sample: its member's number in its shard, -1
  // kImage: the transform, and the size and layout it gives.
  TransformOptions transform;
  int height = 0, width = 0;
  // kClip: the frames, their size and layout (kNCHW: [T, 3, H, W]; kNHWC: [T, H, W, 3]).
  std::vector<int64_t> frames;
  Layout layout = Layout::kNCHW;
  // kTokens: the pad value, and the most tokens kept (0: all).
  int64_t pad = 0;
  int64_t max_length = 0;
  // kJson: (key, type) per column: "int64", "float64", "float32", "bool" or "str".
  std::vector<std::pair<std::string, std::string>> json_keys;
};

/// A Loader of `samples`' fields, `sampler` giving this rank's ids per epoch (a
/// ShardStreamSampler, usually). Under ErrorPolicy::kSkip a failing sample is replaced by one
/// drawn from (seed, epoch, sample) among all samples, as for every dataset kind. Errors
/// (kInvalidArgument): bad options, a field with no members or a bad size, a sampler over
/// another number of samples; and Loader::create's.
Result<std::unique_ptr<Loader>> create_shard_loader(
    std::shared_ptr<const ShardSamples> samples, std::vector<ShardField> fields,
    std::shared_ptr<const sampling::Sampler> sampler, const LoaderOptions& options);

}  // namespace stoker
