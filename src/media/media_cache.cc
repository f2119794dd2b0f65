#include "media/media_cache.h"

#include "core/fork.h"
#include "media/decoder.h"
#include "media/packet_reader.h"

namespace stoker::media {
namespace {

std::string decoder_key(const VideoStreamInfo& s, int threads) {
  std::string key = s.codec;
  for (int v :
       {s.width, s.height, s.pixel_format, s.profile, s.level, s.bits_per_raw_sample, s.color_range,
        s.color_space, s.video_delay, s.time_base_num, s.time_base_den, threads}) {
    key += ':' + std::to_string(v);
  }
  key += '|';
  key.append(s.extradata.begin(), s.extradata.end());
  return key;
}

template <typename List, typename Key>
auto find_and_promote(List& list, const Key& key) {
  for (auto it = list.begin(); it != list.end(); ++it) {
    if (it->key == key) {
      list.splice(list.begin(), list, it);
      return list.begin();
    }
  }
  return list.end();
}

}  // namespace

ThreadMediaCache::ThreadMediaCache() : fork_generation_(core::fork_generation()) {}

// A child that exits without decoding still runs its copy's destructor.
ThreadMediaCache::~ThreadMediaCache() { leave_behind_after_fork(); }

ThreadMediaCache& ThreadMediaCache::current() {
  thread_local ThreadMediaCache cache;
  cache.leave_behind_after_fork();
  return cache;
}

void ThreadMediaCache::leave_behind_after_fork() {
  const uint64_t now = core::fork_generation();
  if (now == fork_generation_) return;
  // Closing them would join decoder threads that do not exist in this process, or free what
  // the parent still uses through shared pages: they are released, unclosed.
  for (ContainerEntry& entry : containers_) static_cast<void>(entry.container.release());
  for (Decoder& decoder : decoders_) static_cast<void>(decoder.context.release());
  containers_.clear();
  decoders_.clear();
  fork_generation_ = now;
}

Result<PacketStream*> ThreadMediaCache::container(const std::string& key,
                                                  const std::shared_ptr<const ByteSource>& held,
                                                  const std::string& path, const FrameTable& table,
                                                  DecodeStats* stats) {
  drop_orphans();
  if (auto it = find_and_promote(containers_, key); it != containers_.end()) {
    // Bytes rewritten under an open container would decode into another video's frames.
    Status unchanged = it->container->source()->check_unchanged();
    if (!unchanged.ok()) {
      containers_.erase(it);
      return unchanged;
    }
    return it->container.get();
  }
  std::shared_ptr<const ByteSource> source = held;
  if (source == nullptr) {
    STOKER_ASSIGN_OR_RETURN(source, open_file_source(path));
    if (source->size() != table.file_size() ||
        (table.file_mtime_ns() != 0 && source->mtime_ns() != table.file_mtime_ns())) {
      return Status(StatusCode::kCorruptData,
                    "'" + path + "' changed since its frame table was made (" +
                        std::to_string(table.file_size()) + " bytes then, " +
                        std::to_string(source->size()) +
                        " now, or a new modification time): rebuild the index");
    }
  }
  std::unique_ptr<PacketStream> opened;
  if (source->is_remote() && table.stream().packets_addressable) {
    opened = std::make_unique<PacketReader>(std::move(source));
  } else {
    STOKER_ASSIGN_OR_RETURN(opened, Container::open(std::move(source), &table));
    if (stats != nullptr) ++stats->containers_opened;
  }
  adopt(key, held != nullptr, std::move(opened));
  return containers_.front().container.get();
}

void ThreadMediaCache::adopt(const std::string& key, bool held, std::unique_ptr<PacketStream> c) {
  if (auto it = find_and_promote(containers_, key); it != containers_.end()) {
    containers_.pop_front();
  }
  containers_.push_front(ContainerEntry{key, std::move(c), held});
  if (containers_.size() > kMaxContainers) containers_.pop_back();
}

void ThreadMediaCache::drop_orphans() {
  // The container's own reference is the last one: no reader can ask for these bytes again.
  containers_.remove_if([](const ContainerEntry& entry) {
    return entry.held && entry.container->source().use_count() == 1;
  });
}

Result<Decoder*> ThreadMediaCache::decoder(const FrameTable& table, int threads,
                                           DecodeStats* stats) {
  const std::string key = decoder_key(table.stream(), threads);
  if (auto it = find_and_promote(decoders_, key); it != decoders_.end()) return &*it;
  STOKER_ASSIGN_OR_RETURN(detail::UniqueCodecContext ctx, build_decoder(table.stream(), threads));
  if (stats != nullptr) ++stats->decoders_built;
  decoders_.push_front(Decoder{.key = key, .context = std::move(ctx), .positioned_in = 0});
  if (decoders_.size() > kMaxDecoders) decoders_.pop_back();
  return &decoders_.front();
}

}  // namespace stoker::media
