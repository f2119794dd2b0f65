#include "pipeline/shard_source.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>
#include <string>
#include <utility>

#include "dataset/shard_members.h"
#include "stoker/image_decoder.h"
#include "stoker/remote_source.h"
#include "stoker/video_reader.h"

namespace stoker::pipeline {
namespace {

// Why an array does not go with the batch's first of its field.
std::string unlike(const SlotValue& value, const SlotValue& first) {
  return "an array of shape " + python_shape(value.shape) + " and dtype " + value.dtype +
         ", where the batch's first is " + python_shape(first.shape) + " " + first.dtype;
}

Result<JsonKind> json_kind(const std::string& name) {
  if (name == "int64") return JsonKind::kInt64;
  if (name == "float64") return JsonKind::kFloat64;
  if (name == "float32") return JsonKind::kFloat32;
  if (name == "bool") return JsonKind::kBool;
  if (name == "str") return JsonKind::kString;
  return Status(StatusCode::kInvalidArgument, "json key type '" + name +
                                                  "' is none of int64, float64, float32, bool, "
                                                  "str");
}

DType json_dtype(JsonKind kind) {
  switch (kind) {
    case JsonKind::kInt64:
      return DType::kInt64;
    case JsonKind::kFloat64:
      return DType::kFloat64;
    case JsonKind::kFloat32:
      return DType::kFloat32;
    case JsonKind::kBool:
      return DType::kBool;
    case JsonKind::kString:
      break;
  }
  return DType::kUint8;
}

// Writes `value` as an integer of `type` (one of the integer DTypes) at `out`.
void store_integer(DType type, int64_t value, uint8_t* out) {
  auto put = [&](auto typed) { std::memcpy(out, &typed, sizeof(typed)); };
  switch (type) {
    case DType::kInt8:
      return put(static_cast<int8_t>(value));
    case DType::kInt16:
      return put(static_cast<int16_t>(value));
    case DType::kInt32:
      return put(static_cast<int32_t>(value));
    case DType::kUint8:
      return put(static_cast<uint8_t>(value));
    case DType::kUint16:
      return put(static_cast<uint16_t>(value));
    case DType::kUint32:
      return put(static_cast<uint32_t>(value));
    case DType::kUint64:
      return put(static_cast<uint64_t>(value));
    default:
      return put(value);
  }
}

Status invalid(const std::string& why) {
  return Status(StatusCode::kInvalidArgument, "loader: " + why);
}

}  // namespace

Result<std::unique_ptr<ShardSource>> ShardSource::create(
    std::shared_ptr<const ShardSamples> samples, std::vector<ShardField> fields,
    std::shared_ptr<const sampling::Sampler> sampler, const LoaderOptions& options) {
  if (samples == nullptr || sampler == nullptr) return invalid("samples and a sampler are needed");
  if (samples->size() == 0) return invalid("the dataset is empty (it has no samples)");
  const int64_t batch = options.batch_size;
  auto layout = std::make_shared<std::vector<BatchField>>();
  size_t offset = 0;
  auto add = [&](std::string name, DType type, std::vector<int64_t> shape) {
    size_t bytes = dtype_size(type);
    for (int64_t dim : shape) bytes *= static_cast<size_t>(dim);
    offset = aligned(offset);
    layout->push_back(BatchField{.name = std::move(name),
                                 .type = type,
                                 .shape = std::move(shape),
                                 .offset = offset,
                                 .bytes = bytes});
    offset += bytes;
    return static_cast<int64_t>(layout->size() - 1);
  };
  std::vector<FieldPlan> plans(fields.size());
  for (size_t f = 0; f < fields.size(); ++f) {
    const ShardField& field = fields[f];
    FieldPlan& plan = plans[f];
    if (field.alternatives.empty()) return invalid("field '" + field.name + "' reads no member");
    for (const std::string& alternative : field.alternatives) {
      plan.alternatives.push_back(samples->field_number(alternative));
    }
    switch (field.kind) {
      case ShardFieldKind::kImage: {
        if (field.height <= 0 || field.width <= 0) {
          return invalid("image field '" + field.name + "' has no output size");
        }
        Result<std::shared_ptr<const ImageTransform>> transform =
            ImageTransform::create(field.transform);
        if (!transform.ok())
          return transform.status().with_context("image field '" + field.name + "'");
        plan.transform = std::move(transform).value();
        plan.slot_bytes = plan.transform->output_bytes(field.height, field.width);
        const bool chw = field.transform.layout == Layout::kNCHW;
        plan.field = add(field.name, field.transform.dtype,
                         chw ? std::vector<int64_t>{batch, 3, field.height, field.width}
                             : std::vector<int64_t>{batch, field.height, field.width, 3});
        break;
      }
      case ShardFieldKind::kClip: {
        if (field.height <= 0 || field.width <= 0 || field.frames.empty()) {
          return invalid("clip field '" + field.name + "' needs frames and a size");
        }
        const auto frames = static_cast<int64_t>(field.frames.size());
        plan.slot_bytes = static_cast<size_t>(frames) * field.height * field.width * 3;
        const bool chw = field.layout == Layout::kNCHW;
        plan.field = add(field.name, DType::kUint8,
                         chw ? std::vector<int64_t>{batch, frames, 3, field.height, field.width}
                             : std::vector<int64_t>{batch, frames, field.height, field.width, 3});
        break;
      }
      case ShardFieldKind::kLabel:
        plan.field = add(field.name, DType::kInt64, {batch});
        break;
      case ShardFieldKind::kTokens:
        plan.field = add(field.name + "_length", DType::kInt64, {batch});
        break;
      case ShardFieldKind::kJson:
        for (const auto& [key, type] : field.json_keys) {
          STOKER_ASSIGN_OR_RETURN(JsonKind kind, json_kind(type));
          plan.json.push_back(kind == JsonKind::kString ? -1 : add(key, json_dtype(kind), {batch}));
        }
        break;
      case ShardFieldKind::kText:
      case ShardFieldKind::kArray:
        break;
    }
  }
  // A sample fails when it has a field the spec reads twice (which of the two the writer
  // meant is unknown).
  std::vector<int32_t> read;
  for (const FieldPlan& plan : plans) {
    read.insert(read.end(), plan.alternatives.begin(), plan.alternatives.end());
  }
  std::vector<std::pair<int64_t, std::string>> bad = samples->bad_samples(read);
  const size_t bytes = std::max<size_t>(aligned(offset), 64);
  return std::unique_ptr<ShardSource>(
      new ShardSource(std::move(samples), std::move(fields), std::move(plans), std::move(bad),
                      std::move(sampler), options, std::move(layout), bytes));
}

ShardSource::ShardSource(std::shared_ptr<const ShardSamples> samples,
                         std::vector<ShardField> fields, std::vector<FieldPlan> plans,
                         std::vector<std::pair<int64_t, std::string>> bad_samples,
                         std::shared_ptr<const sampling::Sampler> sampler,
                         const LoaderOptions& options,
                         std::shared_ptr<const std::vector<BatchField>> layout, size_t batch_bytes)
    : samples_(std::move(samples)),
      fields_(std::move(fields)),
      plans_(std::move(plans)),
      bad_samples_(std::move(bad_samples)),
      sampler_(std::move(sampler)),
      options_(options),
      batch_fields_(std::move(layout)),
      batch_bytes_(batch_bytes) {}

std::unique_ptr<BatchWork> ShardSource::new_work(uint32_t epoch, int64_t index,
                                                 std::shared_ptr<PooledBatch> batch) const {
  return std::make_unique<ShardWork>(epoch, index, std::move(batch));
}

std::string ShardSource::key_of(int64_t sample) const { return std::string(samples_->key(sample)); }

Status ShardSource::known_bad(int64_t sample) const {
  const auto found = std::lower_bound(bad_samples_.begin(), bad_samples_.end(), sample,
                                      [](const auto& entry, int64_t s) { return entry.first < s; });
  if (found == bad_samples_.end() || found->first != sample) return Status();
  return Status(StatusCode::kCorruptData, found->second);
}

int32_t ShardSource::member_of(int64_t sample, size_t field) const {
  return samples_->member_of(sample, plans_[field].alternatives).first;
}

std::string ShardSource::field_of(int64_t sample, size_t field) const {
  const auto [member, found] = samples_->member_of(sample, plans_[field].alternatives);
  if (member >= 0) return samples_->fields()[found];
  std::string names;
  for (const std::string& name : fields_[field].alternatives) {
    names += (names.empty() ? "" : "|") + name;
  }
  return names;
}

std::string ShardSource::where(int64_t sample, const std::string& field,
                               const std::string& why) const {
  return samples_->url(samples_->sample_shard()[sample]) + ": sample " +
         python_repr(key_of(sample)) + ", field " + python_repr(field) + ": " + why;
}

Result<std::shared_ptr<const ByteSource>> ShardSource::source_of(int64_t shard) const {
  // Local files open per call (one open and close, next to reading the members); remote
  // sources are shared per process and URL by open_source().
  return open_source(samples_->url(shard));
}

Status ShardSource::plan(BatchWork& work) {
  const Clock::time_point start = core::now();
  std::vector<int64_t> samples(work.batch->size());
  Status status = sampler_->fill(work.epoch, work.index * options_.batch_size, samples);
  sampling_ns_ += nanoseconds_since(start);
  STOKER_RETURN_IF_ERROR(status);
  std::vector<int64_t> slots(samples.size());
  std::iota(slots.begin(), slots.end(), 0);
  return plan_samples(work, std::move(slots), samples);
}

Status ShardSource::plan_samples(BatchWork& base, std::vector<int64_t> slots,
                                 std::span<const int64_t> samples) {
  auto& work = static_cast<ShardWork&>(base);  // made by new_work()
  PooledBatch& batch = *work.batch;
  const int64_t num_samples = this->num_samples();
  std::vector<Status> errors(batch.size());
  work.values.assign(batch.size(), std::vector<SlotValue>(fields_.size()));
  for (size_t k = 0; k < slots.size(); ++k) {
    const int64_t slot = slots[k];
    const int64_t sample = samples[k];
    if (sample < 0 || sample >= num_samples) {
      return invalid("the sampler gave sample " + std::to_string(sample) +
                     ", outside the dataset's " + std::to_string(num_samples));
    }
    batch.mutable_samples()[slot] = sample;
    batch.mutable_episodes()[slot] = samples_->sample_shard()[sample];
    errors[slot] = known_bad(sample);
    for (size_t f = 0; f < fields_.size() && errors[slot].ok(); ++f) {
      if (member_of(sample, f) < 0) {
        errors[slot] = Status(StatusCode::kCorruptData,
                              where(sample, field_of(sample, f), "the sample has no such member"));
      }
    }
  }
  work.slots = std::move(slots);
  core::MutexLock lock(&work.errors_mutex);
  work.slot_errors = std::move(errors);
  return Status();
}

std::vector<ReadGroup> ShardSource::group_reads(BatchWork& base) {
  auto& work = static_cast<ShardWork&>(base);
  std::vector<int64_t> slots;
  {
    core::MutexLock lock(&work.errors_mutex);
    for (int64_t slot : work.slots) {
      if (work.slot_errors[slot].ok()) slots.push_back(slot);
    }
  }
  const std::span<const int64_t> episodes = work.batch->episodes();  // the slots' shards
  std::stable_sort(slots.begin(), slots.end(),
                   [&](int64_t a, int64_t b) { return episodes[a] < episodes[b]; });
  std::vector<ReadGroup> groups;
  for (size_t k = 0; k < slots.size(); ++k) {
    if (k == 0 || episodes[slots[k]] != episodes[slots[k - 1]] ||
        static_cast<int64_t>(groups.back().size()) == kSlotsPerGroup) {
      groups.emplace_back();
    }
    groups.back().push_back(SlotRead{slots[k], 0});
  }
  return groups;
}

void ShardSource::prefetch(BatchWork& base, const std::vector<ReadGroup>& groups) {
  auto& work = static_cast<ShardWork&>(base);
  std::vector<ByteRange> ranges;
  for (const ReadGroup& group : groups) {
    const int64_t shard = work.batch->episodes()[group[0].slot];
    Result<std::shared_ptr<const ByteSource>> source = source_of(shard);
    if (!source.ok() || !(*source)->is_remote()) continue;  // decode_group reports it
    Result<std::shared_ptr<const ShardIndex>> opened = samples_->index(shard);
    if (!opened.ok()) continue;  // decode_group reports it
    const ShardIndex& index = **opened;
    ranges.clear();
    for (const SlotRead& read : group) {
      const int64_t sample = work.batch->samples()[read.slot];
      for (size_t f = 0; f < fields_.size(); ++f) {
        const int32_t member = member_of(sample, f);
        if (member < 0) continue;
        const ShardIndex::Member& m = index.members()[member];
        ranges.push_back(
            ByteRange{m.offset - ShardIndex::kHeaderBytes, m.size + ShardIndex::kHeaderBytes});
      }
    }
    std::sort(ranges.begin(), ranges.end(),
              [](const ByteRange& a, const ByteRange& b) { return a.offset < b.offset; });
    std::vector<ByteRange> merged;
    for (const ByteRange& range : ranges) {
      if (!merged.empty() && range.offset <= merged.back().end()) {
        merged.back().length = std::max(merged.back().end(), range.end()) - merged.back().offset;
      } else {
        merged.push_back(range);
      }
    }
    (*source)->prefetch(merged);
  }
}

void ShardSource::decode_group(BatchWork& base, const ReadGroup& group) {
  auto& work = static_cast<ShardWork&>(base);
  std::vector<int64_t> slots;
  for (const SlotRead& read : group) slots.push_back(read.slot);
  std::vector<Status> errors(slots.size());
  decode_slots(work, slots, errors);
  core::MutexLock lock(&work.errors_mutex);
  for (size_t k = 0; k < slots.size(); ++k) {
    if (!errors[k].ok()) work.slot_errors[slots[k]] = errors[k];
  }
}

void ShardSource::decode_slots(ShardWork& work, const std::vector<int64_t>& slots,
                               std::vector<Status>& errors) {
  const std::span<const int64_t> ids = work.batch->samples();
  const int64_t shard = samples_->sample_shard()[ids[slots[0]]];
  auto fail_all = [&](const Status& status) {
    for (size_t k = 0; k < slots.size(); ++k) {
      if (errors[k].ok()) {
        errors[k] = Status(status.code(), where(ids[slots[k]], "all", status.message()));
      }
    }
  };
  // Every member of every slot, one read.
  struct Wanted {
    size_t slot_index;
    size_t field;
  };
  std::vector<int64_t> members;
  std::vector<Wanted> owners;
  for (size_t k = 0; k < slots.size(); ++k) {
    for (size_t f = 0; f < fields_.size(); ++f) {
      const int32_t member = member_of(ids[slots[k]], f);
      if (member < 0) {
        if (errors[k].ok()) {
          errors[k] = Status(
              StatusCode::kCorruptData,
              where(ids[slots[k]], field_of(ids[slots[k]], f), "the sample has no such member"));
        }
        continue;
      }
      members.push_back(member);
      owners.push_back(Wanted{k, f});
    }
  }
  Clock::time_point start = core::now();
  Result<std::shared_ptr<const ShardIndex>> opened = samples_->index(shard);
  if (!opened.ok()) return fail_all(opened.status());
  const ShardIndex& index = **opened;
  Result<std::shared_ptr<const ByteSource>> source = source_of(shard);
  if (!source.ok()) return fail_all(source.status());
  const int64_t total = index.bytes_to_read(members);
  if (total < 0) return fail_all(Status(StatusCode::kCorruptData, "a member outside its index"));
  std::vector<uint8_t> bytes(static_cast<size_t>(total));
  std::vector<int64_t> starts(members.size());
  Status read = index.read_members(**source, members, bytes, starts);
  read_ns_ += nanoseconds_since(start);
  if (!read.ok()) return fail_all(read);
  bytes_read_ += total;
  auto member_bytes = [&](size_t m) {
    return std::span<const uint8_t>(bytes.data() + starts[m],
                                    static_cast<size_t>(index.members()[members[m]].size));
  };

  start = core::now();
  uint8_t* buffer = work.batch->buffer();
  for (size_t f = 0; f < fields_.size(); ++f) {
    const ShardField& field = fields_[f];
    if (field.kind == ShardFieldKind::kImage) {
      // The field's images decoded together, each straight into its slot.
      std::vector<ImageInput> inputs;
      std::vector<size_t> input_slot;
      for (size_t m = 0; m < members.size(); ++m) {
        if (owners[m].field != f || !errors[owners[m].slot_index].ok()) continue;
        const int64_t slot = slots[owners[m].slot_index];
        inputs.push_back(ImageInput{
            .bytes = member_bytes(m),
            .out = buffer + (*batch_fields_)[plans_[f].field].offset + slot * plans_[f].slot_bytes,
            .id = static_cast<uint64_t>(ids[slot]),
            .camera = 0});
        input_slot.push_back(owners[m].slot_index);
      }
      std::vector<Status> decoded(inputs.size());
      Status status = decode_images_into(inputs, *plans_[f].transform,
                                         ImageBatchOptions{.height = field.height,
                                                           .width = field.width,
                                                           .seed = options_.seed,
                                                           .epoch = work.epoch,
                                                           .threads = 1},
                                         decoded);
      ++decode_calls_;
      for (size_t i = 0; i < inputs.size(); ++i) {
        const Status& failure = status.ok() ? decoded[i] : status;
        if (failure.ok()) continue;
        const size_t k = input_slot[i];
        errors[k] = Status(failure.code(),
                           where(ids[slots[k]], field_of(ids[slots[k]], f), failure.message()));
      }
      continue;
    }
    for (size_t m = 0; m < members.size(); ++m) {
      if (owners[m].field != f || !errors[owners[m].slot_index].ok()) continue;
      const size_t k = owners[m].slot_index;
      Status status = decode_member(work, slots[k], f, member_bytes(m));
      if (!status.ok()) {
        errors[k] = Status(status.code(),
                           where(ids[slots[k]], field_of(ids[slots[k]], f), status.message()));
      }
    }
  }
  decode_ns_ += nanoseconds_since(start);
}

Status ShardSource::decode_member(ShardWork& work, int64_t slot, size_t f,
                                  std::span<const uint8_t> bytes) {
  const ShardField& field = fields_[f];
  const FieldPlan& plan = plans_[f];
  uint8_t* buffer = work.batch->buffer();
  auto fixed = [&](int64_t batch_field, size_t item) {
    return buffer + (*batch_fields_)[batch_field].offset + slot * item;
  };
  SlotValue& value = work.values[slot][f];
  switch (field.kind) {
    case ShardFieldKind::kClip: {
      const int64_t sample = work.batch->samples()[slot];
      std::string name =
          samples_->url(samples_->sample_shard()[sample]) + ":" + field_of(sample, f);
      std::shared_ptr<const ByteSource> source =
          memory_source(std::move(name), std::vector<uint8_t>(bytes.begin(), bytes.end()));
      STOKER_ASSIGN_OR_RETURN(std::unique_ptr<VideoReader> reader,
                              VideoReader::open(std::move(source), VideoReaderOptions{}));
      DecodeStats stats;
      STOKER_RETURN_IF_ERROR(reader->get_frames(
          field.frames,
          OutputOptions{.height = field.height, .width = field.width, .layout = field.layout},
          std::span<uint8_t>(fixed(plan.field, plan.slot_bytes), plan.slot_bytes), &stats));
      ++decode_calls_;
      return Status();
    }
    case ShardFieldKind::kLabel: {
      STOKER_ASSIGN_OR_RETURN(int64_t label, decode_label(bytes));
      std::memcpy(fixed(plan.field, sizeof(int64_t)), &label, sizeof(label));
      return Status();
    }
    case ShardFieldKind::kText:
      STOKER_RETURN_IF_ERROR(check_utf8(bytes));
      value.bytes.assign(bytes.begin(), bytes.end());
      return Status();
    case ShardFieldKind::kTokens: {
      STOKER_ASSIGN_OR_RETURN(TokenArray tokens, decode_tokens(bytes, field.max_length));
      const auto length = static_cast<int64_t>(tokens.values.size());
      std::memcpy(fixed(plan.field, sizeof(int64_t)), &length, sizeof(length));
      value.dtype = std::move(tokens.dtype);
      value.bytes.resize(tokens.values.size() * sizeof(int64_t));
      std::memcpy(value.bytes.data(), tokens.values.data(), value.bytes.size());
      return Status();
    }
    case ShardFieldKind::kArray: {
      STOKER_ASSIGN_OR_RETURN(NpyArray array, parse_npy(bytes));
      DType type;
      if (!dtype_from_name(array.dtype, &type)) {
        return Status(StatusCode::kCorruptData,
                      "an array of dtype " + array.dtype + ", which batches cannot hold");
      }
      size_t elements = 1;
      for (int64_t dim : array.shape) elements *= static_cast<size_t>(dim);
      value.bytes.resize(elements * array.item_bytes);
      array.copy_to(value.bytes.data());
      value.dtype = array.dtype;
      value.shape = array.shape;
      return Status();
    }
    case ShardFieldKind::kJson: {
      std::vector<JsonKey> keys;
      for (const auto& [key, type] : field.json_keys) {
        STOKER_ASSIGN_OR_RETURN(JsonKind kind, json_kind(type));
        keys.push_back(JsonKey{key, kind});
      }
      std::vector<JsonValue> values(keys.size());
      STOKER_RETURN_IF_ERROR(decode_json(bytes, keys, values));
      value.strings.clear();
      for (size_t k = 0; k < keys.size(); ++k) {
        const int64_t batch_field = plan.json[k];
        switch (keys[k].kind) {
          case JsonKind::kString:
            value.strings.push_back(std::move(values[k].string_value));
            break;
          case JsonKind::kInt64:
            std::memcpy(fixed(batch_field, 8), &values[k].int_value, 8);
            break;
          case JsonKind::kFloat64:
            std::memcpy(fixed(batch_field, 8), &values[k].float_value, 8);
            break;
          case JsonKind::kFloat32: {
            const auto single = static_cast<float>(values[k].float_value);
            std::memcpy(fixed(batch_field, 4), &single, 4);
            break;
          }
          case JsonKind::kBool:
            *fixed(batch_field, 1) = values[k].bool_value ? 1 : 0;
            break;
        }
      }
      return Status();
    }
    case ShardFieldKind::kImage:
      break;
  }
  return Status(StatusCode::kInternal, "an image member decoded one by one");
}

void ShardSource::check_array_shapes(ShardWork& work, std::vector<Status>& errors) const {
  for (size_t f = 0; f < fields_.size(); ++f) {
    if (fields_[f].kind != ShardFieldKind::kArray) continue;
    const SlotValue* first = nullptr;
    for (int64_t slot : work.slots) {
      if (!errors[slot].ok()) continue;
      const SlotValue& value = work.values[slot][f];
      if (first == nullptr) {
        first = &value;
      } else if (value.shape != first->shape || value.dtype != first->dtype) {
        const int64_t sample = work.batch->samples()[slot];
        errors[slot] = Status(StatusCode::kCorruptData,
                              where(sample, field_of(sample, f), unlike(value, *first)));
      }
    }
  }
}

Status ShardSource::finish(BatchWork& base) {
  auto& work = static_cast<ShardWork&>(base);
  std::vector<Status> errors;
  {
    core::MutexLock lock(&work.errors_mutex);
    errors = work.slot_errors;
  }
  check_array_shapes(work, errors);
  {
    core::MutexLock lock(&work.errors_mutex);
    work.slot_errors = errors;
  }
  // Replacements must match the arrays the batch holds; a batch whose every slot failed takes
  // its arrays' shape from its first replacement.
  STOKER_RETURN_IF_ERROR(settle_failures(*this, work, options_, errors));
  const Clock::time_point start = core::now();
  gather_columns(work);
  collate_ns_ += nanoseconds_since(start);
  return Status();
}

// Reads `sample` into `slot`; its arrays must match those of the first other slot that holds
// its sample.
Status ShardSource::refill(BatchWork& base, int64_t slot, int64_t sample) {
  auto& work = static_cast<ShardWork&>(base);
  std::vector<const SlotValue*> reference(fields_.size(), nullptr);
  {
    core::MutexLock lock(&work.errors_mutex);
    for (int64_t other : work.slots) {
      if (other == slot || !work.slot_errors[other].ok()) continue;
      for (size_t f = 0; f < fields_.size(); ++f) {
        if (fields_[f].kind == ShardFieldKind::kArray) reference[f] = &work.values[other][f];
      }
      break;
    }
  }
  work.batch->mutable_samples()[slot] = sample;
  work.batch->mutable_episodes()[slot] = samples_->sample_shard()[sample];
  work.values[slot].assign(fields_.size(), SlotValue{});
  std::vector<Status> errors{known_bad(sample)};
  if (errors[0].ok()) decode_slots(work, {slot}, errors);
  for (size_t f = 0; f < fields_.size() && errors[0].ok(); ++f) {
    const SlotValue* first = reference[f];
    const SlotValue& value = work.values[slot][f];
    if (first != nullptr && (value.shape != first->shape || value.dtype != first->dtype)) {
      errors[0] = Status(StatusCode::kCorruptData,
                         where(sample, field_of(sample, f), unlike(value, *first)));
    }
  }
  return errors[0];
}

void ShardSource::gather_columns(ShardWork& work) const {
  const std::vector<int64_t>& slots = work.slots;  // the column's entries, in order
  const auto size = static_cast<int64_t>(slots.size());
  std::vector<BatchColumn>& columns = work.columns;
  columns.clear();
  auto strings_column = [&](std::string name, auto&& text_of) {
    BatchColumn column{.name = std::move(name), .strings = true};
    column.offsets.reserve(size + 1);
    column.offsets.push_back(0);
    for (int64_t slot : slots) {
      const std::string_view text = text_of(slot);
      column.bytes.insert(column.bytes.end(), text.begin(), text.end());
      column.offsets.push_back(static_cast<int64_t>(column.bytes.size()));
    }
    columns.push_back(std::move(column));
  };
  for (size_t f = 0; f < fields_.size(); ++f) {
    const ShardField& field = fields_[f];
    switch (field.kind) {
      case ShardFieldKind::kText:
        strings_column(field.name, [&](int64_t slot) {
          const std::vector<uint8_t>& bytes = work.values[slot][f].bytes;
          return std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size());
        });
        break;
      case ShardFieldKind::kJson: {
        size_t string_key = 0;
        for (size_t k = 0; k < field.json_keys.size(); ++k) {
          if (plans_[f].json[k] >= 0) continue;
          strings_column(field.json_keys[k].first, [&](int64_t slot) {
            return std::string_view(work.values[slot][f].strings[string_key]);
          });
          ++string_key;
        }
        break;
      }
      case ShardFieldKind::kTokens: {
        std::vector<std::string> dtypes;
        int64_t longest = 0;
        for (int64_t slot : slots) {
          const SlotValue& value = work.values[slot][f];
          dtypes.push_back(value.dtype);
          longest = std::max<int64_t>(longest, static_cast<int64_t>(value.bytes.size() / 8));
        }
        DType type = DType::kInt64;
        dtype_from_name(token_batch_dtype(dtypes, field.pad), &type);
        const size_t item = dtype_size(type);
        BatchColumn column{.name = field.name, .type = type, .shape = {size, longest}};
        column.bytes.resize(static_cast<size_t>(size * longest) * item);
        for (int64_t k = 0; k < size; ++k) {
          const std::vector<uint8_t>& bytes = work.values[slots[k]][f].bytes;
          const auto length = static_cast<int64_t>(bytes.size() / 8);
          uint8_t* row = column.bytes.data() + k * longest * item;
          for (int64_t t = 0; t < longest; ++t) {
            int64_t token = field.pad;
            if (t < length) std::memcpy(&token, bytes.data() + t * 8, 8);
            store_integer(type, token, row + t * item);
          }
        }
        columns.push_back(std::move(column));
        break;
      }
      case ShardFieldKind::kArray: {
        const SlotValue empty;
        const SlotValue& first = slots.empty() ? empty : work.values[slots[0]][f];
        DType type = DType::kUint8;
        dtype_from_name(first.dtype, &type);
        BatchColumn column{.name = field.name, .type = type, .shape = {size}};
        column.shape.insert(column.shape.end(), first.shape.begin(), first.shape.end());
        column.bytes.reserve(first.bytes.size() * size);
        for (int64_t slot : slots) {
          const std::vector<uint8_t>& bytes = work.values[slot][f].bytes;
          column.bytes.insert(column.bytes.end(), bytes.begin(), bytes.end());
        }
        columns.push_back(std::move(column));
        break;
      }
      case ShardFieldKind::kImage:
      case ShardFieldKind::kClip:
      case ShardFieldKind::kLabel:
        break;
    }
  }
  std::vector<std::string> keys(work.batch->size());
  for (int64_t slot : slots) keys[slot] = key_of(work.batch->samples()[slot]);
  strings_column("__key__", [&](int64_t slot) { return std::string_view(keys[slot]); });
}

