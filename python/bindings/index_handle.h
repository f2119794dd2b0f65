// The Python-side EpisodeIndex: a shared handle on the immutable, mapped index, passed between
// the dataset and pipeline bindings.
#pragma once

#include <memory>

#include "stoker/episode_index.h"

namespace stoker::python {

struct IndexHandle {
  std::shared_ptr<const EpisodeIndex> index;
};

}  // namespace stoker::python
