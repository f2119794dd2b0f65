#include "pipeline/batch_source.h"

#include "core/random.h"

namespace stoker::pipeline {

Status settle_failures(Refillable& source, BatchWork& work, const LoaderOptions& options,
                       std::span<const Status> errors) {
  for (const Status& error : errors) {
    if (!error.ok() && options.on_error == ErrorPolicy::kRaise) return error;
  }
  for (size_t slot = 0; slot < errors.size(); ++slot) {
    const Status& failure = errors[slot];
    if (failure.ok()) continue;
    const int64_t failed = work.batch->samples()[slot];
    Status last = failure;
    bool replaced = false;
    for (int attempt = 0; attempt < options.max_replacements && !replaced; ++attempt) {
      const auto words =
          core::random_words(options.seed, work.epoch, static_cast<uint64_t>(failed),
                             core::kReplaceStream | (static_cast<uint32_t>(attempt) << 4));
      const int64_t sample =
          source.replacement(core::uniform_below(words[0], words[1], source.replacement_pool()));
      last = source.refill(work, static_cast<int64_t>(slot), sample);
      replaced = last.ok();
      if (replaced) {
        work.skips.push_back(SkipRecord{.epoch = work.epoch,
                                        .batch = work.index,
                                        .sample = failed,
                                        .replacement = sample,
                                        .reason = failure.message()});
        core::MutexLock lock(&work.errors_mutex);
        work.slot_errors[slot] = Status();
      }
    }
    if (!replaced) {
      return Status(last.code(), failure.message() + "; and " +
                                     std::to_string(options.max_replacements) +
                                     " replacements failed too, the last with: " + last.message());
    }
  }
  return Status();
}

}  // namespace stoker::pipeline