std::vector<std::string> ShardSource::column_names() const {
  std::vector<std::string> names;
  for (size_t f = 0; f < fields_.size(); ++f) {
    const ShardField& field = fields_[f];
    switch (field.kind) {
      case ShardFieldKind::kText:
      case ShardFieldKind::kTokens:
      case ShardFieldKind::kArray:
        names.push_back(field.name);
        break;
      case ShardFieldKind::kJson:
        for (size_t k = 0; k < field.json_keys.size(); ++k) {
          if (plans_[f].json[k] < 0) names.push_back(field.json_keys[k].first);
        }
        break;
      case ShardFieldKind::kImage:
      case ShardFieldKind::kClip:
      case ShardFieldKind::kLabel:
        break;
    }
  }
  names.push_back("__key__");
  return names;
}

int64_t ShardSource::num_samples() const { return samples_->size(); }

void ShardSource::place_fields(const std::vector<size_t>& offsets, size_t batch_bytes) {
  batch_fields_ = placed_at(*batch_fields_, offsets);
  batch_bytes_ = batch_bytes;
}

BuildStats ShardSource::stats() const {
  BuildStats s;
  auto seconds = [](const std::atomic<int64_t>& ns) { return ns.load() * 1e-9; };
  s.sampling_s = seconds(sampling_ns_);
  s.index_s = seconds(read_ns_);
  s.decode_s = seconds(decode_ns_);
  s.collate_s = seconds(collate_ns_);
  s.decode_calls = decode_calls_.load();
  s.bytes_read = bytes_read_.load();
  return s;
}

void ShardSource::reset_stats() {
  for (auto* counter :
       {&sampling_ns_, &read_ns_, &decode_ns_, &collate_ns_, &bytes_read_, &decode_calls_}) {
    counter->store(0);
  }
}

}  // namespace stoker::pipeline

namespace stoker {

Result<std::unique_ptr<pipeline::BatchSource>> make_shard_source(
    std::shared_ptr<const ShardSamples> samples, std::vector<ShardField> fields,
    std::shared_ptr<const sampling::Sampler> sampler, const LoaderOptions& options) {
  if (options.batch_size < 1) {
    return Status(StatusCode::kInvalidArgument, "loader: batch_size must be at least 1");
  }
  STOKER_ASSIGN_OR_RETURN(std::unique_ptr<pipeline::ShardSource> source,
                          pipeline::ShardSource::create(std::move(samples), std::move(fields),
                                                        std::move(sampler), options));
  return std::unique_ptr<pipeline::BatchSource>(std::move(source));
}

}  // namespace stoker
