// decode_bench: stoker's cost per window of frames, next to the least work the video allows.
//
//   decode_bench --video=PATH --windows=FILE [--windows=FILE ...] [--benchmark_* flags]
//
// A windows file holds one request per line: space-separated frame indices (presentation
// order). The Python driver (bench/compare_decoders.py) writes these files and times the same
// windows with the peers, so every number here has a peer number for the same work. Each
// windows file's name without its extension names its benchmarks, e.g. window.txt gives
// "stoker_window/window" and "minimal_work/window". All benchmarks run on the calling thread
// with one decoder thread.
//
// Benchmarks (time per window = 1 / items_per_second):
//   stoker_window/W       VideoReader::get_frames for each window of W, the reader opened once
//                         (the warm case: pooled container and decoder).
//   minimal_work/W        The physical lower bound for the same windows: only the packets the
//                         GOP and reference structure force go through a decoder, from memory.
//   minimal_feed_forward/W  The same, but each run ends by feeding further packets until the
//                         asked frames come out instead of draining the decoder: the price of
//                         keeping a decoder positioned (reordering delay), for diagnosis.
//   stoker_open_window/W  VideoReader::open with a saved frame table, then get_frames of each
//                         window, on a warm thread cache; the minimal work of the same windows
//                         is timed beside it (counter minimal_ms), so the difference is the
//                         fixed cost of a warm open (W = single frames).
//   stoker_open           VideoReader::open with a saved frame table, alone.
//   frame_table_deserialize  FrameTable::deserialize of the saved table (what a dataset index
//                         hands over before the open).
//   sequential_libav      Plain libavformat + libavcodec decode of the whole file (no colour
//                         conversion): the codec's own speed (items = frames).
//   sequential_libav_rgb  The same plus FrameConverter's RGB conversion of every frame.
//   sequential_stoker     get_frames of every index in one call (items = frames).
// Counters per window (stoker: DecodeStats; minimal: the same meaning) show where work differs.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "media/detail/ffmpeg.h"
#include "media/frame_converter.h"
#include "stoker/frame_table.h"
#include "stoker/video_reader.h"

