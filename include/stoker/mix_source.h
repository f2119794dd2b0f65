// Batches of several datasets read as one (a mix), built by one Loader: one pool of buffers,
// one scheduler, one set of threads, whatever the datasets' kinds (a LeRobot dataset mixed with
// tar shards too).
//
// Each dataset is a part: its source (make_episode_part, make_shard_part) built for the mix's
// batch size. The mix's sample ids lay the parts end to end (part k's sample i is id
// offsets[k] + i); its sampler (a MixSampler) draws them, so each slot of a batch is an
// independent weighted draw. Every slot is planned and decoded by its part, straight into
// the mix's buffer, whose fields are the union of the parts' (computed once from their
// fields, without decoding):
//   - a field the parts share must agree in dtype and shape; a slot of a part that lacks a
//     field holds zeros there;
//   - a key some parts lack (a field, a column, or a key the part's front adds, front_keys)
//     gets a mask `<key>_is_pad`, [batch] bool, true in the slots of the parts that lack it;
//     a windowed key's own [batch, T] mask is all true there instead;
//   - `dataset_index`, [batch] int64: the part of each slot.
// The batch's samples() and episodes() are each slot's part's (its row, its episode or shard).
// Columns (text, json strings, arrays) are merged by slot: empty strings, or zero arrays,
// where a slot's part lacks one, marked by the key's mask. A skipped sample is replaced by
// one of its own part, drawn as that part's source draws replacements.
//
// Ownership: the Loader owns the parts' sources.
// Thread-safety: plain values and factories.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "stoker/episode_index.h"
#include "stoker/episode_source.h"
#include "stoker/image_transform.h"
#include "stoker/loader.h"
#include "stoker/sampling.h"
#include "stoker/shard_source.h"
#include "stoker/status.h"
#include "stoker/window_plan.h"

namespace stoker {

/// One dataset of a mix.
struct MixPart {
  MixPart();
  MixPart(MixPart&&) noexcept;
  MixPart& operator=(MixPart&&) noexcept;
  ~MixPart();

  std::unique_ptr<pipeline::BatchSource> source;
  /// The part's sample i is the source's sample rows[i] (a dataset of some episodes' rows);
  /// empty: the source's sample i.
  std::vector<int64_t> rows;
  /// Keys the part's front adds to each sample beyond the source's fields and columns (a
  /// LeRobot dataset's task, index, timestamp, ...): they count when masks are decided.
  std::vector<std::string> front_keys;
  /// Names the part in errors ("dataset 1 (<name>)").
  std::string name;
};

/// A dataset of episodes as a part, as make_episode_source would read it; the part's samples
/// are `episode.replacement_rows` when given (a dataset of some episodes), else every row.
/// Errors: as make_episode_source's.
Result<MixPart> make_episode_part(std::shared_ptr<const EpisodeIndex> index,
                                  std::vector<WindowKey> keys,
                                  std::shared_ptr<const ImageTransform> transform,
                                  const LoaderOptions& options, EpisodeOptions episode = {});

/// A dataset of tar shards as a part, as make_shard_source would read it. Errors: as
/// make_shard_source's.
Result<MixPart> make_shard_part(std::shared_ptr<const ShardSamples> samples,
                                std::vector<ShardField> fields, const LoaderOptions& options);

/// The source of batches of `parts` as one dataset, for Loader::create(source, options);
/// `sampler` gives this rank's ids over all the parts' samples (a MixSampler). Each part's
/// source must have been made with `options`' batch size. Errors: kInvalidArgument (no part, a
/// part without a source, another batch size, a sampler over another number of samples, a
/// name a mix keeps for itself); kCorruptData naming both datasets and the key, where two parts
/// give one field different dtypes or shapes.
Result<std::unique_ptr<pipeline::BatchSource>> make_mix_source(
    std::vector<MixPart> parts, std::shared_ptr<const sampling::Sampler> sampler,
    const LoaderOptions& options);

}  // namespace stoker
