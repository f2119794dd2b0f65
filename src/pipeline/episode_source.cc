#include "pipeline/episode_source.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>
#include <string>

#include "stoker/image_decoder.h"

namespace stoker::pipeline {
EpisodeSource::EpisodeSource(std::shared_ptr<const EpisodeIndex> index,
                             std::unique_ptr<WindowPlanner> planner,
                             std::shared_ptr<const sampling::Sampler> sampler,
                             std::shared_ptr<const ImageTransform> transform, BatchLayout layout,
                             const LoaderOptions& options, EpisodeOptions episode)
    : index_(std::move(index)),
      planner_(std::move(planner)),
      sampler_(std::move(sampler)),
      transform_(std::move(transform)),
      layout_(std::move(layout)),
      options_(options),
      replacement_rows_(std::move(episode.replacement_rows)),
      row_keys_(std::move(episode.row_keys)),
      readers_(index_->video_files().size()) {}

std::unique_ptr<BatchWork> EpisodeSource::new_work(uint32_t epoch, int64_t index,
                                                   std::shared_ptr<PooledBatch> batch) const {
  return std::make_unique<EpisodeWork>(epoch, index, std::move(batch));
}

std::string EpisodeSource::describe_sample(const EpisodeWork& work, int64_t row) const {
  return "sample " + std::to_string(row) + " (episode " +
         std::to_string(index_->episode_of_row(row)) + ", batch " + std::to_string(work.index) +
         " of epoch " + std::to_string(work.epoch) + ")";
}

std::string EpisodeSource::describe_read(const EpisodeWork& work, int64_t row,
                                         int64_t camera) const {
  return describe_sample(work, row) + ", camera '" + index_->cameras()[camera] + "'";
}

Status EpisodeSource::plan(BatchWork& work) {
  PooledBatch& batch = *work.batch;
  const Clock::time_point start = core::now();
  std::vector<int64_t> rows(batch.size());
  Status status = sampler_->fill(work.epoch, work.index * options_.batch_size, rows);
  sampling_ns_ += nanoseconds_since(start);
  STOKER_RETURN_IF_ERROR(status);
  std::vector<int64_t> slots(batch.size());
  std::iota(slots.begin(), slots.end(), 0);
  return plan_samples(work, std::move(slots), rows);
}

Status EpisodeSource::plan_samples(BatchWork& base, std::vector<int64_t> slots,
                                   std::span<const int64_t> rows) {
  auto& work = static_cast<EpisodeWork&>(base);  // made by new_work()
  const int64_t size = work.batch->size();
  work.plans.resize(size);
  work.geometry.assign(size * index_->num_cameras(), FrameGeometry{});
  std::vector<Status> errors(size);
  for (size_t k = 0; k < slots.size(); ++k) {
    work.batch->mutable_samples()[slots[k]] = rows[k];
    errors[slots[k]] = plan_slot(work, slots[k], rows[k]);
  }
  work.slots = std::move(slots);
  core::MutexLock lock(&work.errors_mutex);
  work.slot_errors = std::move(errors);
  return Status();
}

// Plans sample `row` into `slot`: rows into the column fields, pad masks, transform draws.
Status EpisodeSource::plan_slot(EpisodeWork& work, int64_t slot, int64_t row) {
  Clock::time_point start = core::now();
  WindowPlan& plan = work.plans[slot];
  Status planned = planner_->plan(row, &plan);
  index_ns_ += nanoseconds_since(start);
  if (!planned.ok()) return planned.with_context(describe_sample(work, row));
  work.batch->mutable_samples()[slot] = row;
  work.batch->mutable_episodes()[slot] = plan.episode;

  start = core::now();
  uint8_t* buffer = work.batch->buffer();
  auto put_row_key = [&](int64_t field, int64_t value) {
    if (field >= 0) {
      std::memcpy(buffer + (*layout_.fields)[field].offset + slot * sizeof(int64_t), &value,
                  sizeof(value));
    }
  };
  put_row_key(layout_.index_field, row);
  if (layout_.episode_index_field >= 0) {
    put_row_key(layout_.episode_index_field, row_keys_.episode_numbers[plan.episode]);
  }
  put_row_key(layout_.frame_index_field, row - index_->episode_from_row(plan.episode));
  put_row_key(layout_.task_index_field, index_->episode_task(plan.episode));
  for (size_t k = 0; k < layout_.keys.size(); ++k) {
    const KeyLayout& key = layout_.keys[k];
    const int64_t begin = plan.key_begin[k];
    if (key.pad_field >= 0) {
      uint8_t* pad = buffer + (*layout_.fields)[key.pad_field].offset + slot * key.steps;
      std::memcpy(pad, plan.pad.data() + begin, key.steps);
    }
    if (key.column < 0) continue;
    const EpisodeIndex::ColumnView& column = index_->columns()[key.column];
    for (int64_t t = 0; t < key.steps; ++t) {
      std::memcpy(layout_.at(buffer, key, slot, t),
                  column.data.data() + plan.rows[begin + t] * key.step_bytes, key.step_bytes);
    }
  }
  collate_ns_ += nanoseconds_since(start);

  for (const WindowPlan::Read& read : plan.reads) {
    // An image camera's random parameters are drawn by decode_images_into, from the same key.
    if (index_->is_image_camera(read.camera)) continue;
    const std::string context = describe_read(work, row, read.camera);
    Result<const VideoReader*> reader = reader_of(read.video_file);
    if (!reader.ok()) return reader.status().with_context(context);
    const VideoStreamInfo& stream = (*reader)->frame_table().stream();
    Result<FrameGeometry> geometry =
        transform_->geometry(stream.height, stream.width, options_.seed, work.epoch,
                             static_cast<uint64_t>(row), static_cast<int>(read.camera));
    if (!geometry.ok()) return geometry.status().with_context(context);
    work.geometry[slot * index_->num_cameras() + read.camera] = *geometry;
  }
  return Status();
}

std::vector<ReadGroup> EpisodeSource::group_reads(BatchWork& base) {
  auto& work = static_cast<EpisodeWork&>(base);  // made by new_work()
  const Clock::time_point start = core::now();
  std::vector<Status> errors;
  {
    core::MutexLock lock(&work.errors_mutex);
    errors = work.slot_errors;
  }
  // Each read spans the packets from its first frame's keyframe to its last frame's packet.
  struct Span {
    int64_t video, first, last;
    SlotRead read;
  };
  std::vector<Span> spans;
  std::vector<ReadGroup> groups;
  for (int64_t slot = 0; slot < work.batch->size(); ++slot) {
    if (!errors[slot].ok()) continue;
    const WindowPlan& plan = work.plans[slot];
    std::vector<Span> reads;
    Status fits;
    for (size_t r = 0; r < plan.reads.size() && fits.ok(); ++r) {
      const WindowPlan::Read& read = plan.reads[r];
      if (index_->is_image_camera(read.camera)) {  // images share no decoder: one group each
        groups.push_back({SlotRead{slot, r}});
        continue;
      }
      Result<const VideoReader*> reader = reader_of(read.video_file);
      if (!reader.ok()) break;  // plan_slot opened it already
      const FrameTable& table = (*reader)->frame_table();
      // The index's frames must exist in the table before they index into it.
      for (int64_t frame : read.frames) {
        if (frame < 0 || frame >= table.num_frames()) {
          fits = Status(StatusCode::kCorruptData,
                        "the index places it at frame " + std::to_string(frame) + " of '" +
                            (*reader)->name() + "', which has " +
                            std::to_string(table.num_frames()) + " frames")
                     .with_context(describe_read(work, plan.row, read.camera));
          break;
        }
      }
      if (!fits.ok()) break;
      const int64_t lowest = *std::min_element(read.frames.begin(), read.frames.end());
      int64_t last = 0;
      for (int64_t frame : read.frames) last = std::max(last, table.packet_of_frame(frame));
      reads.push_back({read.video_file, table.sync_packet_of_frame(lowest), last, {slot, r}});
    }
    if (fits.ok()) {
      spans.insert(spans.end(), reads.begin(), reads.end());
    } else {
      core::MutexLock lock(&work.errors_mutex);
      work.slot_errors[slot] = fits;
    }
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    return a.video != b.video ? a.video < b.video : a.first < b.first;
  });
  int64_t video = -1, reach = -1;
  for (const Span& span : spans) {
    if (span.video != video || span.first > reach) {
      groups.emplace_back();
      video = span.video;
      reach = span.last;
    }
    reach = std::max(reach, span.last);
    groups.back().push_back(span.read);
  }
  index_ns_ += nanoseconds_since(start);
  return groups;
}