namespace stoker::bench {
namespace {

using media::detail::check_av;
using Window = std::vector<int64_t>;

struct WindowSet {
  std::string name;  // the file's stem
  std::vector<Window> windows;
};

Result<WindowSet> read_windows(const std::string& path, int64_t num_frames) {
  std::ifstream in(path);
  if (!in) return Status(StatusCode::kNotFound, "cannot read windows file '" + path + "'");
  WindowSet set{.name = std::filesystem::path(path).stem().string()};
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    Window window;
    for (int64_t index; fields >> index;) {
      if (index < 0 || index >= num_frames) {
        return Status(StatusCode::kInvalidArgument,
                      path + ": frame " + std::to_string(index) + " is out of range");
      }
      window.push_back(index);
    }
    if (!window.empty()) set.windows.push_back(std::move(window));
  }
  if (set.windows.empty()) return Status(StatusCode::kInvalidArgument, path + ": no windows");
  return set;
}

// The decoder stoker would pick, built the plain libav way: from the container's own codec
// parameters, one thread. FFmpeg's native AV1 decoder needs a hardware accelerator, so AV1 goes
// to libdav1d as in stoker (and PyAV, whose default AV1 decoder it also is).
Result<media::detail::UniqueCodecContext> open_plain_decoder(const AVStream& stream) {
  const AVCodec* codec = nullptr;
  if (stream.codecpar->codec_id == AV_CODEC_ID_AV1)
    codec = avcodec_find_decoder_by_name("libdav1d");
  if (codec == nullptr) codec = avcodec_find_decoder(stream.codecpar->codec_id);
  if (codec == nullptr) return Status(StatusCode::kUnsupported, "no decoder for the stream");
  media::detail::UniqueCodecContext ctx(avcodec_alloc_context3(codec));
  if (!ctx) return Status(StatusCode::kInternal, "cannot allocate a decoder");
  STOKER_RETURN_IF_ERROR(
      check_av(avcodec_parameters_to_context(ctx.get(), stream.codecpar), "codec parameters"));
  ctx->pkt_timebase = stream.time_base;
  ctx->thread_count = 1;
  STOKER_RETURN_IF_ERROR(check_av(avcodec_open2(ctx.get(), codec, nullptr), "open decoder"));
  return ctx;
}

// A demuxer on the file's video stream, opened the plain way (with stream probing).
Result<media::detail::UniqueFormatContext> open_plain_container(const std::string& path,
                                                                int stream_index) {
  AVFormatContext* raw = nullptr;
  STOKER_RETURN_IF_ERROR(check_av(avformat_open_input(&raw, path.c_str(), nullptr, nullptr),
                                  "cannot open '" + path + "'"));
  media::detail::UniqueFormatContext format(raw);
  STOKER_RETURN_IF_ERROR(check_av(avformat_find_stream_info(format.get(), nullptr), "probe"));
  if (stream_index >= static_cast<int>(format->nb_streams)) {
    return Status(StatusCode::kInvalidArgument, "no stream " + std::to_string(stream_index));
  }
  for (unsigned i = 0; i < format->nb_streams; ++i) {
    format->streams[i]->discard =
        static_cast<int>(i) == stream_index ? AVDISCARD_DEFAULT : AVDISCARD_ALL;
  }
  return format;
}

// What a decode did, per the meaning of DecodeStats' fields.
struct WorkCounters {
  int64_t packets_decoded = 0;
  int64_t packets_skippable = 0;
  int64_t frames_received = 0;
  int64_t runs = 0;  // GOP runs (decoder restarts); stoker counts these as seeks
};

// The physical lower bound of one request: every packet of the file already in memory (no I/O,
// no seeking), one decoder built once. For each run of needed frames, the decoder starts at the
// keyframe that the first of them needs, is fed only up to the last needed packet (packets
// whose frame was not asked for go in with the non-reference skip on), is drained, and flushed.
// Only the asked frames are converted, with the same FrameConverter stoker uses.
//
// RunEnd::kFeedUntilOut is a diagnostic variant: instead of draining, it keeps feeding packets
// (non-reference skip on) until the decoder has emitted every asked frame of the run, as a
// decoder that must stay positioned for later requests does. Its difference from kDrain is the
// price of the decoder's reordering delay.
enum class RunEnd { kDrain, kFeedUntilOut };

class MinimalDecoder {
 public:
  static Result<std::unique_ptr<MinimalDecoder>> create(const std::string& path,
                                                        std::shared_ptr<const FrameTable> table,
                                                        RunEnd run_end) {
    const int stream_index = table->stream().stream_index;
    STOKER_ASSIGN_OR_RETURN(auto format, open_plain_container(path, stream_index));
    auto self = std::unique_ptr<MinimalDecoder>(new MinimalDecoder(std::move(table), run_end));
    STOKER_RETURN_IF_ERROR(self->read_all_packets(*format, stream_index));
    STOKER_ASSIGN_OR_RETURN(self->ctx_, open_plain_decoder(*format->streams[stream_index]));
    return self;
  }

  /// Writes the frames of `window` in sorted, distinct order to `out` (frame_bytes each).
  Status decode(const Window& window, std::span<uint8_t> out, WorkCounters* counters) {
    wanted_ = window;
    std::sort(wanted_.begin(), wanted_.end());
    wanted_.erase(std::unique(wanted_.begin(), wanted_.end()), wanted_.end());
    produced_.assign(wanted_.size(), 0);
    out_ = out;
    for (size_t k = 0; k < wanted_.size();) {
      // A run: from the keyframe frame k needs, through every later needed frame whose own
      // keyframe is already reached by decoding forward (restarting would decode a superset).
      const int64_t start = table_->sync_packet_of_frame(wanted_[k]);
      int64_t end = table_->packet_of_frame(wanted_[k]);
      size_t next = k + 1;
      while (next < wanted_.size() && table_->sync_packet_of_frame(wanted_[next]) <= end + 1) {
        end = std::max(end, table_->packet_of_frame(wanted_[next]));
        ++next;
      }
      STOKER_RETURN_IF_ERROR(decode_run(start, end, k, next, counters));
      k = next;
    }
    for (size_t k = 0; k < wanted_.size(); ++k) {
      if (!produced_[k]) {
        return Status(StatusCode::kInternal,
                      "minimal decode missed frame " + std::to_string(wanted_[k]));
      }
    }
    return Status();
  }

