#include "stoker/window_plan.h"

#include <algorithm>
#include <limits>
#include <set>

namespace stoker {
namespace {

// The error for a sample of an episode that camera c's video could not serve when the index was
// built: its frames are not in the index (the caller should have left the episode out).
Status broken_episode(const EpisodeIndex& index, int64_t c, int64_t e) {
  std::string why;
  for (const BrokenEpisode& broken : index.broken_episodes()) {
    if (broken.camera == c && broken.episode == e) why = broken.why;
  }
  return Status(StatusCode::kCorruptData,
                "episode " + std::to_string(e) + ", camera '" + index.cameras()[c] + "', file '" +
                    index.video_files()[index.video_of(c, e)] +
                    "' was left out of the index (its video cannot serve it): " + why);
}

}  // namespace

Result<std::unique_ptr<WindowPlanner>> WindowPlanner::create(
    std::shared_ptr<const EpisodeIndex> index, std::vector<WindowKey> keys) {
  if (keys.empty()) return Status(StatusCode::kInvalidArgument, "the window has no keys");
  std::unique_ptr<WindowPlanner> planner(new WindowPlanner());
  std::set<std::string> names;
  for (const WindowKey& key : keys) {
    if (!names.insert(key.name).second) {
      return Status(StatusCode::kInvalidArgument, "output key '" + key.name + "' appears twice");
    }
    if (key.drop_time_axis && key.offsets.size() != 1) {
      return Status(StatusCode::kInvalidArgument,
                    "key '" + key.name + "' drops its time axis, which needs one offset, not " +
                        std::to_string(key.offsets.size()));
    }
    const auto& cameras = index->cameras();
    const auto camera = std::find(cameras.begin(), cameras.end(), key.source);
    int64_t column = -1;
    for (size_t k = 0; k < index->columns().size(); ++k) {
      if (index->columns()[k].name == key.source) column = static_cast<int64_t>(k);
    }
    if (camera == cameras.end() && column < 0) {
      std::string known;
      for (const auto& c : cameras) known += " '" + c + "'";
      for (const auto& c : index->columns()) known += " '" + c.name + "'";
      return Status(StatusCode::kInvalidArgument, "key '" + key.name + "' reads '" + key.source +
                                                      "', which the dataset does not have (it "
                                                      "has" +
                                                      known + ")");
    }
    planner->key_camera_.push_back(camera == cameras.end() ? -1 : camera - cameras.begin());
    planner->key_column_.push_back(camera == cameras.end() ? column : -1);
  }
  planner->index_ = std::move(index);
  planner->keys_ = std::move(keys);
  return planner;
}

Status WindowPlanner::plan(int64_t row, WindowPlan* plan) const {
  const EpisodeIndex& index = *index_;
  if (row < 0 || row >= index.num_rows()) {
    return Status(StatusCode::kInvalidArgument, "sample " + std::to_string(row) +
                                                    " is out of range (the dataset has " +
                                                    std::to_string(index.num_rows()) + ")");
  }
  const int64_t episode = index.episode_of_row(row);
  const int64_t first = index.episode_from_row(episode);
  const int64_t last = first + index.episode_length(episode) - 1;
  plan->row = row;
  plan->episode = episode;
  plan->rows.clear();
  plan->pad.clear();
  plan->key_begin.clear();
  plan->reads.clear();
  plan->key_read.assign(keys_.size(), -1);
  plan->key_read_begin.assign(keys_.size(), 0);
  for (size_t k = 0; k < keys_.size(); ++k) {
    plan->key_begin.push_back(static_cast<int64_t>(plan->rows.size()));
    const std::vector<int64_t>& offsets = keys_[k].offsets;
    const size_t steps = offsets.empty() ? 1 : offsets.size();
    for (size_t t = 0; t < steps; ++t) {
      const int64_t offset = offsets.empty() ? 0 : offsets[t];
      int64_t wanted = 0;
      if (__builtin_add_overflow(row, offset, &wanted)) {  // far outside: clamped all the same
        wanted =
            offset > 0 ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int64_t>::min();
      }
      const int64_t clamped = std::clamp(wanted, first, last);
      plan->rows.push_back(clamped);
      plan->pad.push_back(clamped != wanted ? 1 : 0);
    }
    const int64_t camera = key_camera_[k];
    if (camera < 0) continue;
    auto read = std::find_if(plan->reads.begin(), plan->reads.end(),
                             [&](const WindowPlan::Read& r) { return r.camera == camera; });
    const bool image = index.is_image_camera(camera);
    if (!image && index.is_broken(camera, episode)) return broken_episode(index, camera, episode);
    if (read == plan->reads.end()) {
      plan->reads.push_back(
          {.camera = camera, .video_file = image ? -1 : index.video_of(camera, episode)});
      read = plan->reads.end() - 1;
    }
    plan->key_read[k] = read - plan->reads.begin();
    plan->key_read_begin[k] = static_cast<int64_t>(read->frames.size());
    for (size_t t = plan->rows.size() - steps; t < plan->rows.size(); ++t) {
      read->frames.push_back(image ? plan->rows[t] : index.frame_of_row(camera, plan->rows[t]));
    }
  }
  plan->key_begin.push_back(static_cast<int64_t>(plan->rows.size()));
  return Status();
}

Result<double> WindowPlanner::cost(int64_t row) const {
  WindowPlan window;
  STOKER_RETURN_IF_ERROR(plan(row, &window));
  double total = 0;
  for (WindowPlan::Read& read : window.reads) {
    if (index_->is_image_camera(read.camera)) {
      for (int64_t r : read.frames) {
        total += 8.0 * static_cast<double>(index_->image_bytes(read.camera, r).size());
      }
      continue;
    }
    STOKER_ASSIGN_OR_RETURN(std::shared_ptr<const FrameTable> table,
                            index_->frame_table(read.video_file));
    std::sort(read.frames.begin(), read.frames.end());
    int64_t packets = 0;
    int64_t run_start = -1;  // sync packet of the current run of frames
    int64_t run_end = -1;    // last packet the run needs
    for (int64_t frame : read.frames) {
      if (frame >= table->num_frames()) {
        return Status(StatusCode::kCorruptData, "frame " + std::to_string(frame) +
                                                    " is beyond the end of video '" +
                                                    index_->video_files()[read.video_file] + "'");
      }
      const int64_t sync = table->sync_packet_of_frame(frame);
      const int64_t packet = table->packet_of_frame(frame);
      if (run_start < 0 || sync > run_end + 1) {  // a new seek, as the reader would make
        if (run_start >= 0) packets += run_end - run_start + 1;
        run_start = sync;
        run_end = packet;
      } else {
        run_end = std::max(run_end, packet);
      }
    }
    if (run_start >= 0) packets += run_end - run_start + 1;
    total += static_cast<double>(packets) * table->stream().width * table->stream().height;
  }
  return total;
}

}  // namespace stoker
