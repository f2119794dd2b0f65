// Batches of a dataset of tar shards (WebDataset's layout) built by the Loader: what each
// sample's members are, which fields to decode from them, and the factory of its source.
//
// A sample is a run of members of one shard sharing a key (ShardSamples groups them). Each
// field of the spec reads, per sample, the member of the first of its alternatives the sample
// has (e.g. jpg or png); a sample that has a field it reads twice fails. A batch reads
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
#include "stoker/shard_samples.h"
#include "stoker/status.h"
#include "stoker/video_reader.h"

namespace stoker {

enum class ShardFieldKind { kImage, kClip, kText, kLabel, kTokens, kArray, kJson };

/// One field of the spec.
struct ShardField {
  std::string name;  // the batch's name for it
  ShardFieldKind kind = ShardFieldKind::kImage;
  std::vector<std::string> alternatives;  // the member fields it reads, first found first
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

/// The source of batches of `samples`' fields, for Loader::create(source, options); `sampler`
/// gives this rank's ids per epoch (a ShardStreamSampler, usually). Under ErrorPolicy::kSkip a
/// failing sample is replaced by one drawn from (seed, epoch, sample) among all samples, as for
/// every dataset kind. Errors (kInvalidArgument): a batch size below 1, no samples, a field with
/// no alternatives or a bad size.
Result<std::unique_ptr<pipeline::BatchSource>> make_shard_source(
    std::shared_ptr<const ShardSamples> samples, std::vector<ShardField> fields,
    std::shared_ptr<const sampling::Sampler> sampler, const LoaderOptions& options);

}  // namespace stoker