void EpisodeSource::prefetch(BatchWork& base, const std::vector<ReadGroup>& groups) {
  auto& work = static_cast<EpisodeWork&>(base);  // made by new_work()
  std::vector<int64_t> frames;
  for (const ReadGroup& group : groups) {
    const WindowPlan::Read& first = work.plans[group[0].slot].reads[group[0].read];
    if (first.video_file < 0) continue;  // images: mapped from the index's side file
    Result<const VideoReader*> reader = reader_of(first.video_file);
    if (!reader.ok() || (*reader)->source() == nullptr) continue;  // decode_group reports it
    frames.clear();
    for (const SlotRead& read : group) {
      const auto& wanted = work.plans[read.slot].reads[read.read].frames;
      frames.insert(frames.end(), wanted.begin(), wanted.end());
    }
    (*reader)->prefetch(frames);
  }
}

void EpisodeSource::decode_group(BatchWork& base, const ReadGroup& group) {
  auto& work = static_cast<EpisodeWork&>(base);  // made by new_work()
  if (group.size() > 1 && decode_reads(work, group).ok()) return;
  if (group.size() == 1) {
    Status status = decode_reads(work, group);
    if (!status.ok()) fail_slot(work, group[0], status);
    return;
  }
  for (const SlotRead& read : group) {
    Status status = decode_reads(work, {read});
    if (!status.ok()) fail_slot(work, read, status);
  }
}

