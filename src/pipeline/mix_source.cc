#include "pipeline/mix_source.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <utility>

#include "pipeline/episode_source.h"
#include "pipeline/shard_source.h"

namespace stoker {

MixPart::MixPart() = default;
MixPart::MixPart(MixPart&&) noexcept = default;
MixPart& MixPart::operator=(MixPart&&) noexcept = default;
MixPart::~MixPart() = default;

}  // namespace stoker

namespace stoker::pipeline {
namespace {

constexpr const char* kDatasetIndex = "dataset_index";
constexpr const char* kPadSuffix = "_is_pad";

bool is_mask(const std::string& name) {
  return name.size() > std::strlen(kPadSuffix) &&
         name.compare(name.size() - std::strlen(kPadSuffix), std::string::npos, kPadSuffix) == 0;
}

std::string describe(const BatchField& field) {
  std::string shape;
  for (size_t d = 1; d < field.shape.size(); ++d) {
    shape += (shape.empty() ? "" : ", ") + std::to_string(field.shape[d]);
  }
  return std::string(dtype_name(field.type)) + " [" + shape + "]";
}

Status invalid(const std::string& why) {
  return Status(StatusCode::kInvalidArgument, "mix: " + why);
}

}  // namespace

Result<std::unique_ptr<MixSource>> MixSource::create(
    std::vector<MixPart> parts, std::shared_ptr<const sampling::Sampler> sampler,
    const LoaderOptions& options) {
  if (parts.empty()) return invalid("a mix needs at least one dataset");
  if (sampler == nullptr) return invalid("a sampler is needed");
  for (size_t k = 0; k < parts.size(); ++k) {
    if (parts[k].source == nullptr)
      return invalid("dataset " + std::to_string(k) + " has no source");
  }
  std::unique_ptr<MixSource> mix(new MixSource(std::move(parts), std::move(sampler), options));
  STOKER_RETURN_IF_ERROR(mix->lay_out());
  return mix;
}

MixSource::MixSource(std::vector<MixPart> parts, std::shared_ptr<const sampling::Sampler> sampler,
                     const LoaderOptions& options)
    : parts_(std::move(parts)), sampler_(std::move(sampler)), options_(options) {
  offsets_.push_back(0);
  for (const MixPart& part : parts_) {
    const int64_t size =
        part.rows.empty() ? part.source->num_samples() : static_cast<int64_t>(part.rows.size());
    offsets_.push_back(offsets_.back() + size);
  }
}

// The union of the parts' fields, the masks and dataset_index, laid out; each part's fields
// placed there.
Status MixSource::lay_out() {
  const int64_t batch = options_.batch_size;
  auto named = [&](size_t k) {
    return "dataset " + std::to_string(k) +
           (parts_[k].name.empty() ? "" : " (" + parts_[k].name + ")");
  };
  std::vector<BatchField> fields;
  std::map<std::string, size_t> field_of;
  std::vector<size_t> owner;
  std::vector<std::set<std::string>> keys(parts_.size());  // per part: the keys it gives
  std::vector<std::string> all_keys;
  auto add_key = [&](size_t k, const std::string& key) {
    if (key == kDatasetIndex) {
      return invalid(named(k) + " has a key '" + key + "': a mix keeps that name for itself");
    }
    if (std::find(all_keys.begin(), all_keys.end(), key) == all_keys.end()) all_keys.push_back(key);
    keys[k].insert(key);
    return Status();
  };
  part_fields_.assign(parts_.size(), {});
  for (size_t k = 0; k < parts_.size(); ++k) {
    for (const BatchField& field : *parts_[k].source->fields()) {
      if (field.shape.empty() || field.shape[0] != batch) {
        return invalid(named(k) + "'s source was made for another batch size than " +
                       std::to_string(batch));
      }
      if (!is_mask(field.name)) STOKER_RETURN_IF_ERROR(add_key(k, field.name));
      const auto found = field_of.find(field.name);
      if (found == field_of.end()) {
        field_of[field.name] = fields.size();
        part_fields_[k].push_back(fields.size());
        fields.push_back(field);
        owner.push_back(k);
        continue;
      }
      const BatchField& first = fields[found->second];
      if (first.type != field.type || first.shape != field.shape) {
        return Status(StatusCode::kCorruptData,
                      "mix: " + named(owner[found->second]) + " and " + named(k) +
                          " disagree on key '" + field.name + "': " + describe(first) +
                          " against " + describe(field) +
                          " (give their specs one size, dtype and window)");
      }
      part_fields_[k].push_back(found->second);
    }
    for (const std::string& name : parts_[k].source->column_names()) {
      STOKER_RETURN_IF_ERROR(add_key(k, name));
      if (std::find(column_names_.begin(), column_names_.end(), name) == column_names_.end()) {
        column_names_.push_back(name);
      }
    }
    for (const std::string& name : parts_[k].front_keys) STOKER_RETURN_IF_ERROR(add_key(k, name));
  }
  for (const std::string& key : all_keys) {
    if (key.rfind("__", 0) == 0) continue;  // a sample's own name (__key__): no mask
    const bool everywhere = std::all_of(keys.begin(), keys.end(),
                                        [&](const auto& part) { return part.count(key) > 0; });
    const std::string mask = key + kPadSuffix;
    if (everywhere || field_of.count(mask) > 0) continue;
    field_of[mask] = fields.size();
    fields.push_back(BatchField{.name = mask, .type = DType::kBool, .shape = {batch}});
  }
  dataset_index_field_ = fields.size();
  fields.push_back(BatchField{.name = kDatasetIndex, .type = DType::kInt64, .shape = {batch}});

  std::vector<size_t> offsets(fields.size());
  size_t offset = 0;
  for (size_t f = 0; f < fields.size(); ++f) {
    BatchField& field = fields[f];
    field.bytes = dtype_size(field.type);
    for (int64_t dim : field.shape) field.bytes *= static_cast<size_t>(dim);
    offset = aligned(offset);
    offsets[f] = offset;
    offset += field.bytes;
  }
  fields_ = std::make_shared<const std::vector<BatchField>>(std::move(fields));
  place_fields(offsets, std::max<size_t>(aligned(offset), 64));

  // The fields some part lacks: zeros there, or for a mask, whether the part lacks its key.
  for (size_t f = 0; f < fields_->size(); ++f) {
    if (f == dataset_index_field_) continue;
    Filler filler{.field = f, .value_per_part = {}, .part_has = {}};
    for (size_t k = 0; k < parts_.size(); ++k) {
      const auto& mine = part_fields_[k];
      const bool has = std::find(mine.begin(), mine.end(), f) != mine.end();
      const std::string& name = (*fields_)[f].name;
      const bool lacks_key = is_mask(name) && keys[k].count(name.substr(
                                                  0, name.size() - std::strlen(kPadSuffix))) == 0;
      filler.part_has.push_back(has);
      filler.value_per_part.push_back(lacks_key ? 1 : 0);
    }
    if (std::find(filler.part_has.begin(), filler.part_has.end(), false) != filler.part_has.end()) {
      fillers_.push_back(std::move(filler));
    }
  }
  return Status();
}

void MixSource::place_fields(const std::vector<size_t>& offsets, size_t batch_bytes) {
  fields_ = placed_at(*fields_, offsets);
  batch_bytes_ = batch_bytes;
  for (size_t k = 0; k < parts_.size(); ++k) {
    std::vector<size_t> placed;
    for (size_t f : part_fields_[k]) placed.push_back(offsets[f]);
    parts_[k].source->place_fields(placed, batch_bytes);
  }
}

std::unique_ptr<BatchWork> MixSource::new_work(uint32_t epoch, int64_t index,
                                               std::shared_ptr<PooledBatch> batch) const {
  return std::make_unique<MixWork>(epoch, index, std::move(batch));
}

Status MixSource::plan(BatchWork& work) {
  const Clock::time_point start = core::now();
  std::vector<int64_t> ids(work.batch->size());
  Status status = sampler_->fill(work.epoch, work.index * options_.batch_size, ids);
  sampling_ns_ += nanoseconds_since(start);
  STOKER_RETURN_IF_ERROR(status);
  std::vector<int64_t> slots(ids.size());
  std::iota(slots.begin(), slots.end(), 0);
  return plan_samples(work, std::move(slots), ids);
}

Status MixSource::plan_samples(BatchWork& base, std::vector<int64_t> slots,
                               std::span<const int64_t> ids) {
  auto& work = static_cast<MixWork&>(base);  // made by new_work()
  PooledBatch& batch = *work.batch;
  const int64_t size = batch.size();
  work.part_of_slot.assign(size, -1);
  work.place_in_part.assign(size, -1);
  std::vector<std::vector<int64_t>> part_slots(parts_.size()), part_samples(parts_.size());
  for (size_t k = 0; k < slots.size(); ++k) {
    const int64_t id = ids[k];
    if (id < 0 || id >= offsets_.back()) {
      return invalid("the sampler gave sample " + std::to_string(id) + ", outside the mix's " +
                     std::to_string(offsets_.back()));
    }
    const auto part = static_cast<size_t>(std::upper_bound(offsets_.begin(), offsets_.end(), id) -
                                          offsets_.begin() - 1);
    const int64_t local = id - offsets_[part];
    work.part_of_slot[slots[k]] = static_cast<int32_t>(part);
    work.place_in_part[slots[k]] = static_cast<int64_t>(part_slots[part].size());
    part_slots[part].push_back(slots[k]);
    part_samples[part].push_back(parts_[part].rows.empty() ? local : parts_[part].rows[local]);
  }
  work.parts.resize(parts_.size());
  for (size_t k = 0; k < parts_.size(); ++k) {
    if (part_slots[k].empty()) continue;
    work.parts[k] = parts_[k].source->new_work(work.epoch, work.index, work.batch);
    STOKER_RETURN_IF_ERROR(
        parts_[k].source->plan_samples(*work.parts[k], part_slots[k], part_samples[k]));
  }
  const Clock::time_point start = core::now();
  auto* dataset_index = reinterpret_cast<int64_t*>(batch.data(dataset_index_field_));
  for (int64_t slot : slots) {
    dataset_index[slot] = work.part_of_slot[slot];
    for (const Filler& filler : fillers_) {
      const size_t part = work.part_of_slot[slot];
      if (filler.part_has[part]) continue;
      const BatchField& field = (*fields_)[filler.field];
      const size_t stride = field.bytes / static_cast<size_t>(field.shape[0]);
      std::memset(batch.data(filler.field) + slot * stride, filler.value_per_part[part], stride);
    }
  }
  collate_ns_ += nanoseconds_since(start);
  work.slots = std::move(slots);
  return Status();
}

std::vector<ReadGroup> MixSource::group_reads(BatchWork& base) {
  auto& work = static_cast<MixWork&>(base);
  std::vector<ReadGroup> groups;
  for (size_t k = 0; k < parts_.size(); ++k) {
    if (work.parts[k] == nullptr) continue;
    std::vector<ReadGroup> mine = parts_[k].source->group_reads(*work.parts[k]);
    std::move(mine.begin(), mine.end(), std::back_inserter(groups));
  }
  return groups;
}

void MixSource::prefetch(BatchWork& base, const std::vector<ReadGroup>& groups) {
  auto& work = static_cast<MixWork&>(base);
  std::vector<std::vector<ReadGroup>> per_part(parts_.size());
  for (const ReadGroup& group : groups) per_part[work.part_of_slot[group[0].slot]].push_back(group);
  for (size_t k = 0; k < parts_.size(); ++k) {
    if (!per_part[k].empty()) parts_[k].source->prefetch(*work.parts[k], per_part[k]);
  }
}

void MixSource::decode_group(BatchWork& base, const ReadGroup& group) {
  auto& work = static_cast<MixWork&>(base);
  const size_t part = work.part_of_slot[group[0].slot];
  parts_[part].source->decode_group(*work.parts[part], group);
}

Status MixSource::finish(BatchWork& base) {
  auto& work = static_cast<MixWork&>(base);
  for (size_t k = 0; k < parts_.size(); ++k) {
    if (work.parts[k] == nullptr) continue;
    const std::string context = "dataset " + std::to_string(k) +
                                (parts_[k].name.empty() ? "" : " (" + parts_[k].name + ")");
    Status status = parts_[k].source->finish(*work.parts[k]);
    if (!status.ok()) return status.with_context(context);
    for (SkipRecord& skip : work.parts[k]->skips) {
      skip.reason = context + ": " + skip.reason;
      work.skips.push_back(std::move(skip));
    }
  }
  const Clock::time_point start = core::now();
  Status merged = merge_columns(work);
  collate_ns_ += nanoseconds_since(start);
  return merged;
}

// The parts' columns as the batch's, entry by slot: a slot's part's entry, or an empty string
// or zeros where its part lacks the column.
Status MixSource::merge_columns(MixWork& work) const {
  const int64_t size = work.batch->size();
  for (const std::string& name : column_names_) {
    std::vector<const BatchColumn*> of_part(parts_.size(), nullptr);
    const BatchColumn* first = nullptr;
    size_t first_part = 0;
    for (size_t k = 0; k < parts_.size(); ++k) {
      if (work.parts[k] == nullptr) continue;
      for (const BatchColumn& column : work.parts[k]->columns) {
        if (column.name != name) continue;
        of_part[k] = &column;
        if (first == nullptr) {
          first = &column;
          first_part = k;
        } else if (column.strings != first->strings || column.type != first->type ||
                   (!column.strings && !std::equal(column.shape.begin() + 1, column.shape.end(),
                                                   first->shape.begin() + 1, first->shape.end()))) {
          return Status(StatusCode::kCorruptData,
                        "mix: datasets " + std::to_string(first_part) + " and " +
                            std::to_string(k) + " give '" + name +
                            "' values of different kinds or shapes in batch " +
                            std::to_string(work.index) + " of epoch " + std::to_string(work.epoch));
        }
      }
    }
    BatchColumn merged{.name = name};
    if (first == nullptr || first->strings) {  // no slot's part has it: empty strings
      merged.strings = true;
      merged.offsets.push_back(0);
      for (int64_t slot = 0; slot < size; ++slot) {
        const BatchColumn* column = of_part[work.part_of_slot[slot]];
        if (column != nullptr) {
          const int64_t entry = work.place_in_part[slot];
          merged.bytes.insert(merged.bytes.end(), column->bytes.begin() + column->offsets[entry],
                              column->bytes.begin() + column->offsets[entry + 1]);
        }
        merged.offsets.push_back(static_cast<int64_t>(merged.bytes.size()));
      }
    } else {
      merged.type = first->type;
      merged.shape = first->shape;
      merged.shape[0] = size;
      size_t row = dtype_size(first->type);
      for (size_t d = 1; d < first->shape.size(); ++d) row *= static_cast<size_t>(first->shape[d]);
      merged.bytes.assign(row * static_cast<size_t>(size), 0);
      for (int64_t slot = 0; slot < size; ++slot) {
        const BatchColumn* column = of_part[work.part_of_slot[slot]];
        if (column == nullptr) continue;
        std::memcpy(merged.bytes.data() + slot * row,
                    column->bytes.data() + work.place_in_part[slot] * row, row);
      }
    }
    work.columns.push_back(std::move(merged));
  }
  return Status();
}

BuildStats MixSource::stats() const {
  BuildStats s;
  for (const MixPart& part : parts_) {
    const BuildStats p = part.source->stats();
    s.sampling_s += p.sampling_s;
    s.index_s += p.index_s;
    s.decode_s += p.decode_s;
    s.transform_s += p.transform_s;
    s.collate_s += p.collate_s;
    s.decode += p.decode;
    s.decode_calls += p.decode_calls;
    s.bytes_read += p.bytes_read;
  }
  s.sampling_s += sampling_ns_.load() * 1e-9;
  s.collate_s += collate_ns_.load() * 1e-9;
  return s;
}

void MixSource::reset_stats() {
  for (const MixPart& part : parts_) part.source->reset_stats();
  sampling_ns_ = 0;
  collate_ns_ = 0;
}

}  // namespace stoker::pipeline

