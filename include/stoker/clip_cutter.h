// Cutting a clip out of a video without re-encoding: the packets of a run of frames copied, as
// they are, into a new file of their own (FFmpeg's muxer: MP4, Matroska, WebM, or any container
// FFmpeg can store the codec in). What `stoker shard` stores LeRobot clips with when it can.
//
// A run of frames [first_frame, first_frame + num_frames) (presentation order, as VideoReader
// numbers them) can be copied when its packets are a contiguous run in decode order that
// starts on a keyframe, and no frame of it needs a packet before the run (an open-GOP leading
// picture): then the new file decodes to exactly those frames. Streams without B-frames
// qualify at every keyframe; with B-frames, where a group of reordered frames is whole.
//
// Output timing: every packet keeps its duration and its composition offset (pts - dts); pts
// and dts are shifted by the same amount, so that the first frame is presented at 0. Where
// dts then starts below 0 (B-frames), MP4 stores an edit list; the file reads back with
// pts(first_frame + i) - pts(first_frame) for frame i, in the source stream's time base.
//
// Output bytes are a function of the input's alone (FFmpeg's bit-exact mode: no encoder
// version, no creation time, no random ids), so a cut made twice is the same file.
//
// Thread-safety: free functions; calls on different targets may run at once, each reading its
// source through its own demuxer.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "stoker/byte_source.h"
#include "stoker/frame_table.h"
#include "stoker/status.h"

namespace stoker {

struct ClipCopyOptions {
  /// FFmpeg's name of the output container ("mp4", "matroska", "webm", "mov", ...). Default
  /// "": the source's own: "mp4" for an MP4/MOV file ("mov" when its name ends in .mov),
  /// "webm" for a Matroska file named .webm, else "matroska"; other containers by FFmpeg's
  /// name for them.
  std::string format;
};

struct ClipCopyResult {
  int64_t frames = 0;
  /// Size of the written file.
  int64_t bytes = 0;
  /// The run of packets copied, decode order: [first_packet, first_packet + frames).
  int64_t first_packet = 0;
};

/// OK when frames [first_frame, first_frame + num_frames) of the video `table` describes can
/// be copied (see the file comment) into a `format` file (the codec is one the muxer stores;
/// "" takes any). Errors, each saying which frame or packet is in the way:
/// kInvalidArgument for a range outside the video, a run that does not start on a keyframe,
/// that cuts a group of reordered frames (a packet inside the run shows a frame outside it) or
/// that needs a packet before it; kUnsupported when the container gives packets no timestamps
/// of their own (VideoStreamInfo::pts_from_decoding) or `format` cannot hold the codec.
Status check_clip_copy(const FrameTable& table, int64_t first_frame, int64_t num_frames,
                       const std::string& format);

/// Copies the packets of frames [first_frame, first_frame + num_frames) of `source` (described
/// by `table`, which must be the source's: a VideoReader's frame_table()) into a new file at
/// `target`, replacing any file there; the folder of `target` must exist. For a remote source
/// the run's bytes are fetched in one ranged read before they are demuxed.
///
/// Atomicity: written to `<target>.partial`, read back and checked (frame count and every
/// frame's time), flushed and renamed: a file at `target` is complete; on failure none is left.
/// Errors: those of check_clip_copy; kCorruptData when the table is stale (another size or
/// modification time than the source's) or the source's packets are damaged or not those of
/// the table; kUnsupported when the muxer refuses the stream; kIoError when `target`
/// cannot be written; kInternal when the written file does not read back as expected. Every
/// message names the source and the target.
Result<ClipCopyResult> copy_clip(std::shared_ptr<const ByteSource> source, const FrameTable& table,
                                 int64_t first_frame, int64_t num_frames, const std::string& target,
                                 const ClipCopyOptions& options = {});

}  // namespace stoker
