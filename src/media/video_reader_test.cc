#include "stoker/video_reader.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <set>
#include <thread>
#include <tuple>

#include "media/detail/ffmpeg.h"
#include "media/frame_converter.h"
#include "media/testing/remote_like_source.h"
#include "media/testing/sequential_decode.h"
#include "media/testing/test_videos.h"

namespace stoker {
namespace {

using testing::decode_all_frames;
using testing::frame_exact_specs;
using testing::make_test_video;
using testing::reference_frames;
using testing::TestVideoSpec;

std::unique_ptr<VideoReader> open_reader(const std::string& path, VideoReaderOptions options = {}) {
  auto reader = VideoReader::open(path, std::move(options));
  EXPECT_TRUE(reader.ok()) << reader.status().message();
  return reader.ok() ? std::move(reader).value() : nullptr;
}

// Asserts that get_frames(indices) returns exactly the reference frames, in request order.
void expect_frames(const VideoReader& reader, const std::vector<int64_t>& indices,
                   const std::vector<std::vector<uint8_t>>& reference,
                   DecodeStats* stats = nullptr) {
  const size_t frame_size = reader.frame_bytes({});
  std::vector<uint8_t> out(indices.size() * frame_size, 0xAB);
  Status status = reader.get_frames(indices, {}, out, stats);
  ASSERT_TRUE(status.ok()) << status.message();
  for (size_t k = 0; k < indices.size(); ++k) {
    const auto& want = reference.at(indices[k]);
    ASSERT_TRUE(std::equal(want.begin(), want.end(), out.begin() + k * frame_size))
        << reader.name() << ": frame " << indices[k] << " (request " << k
        << ") differs from the sequential decode";
  }
}

class FrameExact : public ::testing::TestWithParam<TestVideoSpec> {
 protected:
  void SetUp() override {
    auto made = make_test_video(GetParam());
    ASSERT_TRUE(made.ok()) << made.status().message();
    path_ = *made;
    reader_ = open_reader(path_);
    ASSERT_NE(reader_, nullptr);
  }
  std::string path_;
  std::unique_ptr<VideoReader> reader_;
};

TEST_P(FrameExact, TableMatchesTheSequentialDecode) {
  const auto& reference = reference_frames(path_);
  EXPECT_EQ(reader_->num_frames(), static_cast<int64_t>(reference.size()));
  EXPECT_GT(reader_->num_frames(), 0);
  EXPECT_EQ(reader_->frame_table().is_key()[0], 1);
}

TEST_P(FrameExact, EveryIndexAlone) {
  const auto& reference = reference_frames(path_);
  for (int64_t i = 0; i < reader_->num_frames(); ++i) expect_frames(*reader_, {i}, reference);
  // Backwards too: every call must seek back.
  for (int64_t i = reader_->num_frames() - 1; i >= 0; i -= 7) {
    expect_frames(*reader_, {i}, reference);
  }
}

TEST_P(FrameExact, AllIndicesInOneCall) {
  const auto& reference = reference_frames(path_);
  std::vector<int64_t> all(reader_->num_frames());
  for (int64_t i = 0; i < reader_->num_frames(); ++i) all[i] = i;
  expect_frames(*reader_, all, reference);
}

TEST_P(FrameExact, RandomUnsortedSetsWithRepeats) {
  const auto& reference = reference_frames(path_);
  std::mt19937_64 rng(12345);
  const int64_t n = reader_->num_frames();
  for (int trial = 0; trial < 25; ++trial) {
    std::vector<int64_t> indices(1 + rng() % 12);
    for (int64_t& i : indices) i = static_cast<int64_t>(rng() % n);
    indices.push_back(indices.front());  // a repeat
    expect_frames(*reader_, indices, reference);
  }
}

TEST_P(FrameExact, SavedTableReopensWithoutScanning) {
  const auto& reference = reference_frames(path_);
  auto table = FrameTable::deserialize(reader_->frame_table().serialize());
  ASSERT_TRUE(table.ok()) << table.status().message();
  // Another thread has a cold cache: it opens the container without probing, from the table.
  std::thread([&] {
    auto reopened = open_reader(path_, {.frame_table = *table});
    ASSERT_NE(reopened, nullptr);
    DecodeStats stats;
    const int64_t last = reopened->num_frames() - 1;
    expect_frames(*reopened, {last, 0, last / 2}, reference, &stats);
    EXPECT_EQ(stats.containers_opened, 1);
    EXPECT_EQ(stats.decoders_built, 1);
  }).join();
}

TEST_P(FrameExact, TwoDecoderThreads) {
  const auto& reference = reference_frames(path_);
  auto reader = open_reader(path_, {.threads = 2});
  ASSERT_NE(reader, nullptr);
  const int64_t n = reader->num_frames();
  expect_frames(*reader, {n - 1, 0, n / 3, n / 3 + 1, n / 2}, reference);
}

// The same bytes held in memory decode with the same code to the same frames.
TEST_P(FrameExact, BytesInMemoryGiveTheSameFrames) {
  const auto& reference = reference_frames(path_);
  std::ifstream file(path_, std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(file)),
                             std::istreambuf_iterator<char>());
  std::shared_ptr<const ByteSource> source = memory_source("memory:" + path_, std::move(bytes));
  auto reader = VideoReader::open(source);
  ASSERT_TRUE(reader.ok()) << reader.status().message();
  EXPECT_EQ((*reader)->name(), "memory:" + path_);
  EXPECT_EQ((*reader)->frame_table().packets().size(), reader_->frame_table().packets().size());
  const int64_t n = (*reader)->num_frames();
  expect_frames(**reader, {n - 1, 0, n / 2, n / 2 + 1, n / 3}, reference);
  // A second reader over the same bytes with the first one's saved table skips the scan.
  auto table = FrameTable::deserialize((*reader)->frame_table().serialize());
  ASSERT_TRUE(table.ok());
  auto again = VideoReader::open(source, {.frame_table = *table});
  ASSERT_TRUE(again.ok()) << again.status().message();
  expect_frames(**again, {n / 4, n - 2}, reference);
}

// A remote source is scanned from the container's header where it can be (MP4), and read
// packet by packet from the positions in the table, each window prefetched as whole runs of
// bytes: the frames are the same.
TEST_P(FrameExact, RemoteSourceReadsWindowsByPosition) {
  const auto& reference = reference_frames(path_);
  std::ifstream file(path_, std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(file)),
                             std::istreambuf_iterator<char>());
  auto remote = std::make_shared<testing::RemoteLikeSource>("remote:" + path_, std::move(bytes));
  auto reader = VideoReader::open(remote);
  ASSERT_TRUE(reader.ok()) << reader.status().message();
  const FrameTable& local = reader_->frame_table();
  const FrameTable& table = (*reader)->frame_table();
  const std::string extension = GetParam().extension;
  const bool iso = extension == "mp4" || extension == "mov";
  // What a remote scan learns equals what a full local scan does, bytes unread or not.
  EXPECT_EQ(table.stream().packets_addressable, local.stream().packets_addressable);
  if (iso) {
    EXPECT_TRUE(local.stream().packets_addressable) << "an MP4/MOV stores packets verbatim";
  }
  const VideoStreamInfo &sa = table.stream(), &sb = local.stream();
  EXPECT_EQ(std::tie(sa.codec, sa.width, sa.height, sa.pixel_format, sa.profile, sa.level,
                     sa.video_delay, sa.time_base_num, sa.time_base_den, sa.extradata),
            std::tie(sb.codec, sb.width, sb.height, sb.pixel_format, sb.profile, sb.level,
                     sb.video_delay, sb.time_base_num, sb.time_base_den, sb.extradata));
  ASSERT_EQ(table.packets().size(), local.packets().size());
  for (size_t p = 0; p < table.packets().size(); ++p) {
    const PacketEntry &a = table.packets()[p], &b = local.packets()[p];
    ASSERT_EQ(std::tie(a.pts, a.dts, a.duration, a.is_key, a.shown, a.pos, a.size),
              std::tie(b.pts, b.dts, b.duration, b.is_key, b.shown, b.pos, b.size))
        << "packet " << p;
  }
  const int64_t n = table.num_frames();
  remote->take_prefetched();
  remote->bytes_read = 0;
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 10; ++trial) {
    std::vector<int64_t> indices(1 + rng() % 6);
    for (int64_t& i : indices) i = static_cast<int64_t>(rng() % n);
    expect_frames(**reader, indices, reference);
  }
  const std::vector<ByteRange> prefetched = remote->take_prefetched();
  if (table.stream().packets_addressable) {
    // Each call asked for its windows ahead, and read no byte it had not asked for.
    EXPECT_GE(prefetched.size(), 10u);
    int64_t asked = 0;
    for (const ByteRange& r : prefetched) asked += r.length;
    EXPECT_LE(remote->bytes_read.load(), asked);
  } else {
    EXPECT_TRUE(prefetched.empty());
  }
}