void EpisodeSource::fail_slot(EpisodeWork& work, const SlotRead& read, const Status& status) {
  const int64_t row = work.batch->samples()[read.slot];
  const int64_t camera = work.plans[read.slot].reads[read.read].camera;
  const Status failure = status.with_context(describe_read(work, row, camera));
  core::MutexLock lock(&work.errors_mutex);
  work.slot_errors[read.slot] = failure;
}

// Decodes `reads`, all from one file, in one pass, each frame converted straight into its slot
// (uint8 output, or a depth camera's samples) or into scratch memory that the transform then
// finishes into its slot (float dtypes, metres).
Status EpisodeSource::decode_reads(EpisodeWork& work, const ReadGroup& reads) {
  const WindowPlan::Read& first = work.plans[reads[0].slot].reads[reads[0].read];
  if (index_->is_image_camera(first.camera)) return decode_images(work, reads);
  STOKER_ASSIGN_OR_RETURN(const VideoReader* reader, reader_of(first.video_file));
  const VideoStreamInfo& stream = reader->frame_table().stream();
  const auto [height, width] = layout_.camera_sizes[first.camera];
  const std::optional<DepthCamera>& depth = layout_.depth[first.camera];
  OutputOptions conversion = transform_->conversion(stream.height, stream.width);
  if (depth.has_value()) conversion.pixel_format = PixelFormat::kGray16;
  if (conversion.height != height || conversion.width != width) {
    return Status(StatusCode::kInvalidArgument,
                  "video '" + reader->name() + "' has " + std::to_string(stream.width) + "x" +
                      std::to_string(stream.height) + " frames, which come out " +
                      std::to_string(conversion.width) + "x" + std::to_string(conversion.height) +
                      " while the batch holds " + std::to_string(width) + "x" +
                      std::to_string(height) + " for this camera; give the spec a size");
  }
  // A depth camera's samples are final unless they become distances.
  const bool in_place = depth.has_value() ? !depth->metric : transform_->writes_in_place();
  const size_t converted_bytes =
      static_cast<size_t>(height) * width * pixel_bytes(conversion.pixel_format);

  struct Finish {
    const uint8_t* converted;
    uint8_t* out;
    bool flip;
  };
  size_t total = 0;
  for (const SlotRead& read : reads) total += work.plans[read.slot].reads[read.read].frames.size();
  std::vector<uint8_t> scratch(in_place ? 0 : total * converted_bytes);
  std::vector<FrameRequest> requests;
  std::vector<Finish> finishes;
  requests.reserve(total);
  for (const SlotRead& read : reads) {
    const WindowPlan& plan = work.plans[read.slot];
    const WindowPlan::Read& r = plan.reads[read.read];
    const FrameGeometry& geometry = work.geometry[read.slot * index_->num_cameras() + r.camera];
    // Where frame j of this read goes: the time step of the key it belongs to.
    std::vector<uint8_t*> out(r.frames.size(), nullptr);
    for (size_t k = 0; k < layout_.keys.size(); ++k) {
      if (plan.key_read[k] != static_cast<int64_t>(read.read)) continue;
      const KeyLayout& key = layout_.keys[k];
      for (int64_t t = 0; t < key.steps; ++t) {
        out[plan.key_read_begin[k] + t] = layout_.at(work.batch->buffer(), key, read.slot, t);
      }
    }
    for (size_t j = 0; j < r.frames.size(); ++j) {
      if (out[j] == nullptr) {
        return Status(StatusCode::kInternal, "frame with no destination in the batch");
      }
      uint8_t* converted = in_place ? out[j] : scratch.data() + requests.size() * converted_bytes;
      requests.push_back(
          FrameRequest{.frame = r.frames[j], .crop = geometry.source, .out = converted});
      if (!in_place || geometry.flip) finishes.push_back({converted, out[j], geometry.flip});
    }
  }

  DecodeStats stats;
  Clock::time_point start = core::now();
  Status status = reader->get_frames(requests, conversion, &stats);
  decode_ns_ += nanoseconds_since(start);
  {
    core::MutexLock lock(&decode_mutex_);
    decode_ += stats;
    ++decode_calls_;
  }
  STOKER_RETURN_IF_ERROR(status);

  start = core::now();
  for (const Finish& finish : finishes) {
    if (depth.has_value()) {
      if (in_place) {
        flip_depth_in_place(reinterpret_cast<uint16_t*>(finish.out), height, width);
      } else {
        depth_to_values(reinterpret_cast<const uint16_t*>(finish.converted), height, width,
                        finish.flip, layout_.depth_values[first.camera].data(),
                        reinterpret_cast<float*>(finish.out));
      }
    } else if (in_place) {
      transform_->flip_in_place(finish.out, height, width);
    } else {
      transform_->finish(finish.converted, height, width, finish.flip, finish.out);
    }
  }
  transform_ns_ += nanoseconds_since(start);
  return Status();
}

