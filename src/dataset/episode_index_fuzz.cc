// libFuzzer target: EpisodeIndex::open on arbitrary bytes (written to an in-memory file), then
// every lookup the planner and the Loader make: rows, episodes, frames, frame tables, columns,
// and windows reaching past the episodes' ends. Built by `make fuzz` / `make test-fuzz`; the
// fuzzing build skips the checksums, so that mutations reach the parser behind them.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "stoker/episode_index.h"
#include "stoker/window_plan.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int fd = memfd_create("stoker-index-fuzz", MFD_CLOEXEC);
  if (fd < 0) return 0;
  if (size > 0 && write(fd, data, size) != static_cast<ssize_t>(size)) {
    close(fd);
    return 0;
  }
  auto opened = stoker::EpisodeIndex::open("/proc/self/fd/" + std::to_string(fd));
  close(fd);  // the mapping keeps the bytes
  if (!opened.ok()) return 0;
  const std::shared_ptr<const stoker::EpisodeIndex>& index = *opened;
  const int64_t rows = std::min<int64_t>(index->num_rows(), 256);
  for (int64_t v = 0; v < static_cast<int64_t>(index->video_files().size()); ++v) {
    auto table = index->frame_table(v);
    if (table.ok()) (*table)->num_frames();
  }
  std::vector<stoker::WindowKey> keys;
  for (const std::string& camera : index->cameras()) {
    keys.push_back({.name = camera, .source = camera, .offsets = {-1000000, -1, 0, 1}});
  }
  for (const auto& column : index->columns()) {
    keys.push_back(
        {.name = column.name, .source = column.name, .offsets = {INT64_MIN, 0, INT64_MAX}});
    volatile uint8_t last = column.data.empty() ? 0 : column.data.back();
    (void)last;
  }
  auto planner = stoker::WindowPlanner::create(index, keys);
  for (int64_t row = 0; row < rows; ++row) {
    index->episode_of_row(row);
    index->row_timestamp(row);
    for (int64_t c = 0; c < index->num_cameras(); ++c) index->frame_of_row(c, row);
    if (planner.ok()) {
      stoker::WindowPlan plan;
      if ((*planner)->plan(row, &plan).ok()) static_cast<void>((*planner)->cost(row));
    }
  }
  // What the Python front attaches (see python/stoker/datasets/lerobot/index.py).
  if (const auto* array = index->attached_array("meta/episode_index")) {
    volatile uint8_t last = array->data.empty() ? 0 : array->data.back();
    (void)last;
  }
  static_cast<void>(index->attached_strings("meta/data_files"));
  index->stale_files();
  return 0;
}