// Seeds for the fuzz targets of frame tables and of videos in memory (`make test-fuzz`),
// written where $STOKER_FUZZ_CORPUS says: every frame-exact video under 256 KiB, and its table.
TEST(FuzzSeeds, FrameTablesAndVideos) {
  const char* corpus = std::getenv("STOKER_FUZZ_CORPUS");
  if (corpus == nullptr) GTEST_SKIP() << "STOKER_FUZZ_CORPUS is not set";
  const std::filesystem::path root(corpus);
  std::filesystem::create_directories(root / "frame_table_fuzz");
  std::filesystem::create_directories(root / "video_reader_fuzz");
  for (const TestVideoSpec& spec : frame_exact_specs()) {
    auto path = make_test_video(spec);
    ASSERT_TRUE(path.ok()) << path.status().message();
    auto reader = open_reader(*path);
    ASSERT_NE(reader, nullptr);
    const std::vector<uint8_t> table = reader->frame_table().serialize();
    std::ofstream(root / "frame_table_fuzz" / spec.name, std::ios::binary)
        .write(reinterpret_cast<const char*>(table.data()),
               static_cast<std::streamsize>(table.size()));
    if (std::filesystem::file_size(*path) <= (256u << 10)) {
      std::filesystem::copy_file(*path, root / "video_reader_fuzz" / spec.name,
                                 std::filesystem::copy_options::overwrite_existing);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Videos, FrameExact, ::testing::ValuesIn(frame_exact_specs()),
                         [](const auto& info) { return info.param.name; });

// ---- Requests with crops, in any order, into the caller's own buffers ----

// Frames `wanted` of a plain sequential decode of `path`, as the decoder returned them (no
// conversion): the reference a crop is cut from.
std::map<int64_t, media::detail::UniqueFrame> decode_raw_frames(const std::string& path,
                                                                const std::set<int64_t>& wanted) {
  std::map<int64_t, media::detail::UniqueFrame> frames;
  AVFormatContext* raw = nullptr;
  if (avformat_open_input(&raw, path.c_str(), nullptr, nullptr) < 0) return frames;
  media::detail::UniqueFormatContext format(raw);
  if (avformat_find_stream_info(format.get(), nullptr) < 0) return frames;
  const int stream = av_find_best_stream(format.get(), AVMEDIA_TYPE_VIDEO, -1, -1, nullptr, 0);
  if (stream < 0) return frames;
  const AVCodecParameters* par = format->streams[stream]->codecpar;
  media::detail::UniqueCodecContext ctx(
      avcodec_alloc_context3(avcodec_find_decoder(par->codec_id)));
  avcodec_parameters_to_context(ctx.get(), par);
  ctx->pkt_timebase = format->streams[stream]->time_base;
  ctx->thread_count = 1;
  if (avcodec_open2(ctx.get(), ctx->codec, nullptr) < 0) return frames;
  media::detail::UniquePacket packet(av_packet_alloc());
  media::detail::UniqueFrame frame(av_frame_alloc());
  int64_t index = 0;
  auto receive = [&] {
    while (avcodec_receive_frame(ctx.get(), frame.get()) == 0) {
      if (wanted.count(index) != 0) frames.emplace(index, av_frame_clone(frame.get()));
      av_frame_unref(frame.get());
      ++index;
    }
  };
  while (av_read_frame(format.get(), packet.get()) >= 0) {
    if (packet->stream_index == stream) {
      avcodec_send_packet(ctx.get(), packet.get());
      receive();
    }
    av_packet_unref(packet.get());
  }
  avcodec_send_packet(ctx.get(), nullptr);
  receive();
  return frames;
}

// A new frame holding a copy of `crop` of `frame`, its origin rounded down to the chroma grid
// as the reader documents: an independent cut (a copy of the pixels, not pointers into them).
media::detail::UniqueFrame copy_region(const AVFrame& frame, const CropRect& crop) {
  const AVPixFmtDescriptor* desc = av_pix_fmt_desc_get(static_cast<AVPixelFormat>(frame.format));
  const int x = crop.x & ~((1 << desc->log2_chroma_w) - 1);
  const int y = crop.y & ~((1 << desc->log2_chroma_h) - 1);
  media::detail::UniqueFrame copy(av_frame_alloc());
  copy->format = frame.format;
  copy->width = crop.width;
  copy->height = crop.height;
  copy->colorspace = frame.colorspace;
  copy->color_range = frame.color_range;
  EXPECT_EQ(av_frame_get_buffer(copy.get(), 0), 0);
  const int planes = av_pix_fmt_count_planes(static_cast<AVPixelFormat>(frame.format));
  for (int plane = 0; plane < planes; ++plane) {
    const bool chroma = plane == 1 || plane == 2;
    const int hsub = chroma ? desc->log2_chroma_w : 0;
    const int vsub = chroma ? desc->log2_chroma_h : 0;
    const int bytes_per_sample = (desc->comp[0].depth + 7) / 8;
    const int columns = AV_CEIL_RSHIFT(crop.width, hsub);
    const int rows = AV_CEIL_RSHIFT(crop.height, vsub);
    for (int row = 0; row < rows; ++row) {
      std::memcpy(copy->data[plane] + static_cast<ptrdiff_t>(row) * copy->linesize[plane],
                  frame.data[plane] +
                      static_cast<ptrdiff_t>((y >> vsub) + row) * frame.linesize[plane] +
                      (x >> hsub) * bytes_per_sample,
                  static_cast<size_t>(columns) * bytes_per_sample);
    }
  }
  return copy;
}

// The two chroma layouts: H.264 4:2:0 (crops snap to even pixels) and 4:4:4 at an odd size.
std::vector<TestVideoSpec> crop_specs() {
  std::vector<TestVideoSpec> specs;
  for (const TestVideoSpec& spec : frame_exact_specs()) {
    if (spec.name == "h264_gop30_bframes" || spec.name == "h264_odd_size") specs.push_back(spec);
  }
  return specs;
}

class Crops : public FrameExact {
 protected:
  int frame_width() const { return reader_->frame_table().stream().width; }
  int frame_height() const { return reader_->frame_table().stream().height; }
  // An odd-placed, odd-sized inner crop; one flush with the bottom-right corner; a wide strip.
  std::vector<CropRect> crops() const {
    const int w = frame_width(), h = frame_height();
    return {{.x = 13, .y = 7, .width = w / 2 + 1, .height = h / 2 + 3},
            {.x = w - 51, .y = h - 33, .width = 51, .height = 33},
            {.x = 0, .y = 21, .width = w, .height = 17}};
  }
  // One request per frame and crop, nothing shared: what every batched result must equal.
  std::vector<uint8_t> single(int64_t frame, const CropRect& crop, const OutputOptions& options) {
    std::vector<uint8_t> out(reader_->frame_bytes(options), 0x5A);
    const FrameRequest request{.frame = frame, .crop = crop, .out = out.data()};
    Status status = reader_->get_frames(std::span(&request, 1), options);
    EXPECT_TRUE(status.ok()) << status.message();
    return out;
  }
};

TEST_P(Crops, CropAndResizeMatchAnIndependentCut) {
  const int64_t n = reader_->num_frames();
  const std::set<int64_t> frames = {0, 37, n - 1};
  auto raw = decode_raw_frames(path_, frames);
  ASSERT_EQ(raw.size(), frames.size());
  std::vector<OutputOptions> all_options = {
      {.height = 48, .width = 64},
      {.height = 31, .width = 45, .layout = Layout::kNCHW},
      {.height = 40, .width = 40, .interpolation = Interpolation::kArea},
  };
  for (const CropRect& crop : crops()) {
    // Also the crop's own size: swscale's unscaled path, with a width that is not a multiple of 8.
    all_options.push_back({.height = crop.height, .width = crop.width});
  }
  media::FrameConverter converter;
  for (const OutputOptions& options : all_options) {
    const size_t frame_size = reader_->frame_bytes(options);
    for (const CropRect& crop : crops()) {
      std::vector<FrameRequest> requests;
      std::vector<std::vector<uint8_t>> outs;
      for (int64_t frame : frames) {
        outs.emplace_back(frame_size, 0xAB);
        requests.push_back({.frame = frame, .crop = crop, .out = outs.back().data()});
      }
      ASSERT_TRUE(reader_->get_frames(requests, options).ok());
      for (size_t k = 0; k < requests.size(); ++k) {
        const int64_t frame = requests[k].frame;
        auto cut = copy_region(*raw.at(frame), crop);
        std::vector<uint8_t> want(frame_size, 0xCD);
        ASSERT_TRUE(
            converter.convert(*cut, options, options.height, options.width, want.data()).ok());
        ASSERT_EQ(outs[k], want) << "frame " << frame << ", crop " << crop.width << "x"
                                 << crop.height << " at (" << crop.x << ", " << crop.y
                                 << "), output " << options.height << "x" << options.width;
      }
    }
  }
}

TEST_P(Crops, OriginSnapsToTheChromaGrid) {
  const OutputOptions options{.height = 32, .width = 48};
  const CropRect odd{.x = 13, .y = 7, .width = 60, .height = 40};
  const CropRect even{.x = 12, .y = 6, .width = 60, .height = 40};
  const bool subsampled = GetParam().encoder_args.find("yuv420p") != std::string::npos;
  EXPECT_EQ(single(20, odd, options) == single(20, even, options), subsampled);
}

TEST_P(Crops, RepeatedFrameAndCropAreConvertedOnceAndCopied) {
  const OutputOptions options{.height = 36, .width = 52};
  const CropRect a = crops()[0], b = crops()[1], whole{};
  const int64_t n = reader_->num_frames(), f = n - 10, g = 5, h = n / 2;
  // (frame, crop) pairs, several repeated, interleaved across frames.
  const std::vector<std::pair<int64_t, CropRect>> asked = {
      {f, a}, {g, b}, {f, b}, {f, a}, {h, a},     {f, whole},           {g, b},
      {f, b}, {f, a}, {g, b}, {h, a}, {f, whole}, {g, CropRect{.x = 3}}};
  std::set<std::pair<int64_t, std::tuple<int, int, int, int>>> distinct;
  for (const auto& [frame, crop] : asked) {
    const CropRect region = crop.empty() ? CropRect{} : crop;
    distinct.insert({frame, {region.x, region.y, region.width, region.height}});
  }
  std::vector<std::vector<uint8_t>> outs;
  std::vector<FrameRequest> requests;
  for (size_t k = 0; k < asked.size(); ++k) {
    outs.emplace_back(reader_->frame_bytes(options), static_cast<uint8_t>(k));
  }
  for (size_t k = 0; k < asked.size(); ++k) {
    requests.push_back({.frame = asked[k].first, .crop = asked[k].second, .out = outs[k].data()});
  }
  DecodeStats stats;
  Status status = reader_->get_frames(requests, options, &stats);
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(stats.frames_converted, static_cast<int64_t>(distinct.size()));
  EXPECT_EQ(distinct.size(), 6u);  // the empty crop at (3, 0) is the whole frame
  for (size_t k = 0; k < asked.size(); ++k) {
    EXPECT_EQ(outs[k], single(asked[k].first, asked[k].second, options))
        << "request " << k << " (frame " << asked[k].first << ")";
  }
}

TEST_P(Crops, ScatteredRequestsInRandomOrderEqualTheIndexList) {
  std::mt19937_64 rng(2024);
  const int64_t n = reader_->num_frames();
  for (const OutputOptions& options :
       {OutputOptions{}, OutputOptions{.height = 56, .width = 72, .layout = Layout::kNCHW}}) {
    const size_t frame_size = reader_->frame_bytes(options);
    for (int trial = 0; trial < 5; ++trial) {
      std::vector<int64_t> indices(3 + rng() % 14);
      for (int64_t& i : indices) i = static_cast<int64_t>(rng() % n);
      indices.push_back(indices[rng() % indices.size()]);  // a repeat
      std::vector<uint8_t> batch(indices.size() * frame_size);
      ASSERT_TRUE(reader_->get_frames(indices, options, batch).ok());
      // Each request writes to its own heap buffer, made in a shuffled order.
      std::vector<size_t> order(indices.size());
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), rng);
      std::vector<std::unique_ptr<uint8_t[]>> outs(indices.size());
      std::vector<FrameRequest> requests;
      for (size_t k : order) {
        outs[k] = std::make_unique<uint8_t[]>(frame_size);
        std::memset(outs[k].get(), 0xEE, frame_size);
        requests.push_back({.frame = indices[k], .out = outs[k].get()});
      }
      DecodeStats stats;
      ASSERT_TRUE(reader_->get_frames(requests, options, &stats).ok());
      EXPECT_EQ(stats.frames_converted,
                static_cast<int64_t>(std::set<int64_t>(indices.begin(), indices.end()).size()));
      for (size_t k = 0; k < indices.size(); ++k) {
        ASSERT_TRUE(
            std::equal(outs[k].get(), outs[k].get() + frame_size, batch.begin() + k * frame_size))
            << "frame " << indices[k] << " (request " << k << ")";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Videos, Crops, ::testing::ValuesIn(crop_specs()),
                         [](const auto& info) { return info.param.name; });

TestVideoSpec gop30_spec() { return frame_exact_specs().front(); }

TEST(VideoReader, Attributes) {
  auto path = make_test_video(gop30_spec());
  ASSERT_TRUE(path.ok());
  auto reader = open_reader(*path);
  ASSERT_NE(reader, nullptr);
  const FrameTable& table = reader->frame_table();
  EXPECT_EQ(table.stream().codec, "h264");
  EXPECT_EQ(table.stream().width, 160);
  EXPECT_EQ(table.stream().height, 120);
  EXPECT_EQ(reader->num_frames(), 120);
  EXPECT_NEAR(table.fps(), 30.0, 1e-9);
  EXPECT_NEAR(table.duration(), 4.0, 1e-9);
  for (int64_t i = 0; i < 120; ++i) {
    EXPECT_NEAR(table.pts_seconds(i), i / 30.0, 1e-9);
    EXPECT_EQ(table.is_key()[i], i % 30 == 0 ? 1 : 0) << i;
  }
}

TEST(VideoReader, VariableFrameRateTimestamps) {
  auto path = make_test_video(frame_exact_specs()[6]);
  ASSERT_TRUE(path.ok());
  auto reader = open_reader(*path);
  ASSERT_NE(reader, nullptr);
  const FrameTable& table = reader->frame_table();
  EXPECT_NEAR(table.pts_seconds(31) - table.pts_seconds(30), 0.05, 1e-3);
  EXPECT_NEAR(table.pts_seconds(11) - table.pts_seconds(10), 1 / 30.0, 1e-3);
  // Each frame is found at its own time, not at index * average frame period.
  const auto& reference = reference_frames(*path);
  std::vector<double> times = {table.pts_seconds(45), table.pts_seconds(70)};
  std::vector<uint8_t> out(2 * reader->frame_bytes({}));
  ASSERT_TRUE(reader->get_frames_at(times, 1e-4, {}, out).ok());
  EXPECT_TRUE(std::equal(reference[45].begin(), reference[45].end(), out.begin()));
}

TEST(VideoReader, FirstPtsNotZero) {
  auto path = make_test_video(frame_exact_specs()[7]);
  ASSERT_TRUE(path.ok());
  auto reader = open_reader(*path);
  ASSERT_NE(reader, nullptr);
  EXPECT_NEAR(reader->frame_table().pts_seconds(0), 2.5, 1e-3);
}

// A remote MP4 is indexed from its header, and a window reads exactly its packets' bytes, asked
// for ahead as one range.
TEST(VideoReader, RemoteScanReadsTheHeaderAndAWindowOneRange) {
  TestVideoSpec spec = gop30_spec();
  spec.name = "h264_gop30_12s_320";
  spec.seconds = 12;
  spec.width = 320;
  spec.height = 240;
  auto path = make_test_video(spec);
  ASSERT_TRUE(path.ok()) << path.status().message();
  std::ifstream file(*path, std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(file)),
                             std::istreambuf_iterator<char>());
  const int64_t file_bytes = static_cast<int64_t>(bytes.size());
  auto remote = std::make_shared<testing::RemoteLikeSource>("remote", std::move(bytes));
  auto reader = VideoReader::open(remote);
  ASSERT_TRUE(reader.ok()) << reader.status().message();
  const FrameTable& table = (*reader)->frame_table();
  ASSERT_TRUE(table.stream().packets_addressable);
  EXPECT_LT(remote->bytes_read.load() * 5, file_bytes)
      << "the scan read " << remote->bytes_read.load() << " of " << file_bytes << " bytes";

  std::vector<int64_t> window;
  for (int64_t k = 0; k < 9; ++k) window.push_back(190 + 4 * k);  // GOPs at 180 and 210
  remote->bytes_read = 0;
  DecodeStats stats;
  expect_frames(**reader, window, reference_frames(*path), &stats);
  // Two decode runs (one per GOP), a few packets apart: two ranges, which a remote source
  // coalesces into one request (its read-through gap), and no byte outside them is read.
  const std::vector<ByteRange> ranges = remote->take_prefetched();
  ASSERT_EQ(ranges.size(), 2u);
  EXPECT_EQ(table.byte_ranges(window, 64 * 1024).size(), 1u);
  int64_t asked = 0;
  for (const ByteRange& r : ranges) asked += r.length;
  const auto packets = table.packets();
  int64_t last_packet = 0;
  for (int64_t frame : window) last_packet = std::max(last_packet, table.packet_of_frame(frame));
  int64_t first_to_last = 0;
  for (int64_t p = table.sync_packet_of_frame(window.front()); p <= last_packet; ++p) {
    first_to_last += packets[p].size;
  }
  EXPECT_LE(asked, first_to_last);
  EXPECT_GT(asked, first_to_last * 3 / 4);
  EXPECT_EQ(remote->bytes_read.load(), asked);
  EXPECT_EQ(stats.containers_opened, 0);  // no demuxer: packets are read by position
  EXPECT_EQ(stats.seeks, 2);
}

// The minimal-work contract, checked through the work counters.
TEST(VideoReader, WindowDecodesForwardWithOneSeekAndSkipsUnrequestedFrames) {
  auto path = make_test_video(gop30_spec());
  ASSERT_TRUE(path.ok());
  auto reader = open_reader(*path);
  ASSERT_NE(reader, nullptr);
  const auto& reference = reference_frames(*path);
  // 9 frames spread over 33 inside one GOP plus the next: one seek, then forward only.
  std::vector<int64_t> window;
  for (int64_t k = 0; k < 9; ++k) window.push_back(34 + 4 * k);
  DecodeStats stats;
  expect_frames(*reader, window, reference, &stats);
  EXPECT_EQ(stats.seeks, 1);
  EXPECT_EQ(stats.frames_converted, 9);
  EXPECT_EQ(stats.containers_opened, 0);  // opened by the scan, so warm
  // Exactly the packets from the keyframe to the last needed one go to the decoder (the frames
  // that reordering still holds are flushed out, not waited for), unrequested ones with the
  // non-reference skip on.
  const FrameTable& table = reader->frame_table();
  int64_t last_packet = 0;
  for (int64_t frame : window) last_packet = std::max(last_packet, table.packet_of_frame(frame));
  EXPECT_EQ(stats.packets_decoded, last_packet - table.sync_packet_of_frame(window.front()) + 1);
  EXPECT_EQ(stats.packets_skippable, stats.packets_decoded - 9);
  // Only the non-reference frames were dropped: fewer frames came out than went in.
  EXPECT_LT(stats.frames_received, stats.packets_decoded);
  // The bytes read from the file: at least the decoded packets' (the demuxer reads through its
  // buffer, and again what a seek goes back over).
  int64_t packet_bytes = 0;
  for (int64_t p = table.sync_packet_of_frame(window.front()); p <= last_packet; ++p) {
    packet_bytes += table.packets()[p].size;
  }
  EXPECT_GE(stats.bytes_read, packet_bytes);
}

TEST(VideoReader, NoSeekWithinTheSameGopOnAWarmFile) {
  // Without B-frames each frame leaves the decoder as soon as its packet is in, so the decoder
  // stays positioned after a call and the next call continues forward when it can.
  TestVideoSpec spec = gop30_spec();
  spec.name = "h264_gop30_no_bframes";
  spec.encoder_args = "-c:v libx264 -preset veryfast -pix_fmt yuv420p -g 30 -bf 0";
  auto path = make_test_video(spec);
  ASSERT_TRUE(path.ok());
  auto reader = open_reader(*path);
  ASSERT_NE(reader, nullptr);
  const auto& reference = reference_frames(*path);
  DecodeStats first, second, third;
  expect_frames(*reader, {31}, reference, &first);
  expect_frames(*reader, {40}, reference, &second);  // same GOP, later: continue forward
  expect_frames(*reader, {75}, reference, &third);   // a later GOP: seek
  EXPECT_EQ(first.seeks, 1);
  EXPECT_EQ(second.seeks, 0);
  EXPECT_EQ(second.packets_decoded, 40 - 31);
  EXPECT_EQ(second.containers_opened + second.decoders_built, 0);
  EXPECT_EQ(third.seeks, 1);
}

TEST(VideoReader, DuplicatesAreDecodedOnce) {
  auto path = make_test_video(gop30_spec());
  ASSERT_TRUE(path.ok());
  auto reader = open_reader(*path);
  ASSERT_NE(reader, nullptr);
  DecodeStats stats;
  expect_frames(*reader, {50, 10, 50, 10, 10}, reference_frames(*path), &stats);
  EXPECT_EQ(stats.frames_converted, 2);
}

TEST(VideoReader, DecoderIsSharedAcrossFilesWithIdenticalParameters) {
  // Two episodes encoded alike: one decoder, flushed between them, never rebuilt.
  TestVideoSpec a = gop30_spec();
  a.name = "episode_a";
  a.seconds = 1;
  TestVideoSpec b = a;
  b.name = "episode_b";
  b.filter = "hflip";
  auto path_a = make_test_video(a);
  auto path_b = make_test_video(b);
  ASSERT_TRUE(path_a.ok() && path_b.ok());
  std::thread([&] {
    auto reader_a = open_reader(*path_a);
    auto reader_b = open_reader(*path_b);
    ASSERT_TRUE(reader_a && reader_b);
    if (reader_a->frame_table().stream().extradata != reader_b->frame_table().stream().extradata) {
      GTEST_SKIP() << "x264 wrote different headers for the two episodes";
    }
    DecodeStats sa, sb, sa2;
    expect_frames(*reader_a, {5}, reference_frames(*path_a), &sa);
    expect_frames(*reader_b, {5}, reference_frames(*path_b), &sb);
    expect_frames(*reader_a, {20}, reference_frames(*path_a), &sa2);
    EXPECT_EQ(sa.decoders_built, 1);
    EXPECT_EQ(sb.decoders_built, 0);
    EXPECT_EQ(sa2.decoders_built, 0);
    EXPECT_EQ(sa2.containers_opened, 0);
  }).join();
}

TEST(VideoReader, ResizeAndLayoutMatchTheReferenceConversion) {
  auto path = make_test_video(gop30_spec());
  ASSERT_TRUE(path.ok());
  auto reader = open_reader(*path);
  ASSERT_NE(reader, nullptr);
  for (Interpolation interpolation : {Interpolation::kBilinear, Interpolation::kArea}) {
    const OutputOptions nhwc{.height = 56, .width = 72, .interpolation = interpolation};
    OutputOptions nchw = nhwc;
    nchw.layout = Layout::kNCHW;
    auto reference = decode_all_frames(*path, nhwc);
    auto planar_reference = decode_all_frames(*path, nchw);
    ASSERT_TRUE(reference.ok() && planar_reference.ok());
    const std::vector<int64_t> indices = {3, 77, 40};
    const size_t frame_size = reader->frame_bytes(nhwc);
    ASSERT_EQ(frame_size, 56u * 72 * 3);
    std::vector<uint8_t> interleaved(indices.size() * frame_size);
    std::vector<uint8_t> planar(indices.size() * frame_size);
    ASSERT_TRUE(reader->get_frames(indices, nhwc, interleaved).ok());
    ASSERT_TRUE(reader->get_frames(indices, nchw, planar).ok());
    for (size_t k = 0; k < indices.size(); ++k) {
      const auto& want = (*reference)[indices[k]];
      ASSERT_TRUE(std::equal(want.begin(), want.end(), interleaved.begin() + k * frame_size));
      const auto& want_planar = (*planar_reference)[indices[k]];
      ASSERT_TRUE(
          std::equal(want_planar.begin(), want_planar.end(), planar.begin() + k * frame_size));
      // Planar output is the same picture, up to swscale's rounding in its planar path.
      for (size_t pixel = 0; pixel < 56u * 72; ++pixel) {
        for (size_t c = 0; c < 3; ++c) {
          ASSERT_NEAR(planar[k * frame_size + c * 56 * 72 + pixel], want[pixel * 3 + c], 3);
        }
      }
    }
  }
}

TEST(VideoReader, ConcurrentCallsFromManyThreads) {
  auto path = make_test_video(gop30_spec());
  ASSERT_TRUE(path.ok());
  auto reader = open_reader(*path);
  ASSERT_NE(reader, nullptr);
  const auto& reference = reference_frames(*path);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      for (int call = 0; call < 10; ++call) {
        expect_frames(*reader,
                      {static_cast<int64_t>(rng() % 120), static_cast<int64_t>(rng() % 120)},
                      reference);
      }
    });
  }
  for (auto& thread : threads) thread.join();
}