// Each row's stored image, decoded and transformed straight into its time step's slot; the
// random parameters are drawn from (seed, epoch, sample, camera), as for a video camera.
Status EpisodeSource::decode_images(EpisodeWork& work, const ReadGroup& reads) {
  std::vector<ImageInput> inputs;
  std::vector<int64_t> rows;  // each input's row, for its error
  for (const SlotRead& read : reads) {
    const WindowPlan& plan = work.plans[read.slot];
    const WindowPlan::Read& r = plan.reads[read.read];
    for (size_t k = 0; k < layout_.keys.size(); ++k) {
      if (plan.key_read[k] != static_cast<int64_t>(read.read)) continue;
      const KeyLayout& key = layout_.keys[k];
      for (int64_t t = 0; t < key.steps; ++t) {
        const int64_t row = r.frames[plan.key_read_begin[k] + t];
        rows.push_back(row);
        inputs.push_back(ImageInput{.bytes = index_->image_bytes(r.camera, row),
                                    .out = layout_.at(work.batch->buffer(), key, read.slot, t),
                                    .id = static_cast<uint64_t>(plan.row),
                                    .camera = static_cast<int>(r.camera)});
      }
    }
  }
  const auto [height, width] =
      layout_.camera_sizes[work.plans[reads[0].slot].reads[reads[0].read].camera];
  std::vector<Status> errors(inputs.size());
  const Clock::time_point start = core::now();
  Status status = decode_images_into(inputs, *transform_,
                                     ImageBatchOptions{.height = height,
                                                       .width = width,
                                                       .seed = options_.seed,
                                                       .epoch = work.epoch,
                                                       .threads = 1},
                                     errors);
  decode_ns_ += nanoseconds_since(start);
  int64_t image_bytes = 0;
  for (const ImageInput& input : inputs) image_bytes += static_cast<int64_t>(input.bytes.size());
  {
    core::MutexLock lock(&decode_mutex_);
    ++decode_calls_;
    decode_.bytes_read += image_bytes;
  }
  STOKER_RETURN_IF_ERROR(status);
  for (size_t k = 0; k < errors.size(); ++k) {
    if (!errors[k].ok()) {
      return errors[k].with_context("the image of row " + std::to_string(rows[k]));
    }
  }
  return Status();
}