namespace stoker {

namespace {

// The sampler a part is made with: the mix plans its slots, so it draws nothing.
Result<std::shared_ptr<const sampling::Sampler>> unused_sampler(int64_t samples) {
  STOKER_ASSIGN_OR_RETURN(
      std::unique_ptr<sampling::DistributedSampler> sampler,
      sampling::DistributedSampler::create(std::max<int64_t>(samples, 1), {.shuffle = false}));
  return std::shared_ptr<const sampling::Sampler>(std::move(sampler));
}

}  // namespace

Result<MixPart> make_episode_part(std::shared_ptr<const EpisodeIndex> index,
                                  std::vector<WindowKey> keys,
                                  std::shared_ptr<const ImageTransform> transform,
                                  const LoaderOptions& options, EpisodeOptions episode) {
  if (index == nullptr) return Status(StatusCode::kInvalidArgument, "mix: an index is needed");
  STOKER_ASSIGN_OR_RETURN(std::shared_ptr<const sampling::Sampler> sampler,
                          unused_sampler(index->num_rows()));
  MixPart part;
  part.rows = episode.replacement_rows;  // the part's samples: its rows
  STOKER_ASSIGN_OR_RETURN(part.source,
                          make_episode_source(std::move(index), std::move(keys), std::move(sampler),
                                              std::move(transform), options, std::move(episode)));
  return part;
}

Result<MixPart> make_shard_part(std::shared_ptr<const ShardSamples> samples,
                                std::vector<ShardField> fields, const LoaderOptions& options) {
  if (samples == nullptr) return Status(StatusCode::kInvalidArgument, "mix: samples are needed");
  STOKER_ASSIGN_OR_RETURN(std::shared_ptr<const sampling::Sampler> sampler,
                          unused_sampler(samples->size()));
  MixPart part;
  STOKER_ASSIGN_OR_RETURN(part.source,
                          pipeline::ShardSource::create(std::move(samples), std::move(fields),
                                                        std::move(sampler), options));
  return part;
}

Result<std::unique_ptr<pipeline::BatchSource>> make_mix_source(
    std::vector<MixPart> parts, std::shared_ptr<const sampling::Sampler> sampler,
    const LoaderOptions& options) {
  if (options.batch_size < 1) {
    return Status(StatusCode::kInvalidArgument, "loader: batch_size must be at least 1");
  }
  STOKER_ASSIGN_OR_RETURN(
      std::unique_ptr<pipeline::MixSource> source,
      pipeline::MixSource::create(std::move(parts), std::move(sampler), options));
  return std::unique_ptr<pipeline::BatchSource>(std::move(source));
}

}  // namespace stoker