// Each layout is made from the other by a (de)interleaving copy on one of swscale's paths:
// the values must be the same, for every pixel count (SIMD blocks of 16 and the rest).
TEST(VideoReader, BothLayoutsHoldExactlyTheSameValues) {
  auto path = testing::make_test_video({.name = "layouts_161x97",
                                        .extension = "mp4",
                                        .width = 161,
                                        .height = 97,
                                        .seconds = 0.2,
                                        .encoder_args = "-c:v libx264 -pix_fmt yuv444p"});
  ASSERT_TRUE(path.ok());
  auto reader = VideoReader::open(*path);
  ASSERT_TRUE(reader.ok());
  const std::vector<int64_t> frames = {0, 3};
  for (auto [height, width] : {std::pair{0, 0}, std::pair{50, 70}, std::pair{64, 64}}) {
    for (CropRect crop : {CropRect{}, CropRect{.x = 10, .y = 6, .width = 101, .height = 77}}) {
      if (!crop.empty() && height == 0) continue;  // a crop needs an output size
      OutputOptions nhwc{.height = height, .width = width, .layout = Layout::kNHWC};
      OutputOptions nchw{.height = height, .width = width, .layout = Layout::kNCHW};
      auto [h, w] = (*reader)->output_size(nhwc);
      const size_t bytes = (*reader)->frame_bytes(nhwc);
      std::vector<uint8_t> packed(bytes * 2), planar(bytes * 2);
      std::vector<FrameRequest> a, b;
      for (size_t k = 0; k < frames.size(); ++k) {
        a.push_back({.frame = frames[k], .crop = crop, .out = packed.data() + k * bytes});
        b.push_back({.frame = frames[k], .crop = crop, .out = planar.data() + k * bytes});
      }
      ASSERT_TRUE((*reader)->get_frames(a, nhwc).ok());
      ASSERT_TRUE((*reader)->get_frames(b, nchw).ok());
      for (size_t k = 0; k < frames.size(); ++k) {
        const uint8_t* p = packed.data() + k * bytes;
        const uint8_t* q = planar.data() + k * bytes;
        size_t differing = 0;
        for (int c = 0; c < 3; ++c) {
          for (int i = 0; i < h * w; ++i) differing += p[3 * i + c] != q[c * h * w + i];
        }
        EXPECT_EQ(differing, 0u) << h << "x" << w << (crop.empty() ? "" : " cropped");
      }
    }
  }
}