Status EpisodeSource::finish(BatchWork& base) {
  std::vector<Status> errors;
  {
    core::MutexLock lock(&base.errors_mutex);
    errors = base.slot_errors;
  }
  STOKER_RETURN_IF_ERROR(settle_failures(*this, base, options_, errors));
  if (layout_.task_column) {
    // Each planned slot's task text, in slot order.
    BatchColumn task{.name = "task", .strings = true};
    task.offsets.push_back(0);
    for (int64_t slot : base.slots) {
      const int64_t t = index_->episode_task(base.batch->episodes()[slot]);
      if (t >= 0 && t < static_cast<int64_t>(row_keys_.tasks.size())) {
        const std::string& text = row_keys_.tasks[t];
        task.bytes.insert(task.bytes.end(), text.begin(), text.end());
      }
      task.offsets.push_back(static_cast<int64_t>(task.bytes.size()));
    }
    base.columns.push_back(std::move(task));
  }
  return Status();
}

std::vector<std::string> EpisodeSource::column_names() const {
  if (!layout_.task_column) return {};
  return {"task"};
}

int64_t EpisodeSource::replacement_pool() const {
  const std::vector<int64_t>& rows = replacement_rows_;
  return rows.empty() ? index_->num_rows() : static_cast<int64_t>(rows.size());
}

int64_t EpisodeSource::replacement(int64_t k) const {
  const std::vector<int64_t>& rows = replacement_rows_;
  return rows.empty() ? k : rows[k];
}

// Plans `row` into `slot` and decodes it read by read.
Status EpisodeSource::refill(BatchWork& base, int64_t slot, int64_t row) {
  auto& work = static_cast<EpisodeWork&>(base);  // made by new_work()
  Status status = plan_slot(work, slot, row);
  const WindowPlan& plan = work.plans[slot];
  for (size_t r = 0; r < plan.reads.size() && status.ok(); ++r) {
    status = decode_reads(work, {SlotRead{slot, r}});
    if (!status.ok()) status = status.with_context(describe_read(work, row, plan.reads[r].camera));
  }
  return status;
}