  size_t frame_bytes() const {
    return static_cast<size_t>(table_->stream().width) * table_->stream().height * 3;
  }

 private:
  MinimalDecoder(std::shared_ptr<const FrameTable> table, RunEnd run_end)
      : table_(std::move(table)), run_end_(run_end), frame_(av_frame_alloc()) {}

  // Packets in file order are the table's decode order (the table was built by the same scan).
  Status read_all_packets(AVFormatContext& format, int stream_index) {
    const auto entries = table_->packets();
    for (;;) {
      media::detail::UniquePacket packet(av_packet_alloc());
      const int error = av_read_frame(&format, packet.get());
      if (error == AVERROR_EOF) break;
      STOKER_RETURN_IF_ERROR(check_av(error, "read packet"));
      if (packet->stream_index != stream_index) continue;
      if (packet->pts == AV_NOPTS_VALUE) packet->pts = packet->dts;
      const size_t position = packets_.size();
      if (position >= entries.size() || entries[position].pts != packet->pts) {
        return Status(StatusCode::kInternal, "packet order differs from the frame table");
      }
      packets_.push_back(std::move(packet));
    }
    if (packets_.size() != entries.size()) {
      return Status(StatusCode::kInternal, "packet count differs from the frame table");
    }
    return Status();
  }

  // Decodes packets [start, end], which produce wanted_[first, last).
  Status decode_run(int64_t start, int64_t end, size_t first, size_t last, WorkCounters* counters) {
    ++counters->runs;
    run_start_ = start;
    AVCodecContext* ctx = ctx_.get();
    auto run_done = [&] {
      return std::all_of(produced_.begin() + first, produced_.begin() + last,
                         [](uint8_t p) { return p != 0; });
    };
    const int64_t num_packets = static_cast<int64_t>(packets_.size());
    for (int64_t p = start; p < num_packets; ++p) {
      if (p > end && (run_end_ == RunEnd::kDrain || run_done())) break;
      const int64_t frame = table_->frame_of_packet(p);
      const bool wanted = frame >= 0 && std::binary_search(wanted_.begin(), wanted_.end(), frame);
      ctx->skip_frame = wanted ? AVDISCARD_DEFAULT : AVDISCARD_NONREF;
      ++counters->packets_decoded;
      if (!wanted) ++counters->packets_skippable;
      const int sent = avcodec_send_packet(ctx, packets_[p].get());
      if (sent < 0 && sent != AVERROR(EAGAIN)) return check_av(sent, "send packet");
      STOKER_RETURN_IF_ERROR(receive_frames(counters));
    }
    // Drain the frames the decoder still holds (reordering delay) rather than feeding more
    // packets, then reset it for the next run.
    if (run_end_ == RunEnd::kDrain) {
      avcodec_send_packet(ctx, nullptr);
      STOKER_RETURN_IF_ERROR(receive_frames(counters));
    }
    avcodec_flush_buffers(ctx);
    return Status();
  }

  Status receive_frames(WorkCounters* counters) {
    for (;;) {
      const int received = avcodec_receive_frame(ctx_.get(), frame_.get());
      if (received == AVERROR(EAGAIN) || received == AVERROR_EOF) return Status();
      STOKER_RETURN_IF_ERROR(check_av(received, "receive frame"));
      ++counters->frames_received;
      const int64_t pts =
          frame_->pts != AV_NOPTS_VALUE ? frame_->pts : frame_->best_effort_timestamp;
      const int64_t frame = table_->frame_with_pts(pts);
      auto it = std::lower_bound(wanted_.begin(), wanted_.end(), frame);
      // A frame whose keyframe precedes the run (an open-GOP leading picture) lacked its
      // references here; the run that starts at its own keyframe produces it.
      const bool usable = frame >= 0 && table_->sync_packet_of_frame(frame) >= run_start_;
      if (usable && it != wanted_.end() && *it == frame && !produced_[it - wanted_.begin()]) {
        const size_t k = it - wanted_.begin();
        Status converted = converter_.convert(*frame_, OutputOptions{}, frame_->height,
                                              frame_->width, out_.data() + k * frame_bytes());
        if (!converted.ok()) {
          av_frame_unref(frame_.get());
          return converted;
        }
        produced_[k] = 1;
      }
      av_frame_unref(frame_.get());
    }
  }

