#include "stoker/episode_index.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>

#include "core/byte_io.h"
#include "core/crc32c.h"
#include "core/env.h"
#include "core/file.h"
#include "core/fuzzing.h"
#include "core/mutex.h"
#include "dataset/episode_placement.h"
#include "stoker/byte_slice.h"
#include "stoker/cores.h"
#include "stoker/remote_source.h"
#include "stoker/video_reader.h"

namespace stoker {
namespace {

// A video's identity as its frame table records it: a file's size and modification time; for a
// slice of a file (stoker/byte_slice.h), the slice's length and the file's time, as long as the
// file still holds the slice.
Result<core::FileIdentity> stat_video(const std::string& path) {
  std::optional<ByteSlice> slice = parse_byte_slice(path);
  if (!slice.has_value()) return core::stat_file(path);
  STOKER_ASSIGN_OR_RETURN(core::FileIdentity whole, core::stat_file(slice->whole));
  if (whole.size < slice->range.end()) {
    return Status(StatusCode::kCorruptData, "'" + slice->whole + "' is shorter than the slice");
  }
  return core::FileIdentity{.size = slice->range.length, .mtime_ns = whole.mtime_ns};
}

using core::ByteReader;
using core::ByteWriter;

constexpr char kMagic[8] = {'S', 'T', 'K', 'E', 'P', 'I', 'D', 'X'};
// 2: the file's size and CRC-32C checksums of the header and of everything after it.
// 3: its frame tables know each packet's byte position (frame table format 3).
// 4: image cameras (per row, an image's place in a side file of encoded images).
// 5: broken episodes (episode, camera, why) after the columns; an unscanned video has an empty
//    frame table.
// 6: attached arrays and lists of strings after the broken episodes.
constexpr uint32_t kFormatVersion = 6;
constexpr size_t kMaxListed = 20;

struct Section {
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

// The fixed-size start of an index file. Arrays follow, each 8-byte aligned; `records` holds
// the variable-length parts (names, paths, file stats, column descriptors).
struct Header {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;
  double fps;
  int64_t num_episodes;
  int64_t num_rows;
  int64_t num_cameras;        // video cameras
  int64_t num_image_cameras;  // image cameras, after them
  Section episode_from_row, episode_length, episode_task;
  Section row_episode, row_timestamp;
  Section episode_video, episode_first_frame, episode_drift;
  Section image_offset, image_length;  // [image camera][row]
  Section records;
  uint64_t file_bytes;  // the whole file
  uint32_t body_crc;    // of the bytes after the header
  uint32_t header_crc;  // of the header, with this field 0
};

// Appends an array 8-byte aligned, so the mapped file can be read in place.
template <typename T>
Section append_array(ByteWriter& w, std::span<const T> values) {
  w.align(8);
  const Section section{w.size(), values.size_bytes()};
  w.bytes(values.data(), values.size_bytes());
  return section;
}

Status invalid(const std::string& why) { return Status(StatusCode::kInvalidArgument, why); }

// A column's element type as the file stores it.
constexpr DType kColumnTypes[] = {DType::kFloat32, DType::kFloat64, DType::kInt64};

int32_t column_type_code(DType type) {
  for (int32_t code = 0; code < static_cast<int32_t>(std::size(kColumnTypes)); ++code) {
    if (kColumnTypes[code] == type) return code;
  }
  return -1;
}

// An attached array's element type as the file stores it.
constexpr DType kAttachedTypes[] = {DType::kInt32, DType::kInt64, DType::kFloat32, DType::kFloat64};

int32_t attached_type_code(DType type) {
  for (int32_t code = 0; code < static_cast<int32_t>(std::size(kAttachedTypes)); ++code) {
    if (kAttachedTypes[code] == type) return code;
  }
  return -1;
}

std::string describe(const EpisodeIndexSource& s, size_t c, size_t e) {
  return "episode " + std::to_string(e) + ", camera '" + s.cameras[c] + "', file '" +
         s.video_files[s.episode_video[c][e]] + "'";
}

std::string list_problems(const EpisodeIndexSource& s,
                          const std::vector<PlacementProblem>& problems) {
  std::ostringstream out;
  out << problems.size() << (problems.size() == 1 ? " problem" : " problems") << ":";
  for (size_t k = 0; k < problems.size() && k < kMaxListed; ++k) {
    out << "\n  " << describe(s, problems[k].camera, problems[k].episode) << ": "
        << problems[k].why;
  }
  if (problems.size() > kMaxListed)
    out << "\n  ... and " << problems.size() - kMaxListed << " more";
  return out.str();
}

Status check_source(const EpisodeIndexSource& s) {
  const size_t episodes = s.episode_from_row.size();
  if (episodes == 0) return invalid("the dataset has no episodes");
  if (!(s.fps > 0)) return invalid("fps must be positive");
  if (s.episode_length.size() != episodes || s.episode_task.size() != episodes) {
    return invalid("episode columns differ in length");
  }
  int64_t row = 0;
  for (size_t e = 0; e < episodes; ++e) {
    if (s.episode_from_row[e] != row || s.episode_length[e] <= 0) {
      return invalid("episode " + std::to_string(e) + " starts at row " +
                     std::to_string(s.episode_from_row[e]) + " with " +
                     std::to_string(s.episode_length[e]) + " rows; expected a non-empty episode " +
                     "starting at row " + std::to_string(row));
    }
    row += s.episode_length[e];
  }
  if (static_cast<int64_t>(s.row_timestamp.size()) != row) {
    return invalid("there are " + std::to_string(s.row_timestamp.size()) + " timestamps for " +
                   std::to_string(row) + " rows");
  }
  if (s.episode_video.size() != s.cameras.size() ||
      s.episode_video_offset.size() != s.cameras.size()) {
    return invalid("per-camera episode columns do not match the cameras");
  }
  for (size_t c = 0; c < s.cameras.size(); ++c) {
    if (s.episode_video[c].size() != episodes || s.episode_video_offset[c].size() != episodes) {
      return invalid("camera '" + s.cameras[c] + "' does not list every episode");
    }
    for (int64_t v : s.episode_video[c]) {
      if (v < 0 || v >= static_cast<int64_t>(s.video_files.size())) {
        return invalid("camera '" + s.cameras[c] + "' names video file " + std::to_string(v) +
                       ", which does not exist");
      }
    }
  }
  const size_t image_cameras = s.image_cameras.size();
  if (s.image_offset.size() != image_cameras || s.image_length.size() != image_cameras) {
    return invalid("per-camera image columns do not match the image cameras");
  }
  if (image_cameras > 0 && s.image_file.empty()) {
    return invalid("image cameras need the file of their images");
  }
  for (size_t c = 0; c < image_cameras; ++c) {
    if (std::find(s.cameras.begin(), s.cameras.end(), s.image_cameras[c]) != s.cameras.end()) {
      return invalid("camera '" + s.image_cameras[c] + "' is both a video and an image camera");
    }
    if (s.image_offset[c].size() != static_cast<size_t>(row) ||
        s.image_length[c].size() != static_cast<size_t>(row)) {
      return invalid("image camera '" + s.image_cameras[c] +
                     "' does not have an image for each "
                     "of the " +
                     std::to_string(row) + " rows");
    }
    for (int64_t r = 0; r < row; ++r) {
      if (s.image_offset[c][r] < 0 || s.image_length[c][r] <= 0) {
        return invalid("image camera '" + s.image_cameras[c] + "' has no image at row " +
                       std::to_string(r));
      }
    }
  }
  std::set<std::string> names;
  for (const auto& array : s.attached_arrays) {
    if (!names.insert(array.name).second) {
      return invalid("two attached arrays are named '" + array.name + "'");
    }
    if (attached_type_code(array.type) < 0 || array.data.size() % dtype_size(array.type) != 0) {
      return invalid("attached array '" + array.name + "' does not hold a whole number of " +
                     "int32, int64, float32 or float64 values");
    }
  }
  names.clear();
  for (const auto& strings : s.attached_strings) {
    if (!names.insert(strings.name).second) {
      return invalid("two attached lists of strings are named '" + strings.name + "'");
    }
  }
  for (const auto& column : s.columns) {
    if (column_type_code(column.type) < 0) {
      return invalid("column '" + column.name + "' holds " + dtype_name(column.type) +
                     "; columns hold float32, float64 or int64");
    }
    if (column.dim <= 0 ||
        column.data.size() != static_cast<size_t>(row) * column.dim * dtype_size(column.type)) {
      return invalid("column '" + column.name + "' does not hold " + std::to_string(row) +
                     " rows of " + std::to_string(column.dim) + " values");
    }
  }
  return Status();
}

struct ScannedVideo {
  std::shared_ptr<const FrameTable> table;
  Status status;
};

// Builds every video's frame table on `threads` threads; the calling thread reports progress.
std::vector<ScannedVideo> scan_videos(const std::vector<std::string>& paths, int threads,
                                      const std::function<void(int64_t, int64_t)>& progress) {
  std::vector<ScannedVideo> scanned(paths.size());
  const auto total = static_cast<int64_t>(paths.size());
  core::parallel_for(
      paths.size(), threads,
      [&](size_t v) {
        Result<std::unique_ptr<VideoReader>> reader = VideoReader::open(paths[v]);
        if (reader.ok()) {
          scanned[v].table = (*reader)->shared_frame_table();
        } else {
          scanned[v].status = reader.status();
        }
      },
      [&](size_t done) {
        if (progress) progress(static_cast<int64_t>(done), total);
      });
  return scanned;
}

}  // namespace

// The frame tables decoded from the mapping so far, one slot per video file.
struct EpisodeIndex::FrameTables {
  core::Mutex mutex;
  std::vector<std::shared_ptr<const FrameTable>> decoded GUARDED_BY(mutex);
};

EpisodeIndex::EpisodeIndex() : tables_(std::make_unique<FrameTables>()) {}
EpisodeIndex::~EpisodeIndex() = default;

Status EpisodeIndex::build(const EpisodeIndexSource& source, const std::string& path,
                           const EpisodeIndexBuildOptions& options,
                           EpisodeIndexBuildReport* report) {
  const auto started = core::now();
  STOKER_RETURN_IF_ERROR(check_source(source));
  const int threads = options.threads > 0 ? options.threads : usable_cores();
  std::vector<ScannedVideo> videos = scan_videos(source.video_files, threads, options.progress);

  std::vector<PlacementProblem> problems;
  const size_t episodes = source.episode_from_row.size();
  const size_t cameras = source.cameras.size();
  for (size_t c = 0; c < cameras; ++c) {
    for (size_t e = 0; e < episodes; ++e) {
      const int64_t v = source.episode_video[c][e];
      const Status& failed = videos[v].status;
      if (failed.ok()) continue;
      // The problem names the file already: its message need not say it again.
      std::string why = failed.message();
      const std::string named = "video '" + source.video_files[v] + "': ";
      if (why.starts_with(named)) why.erase(0, named.size());
      problems.push_back({static_cast<int64_t>(e), static_cast<int64_t>(c), v, std::move(why)});
    }
  }
  std::vector<const FrameTable*> tables;
  for (const ScannedVideo& video : videos) tables.push_back(video.table.get());
  std::vector<int64_t> first_frame(cameras * episodes, 0);
  std::vector<double> drift(cameras * episodes, 0);
  for (size_t c = 0; c < cameras; ++c) {
    STOKER_ASSIGN_OR_RETURN(EpisodePlacement placed, place_episodes(source, c, tables));
    for (size_t e = 0; e < episodes; ++e) {
      // An episode of a file that could not be scanned is unplaced, and a problem already.
      if (placed.first_frame[e] < 0) continue;
      first_frame[c * episodes + e] = placed.first_frame[e];
      drift[c * episodes + e] = placed.drift[e];
    }
    problems.insert(problems.end(), std::make_move_iterator(placed.problems.begin()),
                    std::make_move_iterator(placed.problems.end()));
  }
  if (!problems.empty() && !options.keep_broken_episodes) {
    return Status(StatusCode::kCorruptData, list_problems(source, problems));
  }
  for (const PlacementProblem& problem : problems) {  // never read: kept out of the report's drift
    first_frame[problem.camera * episodes + problem.episode] = 0;
    drift[problem.camera * episodes + problem.episode] = 0;
  }

  if (!source.image_cameras.empty()) {
    Result<core::FileIdentity> images = core::stat_file(source.image_file);
    if (!images.ok()) return images.status().with_context("the index's image file");
    for (size_t c = 0; c < source.image_cameras.size(); ++c) {
      for (size_t r = 0; r < source.image_offset[c].size(); ++r) {
        if (source.image_offset[c][r] > images->size - source.image_length[c][r]) {
          return invalid("image camera '" + source.image_cameras[c] + "', row " +
                         std::to_string(r) + ": its image lies beyond the end of '" +
                         source.image_file + "'");
        }
      }
    }
  }

  std::vector<core::FileIdentity> tracked(source.tracked_files.size());
  for (size_t k = 0; k < tracked.size(); ++k) {
    Result<core::FileIdentity> identity = core::stat_file(source.tracked_files[k]);
    if (!identity.ok()) return identity.status().with_context(source.tracked_files[k]);
    tracked[k] = *identity;
  }

  // Arrays, then frame tables and columns, then the records that locate them.
  Header header{};
  std::memcpy(header.magic, kMagic, sizeof(kMagic));
  header.version = kFormatVersion;
  header.header_bytes = sizeof(Header);
  header.fps = source.fps;
  header.num_episodes = static_cast<int64_t>(episodes);
  header.num_rows = static_cast<int64_t>(source.row_timestamp.size());
  header.num_cameras = static_cast<int64_t>(cameras);
  header.num_image_cameras = static_cast<int64_t>(source.image_cameras.size());
  ByteWriter w(sizeof(Header));
  header.episode_from_row = append_array<int64_t>(w, source.episode_from_row);
  header.episode_length = append_array<int64_t>(w, source.episode_length);
  header.episode_task = append_array<int64_t>(w, source.episode_task);
  std::vector<int32_t> row_episode(source.row_timestamp.size());
  for (size_t e = 0; e < episodes; ++e) {
    std::fill_n(row_episode.begin() + source.episode_from_row[e], source.episode_length[e],
                static_cast<int32_t>(e));
  }
  header.row_episode = append_array<int32_t>(w, row_episode);
  header.row_timestamp = append_array<double>(w, source.row_timestamp);
  std::vector<int64_t> episode_video;
  for (const auto& per_camera : source.episode_video) {
    episode_video.insert(episode_video.end(), per_camera.begin(), per_camera.end());
  }
  header.episode_video = append_array<int64_t>(w, episode_video);
  header.episode_first_frame = append_array<int64_t>(w, first_frame);
  header.episode_drift = append_array<double>(w, drift);
  std::vector<int64_t> image_offset, image_length;
  for (size_t c = 0; c < source.image_cameras.size(); ++c) {
    image_offset.insert(image_offset.end(), source.image_offset[c].begin(),
                        source.image_offset[c].end());
    image_length.insert(image_length.end(), source.image_length[c].begin(),
                        source.image_length[c].end());
  }
  header.image_offset = append_array<int64_t>(w, image_offset);
  header.image_length = append_array<int64_t>(w, image_length);

  ByteWriter records;
  records.pod<uint64_t>(cameras);
  for (const std::string& camera : source.cameras) records.string(camera);
  for (const std::string& camera : source.image_cameras) records.string(camera);
  records.string(source.image_file);
  records.pod<uint64_t>(videos.size());
  for (size_t v = 0; v < videos.size(); ++v) {
    // A file that could not be scanned (its episodes are broken) has no frame table; its size
    // and time are still tracked, so that repairing it makes the index stale.
    const std::shared_ptr<const FrameTable>& scanned = videos[v].table;
    const std::vector<uint8_t> table = scanned ? scanned->serialize() : std::vector<uint8_t>();
    int64_t file_size = -1, file_mtime_ns = -1;
    if (scanned) {
      file_size = scanned->file_size();
      file_mtime_ns = scanned->file_mtime_ns();
    } else if (Result<core::FileIdentity> identity = stat_video(source.video_files[v]);
               identity.ok()) {
      file_size = identity->size;
      file_mtime_ns = identity->mtime_ns;
    }
    const Section section = append_array<uint8_t>(w, table);
    records.string(source.video_files[v]);
    records.pod<int64_t>(file_size);
    records.pod<int64_t>(file_mtime_ns);
    records.pod<uint64_t>(section.offset);
    records.pod<uint64_t>(section.bytes);
  }
  records.pod<uint64_t>(tracked.size());
  for (size_t k = 0; k < tracked.size(); ++k) {
    records.string(source.tracked_files[k]);
    records.pod<int64_t>(tracked[k].size);
    records.pod<int64_t>(tracked[k].mtime_ns);
  }
  records.pod<uint64_t>(source.columns.size());
  for (const auto& column : source.columns) {
    const Section section = append_array<uint8_t>(w, column.data);
    records.string(column.name);
    records.pod<int32_t>(column_type_code(column.type));
    records.pod<int64_t>(column.dim);
    records.pod<uint64_t>(section.offset);
    records.pod<uint64_t>(section.bytes);
  }
  records.pod<uint64_t>(problems.size());
  for (const PlacementProblem& problem : problems) {
    records.pod<int64_t>(problem.episode);
    records.pod<int64_t>(problem.camera);
    records.string(problem.why);
  }
  records.pod<uint64_t>(source.attached_arrays.size());
  for (const auto& array : source.attached_arrays) {
    const Section section = append_array<uint8_t>(w, array.data);
    records.string(array.name);
    records.pod<int32_t>(attached_type_code(array.type));
    records.pod<uint64_t>(section.offset);
    records.pod<uint64_t>(section.bytes);
  }
  records.pod<uint64_t>(source.attached_strings.size());
  for (const auto& strings : source.attached_strings) {
    // Each list in a section of its own, decoded only when asked for.
    ByteWriter list;
    list.pod<uint64_t>(strings.values.size());
    for (const std::string& value : strings.values) list.string(value);
    const Section section = append_array<uint8_t>(w, list.buffer());
    records.string(strings.name);
    records.pod<uint64_t>(section.offset);
    records.pod<uint64_t>(section.bytes);
  }
  header.records = append_array<uint8_t>(w, records.buffer());
  header.file_bytes = w.size();
  header.body_crc = core::crc32c(std::span(w.buffer()).subspan(sizeof(Header)));
  header.header_crc = 0;
  header.header_crc =
      core::crc32c(std::span(reinterpret_cast<const uint8_t*>(&header), sizeof(header)));
  std::memcpy(w.buffer().data(), &header, sizeof(header));

  STOKER_RETURN_IF_ERROR(
      core::write_file_atomically(path, w.buffer()).with_context("cannot write the index"));

  if (report != nullptr) {
    report->seconds = std::chrono::duration<double>(core::now() - started).count();
    report->max_drift_s.assign(videos.size(), 0.0);
    for (size_t c = 0; c < cameras; ++c) {
      for (size_t e = 0; e < episodes; ++e) {
        double& worst = report->max_drift_s[source.episode_video[c][e]];
        worst = std::max(worst, std::abs(drift[c * episodes + e]));
      }
    }
  }
  return Status();
}

Result<std::shared_ptr<const EpisodeIndex>> EpisodeIndex::open(const std::string& path) {
  auto malformed = [&](const std::string& why) {
    return Status(StatusCode::kCorruptData, "index '" + path + "' is malformed: " + why);
  };
  Result<std::unique_ptr<core::MappedFile>> mapped = core::MappedFile::open(path);
  if (!mapped.ok()) return mapped.status().with_context("index");
  std::shared_ptr<EpisodeIndex> index(new EpisodeIndex());
  index->mapping_ = std::move(mapped).value();
  const uint8_t* base = index->mapping_->bytes().data();
  const size_t size = index->mapping_->bytes().size();
  if (size < sizeof(Header)) return malformed("shorter than its header");

  Header header;
  std::memcpy(&header, base, sizeof(header));
  if (std::memcmp(header.magic, kMagic, sizeof(kMagic)) != 0) {
    return malformed("not a stoker episode index");
  }
  if (header.version != kFormatVersion || header.header_bytes != sizeof(Header)) {
    return malformed("format version " + std::to_string(header.version) + ", this stoker reads " +
                     std::to_string(kFormatVersion));
  }
  // Every byte is checked before any is used: a damaged index is refused (and rebuilt by
  // load_index), never read into wrong samples.
  Header unchecked = header;
  unchecked.header_crc = 0;
  if (core::crc32c(std::span(reinterpret_cast<const uint8_t*>(&unchecked), sizeof(unchecked))) !=
          header.header_crc &&
      !core::kFuzzing) {
    return malformed("the header's checksum does not match (the file was damaged)");
  }
  if (header.file_bytes != size && !core::kFuzzing) {
    return malformed("it holds " + std::to_string(size) + " bytes, its header says " +
                     std::to_string(header.file_bytes) + " (truncated or extended)");
  }
  if (core::crc32c(std::span(base + sizeof(Header), size - sizeof(Header))) != header.body_crc &&
      !core::kFuzzing) {
    return malformed("its checksum does not match (the file was damaged)");
  }
  // The check touched every page: let go of them, so that a process holds only the pages its
  // lookups touch (a 10^6-episode index is ~300 MB, a lookup reads a few of them).
  index->mapping_->release_resident();
  const int64_t episodes = header.num_episodes;
  const int64_t rows = header.num_rows;
  const int64_t cameras = header.num_cameras;
  const int64_t image_cameras = header.num_image_cameras;
  // Every count sizes an array in the file, so none exceeds its size: products of them, and
  // offsets made from them, cannot overflow.
  const int64_t file_size = static_cast<int64_t>(size);
  if (episodes <= 0 || rows <= 0 || cameras < 0 || episodes > file_size || rows > file_size ||
      cameras > file_size || cameras * episodes > file_size || image_cameras < 0 ||
      image_cameras > file_size || image_cameras * rows > file_size || !(header.fps > 0)) {
    return malformed("bad counts");
  }
  auto bytes_of = [&](const Section& s, size_t alignment) -> std::span<const uint8_t> {
    if (s.offset > size || s.bytes > size - s.offset || s.offset % alignment != 0) return {};
    return std::span(base + s.offset, s.bytes);
  };
  auto array = [&]<typename T>(const Section& s, int64_t count, std::span<const T>* out) {
    std::span<const uint8_t> b = bytes_of(s, alignof(T));
    if (b.data() == nullptr || b.size() != static_cast<size_t>(count) * sizeof(T)) return false;
    *out = std::span(reinterpret_cast<const T*>(b.data()), static_cast<size_t>(count));
    return true;
  };
  EpisodeIndex& x = *index;
  if (!array(header.episode_from_row, episodes, &x.episode_from_row_) ||
      !array(header.episode_length, episodes, &x.episode_length_) ||
      !array(header.episode_task, episodes, &x.episode_task_) ||
      !array(header.row_episode, rows, &x.row_episode_) ||
      !array(header.row_timestamp, rows, &x.row_timestamp_) ||
      !array(header.episode_video, cameras * episodes, &x.episode_video_) ||
      !array(header.episode_first_frame, cameras * episodes, &x.episode_first_frame_) ||
      !array(header.episode_drift, cameras * episodes, &x.episode_drift_) ||
      !array(header.image_offset, image_cameras * rows, &x.image_offset_) ||
      !array(header.image_length, image_cameras * rows, &x.image_length_)) {
    return malformed("an array lies outside the file");
  }
  x.fps_ = header.fps;
  x.checksum_ = header.body_crc;

  std::span<const uint8_t> record_bytes = bytes_of(header.records, 1);
  if (record_bytes.data() == nullptr) return malformed("records lie outside the file");
  ByteReader r(record_bytes);
  uint64_t count = 0;
  if (!r.pod(&count) || count != static_cast<uint64_t>(cameras)) return malformed("cameras");
  x.num_video_cameras_ = cameras;
  x.cameras_.resize(cameras + image_cameras);
  for (std::string& camera : x.cameras_) {
    if (!r.string(&camera, size)) return malformed("cameras");
  }
  if (!r.string(&x.image_file_, size)) return malformed("image file");
  if (!r.pod(&count) || count > size) return malformed("video files");
  x.video_files_.resize(count);
  x.frame_table_bytes_.resize(count);
  {
    core::MutexLock lock(&x.tables_->mutex);
    x.tables_->decoded.resize(count);
  }
  for (uint64_t v = 0; v < count; ++v) {
    TrackedFile file;
    Section table;
    if (!r.string(&file.path, size) || !r.pod(&file.size) || !r.pod(&file.mtime_ns) ||
        !r.pod(&table.offset) || !r.pod(&table.bytes)) {
      return malformed("video files");
    }
    x.frame_table_bytes_[v] = bytes_of(table, 1);
    if (x.frame_table_bytes_[v].data() == nullptr) return malformed("a frame table");
    x.video_files_[v] = file.path;
    x.tracked_.push_back(std::move(file));
  }
  if (!r.pod(&count) || count > size) return malformed("tracked files");
  for (uint64_t k = 0; k < count; ++k) {
    TrackedFile file;
    if (!r.string(&file.path, size) || !r.pod(&file.size) || !r.pod(&file.mtime_ns)) {
      return malformed("tracked files");
    }
    x.tracked_.push_back(std::move(file));
  }
  if (!r.pod(&count) || count > size) return malformed("columns");
  for (uint64_t k = 0; k < count; ++k) {
    ColumnView column;
    int32_t type = 0;
    Section data;
    if (!r.string(&column.name, size) || !r.pod(&type) || !r.pod(&column.dim) ||
        !r.pod(&data.offset) || !r.pod(&data.bytes) || type < 0 ||
        type >= static_cast<int32_t>(std::size(kColumnTypes)) || column.dim <= 0 ||
        column.dim > file_size) {
      return malformed("columns");
    }
    column.type = kColumnTypes[type];
    column.data = bytes_of(data, 1);
    size_t column_bytes = 0;
    if (column.data.data() == nullptr ||
        __builtin_mul_overflow(static_cast<size_t>(rows) * dtype_size(column.type),
                               static_cast<size_t>(column.dim), &column_bytes) ||
        column.data.size() != column_bytes) {
      return malformed("column '" + column.name + "'");
    }
    x.columns_.push_back(std::move(column));
  }
  if (!r.pod(&count) || count > size) return malformed("broken episodes");
  if (count > 0) x.broken_mask_.assign(static_cast<size_t>(cameras * episodes), 0);
  for (uint64_t k = 0; k < count; ++k) {
    BrokenEpisode broken;
    if (!r.pod(&broken.episode) || !r.pod(&broken.camera) || !r.string(&broken.why, size) ||
        broken.episode < 0 || broken.episode >= episodes || broken.camera < 0 ||
        broken.camera >= cameras) {
      return malformed("broken episodes");
    }
    x.broken_mask_[broken.camera * episodes + broken.episode] = 1;
    x.broken_.push_back(std::move(broken));
  }
  if (!r.pod(&count) || count > size) return malformed("attached arrays");
  for (uint64_t k = 0; k < count; ++k) {
    AttachedArrayView array;
    int32_t type = 0;
    Section data;
    if (!r.string(&array.name, size) || !r.pod(&type) || !r.pod(&data.offset) ||
        !r.pod(&data.bytes) || type < 0 ||
        type >= static_cast<int32_t>(std::size(kAttachedTypes))) {
      return malformed("attached arrays");
    }
    array.type = kAttachedTypes[type];
    array.data = bytes_of(data, dtype_size(array.type));
    if (array.data.data() == nullptr || array.data.size() % dtype_size(array.type) != 0) {
      return malformed("attached array '" + array.name + "'");
    }
    x.attached_arrays_.push_back(std::move(array));
  }
  if (!r.pod(&count) || count > size) return malformed("attached strings");
  for (uint64_t k = 0; k < count; ++k) {
    std::string name;
    Section data;
    if (!r.string(&name, size) || !r.pod(&data.offset) || !r.pod(&data.bytes)) {
      return malformed("attached strings");
    }
    std::span<const uint8_t> bytes = bytes_of(data, 1);
    if (bytes.data() == nullptr) return malformed("attached strings '" + name + "'");
    x.attached_strings_.emplace_back(std::move(name), bytes);
  }
  if (!r.at_end()) return malformed("trailing records");

  // Every stored reference must hold, so lookups never leave the arrays.
  for (int64_t e = 0, row = 0; e < episodes; row += x.episode_length_[e], ++e) {
    if (x.episode_from_row_[e] != row || x.episode_length_[e] <= 0 ||
        x.episode_length_[e] > rows - row) {
      return malformed("episode " + std::to_string(e) + " rows");
    }
  }
  for (int64_t row = 0; row < rows; ++row) {
    const int32_t e = x.row_episode_[row];
    if (e < 0 || e >= episodes || row < x.episode_from_row_[e] ||
        row >= x.episode_from_row_[e] + x.episode_length_[e]) {
      return malformed("row " + std::to_string(row) + " episode");
    }
  }
  for (int64_t k = 0; k < cameras * episodes; ++k) {
    if (x.episode_video_[k] < 0 ||
        x.episode_video_[k] >= static_cast<int64_t>(x.video_files_.size()) ||
        x.episode_first_frame_[k] < 0) {
      return malformed("episode video references");
    }
  }
  if (image_cameras > 0) {
    // The side file is part of the index: missing or changed, the index is rebuilt.
    Result<std::unique_ptr<core::MappedFile>> images = core::MappedFile::open(x.image_file_);
    if (!images.ok()) return malformed("its image file: " + images.status().message());
    x.image_mapping_ = std::move(images).value();
    x.image_data_ = x.image_mapping_->bytes();
    const auto image_bytes = static_cast<int64_t>(x.image_data_.size());
    for (int64_t k = 0; k < image_cameras * rows; ++k) {
      if (x.image_offset_[k] < 0 || x.image_length_[k] <= 0 ||
          x.image_offset_[k] > image_bytes - x.image_length_[k]) {
        return malformed("image " + std::to_string(k % rows) + " of camera '" +
                         x.cameras_[cameras + k / rows] + "' lies outside '" + x.image_file_ + "'");
      }
    }
  }
  return std::shared_ptr<const EpisodeIndex>(std::move(index));
}

std::vector<std::string> EpisodeIndex::stale_files() const {
  std::vector<std::string> stale;
  for (const TrackedFile& file : tracked_) {
    // A remote object's version is its ETag, checked by every ranged read (If-Match) and by
    // the key its dataset's index is cached under, not by a request per object here.
    if (is_remote_url(file.path)) continue;
    Result<core::FileIdentity> now = stat_video(file.path);
    if (!now.ok() || now->size != file.size || now->mtime_ns != file.mtime_ns) {
      stale.push_back(file.path);
    }
  }
  return stale;
}

const EpisodeIndex::AttachedArrayView* EpisodeIndex::attached_array(const std::string& name) const {
  for (const AttachedArrayView& array : attached_arrays_) {
    if (array.name == name) return &array;
  }
  return nullptr;
}

Result<std::vector<std::string>> EpisodeIndex::attached_strings(const std::string& name) const {
  for (const auto& [listed, bytes] : attached_strings_) {
    if (listed != name) continue;
    ByteReader r(bytes);
    uint64_t count = 0;
    std::vector<std::string> values;
    if (!r.pod(&count) || count > bytes.size()) {
      return Status(StatusCode::kCorruptData, "attached strings '" + name + "' are malformed");
    }
    values.resize(count);
    for (std::string& value : values) {
      if (!r.string(&value, bytes.size())) {
        return Status(StatusCode::kCorruptData, "attached strings '" + name + "' are malformed");
      }
    }
    if (!r.at_end()) {
      return Status(StatusCode::kCorruptData, "attached strings '" + name + "' are malformed");
    }
    return values;
  }
  return Status(StatusCode::kNotFound, "the index has no attached strings '" + name + "'");
}

Result<std::shared_ptr<const FrameTable>> EpisodeIndex::frame_table(int64_t v) const {
  if (v < 0 || v >= static_cast<int64_t>(video_files_.size())) {
    return Status(StatusCode::kInvalidArgument,
                  "video file " + std::to_string(v) + " is out of range");
  }
  if (frame_table_bytes_[v].empty()) {
    return Status(StatusCode::kCorruptData,
                  "video '" + video_files_[v] +
                      "' could not be read when the index was built: the episodes it holds are "
                      "broken (left out of the samples)");
  }
  core::MutexLock lock(&tables_->mutex);
  std::shared_ptr<const FrameTable>& decoded = tables_->decoded[v];
  if (decoded == nullptr) {
    Result<std::shared_ptr<const FrameTable>> table =
        FrameTable::deserialize(frame_table_bytes_[v]);
    if (!table.ok()) return table.status().with_context("video '" + video_files_[v] + "'");
    decoded = std::move(table).value();
  }
  return decoded;
}

}  // namespace stoker