Result<const VideoReader*> EpisodeSource::reader_of(int64_t video) {
  core::MutexLock lock(&readers_mutex_);
  std::unique_ptr<VideoReader>& reader = readers_[video];
  if (reader == nullptr) {
    STOKER_ASSIGN_OR_RETURN(std::shared_ptr<const FrameTable> table, index_->frame_table(video));
    STOKER_ASSIGN_OR_RETURN(reader, VideoReader::open(index_->video_files()[video],
                                                      VideoReaderOptions{.frame_table = table}));
  }
  return reader.get();
}

void EpisodeSource::place_fields(const std::vector<size_t>& offsets, size_t batch_bytes) {
  layout_.fields = placed_at(*layout_.fields, offsets);
  layout_.batch_bytes = batch_bytes;
}

BuildStats EpisodeSource::stats() const {
  BuildStats s;
  auto seconds = [](const std::atomic<int64_t>& ns) { return ns.load() * 1e-9; };
  s.sampling_s = seconds(sampling_ns_);
  s.index_s = seconds(index_ns_);
  s.decode_s = seconds(decode_ns_);
  s.transform_s = seconds(transform_ns_);
  s.collate_s = seconds(collate_ns_);
  core::MutexLock lock(&decode_mutex_);
  s.decode = decode_;
  s.decode_calls = decode_calls_;
  s.bytes_read = decode_.bytes_read;
  return s;
}

void EpisodeSource::reset_stats() {
  for (auto* counter : {&sampling_ns_, &index_ns_, &decode_ns_, &transform_ns_, &collate_ns_}) {
    counter->store(0);
  }
  core::MutexLock lock(&decode_mutex_);
  decode_ = DecodeStats();
  decode_calls_ = 0;
}

}  // namespace stoker::pipeline

namespace stoker {

Result<std::unique_ptr<pipeline::BatchSource>> make_episode_source(
    std::shared_ptr<const EpisodeIndex> index, std::vector<WindowKey> keys,
    std::shared_ptr<const sampling::Sampler> sampler,
    std::shared_ptr<const ImageTransform> transform, const LoaderOptions& options,
    EpisodeOptions episode) {
  auto invalid = [](const std::string& why) {
    return Status(StatusCode::kInvalidArgument, "loader: " + why);
  };
  if (index == nullptr || sampler == nullptr || transform == nullptr) {
    return invalid("an index, a sampler and a transform are required");
  }
  if (index->num_rows() == 0) return invalid("the dataset is empty (it has no samples)");
  if (options.batch_size < 1) return invalid("batch_size must be at least 1");
  if (episode.row_keys.episode_index &&
      static_cast<int64_t>(episode.row_keys.episode_numbers.size()) != index->num_episodes()) {
    return invalid("row keys: " + std::to_string(episode.row_keys.episode_numbers.size()) +
                   " episode numbers for the index's " + std::to_string(index->num_episodes()) +
                   " episodes");
  }
  for (int64_t row : episode.replacement_rows) {
    if (row < 0 || row >= index->num_rows()) {
      return invalid("replacement row " + std::to_string(row) + " is outside the index's " +
                     std::to_string(index->num_rows()) + " rows");
    }
  }
  STOKER_ASSIGN_OR_RETURN(std::unique_ptr<WindowPlanner> planner,
                          WindowPlanner::create(index, std::move(keys)));
  Result<pipeline::BatchLayout> layout = pipeline::BatchLayout::create(
      *index, *planner, *transform, options.batch_size, episode.depth_cameras, episode.row_keys);
  if (!layout.ok()) return layout.status().with_context("loader");
  return std::unique_ptr<pipeline::BatchSource>(std::make_unique<pipeline::EpisodeSource>(
      std::move(index), std::move(planner), std::move(sampler), std::move(transform),
      std::move(layout).value(), options, std::move(episode)));
}

}  // namespace stoker