// swscale's fast unscaled YUV->RGB path wrote up to 16 bytes past a frame whose width is not a
// multiple of 16 (e.g. 120): into the next frame's slot of a batch, or past the buffer.
TEST(VideoReaderRegression, UnscaledConversionAtWidth120WritesNothingPastTheFrame) {
  auto path = testing::make_test_video({.name = "width120",
                                        .extension = "mp4",
                                        .width = 120,
                                        .height = 90,
                                        .seconds = 0.2,
                                        .encoder_args = "-c:v libx264 -pix_fmt yuv420p"});
  ASSERT_TRUE(path.ok());
  auto reader = VideoReader::open(*path);
  ASSERT_TRUE(reader.ok());
  for (Layout layout : {Layout::kNHWC, Layout::kNCHW}) {
    for (auto [height, width] : {std::pair{0, 0}, std::pair{90, 120}, std::pair{60, 200}}) {
      const OutputOptions options{.height = height, .width = width, .layout = layout};
      const size_t frame = (*reader)->frame_bytes(options);
      constexpr size_t kGuard = 256;
      std::vector<uint8_t> buffer(frame + kGuard, 0xA5);
      const FrameRequest request{.frame = 1, .out = buffer.data()};
      ASSERT_TRUE((*reader)->get_frames(std::span(&request, 1), options).ok());
      EXPECT_TRUE(std::all_of(buffer.begin() + frame, buffer.end(),
                              [](uint8_t byte) { return byte == 0xA5; }))
          << "bytes written past a " << width << "-wide frame";
    }
  }
}

}  // namespace
}  // namespace stoker
