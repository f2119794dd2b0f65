// The Python-side ShardIndex: a shard's immutable index and the URL it was opened for, passed
// between the shard and pipeline bindings.
#pragma once

#include <memory>
#include <string>

#include "stoker/shard_index.h"

namespace stoker::python {

struct OpenedShard {
  std::string url;
  std::shared_ptr<const ShardIndex> index;
};

}  // namespace stoker::python