  std::shared_ptr<const FrameTable> table_;
  const RunEnd run_end_;
  std::vector<media::detail::UniquePacket> packets_;  // decode order
  media::detail::UniqueCodecContext ctx_;
  media::detail::UniqueFrame frame_;
  media::FrameConverter converter_;
  Window wanted_;                  // sorted, distinct
  std::vector<uint8_t> produced_;  // per wanted_ entry
  std::span<uint8_t> out_;
  int64_t run_start_ = 0;
};

// Per-window averages of the work counters, for the JSON output.
void report_work(benchmark::State& state, const WorkCounters& total, int64_t windows) {
  const double n = static_cast<double>(windows) * static_cast<double>(state.iterations());
  if (n == 0) return;
  state.counters["packets_decoded"] = total.packets_decoded / n;
  state.counters["packets_skippable"] = total.packets_skippable / n;
  state.counters["frames_received"] = total.frames_received / n;
  state.counters["runs"] = total.runs / n;
  state.SetItemsProcessed(static_cast<int64_t>(n));
}

void add_stats(WorkCounters& total, const DecodeStats& s) {
  total.packets_decoded += s.packets_decoded;
  total.packets_skippable += s.packets_skippable;
  total.frames_received += s.frames_received;
  total.runs += s.seeks;
}

size_t max_window(const WindowSet& set) {
  size_t size = 1;
  for (const Window& w : set.windows) size = std::max(size, w.size());
  return size;
}

// Everything the benchmarks share; built once, before any timing.
struct Fixture {
  std::string video;
  std::unique_ptr<VideoReader> reader;  // warm: its container and decoder stay pooled
  std::shared_ptr<const FrameTable> table;
  std::vector<uint8_t> saved_table;  // serialized, as a dataset index would store it
  std::unique_ptr<MinimalDecoder> minimal;
  std::unique_ptr<MinimalDecoder> minimal_feed;  // RunEnd::kFeedUntilOut
  std::vector<WindowSet> sets;
};

void bench_stoker_window(benchmark::State& state, Fixture& f, const WindowSet& set) {
  std::vector<uint8_t> out(max_window(set) * f.reader->frame_bytes({}));
  WorkCounters work;
  for (auto _ : state) {
    for (const Window& w : set.windows) {
      DecodeStats stats;
      Status s = f.reader->get_frames(
          w, {}, std::span(out.data(), w.size() * f.reader->frame_bytes({})), &stats);
      if (!s.ok()) return state.SkipWithError(s.message().c_str());
      add_stats(work, stats);
    }
  }
  report_work(state, work, static_cast<int64_t>(set.windows.size()));
}

void bench_minimal_work(benchmark::State& state, MinimalDecoder& minimal, const WindowSet& set) {
  std::vector<uint8_t> out(max_window(set) * minimal.frame_bytes());
  WorkCounters work;
  for (auto _ : state) {
    for (const Window& w : set.windows) {
      Status s = minimal.decode(w, out, &work);
      if (!s.ok()) return state.SkipWithError(s.message().c_str());
    }
  }
  report_work(state, work, static_cast<int64_t>(set.windows.size()));
}

// A fresh VideoReader per window, opened with the saved table, on this thread's warm cache.
// The benchmark's (manual) time is stoker's alone. Each iteration also times one pass of the
// minimal work over the same windows (counter minimal_ms), the two passes in alternating order:
// both see the same machine state, so time per window minus minimal_ms is the fixed cost.
// (Alternating per window instead would make each evict the other's caches.)
void bench_stoker_open_window(benchmark::State& state, Fixture& f, const WindowSet& set) {
  using Clock = std::chrono::steady_clock;
  std::vector<uint8_t> out(max_window(set) * f.reader->frame_bytes({}));
  WorkCounters work, minimal_work;
  double minimal_seconds = 0;
  int64_t built = 0;
  bool stoker_first = false;
  auto stoker_pass = [&]() -> Status {
    for (const Window& w : set.windows) {
      STOKER_ASSIGN_OR_RETURN(auto reader, VideoReader::open(f.video, {.frame_table = f.table}));
      DecodeStats stats;
      STOKER_RETURN_IF_ERROR(reader->get_frames(
          w, {}, std::span(out.data(), w.size() * f.reader->frame_bytes({})), &stats));
      add_stats(work, stats);
      built += stats.containers_opened + stats.decoders_built;
    }
    return Status();
  };
  auto minimal_pass = [&]() -> Status {
    for (const Window& w : set.windows) {
      STOKER_RETURN_IF_ERROR(f.minimal->decode(w, out, &minimal_work));
    }
    return Status();
  };
  for (auto _ : state) {
    stoker_first = !stoker_first;
    for (int turn = 0; turn < 2; ++turn) {
      const bool stoker_turn = (turn == 0) == stoker_first;
      const auto start = Clock::now();
      Status s = stoker_turn ? stoker_pass() : minimal_pass();
      if (!s.ok()) return state.SkipWithError(s.message().c_str());
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      if (stoker_turn) {
        state.SetIterationTime(seconds);
      } else {
        minimal_seconds += seconds;
      }
    }
  }
  report_work(state, work, static_cast<int64_t>(set.windows.size()));
  const double n = static_cast<double>(set.windows.size()) * state.iterations();
  state.counters["minimal_ms"] = n > 0 ? 1e3 * minimal_seconds / n : 0;
  state.counters["containers_or_decoders_built"] = static_cast<double>(built);
}

void bench_stoker_open(benchmark::State& state, Fixture& f) {
  for (auto _ : state) {
    auto reader = VideoReader::open(f.video, {.frame_table = f.table});
    if (!reader.ok()) return state.SkipWithError(reader.status().message().c_str());
    benchmark::DoNotOptimize(reader->get());
  }
  state.SetItemsProcessed(state.iterations());
}

void bench_frame_table_deserialize(benchmark::State& state, Fixture& f) {
  for (auto _ : state) {
    auto table = FrameTable::deserialize(f.saved_table);
    if (!table.ok()) return state.SkipWithError(table.status().message().c_str());
    benchmark::DoNotOptimize(table->get());
  }
  state.SetItemsProcessed(state.iterations());
}

// Opens, probes and decodes the whole file with plain libav; `convert` adds RGB conversion.
Status decode_file(const Fixture& f, bool convert, media::FrameConverter& converter,
                   std::vector<uint8_t>& rgb, int64_t* frames) {
  const int stream_index = f.table->stream().stream_index;
  STOKER_ASSIGN_OR_RETURN(auto format, open_plain_container(f.video, stream_index));
  STOKER_ASSIGN_OR_RETURN(auto ctx, open_plain_decoder(*format->streams[stream_index]));
  media::detail::UniquePacket packet(av_packet_alloc());
  media::detail::UniqueFrame frame(av_frame_alloc());
  auto receive = [&]() -> Status {
    for (;;) {
      const int received = avcodec_receive_frame(ctx.get(), frame.get());
      if (received == AVERROR(EAGAIN) || received == AVERROR_EOF) return Status();
      STOKER_RETURN_IF_ERROR(check_av(received, "receive frame"));
      ++*frames;
      if (convert) {
        STOKER_RETURN_IF_ERROR(
            converter.convert(*frame, OutputOptions{}, frame->height, frame->width, rgb.data()));
      }
      av_frame_unref(frame.get());
    }
  };
  for (;;) {
    const int error = av_read_frame(format.get(), packet.get());
    if (error == AVERROR_EOF) break;
    STOKER_RETURN_IF_ERROR(check_av(error, "read packet"));
    if (packet->stream_index == stream_index) {
      const int sent = avcodec_send_packet(ctx.get(), packet.get());
      if (sent < 0 && sent != AVERROR(EAGAIN)) return check_av(sent, "send packet");
      STOKER_RETURN_IF_ERROR(receive());
    }
    av_packet_unref(packet.get());
  }
  avcodec_send_packet(ctx.get(), nullptr);
  return receive();
}

void bench_sequential_libav(benchmark::State& state, Fixture& f, bool convert) {
  media::FrameConverter converter;
  std::vector<uint8_t> rgb(f.reader->frame_bytes({}));
  int64_t frames = 0;
  for (auto _ : state) {
    Status s = decode_file(f, convert, converter, rgb, &frames);
    if (!s.ok()) return state.SkipWithError(s.message().c_str());
  }
  state.SetItemsProcessed(frames);
}

void bench_sequential_stoker(benchmark::State& state, Fixture& f) {
  Window all(f.reader->num_frames());
  std::iota(all.begin(), all.end(), 0);
  // Touched once before timing, so page faults of a fresh 0.5 GB buffer are not counted.
  std::vector<uint8_t> out(all.size() * f.reader->frame_bytes({}), 0);
  for (auto _ : state) {
    Status s = f.reader->get_frames(all, {}, out);
    if (!s.ok()) return state.SkipWithError(s.message().c_str());
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(all.size()));
}

Status build_fixture(const std::string& video, const std::vector<std::string>& window_files,
                     Fixture& f) {
  f.video = video;
  STOKER_ASSIGN_OR_RETURN(f.reader, VideoReader::open(video));
  f.table = f.reader->shared_frame_table();
  f.saved_table = f.table->serialize();
  STOKER_ASSIGN_OR_RETURN(f.minimal, MinimalDecoder::create(video, f.table, RunEnd::kDrain));
  STOKER_ASSIGN_OR_RETURN(f.minimal_feed,
                          MinimalDecoder::create(video, f.table, RunEnd::kFeedUntilOut));
  for (const std::string& file : window_files) {
    STOKER_ASSIGN_OR_RETURN(WindowSet set, read_windows(file, f.reader->num_frames()));
    f.sets.push_back(std::move(set));
  }
  return Status();
}

void register_all(Fixture& f) {
  auto add = [](const std::string& name, auto fn) {
    benchmark::RegisterBenchmark(name.c_str(), fn)->UseRealTime()->Unit(benchmark::kMillisecond);
  };
  for (const WindowSet& set : f.sets) {
    add("stoker_window/" + set.name,
        [&f, &set](benchmark::State& s) { bench_stoker_window(s, f, set); });
    add("minimal_work/" + set.name,
        [&f, &set](benchmark::State& s) { bench_minimal_work(s, *f.minimal, set); });
    add("minimal_feed_forward/" + set.name,
        [&f, &set](benchmark::State& s) { bench_minimal_work(s, *f.minimal_feed, set); });
    benchmark::RegisterBenchmark(
        ("stoker_open_window/" + set.name).c_str(),
        [&f, &set](benchmark::State& s) { bench_stoker_open_window(s, f, set); })
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  }
  add("stoker_open", [&f](benchmark::State& s) { bench_stoker_open(s, f); });
  add("frame_table_deserialize",
      [&f](benchmark::State& s) { bench_frame_table_deserialize(s, f); });
  add("sequential_libav", [&f](benchmark::State& s) { bench_sequential_libav(s, f, false); });
  add("sequential_libav_rgb", [&f](benchmark::State& s) { bench_sequential_libav(s, f, true); });
  add("sequential_stoker", [&f](benchmark::State& s) { bench_sequential_stoker(s, f); });
}

}  // namespace
}  // namespace stoker::bench

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);  // consumes the --benchmark_* flags
  std::string video;
  std::vector<std::string> window_files;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--video=", 0) == 0) {
      video = arg.substr(8);
    } else if (arg.rfind("--windows=", 0) == 0) {
      window_files.push_back(arg.substr(10));
    } else {
      std::fprintf(stderr, "unknown argument: %s\n", arg.c_str());
      return 2;
    }
  }
  if (video.empty() || window_files.empty()) {
    std::fprintf(stderr,
                 "usage: %s --video=PATH --windows=FILE [--windows=FILE ...] [--benchmark_*]\n",
                 argv[0]);
    return 2;
  }
  static stoker::bench::Fixture fixture;  // outlives the registered benchmarks
  stoker::Status built = stoker::bench::build_fixture(video, window_files, fixture);
  if (!built.ok()) {
    std::fprintf(stderr, "decode_bench: %s\n", built.message().c_str());
    return 1;
  }
  stoker::bench::register_all(fixture);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
