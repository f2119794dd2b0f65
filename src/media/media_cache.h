// ThreadMediaCache: the open containers, decoders and colour converter of one thread, reused
// across calls so that a call on a warm file opens no container and builds no decoder.
//
// - Containers are keyed by the bytes they read (see VideoReader: a local file's path, size and
//   modification time, or one reader's own source), at most kMaxContainers. A container over a
//   reader's own source (bytes in memory) is dropped once no reader shares that source, so a
//   finished reader's bytes are not kept alive by the cache.
// - Decoders are keyed by their codec parameters and extradata, at most kMaxDecoders. Files with
//   identical parameters (LeRobot's per-episode files) share one decoder, flushed between them.
// Both are least-recently-used caches; evicting closes the handle. In a child process after
// fork(), what the parent's thread had open is abandoned, never used nor closed (a decoder's
// threads did not survive the fork), and the child opens its own.
//
// Ownership: the cache owns everything it hands out; returned pointers stay valid until the
// next call to the same getter on the same thread.
// Thread-safety: one cache per thread (current()); never shared.
#pragma once

#include <list>
#include <memory>
#include <string>

#include "media/container.h"
#include "media/frame_converter.h"
#include "media/packet_stream.h"
#include "stoker/video_reader.h"

namespace stoker::media {

/// A codec context and which container's packets it last decoded.
struct Decoder {
  std::string key;
  detail::UniqueCodecContext context;
  /// PacketStream::id of the stream this decoder is positioned in; 0 when it must seek (fresh,
  /// drained at end of file, or last used on another file).
  uint64_t positioned_in = 0;
  /// Decode-order position of the keyframe its current pass started from.
  int64_t pass_start = 0;
};

class ThreadMediaCache {
 public:
  static constexpr size_t kMaxContainers = 16;
  static constexpr size_t kMaxDecoders = 4;

  /// The calling thread's cache.
  static ThreadMediaCache& current();

  /// A packet stream over the bytes `key` names, reused when warm; when cold, over `held`, or
  /// else over the local file at `path`. `table` must describe those bytes. A remote source
  /// whose table has addressable packets gets a PacketReader (no container to open), any
  /// other a Container.
  Result<PacketStream*> container(const std::string& key,
                                  const std::shared_ptr<const ByteSource>& held,
                                  const std::string& path, const FrameTable& table,
                                  DecodeStats* stats);
  /// A decoder for `table`'s stream with `threads` threads, reused when warm.
  Result<Decoder*> decoder(const FrameTable& table, int threads, DecodeStats* stats);

  /// Hands over a container opened elsewhere (after a scan) for the bytes `key` names, so the
  /// next call finds it warm. `held`: whether it reads a reader's own source (see above).
  void adopt(const std::string& key, bool held, std::unique_ptr<PacketStream> c);

  FrameConverter& converter() { return converter_; }

  ThreadMediaCache();
  ~ThreadMediaCache();
  ThreadMediaCache(const ThreadMediaCache&) = delete;
  ThreadMediaCache& operator=(const ThreadMediaCache&) = delete;

 private:
  // Abandons what was opened before a fork, in the child of that fork.
  void leave_behind_after_fork();

  struct ContainerEntry {
    std::string key;
    std::unique_ptr<PacketStream> container;
    bool held = false;  // reads a reader's own source
  };
  // Closes the containers over sources that no reader holds any more.
  void drop_orphans();
  std::list<ContainerEntry> containers_;  // most recently used first
  std::list<Decoder> decoders_;           // most recently used first
  FrameConverter converter_;
  uint64_t fork_generation_;  // of the process that opened what the lists hold
};

}  // namespace stoker::media
