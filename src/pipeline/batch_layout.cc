#include "pipeline/batch_layout.h"

#include <algorithm>
#include <tuple>

#include "pipeline/batch_source.h"
#include "stoker/image_decoder.h"

namespace stoker::pipeline {

Result<BatchLayout> BatchLayout::create(const EpisodeIndex& index, const WindowPlanner& planner,
                                        const ImageTransform& transform, int64_t batch_size,
                                        std::span<const DepthCamera> depth_cameras,
                                        const RowKeys& row_keys) {
  BatchLayout layout;
  layout.depth.assign(index.num_cameras(), std::nullopt);
  layout.depth_values.assign(index.num_cameras(), {});
  for (const DepthCamera& depth : depth_cameras) {
    STOKER_RETURN_IF_ERROR(check_depth_camera(depth));
    const auto& cameras = index.cameras();
    const auto found = std::find(cameras.begin(), cameras.end(), depth.camera);
    auto invalid = [&](const std::string& why) {
      return Status(StatusCode::kInvalidArgument, "depth camera '" + depth.camera + "': " + why);
    };
    if (found == cameras.end()) return invalid("the index has no such camera");
    const int64_t c = found - cameras.begin();
    if (index.is_image_camera(c)) return invalid("it is an image camera; depth maps are video");
    if (layout.depth[c].has_value()) return invalid("it is named twice");
    layout.depth[c] = depth;
    if (depth.metric) layout.depth_values[c] = depth_value_table(depth);
  }
  auto fields = std::make_shared<std::vector<BatchField>>();
  size_t offset = 0;
  auto add_field = [&](std::string name, DType type, std::vector<int64_t> shape) {
    size_t bytes = dtype_size(type);
    for (int64_t side : shape) bytes *= static_cast<size_t>(side);
    fields->push_back(BatchField{std::move(name), type, std::move(shape), offset, bytes});
    offset += aligned(bytes);
    return fields->size() - 1;
  };
  layout.camera_sizes.assign(index.num_cameras(), {0, 0});
  for (size_t k = 0; k < planner.keys().size(); ++k) {
    const WindowKey& window_key = planner.keys()[k];
    KeyLayout key;
    key.camera = planner.key_camera()[k];
    key.column = planner.key_column()[k];
    const bool windowed = !window_key.offsets.empty();
    key.steps = windowed ? static_cast<int64_t>(window_key.offsets.size()) : 1;
    std::vector<int64_t> shape = {batch_size};
    if (windowed && !window_key.drop_time_axis) shape.push_back(key.steps);
    if (key.camera >= 0) {
      int source_height = 0, source_width = 0;
      if (index.is_image_camera(key.camera)) {
        // Every image of a camera must come out at this size (decode_images_into checks).
        Result<ImageInfo> image = probe_image(index.image_bytes(key.camera, 0));
        if (!image.ok()) {
          return image.status().with_context("camera '" + window_key.source + "', row 0");
        }
        source_height = image->height;
        source_width = image->width;
      } else {
        // The first episode this camera's video serves (a broken one has no frame table).
        int64_t episode = 0;
        while (episode + 1 < index.num_episodes() && index.is_broken(key.camera, episode)) {
          ++episode;
        }
        const int64_t video = index.video_of(key.camera, episode);
        Result<std::shared_ptr<const FrameTable>> table = index.frame_table(video);
        if (!table.ok()) return table.status().with_context("camera '" + window_key.source + "'");
        source_height = (*table)->stream().height;
        source_width = (*table)->stream().width;
      }
      std::tie(key.height, key.width) = transform.output_size(source_height, source_width);
      const std::optional<DepthCamera>& depth = layout.depth[key.camera];
      const int64_t channels = depth.has_value() ? 1 : 3;
      const DType type = depth.has_value() ? depth->dtype() : transform.options().dtype;
      key.step_bytes = static_cast<size_t>(key.height) * key.width * channels * dtype_size(type);
      if (transform.options().layout == Layout::kNCHW) {
        shape.insert(shape.end(), {channels, key.height, key.width});
      } else {
        shape.insert(shape.end(), {key.height, key.width, channels});
      }
      key.field = add_field(window_key.name, type, shape);
      layout.camera_sizes[key.camera] = {key.height, key.width};
    } else {
      const EpisodeIndex::ColumnView& column = index.columns()[key.column];
      key.step_bytes = dtype_size(column.type) * static_cast<size_t>(column.dim);
      if (column.dim != 1) shape.push_back(column.dim);  // a column of one value: a scalar
      key.field = add_field(window_key.name, column.type, shape);
    }
    if (windowed) {
      key.pad_field = static_cast<int64_t>(
          add_field(window_key.name + "_is_pad", DType::kBool, {batch_size, key.steps}));
    }
    layout.keys.push_back(key);
  }
  // The row keys, but those a window key is named as.
  auto free_name = [&](const std::string& name) {
    return std::none_of(planner.keys().begin(), planner.keys().end(),
                        [&](const WindowKey& key) { return key.name == name; });
  };
  auto row_field = [&](bool wanted, const char* name) -> int64_t {
    if (!wanted || !free_name(name)) return -1;
    return static_cast<int64_t>(add_field(name, DType::kInt64, {batch_size}));
  };
  layout.index_field = row_field(row_keys.index, "index");
  layout.episode_index_field = row_field(row_keys.episode_index, "episode_index");
  layout.frame_index_field = row_field(row_keys.frame_index, "frame_index");
  layout.task_index_field = row_field(row_keys.task_index, "task_index");
  layout.task_column = row_keys.task && free_name("task");
  layout.fields = std::move(fields);
  layout.batch_bytes = offset;
  return layout;
}

}  // namespace stoker::pipeline
